"""REST routes of documents: upload, list, read, content, delete."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import ServicesDep, Tenant
from api.ingestion import DocumentMeta, validate_document_id
from api.multipart import parse_upload
from api.schemas import AcceptedOut, ContentMetadata, ContentOut, DocumentOut, DocumentPage
from ldims.catalog import DocumentFilter, DocumentStatus, repository
from ldims.errors import InvalidInput, PayloadTooLarge

router = APIRouter(prefix="/api/documents", tags=["documents"])
_DATETIME = TypeAdapter(datetime)
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


def parse_datetime(value: str | None, field: str) -> datetime | None:
    """An ISO date or date-time; naive values are taken as UTC."""
    if not value:
        return None
    try:
        parsed = _DATETIME.validate_python(value)
    except ValidationError as exc:
        raise InvalidInput(f"{field} must be an ISO 8601 date-time.", field=field) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def meta_from_fields(
    fields: dict[str, str], filename: str, default_collection: str
) -> DocumentMeta:
    name = (fields.get("name") or filename or "").strip()
    if not name:
        raise InvalidInput(
            "The document needs a name (form field 'name' or a filename).", field="name"
        )
    return DocumentMeta(
        name=name[:512],
        collection=(fields.get("collection") or default_collection)[:128],
        document_type=fields.get("documentType") or None,
        submitter=fields.get("submitter") or None,
        created_at=parse_datetime(fields.get("createdAt"), "createdAt"),
    )


@router.post("", status_code=202, response_model=AcceptedOut, openapi_extra=_UPLOAD_SCHEMA)
async def upload_document(request: Request, services: ServicesDep, tenant: Tenant) -> JSONResponse:
    """Upload a document (multipart, part ``file``); it is queued for extraction.

    202 when work was queued (new document or new version), 200 when the same content was
    already there (nothing to do). Pass ``documentId`` to replace a document's content.
    """
    settings = services.settings
    declared = int(request.headers.get("content-length") or 0)
    if declared > settings.max_upload_bytes + MULTIPART_SLACK:
        raise PayloadTooLarge(limitBytes=settings.max_upload_bytes)
    await run_in_threadpool(services.dispatcher.ping)
    upload = await parse_upload(
        request.headers.get("content-type", ""),
        request.stream(),
        services.ingestion.blobs,
        settings.max_upload_bytes,
    )
    try:
        meta = meta_from_fields(upload.fields, upload.filename, settings.default_collection)
        document_id = upload.fields.get("documentId") or None
        if document_id:
            validate_document_id(document_id)
    except InvalidInput:
        await run_in_threadpool(services.ingestion.discard_blob, upload.blob.sha256)
        raise
    outcome = await run_in_threadpool(
        services.ingestion.ingest_blob, tenant, upload.blob, upload.head, meta, document_id
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
    tenant: Tenant,
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
    with services.catalog.session() as session:
        items, total = repository.list_documents(session, tenant, filters, limit, offset)
        return DocumentPage(
            items=[DocumentOut.of(d) for d in items], total=total, limit=limit, offset=offset
        )


@router.get("/{document_id}", response_model=DocumentOut)
def get_document(document_id: str, services: ServicesDep, tenant: Tenant) -> DocumentOut:
    """One document's record: state, version, error code and reason."""
    with services.catalog.session() as session:
        return DocumentOut.of(services.ingestion.get(session, tenant, document_id))


@router.get("/{document_id}/content", response_model=ContentOut)
def get_content(
    document_id: str,
    services: ServicesDep,
    tenant: Tenant,
    offset: Annotated[int, Query(ge=0, description="First character to return.")] = 0,
    limit: Annotated[
        int | None, Query(ge=1, description="Characters to return (default: all).")
    ] = None,
) -> ContentOut:
    """The extracted text: 200 when completed, 202 while processing, 409 when it failed."""
    document, result = services.ingestion.read_content(tenant, document_id)
    end = len(result.text) if limit is None else min(len(result.text), offset + limit)
    text = result.text[offset:end]
    return ContentOut(
        documentId=document.id,
        text=text,
        metadata=ContentMetadata(
            documentName=document.name,
            extractedAt=document.extracted_at,
            format=document.format,
            pageCount=document.page_count,
        ),
        offset=offset,
        length=len(text),
        totalLength=len(result.text),
        nextOffset=end if end < len(result.text) else None,
    )


@router.delete("/{document_id}")
def delete_document(document_id: str, services: ServicesDep, tenant: Tenant) -> dict[str, object]:
    """Delete a document from the catalog, the disk and the index."""
    services.ingestion.delete(tenant, document_id)
    return {"documentId": document_id, "deleted": True}
