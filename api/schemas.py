"""JSON shapes of the REST API (camelCase, as in the LDIMS seed)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ldims.catalog import Document
from ldims.documents.reading import VectorsState, vectors_error, vectors_state


class DocumentError(BaseModel):
    code: str
    message: str | None


class DocumentOut(BaseModel):
    documentId: str
    tenant: str
    collection: str
    name: str
    format: str | None
    size: int | None
    sha256: str | None
    submitter: str | None
    documentType: str | None
    createdAt: datetime
    updatedAt: datetime
    version: int
    status: str
    error: DocumentError | None
    extractedAt: datetime | None
    extractor: str | None
    pageCount: int | None
    language: str | None
    title: str | None
    sourceUrl: str | None
    chunks: int | None = Field(None, description="Passages indexed (when completed)")
    ocrPages: list[int] | None = Field(
        None, description="Pages whose text was recognized by OCR (null: none)"
    )
    ocrConfidence: float | None = Field(
        None, description="Tesseract's mean word confidence over those pages, 0..100"
    )
    vectors: VectorsState | None = Field(
        None,
        description="Semantic search's vectors of this version: ready, pending (found by "
        "keywords meanwhile), failed (some chunks could not be embedded: vectorsError says "
        "which and why; the others have vectors) or off; null until completed",
    )
    vectorsError: str | None = Field(
        None, description="When vectors is failed: which chunk could not be embedded, and why"
    )

    @classmethod
    def of(cls, document: Document, fingerprint: str | None = None) -> DocumentOut:
        error = (
            DocumentError(code=document.error_code, message=document.error_message)
            if document.error_code
            else None
        )
        return cls(
            documentId=document.public_id,
            tenant=document.tenant,
            collection=document.collection,
            name=document.name,
            format=document.format,
            size=document.size,
            sha256=document.sha256,
            submitter=document.submitter,
            documentType=document.document_type,
            createdAt=document.created_at,
            updatedAt=document.updated_at,
            version=document.version,
            status=document.status,
            error=error,
            extractedAt=document.extracted_at,
            extractor=document.extractor,
            pageCount=document.page_count,
            language=document.language,
            title=document.title,
            sourceUrl=document.source_url,
            chunks=document.chunk_count if document.status == "completed" else None,
            ocrPages=document.ocr_page_numbers,
            ocrConfidence=document.ocr_confidence,
            vectors=vectors_state(document, fingerprint),
            vectorsError=vectors_error(document, fingerprint),
        )


class AcceptedOut(BaseModel):
    """Answer to an upload: the document, and whether work was queued for it."""

    documentId: str
    status: str
    version: int
    created: bool
    duplicate: bool
    document: DocumentOut


class BulkItemOut(BaseModel):
    """One file of a bulk upload: its document (as a single upload answers), or why it was
    rejected (``errorCode`` and ``message``; nothing was recorded for it)."""

    name: str
    documentId: str | None = None
    status: str | None = None
    version: int | None = None
    created: bool | None = None
    duplicate: bool | None = None
    errorCode: str | None = None
    message: str | None = None


class BulkAcceptedOut(BaseModel):
    """Answer to a bulk upload: one item per file, in the order sent, and the counts."""

    documents: list[BulkItemOut]
    queued: int
    duplicates: int
    rejected: int


class DocumentPage(BaseModel):
    items: list[DocumentOut]
    total: int
    limit: int
    offset: int


class ContentMetadata(BaseModel):
    documentName: str
    extractedAt: datetime | None
    format: str | None
    pageCount: int | None


class ContentOut(BaseModel):
    documentId: str
    text: str
    metadata: ContentMetadata
    offset: int
    length: int
    totalLength: int
    nextOffset: int | None


class LinesOut(BaseModel):
    """A range of lines of the extracted text, each prefixed with its number."""

    documentId: str
    documentName: str
    text: str
    lines: str
    lineCount: int
    truncated: bool
    nextUri: str | None = None


class ErrorOut(BaseModel):
    """The seed's error body of every 4xx and 5xx (made in one place: ``api.errors``)."""

    isError: bool
    errorCode: str
    errorMessage: str
    errorDetails: dict[str, Any] | None = None


class ProcessingOut(BaseModel):
    """202 of a read while the document is queued or processing: ask again after
    ``Retry-After`` seconds (the document's id and status ride along)."""

    model_config = ConfigDict(extra="allow")

    status: str
    message: str


ERRORS = {
    400: "INVALID_INPUT: a parameter is wrong (errorDetails names it).",
    401: "UNAUTHORIZED: no, an unknown, revoked or expired API key (or a bad signature).",
    403: "FORBIDDEN: the API key lacks the scope.",
    404: "RESOURCE_NOT_FOUND: no such document of the caller's tenant.",
    409: "CONTENT_UNAVAILABLE_OR_FAILED: the document failed; its content never comes.",
    413: "TOO_LARGE: the body is over the limit (errorDetails.limitBytes).",
    422: "QUERY_UNPROCESSABLE: nothing searchable in the query.",
    500: "SERVER_ERROR: unexpected; nothing internal is shown.",
    503: "SERVER_ERROR: the catalog or broker is unavailable; nothing was done.",
    504: "SEARCH_TIMEOUT: the search took longer than the server allows.",
}
# What every route behind an API key may answer.
COMMON_ERRORS = (400, 401, 403, 500, 503)


def error_responses(
    *statuses: int, model: type[BaseModel] = ErrorOut, descriptions: Mapping[int, str] = ERRORS
) -> dict[int | str, Any]:
    """OpenAPI ``responses`` of these error statuses and the common ones, in ``model``'s shape."""
    chosen = sorted({*COMMON_ERRORS, *statuses})
    return {status: {"model": model, "description": descriptions[status]} for status in chosen}
