"""Reading a document of the caller: its record, its state, and its extracted text by
character offset, by page range or by line range — bounded, each part saying where the rest is.

The views answer by the document's state as the LDIMS seed asks: ``StillProcessing`` (202 /
``PROCESSING``) while queued or processing, ``ContentUnavailable`` (409) once it failed. Line
numbers are those of search hits (``lineStart``/``lineEnd``): the lines of the pages joined
with one blank line between pages, counted from 1 (:mod:`ldims.text.lines`, the one rule).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from ldims.caller import Caller
from ldims.catalog import Catalog, Document, DocumentFilter, DocumentStatus, repository
from ldims.compact_schema import compact_field
from ldims.documents.extract_text import (
    character_slice,
    line_beginnings,
    read_extract,
    read_pages,
    text_measures,
    text_pieces,
    text_value,
)
from ldims.documents.intake import owned_document
from ldims.documents.uris import extracted_uri, lines_uri, pages_uri
from ldims.errors import ContentUnavailable, InvalidInput, NotFound, StillProcessing
from ldims.extracts import ExtractStore
from ldims.semantic import fingerprint_for
from ldims.settings import Settings
from ldims.text import ExtractionResult, blank_line, joined, page_texts

_RANGE = re.compile(r"^(?P<first>\d{1,7})(?:-(?P<last>\d{1,7}))?$")
RETRY_AFTER_SECONDS = 5
_ALL = 10**9  # "to the last page"


_STAGES = {
    "queued": "waiting for an extraction worker",
    "processing": "text extraction and indexing in progress",
    "completed": "ready: searchable and readable",
    "failed": "processing failed; the content is unavailable",
}
# A version handed to the OCR workers (its pages are scans, or it is an image).
_OCR_STAGES = {
    "queued": "waiting for text recognition (OCR) of its scanned pages",
    "processing": "text recognition (OCR) in progress",
}


class DocumentErrorOut(BaseModel):
    code: str
    message: str | None


class DocumentStatusOut(BaseModel):
    documentId: str  # noqa: N815
    documentName: str  # noqa: N815
    status: Literal["queued", "processing", "completed", "failed"]
    ready: bool = Field(description="The content can be read and searched")
    stage: str = Field(description="What is happening to the document, in words")
    version: int
    error: Annotated[DocumentErrorOut | None, compact_field(DocumentErrorOut, nullable=True)]
    attempts: int
    retryAfterSeconds: int | None = Field(  # noqa: N815
        description="When still processing: seconds to wait before asking again"
    )
    collection: str
    documentType: str | None  # noqa: N815
    submitter: str | None
    format: str | None
    pageCount: int | None  # noqa: N815
    createdAt: str  # noqa: N815
    updatedAt: str  # noqa: N815
    statusChangedAt: str  # noqa: N815
    extractedAt: str | None  # noqa: N815
    chunks: int | None = Field(description="Passages indexed (when completed)")
    ocrPages: list[int] | None = Field(  # noqa: N815
        None, description="Pages whose text was recognized by OCR (null: none)"
    )
    ocrConfidence: float | None = Field(  # noqa: N815
        None, description="OCR's mean word confidence over those pages, 0..100"
    )
    vectors: Literal["ready", "pending", "failed", "off"] | None = Field(
        description="Semantic search's vectors of this version: ready, pending (the document "
        "is found by keywords meanwhile), failed (some chunks could not be embedded: see "
        "vectorsError; the others have vectors), off (semantic search is not configured); "
        "null until completed"
    )
    vectorsError: str | None = Field(  # noqa: N815
        None, description="When vectors is failed: which chunk could not be embedded, and why"
    )
    uri: str


@dataclass(frozen=True)
class CharacterSlice:
    """``text[offset:offset+length]`` of the extracted text."""

    document: Document
    text: str
    offset: int
    total_length: int
    next_offset: int | None


@dataclass(frozen=True)
class DocumentPart:
    """A bounded part of a document: its text and what a reader needs to go on."""

    document: Document
    text: str
    meta: dict[str, Any]


def parse_range(text: str, field: str = "range") -> tuple[int, int]:
    """``"3"`` or ``"3-7"`` (counted from 1, first <= last)."""
    match = _RANGE.match(text)
    if match is None:
        raise InvalidInput(field=field, issue="a number (3) or a range (3-7)")
    first = int(match["first"])
    last = int(match["last"] or first)
    if not 1 <= first <= last:
        raise InvalidInput(field=field, issue="counted from 1, first <= last")
    return first, last


class DocumentReader:
    def __init__(self, settings: Settings, catalog: Catalog, extracts: ExtractStore) -> None:
        self.settings = settings
        self.catalog = catalog
        self.extracts = extracts

    def get(self, caller: Caller, document_id: str) -> Document:
        """The caller's document record, whatever its state."""
        with self.catalog.session() as session:
            return owned_document(session, caller, document_id)

    def list(
        self, caller: Caller, filters: DocumentFilter, limit: int, offset: int
    ) -> tuple[list[Document], int]:
        """The caller's documents, newest first, filtered and paged; and how many match."""
        with self.catalog.session() as session:
            return repository.list_documents(session, caller.tenant, filters, limit, offset)

    def status(self, caller: Caller, document_id: str) -> DocumentStatusOut:
        return status_of(self.get(caller, document_id), fingerprint_for(self.settings))

    def content(self, caller: Caller, document_id: str) -> tuple[Document, ExtractionResult]:
        """The extracted content of a completed document, or the error its state calls for."""
        document, path = self.extract_file(caller, document_id)
        return document, ExtractionResult.from_json(path.read_text(encoding="utf-8"))

    def extract_file(self, caller: Caller, document_id: str) -> tuple[Document, Path]:
        """The stored extract of a completed document (to read in pieces:
        :mod:`ldims.documents.extract_text`), or the error its state calls for."""
        return self.extract_of(self.get(caller, document_id))

    def extract_of(self, document: Document) -> tuple[Document, Path]:
        """:meth:`extract_file` of a record already read for its caller (a batch read once)."""
        if document.status in (DocumentStatus.QUEUED.value, DocumentStatus.PROCESSING.value):
            raise StillProcessing(documentId=document.public_id, documentStatus=document.status)
        if document.status == DocumentStatus.FAILED.value:
            raise ContentUnavailable(
                documentId=document.public_id,
                status=document.status,
                failureCode=document.error_code,
                reason=document.error_message,
            )
        fmt = document.format or ""
        if not document.sha256 or not self.extracts.exists(document.sha256, fmt):
            raise ContentUnavailable(
                "The extracted content is missing; re-upload the document.",
                documentId=document.public_id,
                status=document.status,
                failureCode="CONTENT_MISSING",
            )
        return document, self.extracts.path(document.sha256, fmt)

    def characters(
        self, caller: Caller, document_id: str, offset: int = 0, limit: int | None = None
    ) -> CharacterSlice:
        """Characters ``offset..offset+limit`` of the text, ``limit`` at most (and by
        default) ``LDIMS_MCP_MAX_CONTENT_CHARS``; read from the extract in pieces, so a
        reader of a long document holds the slice, never the whole text."""
        most = self.settings.mcp_max_content_chars
        limit = most if limit is None else min(limit, most)
        document, path = self.extract_file(caller, document_id)
        total = text_measures(path).text_chars  # remembered: no walk of the whole per page
        text = read_extract(
            path,
            lambda: character_slice(text_value(path), offset, limit),
            lambda result: result.text[offset : offset + limit],
        )
        end = min(total, offset + limit)
        return CharacterSlice(document, text, offset, total, end if end < total else None)

    def whole(self, caller: Caller, document_id: str) -> DocumentPart:
        """The whole document, or as many whole pages from the first as fit one part."""
        document, path = self.extract_file(caller, document_id)
        texts, count = self._read_pages(path, 1, _ALL)
        return self._pages_part(document, texts, count, 1, count, extracted_uri(document.public_id))

    def pages(self, caller: Caller, document_id: str, pages_range: str) -> DocumentPart:
        """Pages ``first..last`` (``"3"`` or ``"3-7"``), as many whole pages as fit."""
        first, last = parse_range(pages_range)
        document, path = self.extract_file(caller, document_id)
        texts, count = self._read_pages(path, first, last)
        if first > count:
            raise NotFound(
                f"The document has {count} page(s).",
                documentId=document.public_id,
                pageCount=count,
            )
        uri = pages_uri(document.public_id, pages_range)
        return self._pages_part(document, texts, count, first, min(last, count), uri)

    def _read_pages(self, path: Path, first: int, last: int) -> tuple[list[str], int]:
        """Pages ``first..last`` as far as one part can show them, read from the extract in
        pieces (:func:`read_pages`), and the page count."""
        limit = self.settings.mcp_max_content_chars

        def whole(result: ExtractionResult) -> tuple[list[str], int]:
            pages = page_texts(result)
            return [page[: limit + 1] for page in pages[first - 1 : last]], len(pages)

        return read_extract(path, lambda: read_pages(path, first, last, limit), whole)

    def lines(self, caller: Caller, document_id: str, lines_range: str) -> DocumentPart:
        """Lines ``first..last`` in the numbering of search hits, each prefixed with its
        number; as many whole lines as fit one part."""
        first, last = parse_range(lines_range)
        document, path = self.extract_file(caller, document_id)
        limit = self.settings.mcp_max_content_chars
        count = text_measures(path).lines  # remembered: the count walks the extract once
        if first > count:
            raise NotFound(
                f"The document has {count} line(s).",
                documentId=document.public_id,
                lineCount=count,
            )
        last = min(last, count)

        def whole(result: ExtractionResult) -> tuple[list[str], int]:
            text = joined(page_texts(result))
            return _numbered(iter(text.split("\n")[first - 1 :]), first, last, limit)

        out, shown = read_extract(  # the walk stops at the last line shown
            path,
            lambda: _numbered(
                line_beginnings(text_pieces(path, blank_line), first, limit + 1),
                first,
                last,
                limit,
            ),
            whole,
        )
        meta: dict[str, Any] = {
            "documentName": document.name,
            "lineCount": count,
            "lines": f"{first}-{shown}",
            "truncated": shown < last,
        }
        text = "\n".join(out)
        if shown < last:
            rest = lines_uri(document.public_id, f"{shown + 1}-{last}")
            meta["nextUri"] = rest
            text += f"\n\n[Lines {first}-{shown} of {count}. Continue with {rest}]"
        return DocumentPart(document, text, meta)

    def _pages_part(
        self,
        document: Document,
        texts: list[str],
        count: int,
        first: int,
        last: int,
        uri: str,
    ) -> DocumentPart:
        """Pages ``first..last`` (1-based; ``texts``: theirs from ``first``, as far as they
        were read, each cut past the limit), as many whole pages as fit the size limit; a
        part that stops early ends with the URI of the rest."""
        limit = self.settings.mcp_max_content_chars
        marked = count > 1 or first > 1
        parts: list[str] = []
        size = 0
        shown = first - 1
        for number in range(first, min(last, first + len(texts) - 1) + 1):
            page = texts[number - first]
            text = f"--- page {number} ---\n{page}" if marked else page
            if size + len(text) > limit and parts:
                break
            if len(text) > limit:  # one page alone is over the limit: its beginning only
                text = text[:limit]
            parts.append(text)
            size += len(text) + 2
            shown = number
        body = "\n\n".join(parts)
        truncated = shown < last or size > limit
        meta: dict[str, Any] = {
            "documentName": document.name,
            "extractedAt": document.extracted_at.isoformat() if document.extracted_at else None,
            "format": document.format,
            "pageCount": count,
            "pages": f"{first}-{shown}",
            "truncated": truncated,
        }
        if truncated:
            rest = shown + 1 if shown < last else shown
            next_uri = pages_uri(document.public_id, f"{rest}-{last}" if rest < last else str(rest))
            if shown < last:
                meta["nextUri"] = next_uri
                body += f"\n\n[Part of the document: pages {first}-{shown} of {count}. "
                body += f"Continue with {next_uri}]"
            else:
                body += f"\n\n[Page {shown} is longer than {limit} characters; it was cut here.]"
        return DocumentPart(document, body, meta)


