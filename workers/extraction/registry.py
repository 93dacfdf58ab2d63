"""Choosing the extractor for a file by the type found in its bytes, and the checks around it.

The order for one file: size limits → the real type of ZIP/OLE2 containers → hostile-container
guards → (a Strict Open XML package: its Transitional reading) → the extractor for that type →
language detection when the file did not declare one.
Extractor modules are imported on first use, so the API process (which only detects types)
does not load PDFium, python-docx or Tika.
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from workers.extraction import containers
from workers.extraction.common import ensure_chars, ensure_size
from workers.extraction.detect import FLAT_ODF_TYPES
from workers.extraction.guards import check_xml, check_zip
from workers.extraction.result import ExtractionLimits
from workers.extraction.strict_ooxml import is_strict, transitional_copy

PDF = "application/pdf"
HTML = "text/html"
TEXT_TYPES = ("text/plain", "text/markdown")
# Everything Tika reads for us (the REST server when LDIMS_TIKA_URL is set, else in-process).
TIKA_TYPES = (
    containers.XLSX,
    containers.PPTX,
    containers.DOC,
    containers.XLS,
    containers.PPT,
    containers.MSG,
    containers.EPUB,
    "application/rtf",
    "application/vnd.oasis.opendocument.text",
    "application/vnd.oasis.opendocument.spreadsheet",
    "application/vnd.oasis.opendocument.presentation",
    *FLAT_ODF_TYPES.values(),  # flat (one XML file) OpenDocument: Tika's flat ODF parser
)
# Read by OCR (workers.extraction.image; the module itself loads Pillow and Tesseract).
IMAGE_TYPES = ("image/png", "image/jpeg", "image/tiff", "image/webp", "image/bmp", "image/gif")
EMAIL = "message/rfc822"
_ZIP_BASED = (containers.DOCX, containers.XLSX, containers.PPTX, containers.EPUB, containers.ZIP)
_OOXML = (containers.DOCX, containers.XLSX, containers.PPTX)
_LANGUAGE_SAMPLE = 20_000

Extractor = Callable[[Path, str, ExtractionLimits], ExtractionResult]


def extract_path(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    """Extract the file at ``path`` whose head was detected as ``mime``; raise with a code."""
    ensure_size(path, limits)
    mime = containers.refine_container_format(path, mime)
    if mime == containers.ENCRYPTED_OFFICE:
        raise PermanentError(
            "ENCRYPTED",
            "The Office document is encrypted with a password; LDIMS cannot open it. "
            "Upload a copy without password protection.",
        )
    if mime in FLAT_ODF_TYPES.values():
        check_xml(path, limits)
    elif mime in _ZIP_BASED or mime.startswith("application/vnd.oasis.opendocument."):
        check_zip(path, limits)
    if mime in _OOXML and is_strict(path):
        return _with_language(replace(_strict(path, mime, limits), format=mime))
    result = _extractor_for(mime)(path, mime, limits)
    return _with_language(replace(result, format=mime))


def _strict(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    """A Strict Open XML package, extracted from its Transitional reading (a temporary copy,
    within the size the zip guard allowed)."""
    with tempfile.TemporaryDirectory(prefix="ldims-strict-") as folder:
        copy = transitional_copy(path, Path(folder) / path.name)
        result = _extractor_for(mime)(copy, mime, limits)
    return replace(result, metadata={**result.metadata, "ooxml_conformance": "strict"})


def warm_up() -> None:
    """Import every extractor and the language model (the extractor process calls this once)."""
    from workers.extraction import html, pdf, tika, word  # noqa: F401

    _language_model()

    tika.tika_extractor()


def supported_types() -> tuple[str, ...]:
    """Every MIME type some extractor accepts."""
    return (
        PDF,
        containers.DOCX,
        HTML,
        *TEXT_TYPES,
        *TIKA_TYPES,
        *IMAGE_TYPES,
        EMAIL,
        containers.ZIP,
    )


def _extractor_for(mime: str) -> Extractor:
    if mime == PDF:
        return _pdf
    if mime == containers.DOCX:
        return _docx
    if mime == HTML:
        return _html
    if mime in TEXT_TYPES:
        return _text
    if mime in TIKA_TYPES:
        return _tika
    if mime in IMAGE_TYPES:
        return _image
    if mime == EMAIL:
        return _email
    if mime == containers.ZIP:
        return _zip
    if mime.startswith("image/"):
        raise PermanentError(
            "UNSUPPORTED_FORMAT",
            f"The file is an image ({mime}) of a kind LDIMS does not read; text recognition "
            "takes PNG, JPEG, TIFF, WebP, BMP and GIF.",
        )
    raise PermanentError(
        "UNSUPPORTED_FORMAT",
        f"The file's content is {mime}, which LDIMS cannot extract text from. Supported: PDF, "
        "Word, PowerPoint, Excel, OpenDocument, RTF, EPUB, HTML, Markdown, plain text, e-mail "
        "(.eml), ZIP archives of these and images (PNG, JPEG, TIFF, WebP, BMP, GIF: by OCR).",
    )


def _pdf(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.pdf import extract_pdf

    return extract_pdf(path, limits)


def _docx(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.word import extract_docx

    return extract_docx(path, limits)


def _email(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.email_message import extract_email

    return extract_email(path, limits, extract_path)


def _zip(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.archive import extract_zip

    return extract_zip(path, limits, extract_path)


def _image(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.image import extract_image

    return extract_image(path, mime, limits)


def _html(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.html import extract_html

    return extract_html(path, limits)


def _tika(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.tika import extract_with_tika

    return extract_with_tika(path, mime, limits)


def _text(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    from workers.extraction.text import extract_text

    # Decoding needs the whole file in memory: refuse early what cannot fit, counting at
    # most 4 bytes per character (UTF-32), so nothing under the limit is refused.
    ensure_chars(path.stat().st_size // 4, limits)
    result = extract_text(path.read_bytes(), mime)
    ensure_chars(len(result.text), limits)
    return result


def _with_language(result: ExtractionResult) -> ExtractionResult:
    if result.metadata.get("language") or not result.text.strip():
        return result
    language = _detect_language(result.text[:_LANGUAGE_SAMPLE])
    if language is None:
        return result
    return replace(result, metadata={**result.metadata, "language": language})


# Languages worth telling apart for search (analyzers, stop words); restricting the model to
# them keeps short or noisy texts from being labelled with rare languages.
_LANGUAGES = [
    "en",
    "ru",
    "zh",
    "ja",
    "ko",
    "de",
    "fr",
    "es",
    "it",
    "pt",
    "nl",
    "pl",
    "uk",
    "be",
    "cs",
    "sk",
    "sv",
    "da",
    "no",
    "fi",
    "et",
    "lv",
    "lt",
    "tr",
    "ar",
    "he",
    "fa",
    "el",
    "hu",
    "ro",
    "bg",
    "sr",
    "hr",
    "sl",
    "vi",
    "th",
    "id",
    "ms",
    "hi",
]
_MIN_LETTERS = 40


@functools.cache
def _language_model() -> ModuleType:
    import py3langid  # loads its model once per process, on first use

    py3langid.set_languages(_LANGUAGES)
    return py3langid


def _detect_language(sample: str) -> str | None:
    """ISO 639-1 code of the sample's main language, or None when there is too little text."""
    # Counting stops at the minimum: counting every letter of the 20,000-character sample
    # took 0.1 ms a file, a sixth of a small text file's extraction.
    if len(list(itertools.islice(filter(str.isalpha, sample), _MIN_LETTERS))) < _MIN_LETTERS:
        return None
    language, _score = _language_model().classify(sample)
    return str(language)
