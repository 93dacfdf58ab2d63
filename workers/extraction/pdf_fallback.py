"""A second reading of a PDF's text with pdfminer (through pdfplumber) when PDFium misses it.

PDFium reads nearly every PDF fast and well, but it drops the text of some fonts it cannot map
to Unicode — typically CID fonts in OCR layers of scanned CJK documents, which pdfminer maps
with its predefined CMaps (``pdfplumber__pr-136-example.pdf``: PDFium finds the digits, pdfminer
the Chinese). A few sample pages are read both ways; when pdfminer sees clearly more
characters, every page is read with it. The check costs a few pages of pdfminer per PDF.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pdfplumber

from ldims.errors import ProcessingError
from workers.extraction.common import clean_text, ensure_chars
from workers.extraction.result import ExtractionLimits

logger = logging.getLogger(__name__)

_SAMPLE_PAGES = 3
# pdfminer must find this much more text on the sample before the slow path is worth it.
_RICHER = 1.3
_MIN_EXTRA_CHARS = 20


def richer_texts(path: Path, texts: list[str], limits: ExtractionLimits) -> list[str] | None:
    """Every page's text read by pdfminer, if it finds clearly more than PDFium; else None."""
    sample = _sample(texts)
    try:
        with warnings.catch_warnings(), pdfplumber.open(path, password="") as pdf:
            # pdfminer warns about every oddity of a malformed file; they are not ours to raise.
            warnings.simplefilter("ignore")
            theirs = sum(_visible_chars(pdf.pages[index]) for index in sample)
            ours = sum(_count(texts[index]) for index in sample)
            if theirs <= ours * _RICHER + _MIN_EXTRA_CHARS:
                return None
            logger.info(
                "PDFium misses text on this PDF (%d vs %d chars): using pdfminer", ours, theirs
            )
            return _read_all(pdf, limits)
    except ProcessingError:  # over a limit while reading every page: the file's outcome
        raise
    except Exception as exc:  # a file pdfminer cannot read keeps PDFium's text
        logger.info("pdfminer cannot read this PDF: %s", type(exc).__name__)
        return None


def _sample(texts: list[str]) -> list[int]:
    if len(texts) <= _SAMPLE_PAGES:
        return list(range(len(texts)))
    step = len(texts) / _SAMPLE_PAGES
    return [int(step * n) for n in range(_SAMPLE_PAGES)]


def _visible_chars(page: pdfplumber.page.Page) -> int:
    try:
        return sum(1 for char in page.chars if not char["text"].isspace())
    finally:
        page.close()


def _count(text: str) -> int:
    return sum(1 for char in text if not char.isspace())


def _read_all(pdf: pdfplumber.PDF, limits: ExtractionLimits) -> list[str]:
    texts = []
    total = 0
    for page in pdf.pages:
        try:
            text = clean_text(page.extract_text() or "")
        finally:
            page.close()  # pdfplumber keeps every page's layout otherwise
        texts.append(text)
        total += len(text)
        ensure_chars(total, limits)
    return texts
