"""Office formats through Apache Tika: PPTX, XLSX, ODF, RTF, EPUB, DOC, PPT, XLS, MSG.

Two backends give the same XHTML (read by :mod:`workers.extraction.xhtml`):

* ``limits.tika_url`` unset: iscc-tika, Tika compiled to a native library, in this process.
  Its output is streamed and cut off past a size cap derived from ``limits.max_chars``, so a
  huge spreadsheet fails ``TOO_LARGE`` early instead of being truncated silently.
* ``limits.tika_url`` set: a Tika server through ``tika-client`` (``POST /tika/form``). An
  unreachable or failing server is a ``TransientError`` (``TIKA_UNAVAILABLE``, retried).

Failures become ``PermanentError`` codes: encrypted → ``ENCRYPTED``, unparseable →
``CORRUPT_FILE``, no text → ``EMPTY_FILE``, no Tika parser for the bytes → ``UNSUPPORTED_FORMAT``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import olefile
from iscc_tika import (
    Extractor,
    PdfOcrStrategy,
    PdfParserConfig,
    StreamReader,
    TesseractOcrConfig,
)
from tika_client import HttpStatusError, TikaClient

from ldims.errors import PermanentError, TransientError
from ldims.text import ExtractionResult
from workers.extraction.common import ensure_pages, ensure_size, language_code, parse_count
from workers.extraction.result import ExtractionLimits
from workers.extraction.xhtml import parse_xhtml

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_CONTENT_KEY = "X-TIKA:content"
_TIKA_REASON = re.compile(r'Parse error occurred : (.*?)"?\)?$', re.DOTALL)
_REASON_MAX = 200
_ISO639_2 = {
    "ara": "ar", "chi": "zh", "zho": "zh", "deu": "de", "ger": "de", "dut": "nl", "nld": "nl",
    "eng": "en", "fra": "fr", "fre": "fr", "ita": "it", "jpn": "ja", "kor": "ko", "pol": "pl",
    "por": "pt", "rus": "ru", "spa": "es", "swe": "sv", "tur": "tr", "ukr": "uk",
}  # fmt: skip
_DECLARED_PAGES = ("xmpTPg:NPages", "meta:page-count", "meta:slide-count")
_ENCRYPTED_MESSAGE = (
    "The document is encrypted with a password; LDIMS cannot open it. "
    "Upload a copy without password protection."
)


def extract_with_tika(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    """Extract an Office/RTF/EPUB file with Tika (in-process, or the server at tika_url)."""
    ensure_size(path, limits)
    if limits.tika_url is None:
        xhtml, raw_metadata = _read_inprocess(path, limits)
        extractor = "tika-inprocess"
    else:
        xhtml, raw_metadata = _read_rest(path, mime, limits)
        extractor = "tika-rest"
    metadata = normalise_metadata(raw_metadata)
    _refuse_unreadable(metadata, mime)
    ensure_pages(_declared_pages(metadata) or 0, limits)
    document = parse_xhtml(xhtml, mime, limits)
    merged = {**document.head_metadata, **metadata}
    return ExtractionResult(
        format=mime,
        extractor=extractor,
        text=document.text,
        pages=document.pages,
        sections=document.sections,
        tables=document.tables,
        metadata=_result_metadata(merged, len(document.pages)),
        headers_footers=document.headers_footers,
    )


@functools.cache
def tika_extractor() -> Extractor:
    """The one in-process Extractor: XHTML output, OCR off, iscc-tika's Office defaults.

    Headers and footers stay off (the default): Tika writes Excel's raw header codes
    (``&"Arial,Bold"&12``) into the sheets, which would pollute the text.
    """
    return (
        Extractor()
        .set_xml_output(True)
        .set_ocr_config(TesseractOcrConfig().set_skip_ocr(True))
        .set_pdf_config(PdfParserConfig().set_ocr_strategy(PdfOcrStrategy.NO_OCR))
    )


@functools.cache
def _probe_extractor() -> Extractor:
    # Only used to learn why a stream failed: stops after a few characters on success.
    return tika_extractor().set_extract_string_max_length(1000)


def normalise_metadata(raw: Mapping[str, Any]) -> dict[str, list[str]]:
    """Tika metadata with every value a list of strings (a server sends lone values bare)."""
    metadata: dict[str, list[str]] = {}
    for key, value in raw.items():
        values = value if isinstance(value, list | tuple) else [value]
        metadata[str(key)] = [str(item) for item in values if item is not None]
    return metadata


def xhtml_cap(limits: ExtractionLimits) -> int:
    """The most XHTML accepted: markup outweighs text, so a multiple of max_chars."""
    return 4 * limits.max_chars + _MIB


def _read_inprocess(path: Path, limits: ExtractionLimits) -> tuple[str, Mapping[str, Any]]:
    try:
        reader, metadata = tika_extractor().extract_file(str(path))
        # Slide and page counts are known before the body is parsed: refuse early.
        ensure_pages(_declared_pages(normalise_metadata(metadata)) or 0, limits)
        data = _read_capped(reader, xhtml_cap(limits), limits)
    except (TypeError, OSError) as error:
        raise _inprocess_failure(path, error) from error
    return data.decode("utf-8", errors="replace"), metadata


def _read_capped(reader: StreamReader, cap: int, limits: ExtractionLimits) -> bytes:
    """Read Tika's output up to ``cap`` bytes; one byte more means the file is too large."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = reader.read(min(_MIB, cap + 1 - total))
        if not chunk:
            return b"".join(chunks)
        total += len(chunk)
        if total > cap:
            # Dropping the reader stops Tika: nothing more is parsed or buffered.
            raise PermanentError(
                "TOO_LARGE",
                f"The document's extracted content exceeds the limit of {limits.max_chars} "
                "characters; split it into smaller files.",
            )
        chunks.append(bytes(chunk))  # the reader may reuse its buffer


