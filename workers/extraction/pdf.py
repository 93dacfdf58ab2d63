"""PDF: page text with pypdfium2, tables with pdfplumber, sections from the outline.

pdfium opens what other parsers refuse (broken cross-reference tables, empty user passwords)
and extracts text fast, so it does the reading; pdfplumber only looks for ruled tables on the
pages that can hold one (see :mod:`workers.extraction.pdf_tables`). A page pdfium cannot parse
stays in the result as an empty page listed in ``metadata["broken_pages"]``.
"""

from __future__ import annotations

import ctypes
import logging
import math
import re
import time
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pypdfium2
import pypdfium2.raw as pdfium_c

from ldims.errors import PermanentError
from ldims.text import ExtractionResult, Page, Section
from workers.extraction.common import (
    clean_text,
    ensure_chars,
    ensure_pages,
    ensure_size,
    language_code,
)
from workers.extraction.pdf_fallback import richer_texts
from workers.extraction.pdf_ocr import recognize_pages
from workers.extraction.pdf_tables import extract_tables, may_hold_table
from workers.extraction.result import ExtractionLimits

logger = logging.getLogger(__name__)

FORMAT = "application/pdf"
EXTRACTOR = "pypdfium2+pdfplumber"

_SECTION_CHARS = 20_000
_MAX_SECTIONS = 2_000  # an outline is navigation; more bookmarks than this is not
# pdfium marks the hyphen of a word it joined across a line break with U+0002; dropping it
# restores the word. Other control characters are noise from broken font encodings.
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")
_OPEN_ERRORS = {
    pdfium_c.FPDF_ERR_FILE: "the file cannot be read",
    pdfium_c.FPDF_ERR_FORMAT: "its structure is not valid PDF",
    pdfium_c.FPDF_ERR_PAGE: "its pages cannot be found",
}
_DIGITS = re.compile(r"\d+")
_SPACES = re.compile(r"\s+")
_PDF_DATE = re.compile(
    r"(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*"
    r"(?:([Zz+-])\s*(?:(\d{2})'?\s*(?:(\d{2})'?)?)?)?"
)


def extract_pdf(path: Path, limits: ExtractionLimits) -> ExtractionResult:
    """Extract the PDF at ``path``; raise ``PermanentError`` when it cannot be read."""
    started = time.monotonic()
    pdf = _open(path, limits)
    try:
        count = len(pdf)
        if count == 0:
            raise PermanentError("CORRUPT_FILE", "The PDF has no pages (its page tree is damaged).")
        ensure_pages(count, limits)
        texts, broken, table_pages = _read_pages(pdf, count, limits)
        better = richer_texts(path, texts, limits)
        if better is not None and len(better) == count:
            texts, text_source = better, "pdfminer"
        else:
            text_source = "pdfium"
        texts, recognized = recognize_pages(pdf, texts, limits, started)
        if not any(text.strip() for text in texts):
            _raise_without_text(count, broken, limits.ocr.mode)
        texts, running = split_running_lines(texts)
        sections = _outline_sections(pdf, texts)
        metadata = _metadata(pdf, count)
        metadata["text_source"] = text_source
        metadata.update(recognized)
    finally:
        pdf.close()
    tables, table_errors = extract_tables(path, table_pages)
    if broken:
        metadata["broken_pages"] = broken
    if table_errors:
        metadata["table_errors"] = table_errors
    return ExtractionResult(
        format=FORMAT,
        extractor=EXTRACTOR,
        text="\n\n".join(text for text in texts if text),
        pages=[Page(number, text) for number, text in enumerate(texts, start=1)],
        sections=sections,
        tables=tables,
        metadata=metadata,
        headers_footers=running,
    )


def _open(path: Path, limits: ExtractionLimits) -> pypdfium2.PdfDocument:
    ensure_size(path, limits)
    try:
        # An empty password opens files encrypted without a user password (owner-only
        # protection, "copy-protected" files); pdfium ignores it for unencrypted files.
        return pypdfium2.PdfDocument(path, password="")
    except pypdfium2.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code == pdfium_c.FPDF_ERR_PASSWORD:
            raise PermanentError(
                "ENCRYPTED",
                "The PDF is protected by a password and cannot be read without it. "
                "Upload a copy saved without a password.",
            ) from None
        if code == pdfium_c.FPDF_ERR_SECURITY:
            raise PermanentError(
                "ENCRYPTED",
                "The PDF uses an encryption scheme that is not supported. "
                "Upload a copy saved without encryption.",
            ) from None
        reason = _OPEN_ERRORS.get(code, "unknown error")
        raise PermanentError(
            "CORRUPT_FILE",
            f"The PDF could not be opened ({reason}): the file is damaged, truncated or not "
            "a PDF. Upload the original file again or export it to PDF anew.",
        ) from None


