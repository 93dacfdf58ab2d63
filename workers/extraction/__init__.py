"""Extraction: a file in, an :class:`ExtractionResult` out, or a ``PermanentError`` with a code.

Extractors are pure: no catalog or index I/O. :func:`extract_file` picks one by the type
detected from the bytes.
"""

from __future__ import annotations

from pathlib import Path

from ldims.errors import PermanentError
from workers.extraction.detect import detect_format
from workers.extraction.result import ExtractionResult, Page, Section
from workers.extraction.text import extract_text

__all__ = ["ExtractionResult", "Page", "Section", "detect_format", "extract_file", "self_check"]

_TEXT_TYPES = {"text/plain", "text/markdown"}


def extract_file(path: Path, mime: str, max_bytes: int) -> ExtractionResult:
    """Extract the file at ``path``, whose type :func:`detect_format` found to be ``mime``."""
    size = path.stat().st_size
    if size == 0:
        raise PermanentError("EMPTY_FILE", "The file is empty (0 bytes).")
    if size > max_bytes:
        raise PermanentError("TOO_LARGE", f"The file has {size} bytes; the limit is {max_bytes}.")
    if mime in _TEXT_TYPES:
        return extract_text(path.read_bytes(), mime)
    raise PermanentError(
        "UNSUPPORTED_FORMAT", f"No extractor is available for {mime} files in this version."
    )


def self_check() -> dict[str, str]:
    """Extract a tiny sample with every available extractor; raise if one is broken."""
    extract_text(b"# ok\nLDIMS self-check", "text/markdown")
    return {"text/plain": "text", "text/markdown": "text"}
