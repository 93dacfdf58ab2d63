"""REST routes of documents: upload (one file, or many in a bulk), list, read, content, delete."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.deps import DocumentsDep, IngestDep, ReaderDep, ServicesDep
from api.multipart import parse_bulk_upload, parse_upload
from api.schemas import (
    AcceptedOut,
    BulkAcceptedOut,
    BulkItemOut,
    ContentMetadata,
    ContentOut,
    DocumentOut,
    DocumentPage,
    LinesOut,
    ProcessingOut,
    error_responses,
)
from ldims.catalog import DocumentFilter, DocumentStatus
from ldims.documents import DocumentMeta, document_meta, parse_datetime
from ldims.errors import InvalidInput, PayloadTooLarge

router = APIRouter(prefix="/api/documents", tags=["documents"])
MULTIPART_SLACK = 1024 * 1024  # room for boundaries and metadata fields around the file
MAX_OFFSET = 2**63 - 1  # SQL's largest integer: past it the catalog's driver raises (a 500)
_SHARED_FIELDS: dict[str, Any] = {
    "collection": {"type": "string"},
    "documentType": {"type": "string"},
    "submitter": {"type": "string"},
    "createdAt": {"type": "string", "format": "date-time"},
}


def _multipart_schema(properties: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI of a multipart upload with these form parts (``file`` required)."""
    schema = {"type": "object", "required": ["file"], "properties": properties}
    return {
        "requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}
    }


_UPLOAD_SCHEMA = _multipart_schema(
    {
        "file": {"type": "string", "format": "binary"},
        "name": {"type": "string"},
        "documentId": {"type": "string"},
        **_SHARED_FIELDS,
    }
)


@router.post(
    "",
    status_code=202,
    response_model=AcceptedOut,
    responses={200: {"model": AcceptedOut, "description": "The same content was already there."}}
    | error_responses(413),
    openapi_extra=_UPLOAD_SCHEMA,
)
async def upload_document(
    request: Request, services: ServicesDep, caller: IngestDep
) -> JSONResponse:
    """Upload a document (multipart, part ``file``); it is queued for extraction.

    202 when work was queued (new document or new version), 200 when the same content was
    already there (nothing to do). Pass ``documentId`` to replace a document's content.
    """
    settings = services.settings  # the body's size is bounded by api.body_limits, in front
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
        documentId=outcome.document.public_id,
        status=outcome.document.status,
        version=outcome.document.version,
        created=outcome.created,
        duplicate=not outcome.queued,
        document=DocumentOut.of(outcome.document),
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=202 if outcome.queued else 200)


_BULK_SCHEMA = _multipart_schema(
    {"file": {"type": "array", "items": {"type": "string", "format": "binary"}}, **_SHARED_FIELDS}
)


