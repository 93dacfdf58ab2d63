"""Signed webhook ingestion: ``POST /api/webhooks/ingest``.

The sender signs ``f"{timestamp}.".encode() + body`` with HMAC-SHA256 and the shared
secret and sends ``X-LDIMS-Timestamp`` (Unix seconds) and ``X-LDIMS-Signature:
sha256=<hex>``. A timestamp outside the replay window or a bad signature gets 401; an event
id seen before changes nothing (200, ``duplicate: true``). Events:
``document.created`` / ``document.updated`` with inline ``content`` (text),
``contentBase64`` or a ``url`` a worker fetches, and ``document.deleted``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import json
import time
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool

from api.deps import Services, ServicesDep
from api.ingestion import DocumentMeta, IngestOutcome, validate_document_id
from api.routes.documents import parse_datetime
from ldims.catalog import WebhookEvent
from ldims.errors import (
    Forbidden,
    InvalidInput,
    LdimsError,
    NotFound,
    PayloadTooLarge,
    PermanentError,
    Unauthorized,
)
from workers import check_url

router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])
TIMESTAMP_HEADER = "X-LDIMS-Timestamp"
SIGNATURE_HEADER = "X-LDIMS-Signature"


class WebhookDocument(BaseModel):
    id: str | None = None
    name: str | None = None
    collection: str | None = None
    documentType: str | None = None
    submitter: str | None = None
    createdAt: str | None = None
    content: str | None = None
    contentBase64: str | None = None
    url: str | None = None


class WebhookEventIn(BaseModel):
    id: str = Field(min_length=1, max_length=200)
    type: Literal["document.created", "document.updated", "document.deleted"]
    tenant: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    document: WebhookDocument


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value a sender must send (also used by tests and clients)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def verify(services: Services, request: Request, body: bytes) -> None:
    secret = services.settings.webhook_secret
    if secret is None:
        raise Forbidden("Webhook ingestion is disabled: set LDIMS_WEBHOOK_SECRET.")
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        raise Unauthorized(f"Missing or malformed {TIMESTAMP_HEADER}.") from None
    if age > services.settings.webhook_tolerance_seconds:
        raise Unauthorized("Stale or future timestamp: outside the replay window.")
    expected = sign(secret.get_secret_value(), timestamp, body)
    if not hmac.compare_digest(expected, request.headers.get(SIGNATURE_HEADER, "")):
        raise Unauthorized("Bad webhook signature.")


async def read_body(request: Request, limit: int) -> bytes:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLarge(limitBytes=limit)
    return bytes(body)


def _inline_bytes(document: WebhookDocument) -> bytes | None:
    if document.contentBase64 is not None:
        try:
            return base64.b64decode(document.contentBase64, validate=True)
        except binascii.Error as exc:
            raise InvalidInput(
                "contentBase64 is not valid base64.", field="document.contentBase64"
            ) from exc
    return None if document.content is None else document.content.encode("utf-8")


def apply_event(services: Services, event: WebhookEventIn) -> tuple[str, IngestOutcome | None]:
    """Carry out one verified event; returns the document id and the ingest outcome."""
    ingestion, settings = services.ingestion, services.settings
    tenant = event.tenant or settings.default_tenant
    doc = event.document
    if doc.id:
        validate_document_id(doc.id)
    if event.type == "document.deleted":
        if not doc.id:
            raise InvalidInput("document.deleted needs document.id.", field="document.id")
        with contextlib.suppress(NotFound):  # already gone: deleting is idempotent
            ingestion.delete(tenant, doc.id)
        return doc.id, None
    if event.type == "document.updated" and not doc.id:
        raise InvalidInput("document.updated needs document.id.", field="document.id")
    meta = DocumentMeta(
        name=(doc.name or doc.id or "webhook document")[:512],
        collection=doc.collection or settings.default_collection,
        document_type=doc.documentType,
        submitter=doc.submitter,
        created_at=parse_datetime(doc.createdAt, "document.createdAt"),
    )
    data = _inline_bytes(doc)
    if data is not None:
        writer = ingestion.blobs.writer(settings.max_upload_bytes)
        writer.write(data)
        outcome = ingestion.ingest_blob(tenant, writer.commit(), writer.head, meta, doc.id)
        return outcome.document.id, outcome
    if not doc.url:
        raise InvalidInput(
            "Give document.content, document.contentBase64 or document.url.", field="document"
        )
    try:
        check_url(doc.url, settings)
    except PermanentError as exc:
        raise InvalidInput(exc.message, field="document.url", reason=exc.code) from exc
    outcome = ingestion.ingest_url(tenant, doc.url, meta, doc.id)
    return outcome.document.id, outcome


def _claim_event(services: Services, event: WebhookEventIn) -> bool:
    """Record the event id; False when it was seen before."""
    try:
        with services.catalog.session() as session:
            session.add(
                WebhookEvent(event_id=event.id, tenant=event.tenant or "", event_type=event.type)
            )
    except IntegrityError:
        return False
    return True


def _release_event(services: Services, event_id: str, document_id: str | None) -> None:
    with services.catalog.session() as session:
        row = session.get(WebhookEvent, event_id)
        if row is not None:
            if document_id is None:
                session.delete(row)  # not applied: let the sender retry it
            else:
                row.document_id = document_id


def handle_event(services: Services, event: WebhookEventIn) -> tuple[int, dict[str, Any]]:
    if not _claim_event(services, event):
        return 200, {"eventId": event.id, "duplicate": True}
    try:
        document_id, outcome = apply_event(services, event)
    except LdimsError:
        _release_event(services, event.id, None)
        raise
    _release_event(services, event.id, document_id)
    body: dict[str, Any] = {"eventId": event.id, "documentId": document_id, "duplicate": False}
    if outcome is None:
        return 200, {**body, "deleted": True}
    body["status"] = outcome.document.status
    return (202 if outcome.queued else 200), body


@router.post("/ingest")
async def ingest_webhook(request: Request, services: ServicesDep) -> JSONResponse:
    """Apply a signed ``document.created|updated|deleted`` event (see module docs)."""
    # Inline content may be base64: allow for its 4/3 growth plus the JSON around it.
    limit = services.settings.max_upload_bytes * 4 // 3 + 64 * 1024
    body = await read_body(request, limit)
    verify(services, request, body)
    try:
        event = WebhookEventIn.model_validate(json.loads(body))
    except (ValueError, ValidationError) as exc:
        field = None
        if isinstance(exc, ValidationError) and exc.errors():
            field = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise InvalidInput(
            "The event is not valid JSON of the documented shape.", field=field
        ) from exc
    status, payload = await run_in_threadpool(handle_event, services, event)
    return JSONResponse(payload, status_code=status)
