"""Every request body has a size limit, enforced while it streams in, before any route reads it.

A route that reads its body and then checks its size has already paid for it: one 300 MB body
to ``/internal/mcp/execute`` (checked against 64 KB after ``request.body()``) grew the server by
500 MB. Here one ASGI middleware, in front of every route, knows each route's limit:

=========================  ===============================================================
``POST /api/documents``    LDIMS_MAX_UPLOAD_BYTES plus the multipart envelope's slack
``/api/documents/bulk``    LDIMS_BULK_UPLOAD_MAX_BYTES plus the same slack
``/api/webhooks/ingest``   the webhook's own limit (inline content may be base64)
``/mcp``, ``/messages/``   the MCP SDK's 4 MiB (its own check, in plain text, comes second)
``/internal/mcp/execute``  the proxy envelope's 64 KiB
anything else              LDIMS_HTTP_MAX_BODY_BYTES
=========================  ===============================================================

A declared ``Content-Length`` over the limit is refused before a byte of the body is read (so
a client waiting on ``Expect: 100-continue`` never sends it); a body without one (chunked) is
counted as it arrives and refused at the first chunk past the limit. The refusal is 413
``TOO_LARGE`` in the seed's error body, with ``Connection: close``: the server drops the
connection rather than read and discard the rest. The routes' own finer checks (a file within
the upload limit inside a bulk body, the multipart parser's counts) stay where they are; this
only makes sure no route ever holds more than its limit. Uploads still stream to disk: the
middleware passes each chunk on as it comes, buffering nothing.

The small JSON routes (``/mcp``, ``/internal/mcp/execute``) read their body whole anyway, so
there the middleware reads it first, up to the limit, answers 413 without calling the route
when it is past, and hands the route the body it holds: the route never sees a refusal (the
MCP SDK logged an ERROR traceback for every chunked body over 4 MiB, the refusal raised inside
its ``request.body()``). ``/messages/`` is not buffered: its session check answers before the
body is read (a client need not send it to an unknown session), and the SDK behind it reads
the body outside any handler that logs. A route may render its own 413 (the proxy's envelope).

Once the limit is passed, the route's ``receive`` raises :class:`BodyTooLarge` (a
``PayloadTooLarge``, so a route that catches LDIMS errors sees the right one) and then answers
``http.disconnect``; whatever the route sends afterwards is dropped, and the middleware answers
413 itself: one body whatever the route's error handling. A client that goes away mid-body
ends its request quietly, without an error traceback in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.routes.documents import MULTIPART_SLACK
from api.routes.proxy import MAX_BODY_BYTES as PROXY_ENVELOPE_BYTES
from api.routes.proxy import envelope_error
from api.routes.webhooks import body_limit as webhook_body_limit
from ldims.errors import PayloadTooLarge
from ldims.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limit:
    """A route's body limit: the bytes let in, and the figure the 413 names (an upload's limit
    is its file's; the multipart envelope around it has some slack); whether the body is read
    whole before the route is called, and how the route's 413 looks if not the seed's way."""

    bytes: int
    stated: int
    buffered: bool = False
    render: Callable[[PayloadTooLarge], Response] | None = None


def route_limits(settings: Settings) -> dict[str, Limit]:
    """The limit of every route with one of its own, by path (without a trailing slash)."""

    def exact(limit: int, *, buffered: bool = False) -> Limit:
        return Limit(limit, limit, buffered)

    return {
        "/api/documents": Limit(
            settings.max_upload_bytes + MULTIPART_SLACK, settings.max_upload_bytes
        ),
        "/api/documents/bulk": Limit(
            settings.bulk_upload_max_bytes + MULTIPART_SLACK, settings.bulk_upload_max_bytes
        ),
        "/api/webhooks/ingest": exact(webhook_body_limit(settings)),
        "/mcp": exact(DEFAULT_MAX_REQUEST_BODY_SIZE, buffered=True),
        "/messages": exact(DEFAULT_MAX_REQUEST_BODY_SIZE),
        "/internal/mcp/execute": Limit(
            PROXY_ENVELOPE_BYTES, PROXY_ENVELOPE_BYTES, buffered=True, render=envelope_error
        ),
    }


class BodyTooLarge(PayloadTooLarge):
    """Raised by the middleware's ``receive`` once a body passes its route's limit."""


class BodyLimits:
    """ASGI middleware: each request's body within its route's :class:`Limit` (see above)."""

    def __init__(self, app: ASGIApp, settings: Settings) -> None:
        self.app = app
        self.limits = route_limits(settings)
        self.default = Limit(settings.http_max_body_bytes, settings.http_max_body_bytes)

    def limit_for(self, path: str) -> Limit:
        return self.limits.get(path.rstrip("/") or "/", self.default)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope["path"])
        declared = _content_length(scope)
        if declared is not None and declared > limit.bytes:
            await _too_large(limit)(scope, receive, send)
            return
        if limit.buffered:
            await _buffered(self.app, limit, scope, receive, send)
            return
        await _Counted(self.app, limit)(scope, receive, send)


async def _buffered(app: ASGIApp, limit: Limit, scope: Scope, receive: Receive, send: Send) -> None:
    """The body read whole (within ``limit``) before ``app`` is called with a ``receive`` that
    gives it first, then whatever comes next (a disconnect, which streamed answers wait for)."""
    chunks: list[bytes] = []
    seen = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            log.info("client went away before its request body was read in full")
            return
        chunk = message.get("body", b"")
        seen += len(chunk)
        if seen > limit.bytes:
            await _too_large(limit)(scope, receive, send)
            return
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    whole: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
    chunks.clear()

    async def replay() -> Message:
        nonlocal whole
        if whole is None:
            return await receive()
        message, whole = whole, None
        return message

    await app(scope, replay, send)


class _Counted:
    """One request whose body is counted as the route reads it."""

    def __init__(self, app: ASGIApp, limit: Limit) -> None:
        self.app = app
        self.limit = limit
        self.seen = 0
        self.refused = False
        self.disconnected = False
        self.started = False

    async def receive(self, receive: Receive) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await receive()
        if message["type"] == "http.request":
            self.seen += len(message.get("body", b""))
            if self.seen > self.limit.bytes:
                self.refused = True
                raise BodyTooLarge(limitBytes=self.limit.stated)
        elif message["type"] == "http.disconnect":
            self.disconnected = True
        return message

    async def send(self, send: Send, message: Message) -> None:
        if self.refused:
            return  # the middleware answers 413 itself once the route is done
        if message["type"] == "http.response.start":
            self.started = True
        await send(message)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def counted_receive() -> Message:
            return await self.receive(receive)

        async def guarded_send(message: Message) -> None:
            await self.send(send, message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except Exception as exc:
            # The route's error after a refusal or a client gone is expected, and said below.
            if not self.refused and not (self.disconnected and _client_gone(exc)):
                raise
        if self.refused:
            if self.started:  # too late for a 413: cut the response short instead
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await _too_large(self.limit)(scope, receive, send)
        elif self.disconnected and not self.started:
            log.info("client went away before its request body was read in full")


def _client_gone(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_client_gone(inner) for inner in exc.exceptions)
    return isinstance(exc, ClientDisconnect | OSError)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


def _too_large(limit: Limit) -> Response:
    error = PayloadTooLarge(
        f"The request body is larger than the limit of {limit.stated} bytes.",
        limitBytes=limit.stated,
    )
    if limit.render is not None:
        response = limit.render(error)
    else:
        response = JSONResponse(error.body(), status_code=error.http_status)
    # Connection: close: the server stops reading the rest instead of draining it.
    response.headers["Connection"] = "close"
    return response


__all__ = ["BodyLimits", "BodyTooLarge", "Limit", "route_limits"]