async def _bounded(body: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The body, cut off with 413 past ``limit`` bytes (a chunked body declares no length)."""
    seen = 0
    async for chunk in body:
        seen += len(chunk)
        if seen > limit:
            raise PayloadTooLarge(limitBytes=limit)
        yield chunk


@router.post(
    "/bulk",
    status_code=202,
    response_model=BulkAcceptedOut,
    responses={200: {"model": BulkAcceptedOut, "description": "Every file was a duplicate."}}
    | error_responses(413),
    openapi_extra=_BULK_SCHEMA,
)
async def upload_documents(
    request: Request, services: ServicesDep, caller: IngestDep
) -> JSONResponse:
    """Upload many documents in one request (multipart, one part ``file`` each, named by its
    filename; ``collection``, ``documentType``, ``submitter`` and ``createdAt`` apply to all).

    Each file's outcome is its own, as if it had been uploaded alone (new, or a duplicate of
    content the tenant holds), or it is rejected with a code (a file without a name); one
    transaction records them all. 202 when work was queued, 200 when every file was a
    duplicate, 400 when none was accepted. At most ``LDIMS_BULK_UPLOAD_MAX_FILES`` files and
    ``LDIMS_BULK_UPLOAD_MAX_BYTES`` in all (each file within ``LDIMS_MAX_UPLOAD_BYTES``).
    Replacing a document's content goes through the single upload with ``documentId``.
    """
    settings = services.settings
    limit = settings.bulk_upload_max_bytes + MULTIPART_SLACK  # a declared length: body_limits
    intake = services.documents.intake
    files, fields = await parse_bulk_upload(
        request.headers.get("content-type", ""),
        _bounded(request.stream(), limit),
        intake.blobs,
        settings.max_upload_bytes,
        settings.bulk_upload_max_files,
        settings.bulk_upload_max_bytes,
    )
    items: list[BulkItemOut | None] = []
    accepted: list[tuple[Any, bytes, DocumentMeta]] = []
    try:
        for file in files:
            try:
                meta = document_meta(
                    settings,
                    file.filename,
                    fields.get("collection"),
                    fields.get("documentType"),
                    fields.get("submitter"),
                    fields.get("createdAt"),
                )
            except InvalidInput as exc:
                if exc.details.get("field") != "name":
                    raise  # a shared field is wrong: every file would be rejected for it
                items.append(
                    BulkItemOut(name=file.filename, errorCode=exc.code, message=exc.message)
                )
                continue
            items.append(None)
            accepted.append((file.blob, file.head, meta))
    except InvalidInput:
        await run_in_threadpool(intake.discard_blobs, [file.blob.sha256 for file in files])
        raise
    rejected = [file.blob.sha256 for file, item in zip(files, items, strict=True) if item]
    if not accepted:
        await run_in_threadpool(intake.discard_blobs, rejected)
        raise InvalidInput(
            "No file of the bulk upload was accepted: every file needs a name.", field="file"
        )
    outcomes = iter(await run_in_threadpool(intake.ingest_blobs, caller, accepted))
    if rejected:  # kept only where an accepted file has the same content
        await run_in_threadpool(intake.discard_blobs, rejected)
    for position, item in enumerate(items):
        if item is None:
            outcome = next(outcomes)
            items[position] = BulkItemOut(
                name=outcome.document.name,
                documentId=outcome.document.public_id,
                status=outcome.document.status,
                version=outcome.document.version,
                created=outcome.created,
                duplicate=not outcome.queued,
            )
    answers = [item for item in items if item is not None]
    queued = sum(1 for item in answers if item.duplicate is False)
    body = BulkAcceptedOut(
        documents=answers,
        queued=queued,
        duplicates=sum(1 for item in answers if item.duplicate),
        rejected=len(rejected),
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True), status_code=202 if queued else 200
    )


@router.get("", response_model=DocumentPage, responses=error_responses())
def list_documents(
    services: ServicesDep,
    caller: ReaderDep,
    status: DocumentStatus | None = None,
    collection: str | None = None,
    documentType: str | None = None,
    submitter: str | None = None,
    createdFrom: str | None = None,
    createdTo: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
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
        items=[DocumentOut.of(d, services.documents.fingerprint) for d in items],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.get("/{document_id}", response_model=DocumentOut, responses=error_responses(404))
def get_document(document_id: str, documents: DocumentsDep, caller: ReaderDep) -> DocumentOut:
    """One document's record: state, version, error code and reason."""
    return DocumentOut.of(documents.reader.get(caller, document_id), documents.fingerprint)


_STILL_PROCESSING: dict[int | str, Any] = {
    202: {"model": ProcessingOut, "description": "Still processing: ask again later."}
}


@router.get(
    "/{document_id}/content",
    response_model=ContentOut,
    responses=_STILL_PROCESSING | error_responses(404, 409),
)
def get_content(
    document_id: str,
    documents: DocumentsDep,
    caller: ReaderDep,
    offset: Annotated[int, Query(ge=0, description="First character to return.")] = 0,
    limit: Annotated[
        int | None,
        Query(
            ge=1,
            description="Characters to return: at most (and by default) "
            "LDIMS_MCP_MAX_CONTENT_CHARS; nextOffset says where the rest starts.",
        ),
    ] = None,
) -> ContentOut:
    """The extracted text: 200 when completed, 202 while processing, 409 when it failed."""
    part = documents.reader.characters(caller, document_id, offset, limit)
    document = part.document
    return ContentOut(
        documentId=document.public_id,
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


@router.get(
    "/{document_id}/lines/{lines}",
    response_model=LinesOut,
    responses=_STILL_PROCESSING | error_responses(404, 409),
)
def get_lines(document_id: str, lines: str, documents: DocumentsDep, caller: ReaderDep) -> LinesOut:
    """Lines of the extracted text (``12`` or ``12-40``), numbered as search hits number them
    (``lineStart``/``lineEnd``); a long range ends early with ``nextUri``."""
    part = documents.reader.lines(caller, document_id, lines)
    return LinesOut(documentId=part.document.public_id, text=part.text, **part.meta)


@router.delete("/{document_id}", responses=error_responses(404))
def delete_document(
    document_id: str, documents: DocumentsDep, caller: IngestDep
) -> dict[str, object]:
    """Delete a document from the catalog, the disk and the index."""
    documents.intake.delete(caller, document_id)
    return {"documentId": document_id, "deleted": True}
