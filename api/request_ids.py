"""Every HTTP request gets an id on its log lines (REST and MCP alike).

A caller may send its own ``X-Request-ID`` (letters, digits, ``_ . -``, at most 64: nothing
else reaches the logs); otherwise a short random one is made. The id goes back in the
response's ``X-Request-ID`` header, so a user can quote it. Pure ASGI: a ``BaseHTTPMiddleware``
costs each MCP call far more than this.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ldims.logs import bound_request_id

HEADER = b"x-request-id"
_ACCEPTED = re.compile(rb"^[A-Za-z0-9_.-]{1,64}$")


class RequestIds:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == HEADER), b"")
        with bound_request_id(given.decode() if _ACCEPTED.match(given) else None) as value:
            encoded = value.encode()

            async def send_with_id(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message["headers"] = [*message.get("headers", ()), (HEADER, encoded)]
                await send(message)

            await self.app(scope, receive, send_with_id)
