"""Small pieces every extractor shares: limit checks, text clean-up, tables as text, sections."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from ldims.errors import PermanentError
from ldims.text import Section
from workers.extraction.result import ExtractionLimits

# The lookbehind anchors each run at its start: without it a long run of blanks not followed
# by a newline is retried from every position (quadratic).
_TRAILING_SPACE = re.compile(r"(?<![ \t\u00a0])[ \t\u00a0]+\n")
_LANGUAGE_TAG = re.compile(r"^([A-Za-z]{2})(?:[-_][A-Za-z0-9]+)*$")
_BLANK_RUNS = re.compile(r"\n{3,}")
_CELL_SPACE = re.compile(r"\s+")


def ensure_size(path: Path, limits: ExtractionLimits) -> int:
    """The file's size; EMPTY_FILE for zero bytes, TOO_LARGE over the byte limit."""
    size = path.stat().st_size
    if size == 0:
        raise PermanentError("EMPTY_FILE", "The file is empty (0 bytes).")
    if size > limits.max_bytes:
        raise PermanentError(
            "TOO_LARGE", f"The file has {size} bytes; the limit is {limits.max_bytes}."
        )
    return size


def language_code(tag: str | None) -> str | None:
    """The ISO 639-1 code of a language tag ("en-GB" → "en", "RU" → "ru"), else None."""
    match = _LANGUAGE_TAG.match((tag or "").strip())
    return match.group(1).lower() if match else None


def parse_count(value: str | None, limit: int = 10_000_000) -> int | None:
    """A non-negative count written in a file's metadata, or None when it is not one."""
    value = (value or "").strip()
    if not value or len(value) > 9 or not value.isascii() or not value.isdecimal():
        return None
    number = int(value)
    return number if number <= limit else None


def ensure_pages(count: int, limits: ExtractionLimits) -> None:
    """Refuse a file with more pages than the limit (before extracting them)."""
    if count > limits.max_pages:
        raise PermanentError(
            "TOO_LARGE", f"The file has {count} pages; the limit is {limits.max_pages}."
        )


def ensure_chars(count: int, limits: ExtractionLimits) -> None:
    """Refuse a file whose extracted text is longer than the limit."""
    if count > limits.max_chars:
        raise PermanentError(
            "TOO_LARGE",
            f"The extracted text exceeds {limits.max_chars} characters (the limit).",
        )


def clean_text(text: str) -> str:
    """Unix line ends, no trailing blanks, at most one empty line in a row, no NULs."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    text = _TRAILING_SPACE.sub("\n", text)
    return _BLANK_RUNS.sub("\n\n", text).strip()


def rows_to_text(rows: Iterable[Iterable[str | None]]) -> str:
    """A table as readable text: one line per non-empty row, cells joined by `` | ``."""
    lines = []
    for row in rows:
        cells = [_CELL_SPACE.sub(" ", cell or "").strip() for cell in row]
        if any(cells):
            lines.append(" | ".join(cells))
    return "\n".join(lines)


class SectionBuilder:
    """Collects headings and the text under them, in reading order, into :class:`Section`s.

    Text before the first heading belongs to no section. A section ends at the next heading
    of any level (sections are flat; ``level`` keeps the hierarchy readable).
    """

    def __init__(self) -> None:
        self._sections: list[Section] = []
        self._heading: tuple[str, int, int] | None = None
        self._body: list[str] = []
        self._last_page = 1

    def heading(self, text: str, level: int, page: int) -> None:
        text = _CELL_SPACE.sub(" ", text).strip()
        if not text:
            return
        self._close()
        self._heading = (text, max(1, min(level, 9)), page)
        self._body = []
        self._last_page = page

    def text(self, text: str, page: int) -> None:
        if self._heading is not None and text.strip():
            self._body.append(text.strip())
            self._last_page = max(self._last_page, page)

    def sections(self) -> list[Section]:
        self._close()
        return self._sections

    def _close(self) -> None:
        if self._heading is not None:
            heading, level, page = self._heading
            body = "\n".join(self._body)
            self._sections.append(Section(heading, level, page, self._last_page, body))
            self._heading = None
            self._body = []
