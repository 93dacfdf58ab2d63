"""Signed webhook ingestion: ``POST /api/webhooks/ingest``.

The sender signs ``f"{timestamp}.".encode() + body`` with HMAC-SHA256 and the shared secret
and sends ``X-LDIMS-Timestamp`` (Unix seconds) and ``X-LDIMS-Signature: sha256=<hex>``
(:func:`ldims.documents.sign`). What the event does is the documents core's
(:class:`ldims.documents.events.WebhookEvents`); this route only checks the transport:

* everything that needs no body is checked before a byte of it is read: webhooks on, the
  timestamp inside the replay window, a well-formed signature header, a declared length
  under the cap;
* the body is hashed while it streams and kept in memory only up to
  :data:`IN_MEMORY_BYTES` (beyond, a temporary file): an unsigned sender of large bodies
  costs disk for a moment, not the API's memory (measured before: 4 × 130 MB raised the
  API's RSS by 490 MB);
* only a body whose signature matches is parsed, and only to :data:`MAX_JSON_DEPTH` levels;
* a tenant name without a secret is answered exactly as a bad signature, after the same
  work: its body is read and hashed with a key nobody holds, so neither the answer nor its
  time says which tenant names exist.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import tempfile
import time
from typing import IO

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import SecretStr, ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import ServicesDep
from api.schemas import error_responses
from ldims.caller import TENANT_HEADER
from ldims.documents import WebhookEventIn
from ldims.errors import Forbidden, InvalidInput, PayloadTooLarge, Unauthorized
from ldims.settings import Settings

router = APIRouter(prefix="/api/webhooks", tags=["webhooks"])
TIMESTAMP_HEADER = "X-LDIMS-Timestamp"
SIGNATURE_HEADER = "X-LDIMS-Signature"
IN_MEMORY_BYTES = 1024 * 1024
# An event is three levels deep (event, document, fields); anything much deeper is not an event.
# The bound also keeps a hostile body from reaching the JSON parser's recursion limit.
MAX_JSON_DEPTH = 32
_SIGNATURE = re.compile(r"^sha256=[0-9a-f]{64}$")
# One answer for a wrong signature and for a tenant without a secret (no tenant-name oracle).
BAD_SIGNATURE = "Bad webhook signature (or no LDIMS_WEBHOOK_SECRETS entry for this tenant)."
# What a tenant without a secret is checked against: random per process, so nothing matches.
_NOBODYS_SECRET = SecretStr(secrets.token_hex(32))


def body_limit(settings: Settings) -> int:
    """Inline content may be base64: its 4/3 growth plus the JSON around it."""
    return settings.max_upload_bytes * 4 // 3 + 64 * 1024


def webhook_secret(
    settings: Settings, request: Request, keys_on: bool
) -> tuple[SecretStr | None, str | None]:
    """The secret the event must be signed with (None: this tenant has none, so no signature
    will do), and the tenant it is bound to (None: the shared secret, whose events name their
    tenant)."""
    tenant = request.headers.get(TENANT_HEADER)
    if tenant is not None:
        return settings.webhook_secrets.get(tenant), tenant
    if settings.webhook_secret is None or keys_on:
        raise Forbidden(
            "Send X-LDIMS-Tenant and sign with that tenant's secret (LDIMS_WEBHOOK_SECRETS)"
            + (
                "; with API keys on, the shared LDIMS_WEBHOOK_SECRET is not accepted."
                if keys_on
                else ", or set LDIMS_WEBHOOK_SECRET."
            )
        )
    return settings.webhook_secret, None


def check_headers(settings: Settings, request: Request) -> tuple[str, str]:
    """What can be refused before the body is read; the timestamp and signature."""
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    try:
        age = abs(time.time() - int(timestamp))
    except ValueError:
        raise Unauthorized(f"Missing or malformed {TIMESTAMP_HEADER}.") from None
    if age > settings.webhook_tolerance_seconds:
        raise Unauthorized("Stale or future timestamp: outside the replay window.")
    signature = request.headers.get(SIGNATURE_HEADER, "")
    if not _SIGNATURE.match(signature):
        raise Unauthorized(f"Missing or malformed {SIGNATURE_HEADER} (sha256=<64 hex>).")
    return timestamp, signature


async def read_signed_body(
    settings: Settings, request: Request, secret: SecretStr | None
) -> IO[bytes]:
    """The body, hashed as it streams; raises unless its signature matches ``secret``.

    Without a secret the same work is done against a key nobody holds and the same error is
    raised: a tenant without a secret cannot be told from a wrong signature.
    """
    timestamp, signature = check_headers(settings, request)
    key = (secret or _NOBODYS_SECRET).get_secret_value().encode()
    digest = hmac.new(key, digestmod=hashlib.sha256)
    digest.update(f"{timestamp}.".encode())
    spool = tempfile.SpooledTemporaryFile(max_size=IN_MEMORY_BYTES)  # noqa: SIM115 (returned)
    limit, size = body_limit(settings), 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(limitBytes=limit)
            digest.update(chunk)
            spool.write(chunk)
        matches = hmac.compare_digest("sha256=" + digest.hexdigest(), signature)
        if not matches or secret is None:
            raise Unauthorized(BAD_SIGNATURE)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def parse_event(body: IO[bytes]) -> WebhookEventIn:
    """The event in ``body``: 400 for JSON that is malformed, nested deeper than
    :data:`MAX_JSON_DEPTH` or not of the documented shape."""
    try:
        return WebhookEventIn.model_validate(bounded_json(body.read(), MAX_JSON_DEPTH))
    except (ValueError, ValidationError) as exc:
        field = None
        if isinstance(exc, ValidationError) and exc.errors():
            field = ".".join(str(p) for p in exc.errors()[0]["loc"])
        raise InvalidInput(
            "The event is not valid JSON of the documented shape.", field=field
        ) from None


def bounded_json(data: bytes, max_depth: int) -> object:
    """``data`` parsed as JSON, refused with :class:`InvalidInput` past ``max_depth`` levels.

    The C parser raises ``RecursionError`` near Python's recursion limit (about 1000 levels),
    which would surface as a 500 with a traceback; shallower but still excessive nesting is
    found by an iterative walk (no recursion of ours either).
    """
    deep = InvalidInput(f"The JSON is nested deeper than {max_depth} levels.")
    try:
        value = json.loads(data)
    except RecursionError:
        raise deep from None
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > max_depth:
                raise deep
            stack.extend((child, depth + 1) for child in item)
    return value


@router.post(
    "/ingest",
    responses={
        202: {
            "description": "The event queued work.",
            "content": {"application/json": {"schema": {"type": "object"}}},
        }
    }
    | error_responses(404, 413),
)
async def ingest_webhook(request: Request, services: ServicesDep) -> JSONResponse:
    """Apply a signed ``document.created|updated|deleted`` event (see module docs)."""
    secret, tenant = webhook_secret(services.settings, request, services.keys.required())
    with await read_signed_body(services.settings, request, secret) as body:
        event = await run_in_threadpool(parse_event, body)
    if tenant is not None:  # a tenant's secret acts for that tenant only
        if event.tenant not in (None, tenant):
            raise Forbidden("The event names another tenant than its secret's.")
        event = event.model_copy(update={"tenant": tenant})
    status, payload = await run_in_threadpool(services.documents.events.handle, event)
    return JSONResponse(payload, status_code=status)
