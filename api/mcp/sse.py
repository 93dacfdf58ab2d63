"""The legacy HTTP+SSE transport (MCP 2024-11-05) at ``/sse``, for agents and gateways that do
not speak Streamable HTTP.

``GET /sse`` opens an event stream whose first event (``endpoint``) names the URL to ``POST``
the client's messages to, ``/messages/?session_id=<32 hex digits>``; the server's answers come
back on the stream. The SDK's ``SseServerTransport`` (through ``MCPServer.sse_app``) speaks
the protocol and serves the same server as ``/mcp``: the same toolsets, resources, prompts,
error shapes and per-call time limit. This module puts LDIMS's rules around its two routes:

* the gate of ``/mcp`` (:class:`~api.mcp.transport_guard.TransportGuard`): one exact Host, an
  exact Origin or none, the one method of each route (405 otherwise), and with API keys on a
  valid key on both requests (401), whose caller the tools see;
* a session belongs to the caller that opened it (its key, or its tenant without keys): a
  message naming another caller's session, an unknown one or a malformed id is answered
  404 ``RESOURCE_NOT_FOUND``, the same body every time, so an id reveals nothing;
* bounded: at most ``LDIMS_MCP_SSE_MAX_SESSIONS`` open streams,
  ``LDIMS_MCP_SSE_MAX_SESSIONS_PER_CALLER`` per key and ``LDIMS_MCP_SSE_MAX_SESSIONS_PER_TENANT``
  per tenant, whatever its keys (ten keys of one tenant once filled all 100 places): 429
  ``TOO_MANY_SESSIONS`` past any, before a stream opens; a session without a message from its
  client for ``LDIMS_MCP_SSE_IDLE_SECONDS`` is closed (its stream ends, as if the client had
  gone); a session whose client went away frees its place the moment the disconnect is seen
  (``http.disconnect``), not when the SDK has finished tearing the stream down.

Everything here runs on the server's one event loop, so the session table needs no lock.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qsl

import anyio
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.mcp.server import LdimsMCP, transport_security
from api.mcp.transport_guard import CALLER_STATE, TransportGuard
from ldims.caller import Caller
from ldims.errors import InvalidInput, LdimsError, NotFound, TooManySessions

log = logging.getLogger(__name__)

SSE_PATH = "/sse"
MESSAGE_PATH = "/messages/"
# The SDK's endpoint event: "data: /messages/?session_id=<uuid4 hex>".
_ENDPOINT_EVENT = re.compile(rb"session_id=([0-9a-f]{32})")
_SESSION_ID = re.compile(r"[0-9a-f]{32}")
Owner = tuple[str, str | None]  # (tenant, key id): who may post to a session


def owner_of(caller: Caller) -> Owner:
    return caller.tenant, caller.key_id


@dataclass(eq=False)
class SseSession:
    """One open stream: its owner, its id once the SDK has named it, and when it falls idle
    (moved on by every message of its client)."""

    owner: Owner
    idle_seconds: float
    session_id: str | None = None
    deadline: float = 0.0
    timed_out: bool = False

    def touch(self) -> None:
        self.deadline = anyio.current_time() + self.idle_seconds

    def watching(self, receive: Receive) -> Receive:
        """``receive`` that answers ``http.disconnect`` once the session is idle.

        The SDK's stream ends when its client disconnects, closing what it opened on the way
        out; an idle session is ended the same way, as if its client had gone, rather than by
        cancelling the stream (which left the SDK's memory streams unclosed)."""

        async def receive_or_idle() -> Message:
            while True:
                with anyio.CancelScope(deadline=self.deadline):
                    return await receive()
                if anyio.current_time() >= self.deadline:  # not moved on meanwhile
                    self.timed_out = True
                    return {"type": "http.disconnect"}

        return receive_or_idle


class SseSessions:
    """The open SSE sessions, their caps and owners."""

    def __init__(
        self, max_sessions: int, max_per_owner: int, idle_seconds: float, max_per_tenant: int
    ) -> None:
        self.max_sessions = max_sessions
        self.max_per_owner = max_per_owner
        self.max_per_tenant = max_per_tenant
        self.idle_seconds = idle_seconds
        self._open: set[SseSession] = set()
        self._per_owner: Counter[Owner] = Counter()
        self._per_tenant: Counter[str] = Counter()
        self._by_id: dict[str, SseSession] = {}

    def __len__(self) -> int:
        return len(self._open)

    def open(self, owner: Owner) -> SseSession:
        """A new session of ``owner`` (TooManySessions past a cap)."""
        if len(self._open) >= self.max_sessions:
            raise TooManySessions(limit="LDIMS_MCP_SSE_MAX_SESSIONS", maxSessions=self.max_sessions)
        if self._per_owner[owner] >= self.max_per_owner:
            raise TooManySessions(
                "Too many SSE sessions are open for this API key (or tenant); close one first.",
                limit="LDIMS_MCP_SSE_MAX_SESSIONS_PER_CALLER",
                maxSessions=self.max_per_owner,
            )
        if self._per_tenant[owner[0]] >= self.max_per_tenant:
            raise TooManySessions(
                "Too many SSE sessions are open for this tenant; close one first.",
                limit="LDIMS_MCP_SSE_MAX_SESSIONS_PER_TENANT",
                maxSessions=self.max_per_tenant,
            )
        session = SseSession(owner, self.idle_seconds)
        session.touch()
        self._open.add(session)
        self._per_owner[owner] += 1
        self._per_tenant[owner[0]] += 1
        return session

    def name(self, session: SseSession, session_id: str) -> None:
        """The id the SDK gave ``session`` (read from its endpoint event)."""
        session.session_id = session_id
        self._by_id[session_id] = session

    def find(self, session_id: str, owner: Owner) -> SseSession | None:
        """``owner``'s open session of that id; None when there is none (unknown, closed, or
        another caller's: the caller cannot tell which)."""
        session = self._by_id.get(session_id)
        return session if session is not None and session.owner == owner else None

    def close(self, session: SseSession) -> None:
        if session not in self._open:
            return
        self._open.discard(session)
        self._per_owner[session.owner] -= 1
        if not self._per_owner[session.owner]:
            del self._per_owner[session.owner]
        self._per_tenant[session.owner[0]] -= 1
        if not self._per_tenant[session.owner[0]]:
            del self._per_tenant[session.owner[0]]
        if session.session_id is not None:
            self._by_id.pop(session.session_id, None)


class _Stream:
    """``GET /sse`` behind the guard: a place among the sessions, the SDK's stream (its
    ``receive`` watched for the idle timeout), and a clean end of the response however the
    stream stops."""

    def __init__(self, app: ASGIApp, sessions: SseSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope["state"][CALLER_STATE]
        try:
            session = self.sessions.open(owner_of(caller))
        except TooManySessions as exc:
            await _error(exc, {"Retry-After": "30"})(scope, receive, send)
            return
        started = ended = dropping = False

        async def tracked(message: Message) -> None:
            nonlocal started, ended, dropping
            if ended or dropping or (started and message["type"] == "http.response.start"):
                # The SDK answers with an empty Response once its stream has stopped: the
                # stream was the response, and it ends below if it has not already.
                dropping = True
                return
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body":
                if session.session_id is None:
                    found = _ENDPOINT_EVENT.search(message.get("body", b""))
                    if found is not None:  # named before the client can read the id
                        self.sessions.name(session, found.group(1).decode())
                ended = not message.get("more_body", False)
            await send(message)

        watched = session.watching(receive)

        async def receive_until_gone() -> Message:
            message = await watched()
            if message["type"] == "http.disconnect":
                # The client is gone (or idle): its place is free now, while the SDK may still
                # take a while to tear its side of the stream down.
                self.sessions.close(session)
            return message

        try:
            await self.app(scope, receive_until_gone, tracked)
        finally:
            self.sessions.close(session)
        if session.timed_out:
            log.info(
                "SSE session of tenant %s closed after %ss idle",
                caller.tenant,
                session.idle_seconds,
            )
        if started and not ended:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Messages:
    """``POST /messages/`` behind the guard: only to an open session of the same caller."""

    def __init__(self, app: ASGIApp, sessions: SseSessions) -> None:
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        caller = scope["state"][CALLER_STATE]
        values = [value for name, value in _query_pairs(scope) if name == "session_id"]
        if not values:
            error: LdimsError = InvalidInput(
                "session_id is required: POST to the URL of the stream's endpoint event.",
                field="session_id",
            )
            await _error(error)(scope, receive, send)
            return
        session = None
        if len(values) == 1 and _SESSION_ID.fullmatch(values[0]):
            session = self.sessions.find(values[0], owner_of(caller))
        if session is None:
            error = NotFound("No open SSE session has this id.", field="session_id")
            await _error(error)(scope, receive, send)
            return
        session.touch()
        await self.app(scope, receive, send)


def mcp_sse_routes(
    server: LdimsMCP, authenticate: Callable[[Headers], Caller]
) -> tuple[list[BaseRoute], SseSessions]:
    """``GET /sse`` and ``POST /messages/`` of ``server``, guarded, and their session table."""
    settings = server.services.settings
    sessions = SseSessions(
        settings.mcp_sse_max_sessions,
        settings.mcp_sse_max_sessions_per_caller,
        settings.mcp_sse_idle_seconds,
        settings.mcp_sse_max_sessions_per_tenant,
    )
    sdk = server.sse_app(
        sse_path=SSE_PATH,
        message_path=MESSAGE_PATH,
        transport_security=transport_security(settings),
    )
    hosts, origins = settings.mcp_allowed_hosts, settings.mcp_allowed_origins
    routes: list[BaseRoute] = []
    for route in sdk.routes:
        if isinstance(route, Route) and route.path == SSE_PATH:
            stream = _Stream(route.app, sessions)
            guard = TransportGuard(
                stream, hosts, origins, authenticate, method="GET", method_refusal=_GET_ONLY
            )
            routes.append(Route(SSE_PATH, endpoint=guard, name="mcp_sse"))
        elif isinstance(route, Mount) and route.path + "/" == MESSAGE_PATH:
            messages = _Messages(route.app, sessions)
            guard = TransportGuard(
                messages, hosts, origins, authenticate, method="POST", method_refusal=_POST_ONLY
            )
            routes.append(Mount(MESSAGE_PATH.rstrip("/"), app=guard, name="mcp_sse_messages"))
    if len(routes) != 2:  # the SDK changed its routes: fail at start-up, not on a request
        raise RuntimeError(f"unexpected SSE routes from the MCP SDK: {sdk.routes}")
    return routes, sessions


_GET_ONLY = "Method not allowed: /sse opens the event stream with GET; messages go to /messages/."
_POST_ONLY = "Method not allowed: /messages/ takes the session's messages by POST."


def _error(error: LdimsError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.http_status, headers=headers)


def _query_pairs(scope: Scope) -> list[tuple[str, str]]:
    query: bytes = scope.get("query_string", b"")
    return parse_qsl(query.decode("latin-1"), keep_blank_values=True)


__all__ = ["MESSAGE_PATH", "SSE_PATH", "SseSessions", "mcp_sse_routes", "owner_of"]
