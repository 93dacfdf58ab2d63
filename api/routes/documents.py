"""REST routes of documents: upload, list, read, content, delete."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.deps import CallerDep, DocumentsDep, ServicesDep
from api.multipart import parse_upload
from api.schemas import (
    AcceptedOut,
    ContentMetadata,
    ContentOut,
    DocumentOut,
    DocumentPage,
    LinesOut,
)
from ldims.catalog import DocumentFilter, DocumentStatus
from ldims.documents import document_meta, parse_datetime
from ldims.errors import InvalidInput, PayloadTooLarge

router = APIRouter(prefix="/api/documents", tags=["documents"])
MULTIPART_SLACK = 1024 * 1024  # room for boundaries and metadata fields around the file
_UPLOAD_SCHEMA: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "name": {"type": "string"},
                        "documentId": {"type": "string"},
                        "collection": {"type": "string"},
                        "documentType": {"type": "string"},
                        "submitter": {"type": "string"},
                        "createdAt": {"type": "string", "format": "date-time"},
                    },
                }
            }
        },
    }
}


@router.post("", status_code=202, response_model=AcceptedOut, openapi_extra=_UPLOAD_SCHEMA)
async def upload_document(
    request: Request, services: ServicesDep, caller: CallerDep
) -> JSONResponse:
    """Upload a document (multipart, part ``file``); it is queued for extraction.

    202 when work was queued (new document or new version), 200 when the same content was
    already there (nothing to do). Pass ``documentId`` to replace a document's content.
    """
    settings = services.settings
    declared = int(request.headers.get("content-length") or 0)
    if declared > settings.max_upload_bytes + MULTIPART_SLACK:
        raise PayloadTooLarge(limitBytes=settings.max_upload_bytes)
    intake = services.documents.intake
    await run_in_threadpool(services.dispatcher.ping)
    upload = await parse_upload(
        request.headers.get("content-type", ""),
        request.stream(),
        intake.blobs,
        settings.max_upload_bytes,
    )
    fields = upload.fields
    try:
        meta = document_meta(
            settings,
            fields.get("name") or upload.filename,
            fields.get("collection"),
            fields.get("documentType"),
            fields.get("submitter"),
            fields.get("createdAt"),
        )
    except InvalidInput:
        await run_in_threadpool(intake.discard_blob, upload.blob.sha256)
        raise
    outcome = await run_in_threadpool(
        intake.ingest_blob, caller, upload.blob, upload.head, meta, fields.get("documentId") or None
    )
    body = AcceptedOut(
        documentId=outcome.document.id,
        status=outcome.document.status,
        version=outcome.document.version,
        created=outcome.created,
        duplicate=not outcome.queued,
        document=DocumentOut.of(outcome.document),
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if outcome.queued else 200)


@router.get("", response_model=DocumentPage)
def list_documents(
    services: ServicesDep,
    caller: CallerDep,
    status: DocumentStatus | None = None,
    collection: str | None = None,
    documentType: str | None = None,
    submitter: str | None = None,
    createdFrom: str | None = None,
    createdTo: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> DocumentPage:
    """The caller's documents, newest first, filtered and paged."""
    filters = DocumentFilter(
        status=status.value if status else None,
        collection=collection,
        document_type=documentType,
        submitter=submitter,
        created_from=parse_datetime(createdFrom, "createdFrom"),
        created_to=parse_datetime(createdTo, "createdTo"),
    )
    items, total = services.documents.reader.list(caller, filters, limit, offset)
    return DocumentPage(
        items=[DocumentOut.of(d) for d in items], total=total, limit=limit, offset=offset
    )


@router.get("/{document_id}", response_model=DocumentOut)
def get_document(document_id: str, documents: DocumentsDep, caller: CallerDep) -> DocumentOut:
    """One document's record: state, version, error code and reason."""
    return DocumentOut.of(documents.reader.get(caller, document_id))


@router.get("/{document_id}/content", response_model=ContentOut)
def get_content(
    document_id: str,
    documents: DocumentsDep,
    caller: CallerDep,
    offset: Annotated[int, Query(ge=0, description="First character to return.")] = 0,
    limit: Annotated[
        int | None, Query(ge=1, description="Characters to return (default: all).")
    ] = None,
) -> ContentOut:
    """The extracted text: 200 when completed, 202 while processing, 409 when it failed."""
    part = documents.reader.characters(caller, document_id, offset, limit)
    document = part.document
    return ContentOut(
        documentId=document.id,
        text=part.text,
        metadata=ContentMetadata(
            documentName=document.name,
            extractedAt=document.extracted_at,
            format=document.format,
            pageCount=document.page_count,
        ),
        offset=part.offset,
        length=len(part.text),
        totalLength=part.total_length,
        nextOffset=part.next_offset,
    )


@router.get("/{document_id}/lines/{lines}", response_model=LinesOut)
def get_lines(document_id: str, lines: str, documents: DocumentsDep, caller: CallerDep) -> LinesOut:
    """Lines of the extracted text (``12`` or ``12-40``), numbered as search hits number them
    (``lineStart``/``lineEnd``); a long range ends early with ``nextUri``."""
    part = documents.reader.lines(caller, document_id, lines)
    return LinesOut(documentId=part.document.id, text=part.text, **part.meta)


@router.delete("/{document_id}")
def delete_document(
    document_id: str, documents: DocumentsDep, caller: CallerDep
) -> dict[str, object]:
    """Delete a document from the catalog, the disk and the index."""
    documents.intake.delete(caller, document_id)
    return {"documentId": document_id, "deleted": True}