def _numbered(lines: Iterator[str], first: int, last: int, limit: int) -> tuple[list[str], int]:
    """Lines ``first..last`` of ``lines`` (which starts at ``first``), each prefixed with
    its number, as many whole ones as fit ``limit`` characters; and the last one shown."""
    width = len(str(last))
    out: list[str] = []
    size = 0
    shown = first - 1
    for number, text in zip(range(first, last + 1), lines, strict=False):
        line = f"{number:>{width}}: {text}"
        if out and size + len(line) + 1 > limit:
            break
        out.append(line[:limit])
        size += len(out[-1]) + 1
        shown = number
    return out, shown


VectorsState = Literal["ready", "pending", "failed", "off"]


def vectors_state(document: Document, fingerprint: str | None) -> VectorsState | None:
    """Whether the vectors of ``document``'s version and of the model ``fingerprint`` are
    stored (None until it is completed; off: no model; failed: stored but for the chunks
    :func:`vectors_error` names)."""
    if document.status != "completed":
        return None
    if fingerprint is None:
        return "off"
    embedded = document.vectors_sha256 == document.sha256 and document.vectors_model == fingerprint
    if not embedded:
        return "pending"
    return "failed" if document.vectors_error else "ready"


def vectors_error(document: Document, fingerprint: str | None) -> str | None:
    """Why some chunks of the document have no vector (when its vectors state is failed)."""
    return document.vectors_error if vectors_state(document, fingerprint) == "failed" else None


