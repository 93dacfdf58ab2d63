"""Extraction: a file in, an :class:`ldims.text.ExtractionResult` out, or a ``PermanentError``
with a code.

Extractors are pure: no catalog or index I/O. :func:`extract_file` picks one by the type
detected from the bytes and runs it in this process; workers use :class:`ExtractionSandbox`,
which runs the same function in a watched child process under time and memory limits.
"""

from __future__ import annotations

import httpx

from workers.extraction.detect import detect_format
from workers.extraction.registry import extract_path as extract_file
from workers.extraction.registry import supported_types
from workers.extraction.result import FAILURE_CODES, ExtractionLimits, OcrOptions
from workers.extraction.sandbox import ExtractionSandbox
from workers.extraction.text import extract_text

__all__ = [
    "FAILURE_CODES",
    "ExtractionLimits",
    "ExtractionSandbox",
    "OcrOptions",
    "detect_format",
    "extract_file",
    "self_check",
    "supported_types",
]


def self_check(tika_url: str | None = None) -> dict[str, object]:
    """Extract a tiny sample in-process and reach the Tika server if one is configured.

    Raises when something is broken. The heavy extractors (PDFium, python-docx, iscc-tika)
    live in the workers' extractor processes and are not loaded here.
    """
    extract_text(b"# ok\nLDIMS self-check", "text/markdown")
    if tika_url:
        # Tika's own liveness endpoint; a server that does not answer fails the check.
        httpx.get(f"{tika_url.rstrip('/')}/tika", timeout=3.0).raise_for_status()
    return {"tika": "rest" if tika_url else "in-process", "formats": len(supported_types())}