def _inprocess_failure(path: Path, error: Exception) -> PermanentError:
    message = str(error)
    if isinstance(error, OSError):
        # The stream only says "JNI error"; Tika's own message comes from a short re-parse.
        message = _probe_message(path) or message
    return _parse_failure(path, message)


def _probe_message(path: Path) -> str | None:
    try:
        _probe_extractor().extract_file_to_string(str(path))
    except TypeError as error:
        return str(error)
    return None


def _parse_failure(path: Path, message: str) -> PermanentError:
    """The code for a Tika exception message (in-process or a server's 422 body)."""
    lowered = message.lower()
    if "encrypt" in lowered or "password" in lowered or _is_encrypted_package(path):
        return PermanentError("ENCRYPTED", _ENCRYPTED_MESSAGE)
    if "> 0 bytes" in message or "zerobytefile" in lowered:
        return PermanentError("EMPTY_FILE", "The file is empty (0 bytes).")
    match = _TIKA_REASON.search(message)
    reason = (match.group(1) if match else message).strip()[:_REASON_MAX] or "no details"
    log.info("Tika could not parse a file (CORRUPT_FILE)")
    return PermanentError(
        "CORRUPT_FILE",
        f"The file is damaged or truncated; Tika could not parse it ({reason}). "
        "Re-save it from the application that created it and upload it again.",
    )


def _is_encrypted_package(path: Path) -> bool:
    """A password-protected DOCX/XLSX/PPTX: an OLE2 file holding an EncryptedPackage."""
    try:
        if not olefile.isOleFile(str(path)):
            return False
        with olefile.OleFileIO(str(path)) as ole:
            return bool(ole.exists("EncryptedPackage"))
    except OSError:
        return False