def status_of(document: Document, fingerprint: str | None = None) -> DocumentStatusOut:
    """The status of ``document``; ``fingerprint``: the embedding model's (None: off)."""
    waiting = document.status in ("queued", "processing")
    completed = document.status == "completed"
    vectors = vectors_state(document, fingerprint)
    return DocumentStatusOut(
        documentId=document.public_id,
        documentName=document.name,
        status=document.status,  # type: ignore[arg-type]
        ready=document.status == "completed",
        stage=(_OCR_STAGES if document.waiting_for_ocr else _STAGES).get(
            document.status, document.status
        ),
        version=document.version,
        error=DocumentErrorOut(code=document.error_code, message=document.error_message)
        if document.error_code
        else None,
        attempts=document.attempts,
        retryAfterSeconds=RETRY_AFTER_SECONDS if waiting else None,
        collection=document.collection,
        documentType=document.document_type,
        submitter=document.submitter,
        format=document.format,
        pageCount=document.page_count,
        createdAt=document.created_at.isoformat(),
        updatedAt=document.updated_at.isoformat(),
        statusChangedAt=document.status_changed_at.isoformat(),
        extractedAt=document.extracted_at.isoformat() if document.extracted_at else None,
        chunks=document.chunk_count if completed else None,
        ocrPages=document.ocr_page_numbers,
        ocrConfidence=document.ocr_confidence,
        vectors=vectors,
        vectorsError=vectors_error(document, fingerprint),
        uri=extracted_uri(document.public_id),
    )