def _read_pages(
    pdf: pypdfium2.PdfDocument, count: int, limits: ExtractionLimits
) -> tuple[list[str], list[int], list[int]]:
    """Cleaned text per page, numbers of broken pages, numbers of pages worth a table search."""
    texts: list[str] = []
    broken: list[int] = []
    table_pages: list[int] = []
    total = 0
    for index in range(count):
        try:
            text, ruled = _read_page(pdf, index)
        except pypdfium2.PdfiumError as exc:
            logger.info("PDF page %d cannot be parsed: %s", index + 1, type(exc).__name__)
            text, ruled = "", False
            broken.append(index + 1)
        texts.append(text)
        if ruled:
            table_pages.append(index + 1)
        total += len(text)
        ensure_chars(total, limits)
    return texts, broken, table_pages


def _read_page(pdf: pypdfium2.PdfDocument, index: int) -> tuple[str, bool]:
    page = pdf.get_page(index)
    try:
        textpage = page.get_textpage()
        try:
            raw = textpage.get_text_bounded()
        finally:
            textpage.close()
        return clean_text(_CONTROL.sub("", raw)), may_hold_table(page)
    finally:
        page.close()


def _raise_without_text(count: int, broken: list[int], ocr_mode: str) -> None:
    if len(broken) == count:
        raise PermanentError(
            "CORRUPT_FILE", "None of the PDF's pages could be parsed; the file is damaged."
        )
    if ocr_mode == "off":
        raise PermanentError(
            "NO_TEXT_LAYER",
            "The PDF's pages are images without a text layer (a scan or a picture), and text "
            "recognition is off (LDIMS_OCR=off): set LDIMS_OCR=auto and reprocess it, or upload "
            "a PDF with a text layer.",
        )
    raise PermanentError(
        "EMPTY_FILE",
        "The PDF holds no text: its pages are blank, or text recognition (OCR) found no text "
        "on them.",
    )


def split_running_lines(texts: list[str]) -> tuple[list[str], list[str]]:
    """Move running headers and footers out of the pages' text.

    A line is running when it is among the first two or last two lines of at least half of
    the pages (and of at least three). Digits are ignored when comparing, and numbers at
    either end of a line are dropped, so "Report 12" and "13 Report" match. Documents of fewer
    than three pages keep everything.
    """
    if len(texts) < 3:
        return texts, []
    needed = max(3, math.ceil(len(texts) / 2))
    edges = [_edge_lines(text) for text in texts]
    seen: Counter[str] = Counter()
    for lines in edges:
        seen.update({_running_key(line) for line in lines})
    repeated = {key for key, pages in seen.items() if pages >= needed}
    if not repeated:
        return texts, []
    running: dict[str, str] = {}
    kept = []
    for text, lines in zip(texts, edges, strict=True):
        drop = {line for line in lines if _running_key(line) in repeated}
        for line in drop:
            running.setdefault(_running_key(line), line.strip())
        kept.append(_without_lines(text, drop) if drop else text)
    # Bare page numbers leave the text but are not worth listing.
    return kept, [line for key, line in running.items() if key != "#"]


def _edge_lines(text: str) -> list[str]:
    lines = [line for line in text.split("\n") if line.strip()]
    return lines[:2] + lines[2:][-2:]


def _running_key(line: str) -> str:
    key = _DIGITS.sub("#", _SPACES.sub(" ", line).strip())
    return key.strip("# ") or "#"


def _without_lines(text: str, drop: set[str]) -> str:
    """``text`` without the dropped lines where they are among the first or last two."""
    lines = text.split("\n")
    filled = [i for i, line in enumerate(lines) if line.strip()]
    edge = set(filled[:2] + filled[2:][-2:])
    kept = [line for i, line in enumerate(lines) if not (i in edge and line in drop)]
    return clean_text("\n".join(kept))