def _read_rest(path: Path, mime: str, limits: ExtractionLimits) -> tuple[str, Mapping[str, Any]]:
    url = str(limits.tika_url)
    # Give up on the server before the sandbox gives up on us: a hung server is then a retried
    # TIKA_UNAVAILABLE, not the file's permanent TIMEOUT.
    timeout = max(1.0, limits.timeout_seconds * 0.8)
    try:
        with TikaClient(tika_url=url, timeout=timeout, backend="httpx") as client:
            data = client.tika.as_html.from_file(path, mime).data
    except HttpStatusError as error:
        raise _http_failure(path, url, error) from error
    except httpx.TransportError as error:
        raise _unavailable(url, f"{type(error).__name__}: {error}") from error
    except (ValueError, KeyError) as error:  # not JSON, or JSON without Tika's keys
        raise _unavailable(url, "the answer is not Tika's JSON") from error
    if not isinstance(data, dict):
        raise _unavailable(url, "the answer is not Tika's JSON")
    content = str(data.pop(_CONTENT_KEY, None) or "")
    if len(content) > xhtml_cap(limits):
        raise PermanentError(
            "TOO_LARGE",
            f"The document's extracted content exceeds the limit of {limits.max_chars} "
            "characters; split it into smaller files.",
        )
    return content, data


def _http_failure(path: Path, url: str, error: HttpStatusError) -> Exception:
    status = error.response.status_code
    cause = error.__cause__
    body = cause.response.text if isinstance(cause, httpx.HTTPStatusError) else ""
    if status == 415:
        return PermanentError(
            "UNSUPPORTED_FORMAT", "The Tika server has no parser for this file's type."
        )
    if status == 422:
        return _parse_failure(path, body or "the server gave no details")
    if status == 413:
        return PermanentError("TOO_LARGE", "The Tika server refused the file as too large.")
    return _unavailable(url, f"HTTP {status}")


def _unavailable(url: str, reason: str) -> TransientError:
    parts = urlsplit(url)  # never echo credentials a URL might carry
    where = f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)
    log.warning("Tika server %s unavailable: %s", where, reason)
    return TransientError(
        "TIKA_UNAVAILABLE",
        f"The Tika server at {where} could not extract the file ({reason}); it will be retried.",
    )


def _refuse_unreadable(metadata: Mapping[str, list[str]], mime: str) -> None:
    content_type = (metadata.get("Content-Type") or [""])[0].lower()
    if content_type.endswith("-protected") or "encrypted" in content_type:
        raise PermanentError("ENCRYPTED", _ENCRYPTED_MESSAGE)
    parsers = metadata.get("X-TIKA:Parsed-By") or []
    if parsers and all(name.endswith(("EmptyParser", "DefaultParser")) for name in parsers):
        raise PermanentError(
            "UNSUPPORTED_FORMAT",
            f"Tika has no parser for this file (its bytes look like {content_type or 'nothing'} "
            f"rather than {mime}).",
        )


def _first(metadata: Mapping[str, list[str]], *keys: str) -> str | None:
    for key in keys:
        for value in metadata.get(key, []):
            if value.strip():
                return value.strip()
    return None


def _language(value: str | None) -> str | None:
    """An ISO 639-1 code from ``en``, ``en-GB``, ``eng`` and the like."""
    if not value:
        return None
    return language_code(value) or _ISO639_2.get(re.split(r"[-_]", value.strip().lower())[0])


def _declared_pages(metadata: Mapping[str, list[str]]) -> int | None:
    for key in _DECLARED_PAGES:
        for value in metadata.get(key, []):
            count = parse_count(value)
            if count is not None:
                return count
    return None


def _result_metadata(metadata: Mapping[str, list[str]], page_count: int) -> dict[str, Any]:
    facts: dict[str, Any] = {
        "title": _first(metadata, "dc:title"),
        "author": _first(metadata, "dc:creator", "meta:author"),
        "created": _first(metadata, "dcterms:created"),
        "language": _language(_first(metadata, "dc:language")),
        "page_count": page_count,
        "declared_page_count": _declared_pages(metadata),
        "tika_content_type": _first(metadata, "Content-Type"),
    }
    return {key: value for key, value in facts.items() if value is not None}
