"""The failure codes and limits of extracting one file.

Every extractor returns an :class:`ldims.text.ExtractionResult` (the data model every later
stage shares, in the base layer) or raises ``PermanentError`` with one of
the failure codes below. Pages are numbered from 1; a section's page span refers to them.

Failure codes (``PermanentError.code``):

================== =====================================================================
EMPTY_FILE         zero bytes, or no text at all after extraction of a text format
ENCRYPTED          needs a password we do not have (an empty user password is tried)
CORRUPT_FILE       the container or structure cannot be parsed
NO_TEXT_LAYER      a PDF whose pages carry no text and OCR is off (LDIMS_OCR=off)
OCR_UNAVAILABLE    pages or an image need OCR and its engine or language data are missing
UNSUPPORTED_FORMAT no extractor for the type detected from the bytes
TOO_LARGE          over a limit: bytes, pages, extracted characters or memory
TIMEOUT            over the per-file wall time
HOSTILE_FILE       zip bomb, XML entity bomb or a similar trap
================== =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass

FAILURE_CODES = (
    "EMPTY_FILE",
    "ENCRYPTED",
    "CORRUPT_FILE",
    "NO_TEXT_LAYER",
    "OCR_UNAVAILABLE",
    "UNSUPPORTED_FORMAT",
    "TOO_LARGE",
    "TIMEOUT",
    "HOSTILE_FILE",
)


@dataclass(frozen=True)
class OcrOptions:
    """How text recognition runs (``LDIMS_OCR*``; see :mod:`workers.extraction.ocr`)."""

    mode: str = "auto"  # auto: pages without a text layer, and images; off; force: every page
    languages: tuple[str, ...] = ("eng", "rus", "chi_sim")
    max_pages: int = 50  # pages of one document recognized at most
    dpi: int = 200  # resolution PDF pages are rendered at for recognition (LDIMS_OCR_DPI)
    tessdata: str | None = None  # the language data's folder; None: the system's
    # The extract workers' pass: a file that needs OCR raises ``OcrDeferred`` (the ``ocr``
    # queue's workers read it) instead of being read here.
    defer: bool = False


@dataclass(frozen=True)
class ExtractionLimits:
    """The limits one extraction runs under (built from settings by the worker)."""

    max_bytes: int = 100 * 1024 * 1024
    max_pages: int = 5000
    max_chars: int = 20_000_000
    timeout_seconds: float = 120.0
    max_memory_mib: int = 2048
    # Zip containers (DOCX, XLSX, PPTX, ODF, EPUB): real uncompressed total, per-member ratio.
    max_unzipped_bytes: int = 1024 * 1024 * 1024
    max_zip_ratio: int = 200
    max_zip_members: int = 20_000
    # Tika: a server URL (tika-client over REST), or None for iscc-tika in-process.
    tika_url: str | None = None
    ocr: OcrOptions = OcrOptions()
    depth: int = 0  # how deep this file is inside others (an e-mail's attachment: 1)