def _outline_sections(pdf: pypdfium2.PdfDocument, texts: list[str]) -> list[Section]:
    """Sections from the bookmarks: each runs to the next bookmark of its level or above."""
    marks = _bookmarks(pdf, len(texts))
    sections = []
    for i, (heading, level, start) in enumerate(marks):
        end = len(texts)
        for _, next_level, next_start in marks[i + 1 :]:
            if next_level <= level:
                end = max(start, next_start - 1)
                break
        sections.append(Section(heading, level, start, end, _bounded_text(texts[start - 1 : end])))
    return sections


def _bounded_text(texts: list[str]) -> str:
    """The pages' text joined, cut at _SECTION_CHARS without joining pages it will not use."""
    parts: list[str] = []
    size = 0
    for text in texts:
        if text:
            parts.append(text)
            size += len(text) + 2
            if size >= _SECTION_CHARS:
                break
    return "\n\n".join(parts)[:_SECTION_CHARS]


def _bookmarks(pdf: pypdfium2.PdfDocument, count: int) -> list[tuple[str, int, int]]:
    """(title, 1-based level, 1-based page) of each bookmark that points to a page."""
    marks: list[tuple[str, int, int]] = []
    try:
        for bookmark in pdf.get_toc():
            dest = bookmark.get_dest()
            index = dest.get_index() if dest is not None else None
            title = _SPACES.sub(" ", _CONTROL.sub("", bookmark.get_title())).strip("\x00 ")
            if index is None or not 0 <= index < count or not title:
                continue
            marks.append((title, bookmark.level + 1, index + 1))
            if len(marks) >= _MAX_SECTIONS:
                logger.info("PDF outline cut at %d bookmarks", _MAX_SECTIONS)
                break
    except pypdfium2.PdfiumError as exc:
        logger.info("PDF outline unreadable, no sections: %s", type(exc).__name__)
    return marks


def _metadata(pdf: pypdfium2.PdfDocument, count: int) -> dict[str, Any]:
    keys = ("Title", "Author", "Subject", "Keywords", "Producer", "CreationDate")
    info = {key: _info_value(pdf, key) for key in keys}
    metadata: dict[str, Any] = {
        "title": info["Title"],
        "author": info["Author"],
        "subject": info["Subject"],
        "keywords": info["Keywords"],
        "producer": info["Producer"],
        "created": parse_pdf_date(info["CreationDate"]),
        "language": _language(pdf),
        "page_count": count,
    }
    metadata = {key: value for key, value in metadata.items() if value}
    # -1 means no security handler; any other revision means encrypted (here: no user password).
    if pdfium_c.FPDF_GetSecurityHandlerRevision(pdf) != -1:
        metadata["encrypted"] = True
    return metadata


def _info_value(pdf: pypdfium2.PdfDocument, key: str) -> str:
    return _CONTROL.sub("", pdf.get_metadata_value(key)).replace("\x00", "").strip()


def _language(pdf: pypdfium2.PdfDocument) -> str | None:
    """ISO 639-1 code from the catalog's /Lang entry ("fr-CA" gives "fr"), if present."""
    size = pdfium_c.FPDFCatalog_GetLanguage(pdf, None, 0)
    if size <= 2:
        return None
    buffer = (ctypes.c_ushort * (size // 2))()
    pdfium_c.FPDFCatalog_GetLanguage(pdf, buffer, size)
    tag = bytes(memoryview(buffer))[: size - 2].decode("utf-16-le", errors="ignore")
    return language_code(tag)


def parse_pdf_date(value: str) -> str | None:
    """ISO 8601 from a PDF date (``D:YYYYMMDDHHmmSS+HH'mm'``, parts optional), or None."""
    match = _PDF_DATE.match(value.strip())
    if not match:
        return None
    year, month, day, hour, minute, second, sign, tz_hours, tz_minutes = match.groups()
    tz = None
    if sign in ("Z", "z"):
        tz = UTC
    elif sign and tz_hours:
        offset = timedelta(hours=int(tz_hours), minutes=int(tz_minutes or 0))
        tz = timezone(offset if sign == "+" else -offset)
    parts = [
        int(part) if part else default
        for part, default in zip(
            (year, month, day, hour, minute, second), (0, 1, 1, 0, 0, 0), strict=True
        )
    ]
    try:
        return datetime(*parts, tzinfo=tz).isoformat()
    except (ValueError, OverflowError):
        return None
