"""Webhook events applied to documents, once each.

An event ``document.created`` / ``document.updated`` (inline ``content``, ``contentBase64``
or a ``url`` a worker fetches) or ``document.deleted`` is applied through :mod:`intake`. Its
id is claimed in the catalog first, so a sender's retry of an applied event changes nothing
(``duplicate: true``); on every failure — a bad field, a refused URL, a broker that is down,
a crash — the claim is released, so the sender's retry is applied, never lost.

Verifying the signature is the transport's job (``api.routes.webhooks``); :func:`sign` is the
one definition of it, used by that route, by clients and by tests.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
from typing import Any, Literal

from pydantic import BaseModel, Field
from sqlalchemy.exc import IntegrityError

from ldims.caller import Caller
from ldims.catalog import Catalog, WebhookEvent
from ldims.documents.intake import IngestOutcome, Intake, document_meta
from ldims.errors import InvalidInput, NotFound
from ldims.settings import Settings


class WebhookDocument(BaseModel):
    id: str | None = Field(default=None, max_length=64)
    name: str | None = Field(default=None, max_length=512)
    collection: str | None = Field(default=None, max_length=128)
    documentType: str | None = Field(default=None, max_length=128)  # noqa: N815
    submitter: str | None = Field(default=None, max_length=256)
    createdAt: str | None = Field(default=None, max_length=64)  # noqa: N815
    content: str | None = None
    contentBase64: str | None = None  # noqa: N815
    url: str | None = Field(default=None, max_length=4096)


class WebhookEventIn(BaseModel):
    id: str = Field(min_length=1, max_length=200)
    type: Literal["document.created", "document.updated", "document.deleted"]
    tenant: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    document: WebhookDocument


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """The signature header value a sender must send: HMAC-SHA256 of ``"{timestamp}." + body``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


class WebhookEvents:
    def __init__(self, settings: Settings, catalog: Catalog, intake: Intake) -> None:
        self.settings = settings
        self.catalog = catalog
        self.intake = intake

    def handle(self, event: WebhookEventIn) -> tuple[int, dict[str, Any]]:
        """Apply ``event`` once; the HTTP status and body of the answer."""
        if not self._claim(event):
            return 200, {"eventId": event.id, "duplicate": True}
        try:
            document_id, outcome = self._apply(event)
        except BaseException:
            self._release(event.id, None)
            raise
        self._release(event.id, document_id)
        body: dict[str, Any] = {"eventId": event.id, "documentId": document_id, "duplicate": False}
        if outcome is None:
            return 200, {**body, "deleted": True}
        body["status"] = outcome.document.status
        return (202 if outcome.queued else 200), body

    def _apply(self, event: WebhookEventIn) -> tuple[str, IngestOutcome | None]:
        caller = Caller(tenant=event.tenant or self.settings.default_tenant, transport="webhook")
        doc = event.document
        if event.type == "document.deleted":
            if not doc.id:
                raise InvalidInput("document.deleted needs document.id.", field="document.id")
            with contextlib.suppress(NotFound):  # already gone: deleting is idempotent
                self.intake.delete(caller, doc.id)
            return doc.id, None
        if event.type == "document.updated" and not doc.id:
            raise InvalidInput("document.updated needs document.id.", field="document.id")
        meta = document_meta(
            self.settings,
            doc.name or doc.id or "webhook document",
            doc.collection,
            doc.documentType,
            doc.submitter,
            doc.createdAt,
            created_at_field="document.createdAt",
        )
        data = _inline_bytes(doc)
        if data is not None:
            outcome = self.intake.ingest_bytes(caller, data, meta, doc.id)
        elif doc.url:
            outcome = self.intake.ingest_url(caller, doc.url, meta, doc.id)
        else:
            raise InvalidInput(
                "Give document.content, document.contentBase64 or document.url.", field="document"
            )
        return outcome.document.public_id, outcome

    def _claim(self, event: WebhookEventIn) -> bool:
        """Record the event id; False when it was seen before."""
        try:
            with self.catalog.session() as session:
                session.add(
                    WebhookEvent(
                        event_id=event.id, tenant=event.tenant or "", event_type=event.type
                    )
                )
        except IntegrityError:
            return False
        return True

    def _release(self, event_id: str, document_id: str | None) -> None:
        with self.catalog.session() as session:
            row = session.get(WebhookEvent, event_id)
            if row is not None:
                if document_id is None:
                    session.delete(row)  # not applied: let the sender retry it
                else:
                    row.document_id = document_id


def _inline_bytes(document: WebhookDocument) -> bytes | None:
    if document.contentBase64 is not None:
        try:
            return base64.b64decode(document.contentBase64, validate=True)
        except binascii.Error as exc:
            raise InvalidInput(
                "contentBase64 is not valid base64.", field="document.contentBase64"
            ) from exc
    return None if document.content is None else document.content.encode("utf-8")
