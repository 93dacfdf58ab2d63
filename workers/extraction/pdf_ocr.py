"""OCR of a PDF's pages: those without a usable text layer (``LDIMS_OCR=auto``) or every page
(``force``), rendered with pdfium and read by :mod:`workers.extraction.ocr`.

A page needs OCR when its text layer holds fewer than :data:`MIN_TEXT_CHARACTERS` characters
and it shows an image (a blank page needs nothing); those few characters (a stamp, a date)
stay beside what OCR reads. In a mixed file only those pages are read.
At most ``LDIMS_OCR_MAX_PAGES`` pages are, and none once most of the extraction's time is
spent: the pages left are listed (``ocr_skipped_pages``) rather than the whole file failing
``TIMEOUT``. The record says which pages were read, in which languages, and Tesseract's mean
confidence over them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import pypdfium2
import pypdfium2.raw as pdfium_c

from ldims.errors import OcrDeferred
from workers.extraction.common import clean_text, ensure_chars
from workers.extraction.ocr import RecognizedPage, ocr_metadata, recognize, unavailable
from workers.extraction.result import ExtractionLimits

MIN_TEXT_CHARACTERS = 20  # non-space characters of a page's text layer that count as text
MAX_PIXELS = 40_000_000  # a rendered page at most (an A4 page at 300 dpi is 8.7 million)
TIME_SHARE = 0.8  # of the extraction's time limit, after which no further page is read


def needs_ocr(pdf: pypdfium2.PdfDocument, texts: list[str], mode: str) -> list[int]:
    """Indexes of the pages to read by OCR."""
    if mode == "off":
        return []
    if mode == "force":
        return list(range(len(texts)))
    return [
        index
        for index, text in enumerate(texts)
        if sum(not char.isspace() for char in text) < MIN_TEXT_CHARACTERS
        and _shows_an_image(pdf, index)
    ]


def recognize_pages(
    pdf: pypdfium2.PdfDocument, texts: list[str], limits: ExtractionLimits, started: float
) -> tuple[list[str], dict[str, Any]]:
    """``texts`` with the pages that need it read by OCR, and what the record says of it.
    Raises ``OCR_UNAVAILABLE`` when no page has text and OCR cannot run, and ``OcrDeferred``
    when pages need it and ``limits.ocr.defer`` hands them to the OCR workers."""
    options = limits.ocr
    wanted = needs_ocr(pdf, texts, options.mode)
    if not wanted:
        return texts, {}
    error = unavailable(options)
    if error is not None:
        if not any(text.strip() for text in texts):
            raise error
        # A mixed file keeps the text it has; its record says what OCR would have added.
        return texts, {
            "ocr_unavailable": error.message,
            "ocr_needed_pages": [index + 1 for index in wanted],
        }
    if options.defer:
        raise OcrDeferred("OCR_DEFERRED", f"{len(wanted)} pages wait for OCR.")
    texts = list(texts)
    read: list[int] = []
    found: list[RecognizedPage] = []
    deadline = started + TIME_SHARE * limits.timeout_seconds
    for index in wanted[: options.max_pages]:
        if read and time.monotonic() > deadline:
            break
        page = recognize(_render(pdf, index, options.dpi), options)
        recognized = clean_text(page.text)
        texts[index] = recognized if options.mode == "force" else _merged(texts[index], recognized)
        read.append(index + 1)
        found.append(page)
        ensure_chars(sum(len(text) for text in texts), limits)
    done = set(read)
    skipped = [index + 1 for index in wanted if index + 1 not in done]
    return texts, ocr_metadata(read, found, skipped)


def _merged(layer: str, recognized: str) -> str:
    """A page's few words of text layer (a stamp, a date, a page number) kept beside what OCR
    read of its image, unless OCR read them too."""
    if not layer.strip() or "".join(layer.split()) in "".join(recognized.split()):
        return recognized
    return f"{layer}\n\n{recognized}" if recognized else layer


def _shows_an_image(pdf: pypdfium2.PdfDocument, index: int) -> bool:
    try:
        page = pdf.get_page(index)
    except pypdfium2.PdfiumError:
        return False  # a page that cannot load (kept empty, listed in broken_pages)
    try:
        objects = page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=3)
        return next(iter(objects), None) is not None
    finally:
        page.close()


def _render(pdf: pypdfium2.PdfDocument, index: int, dpi: int) -> Any:
    page = pdf.get_page(index)
    try:
        width, height = page.get_size()  # points
        scale = dpi / 72
        pixels = width * scale * height * scale
        if pixels > MAX_PIXELS:  # a poster or a map: read it at the resolution that fits
            scale *= math.sqrt(MAX_PIXELS / pixels)
        bitmap = page.render(scale=scale, grayscale=True)
        try:
            return bitmap.to_pil().copy()  # to_pil shares the bitmap's memory
        finally:
            bitmap.close()
    finally:
        page.close()
