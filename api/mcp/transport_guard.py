"""The gate in front of ``/mcp``: one exact Host, an exact Origin (or none), and POST only.

Why not the SDK's ``TransportSecuritySettings`` alone: it compares Host and Origin as string
prefixes. With the allow-list entries ``127.0.0.1:*`` and ``http://127.0.0.1:*`` it lets
``Host: 127.0.0.1:8200, evil.com`` and ``Origin: http://127.0.0.1:8200@evil.com`` through, so
a page on evil.com could reach a local server. Here each header is parsed as one value, strictly
(``host[:port]`` and ``scheme://host[:port]``, nothing else), and the parts are compared with
allow-list entries parsed the same way. Entries: ``name`` (no port given), ``name:8000``,
``name:*`` (any explicit port, as the SDK reads it, so its check stays a weaker second layer);
hostnames are compared lowercased and IPv6 literals in brackets, normalised (``[::1]:*``).
An admitted request goes on with its Host and Origin spelled as the entry that admitted them
(``LOCALHOST:8200`` becomes ``localhost:8200``): one spelling from here on, so the SDK's
case-sensitive second check agrees with this one instead of answering 421 in plain text.

Why only POST: ``/mcp`` is stateless with JSON responses, yet the SDK answers ``GET`` with an SSE
stream that never ends (a ping every 15 s) to anyone: a thousand of them held a thousand
descriptors and 70 MB. The stateless spec server answers 405, and so do we, before the SDK sees
the request, for every method but POST: ``DELETE`` (no session to delete), ``OPTIONS`` (no CORS
is offered, so a browser's preflight fails, as it should), ``HEAD``, ``PUT`` …. The legacy SSE
transport (:mod:`api.mcp.sse`) puts the same guard in front of its two endpoints, each with its
one method: ``GET /sse`` and ``POST /messages/``.

With API keys on, a request without a valid key is refused next (401, ``WWW-Authenticate:
Bearer``), so every MCP method — tools/list, prompts, resources, not only tool calls — needs one.

Order: Host (421, the SDK's status), then Origin (403), then the method (405, ``Allow: POST``),
then the key (401), all in LDIMS's error body. Offending values are echoed cut to 100
characters and logged only at DEBUG (an attacker chooses them). Lifespan and other non-HTTP
scopes pass through untouched.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ldims.errors import Forbidden, InvalidInput, LdimsError, Unauthorized

CALLER_STATE = "ldims.caller"  # request state: the caller the guard authenticated
STREAMABLE_ONLY_POST = (
    "Method not allowed: /mcp is stateless with JSON responses and answers POST only (no SSE "
    "stream to GET, no session to DELETE; the legacy SSE transport is at /sse)."
)
log = logging.getLogger(__name__)

MISDIRECTED = 421  # what the SDK answers to a bad Host; clients may already expect it
ECHO_LIMIT = 100
# A DNS name or IPv4 address (labels of letters, digits, "-" and "_"), or an IPv6 literal.
_HOST = r"(?P<host>[a-z0-9_-]+(?:\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\])"
_PORT = r"(?::(?P<port>[0-9]{1,5}|\*))?"
_HOST_RE = re.compile(_HOST + _PORT)
_ORIGIN_RE = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*)://" + _HOST + _PORT)
ANY_PORT = "*"


@dataclass(frozen=True)
class Authority:
    """A parsed Host or Origin (``scheme`` is empty for Host); ``port`` None when not given."""

    scheme: str
    host: str
    port: int | str | None  # an int, None, or ANY_PORT in an allow-list entry

    def allows(self, other: Authority) -> bool:
        """Whether this allow-list entry admits the header value ``other``."""
        if (self.scheme, self.host) != (other.scheme, other.host):
            return False
        if self.port == ANY_PORT:
            return other.port is not None
        return self.port == other.port


def parse_host(value: str, *, entry: bool = False) -> Authority | None:
    """``host[:port]`` as an :class:`Authority`, or None when it is anything else."""
    return _parse(_HOST_RE, value, entry)


def parse_origin(value: str, *, entry: bool = False) -> Authority | None:
    """``scheme://host[:port]`` (no path, userinfo or list) as an :class:`Authority`, or None."""
    return _parse(_ORIGIN_RE, value, entry)


def _parse(pattern: re.Pattern[str], value: str, entry: bool) -> Authority | None:
    # ASCII first: str.lower() maps some non-ASCII letters to ASCII ones.
    match = pattern.fullmatch(value.lower()) if value.isascii() else None
    if match is None:
        return None
    scheme, host, port = match.groupdict().get("scheme", ""), match["host"], match["port"]
    if host.startswith("["):
        try:
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            return None
    if port is None or (port == ANY_PORT and entry):
        return Authority(scheme, host, port)
    # Digits only, no leading zero: "0080" would be a second spelling of one port.
    if port == ANY_PORT or port.startswith("0") or int(port) > 65535:
        return None
    return Authority(scheme, host, int(port))


def _entries(
    values: Iterable[str], parse: Callable[..., Authority | None], what: str
) -> list[tuple[Authority, str]]:
    """Each allow-list entry parsed, with its spelling in the settings."""
    entries = []
    for value in values:
        parsed = parse(value, entry=True)
        if parsed is None:
            raise ValueError(f"not a valid allowed {what}: {value[:ECHO_LIMIT]!r}")
        entries.append((parsed, value))
    return entries


def _admitted(entries: list[tuple[Authority, str]], given: Authority) -> str | None:
    """``given`` spelled as the first entry that admits it, or None when none does.

    The spelling is what the SDK's own check (exact strings, ``name:*`` as a prefix) is then
    shown: it admits exactly what the guard admitted, so ``Host: LOCALHOST:8000`` is either
    refused here in LDIMS's body or let through everywhere, never refused by the SDK in plain
    text with a traceback (as it was: its comparison is case-sensitive).
    """
    for entry, listed in entries:
        if entry.allows(given):
            return f"{listed[:-2]}:{given.port}" if entry.port == ANY_PORT else listed
    return None


def _echo(value: str) -> str:
    return value if len(value) <= ECHO_LIMIT else value[:ECHO_LIMIT] + "…"


class TransportGuard:
    """ASGI wrapper of the ``/mcp`` endpoint: strict Host/Origin allow-lists, POST only.

    ``allowed_hosts`` / ``allowed_origins`` take the entries described in the module docstring;
    a malformed entry raises ``ValueError`` here, at start-up. Answers: 421 bad or unlisted
    Host, 403 bad or unlisted Origin (no Origin passes: non-browser clients send none), 405
    with ``Allow: POST`` for any other method; everything else reaches ``app``.
    """

    def __init__(
        self,
        app: ASGIApp,
        allowed_hosts: Iterable[str],
        allowed_origins: Iterable[str],
        authenticate: Callable[[Headers], object] | None = None,
        method: str = "POST",
        method_refusal: str = STREAMABLE_ONLY_POST,
    ) -> None:
        self.app = app
        # The one method the endpoint answers (/mcp and /messages/: POST; /sse: GET), and
        # what a request with another one is told.
        self.method = method
        self.method_refusal = method_refusal
        self.allowed_hosts = _entries(allowed_hosts, parse_host, "host")
        self.allowed_origins = _entries(allowed_origins, parse_origin, "origin")
        # Raises Unauthorized when keys are on and the request has no valid one: then every
        # MCP method (tools/list, prompts, resources …) is refused with 401, not only calls.
        # What it returns (the caller) goes into the request's state under CALLER_STATE, so
        # the server does not look the key up a second time.
        self.authenticate = authenticate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, error = refusal
        headers = {"Allow": self.method} if status == 405 else None
        if status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        await JSONResponse(error.body(), status_code=status, headers=headers)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, LdimsError] | None:
        """The status and error that refuse this request, or None to let it through (its Host
        and Origin then rewritten in ``scope`` as the allow-list spells them)."""
        hosts = _header(scope, b"host")
        host = parse_host(hosts[0]) if len(hosts) == 1 else None
        host_as_listed = None if host is None else _admitted(self.allowed_hosts, host)
        if host_as_listed is None:
            return MISDIRECTED, _refused("Host", hosts, host is None)
        canonical = {b"host": host_as_listed}
        origins = _header(scope, b"origin")
        if origins:
            origin = parse_origin(origins[0]) if len(origins) == 1 else None
            origin_as_listed = None if origin is None else _admitted(self.allowed_origins, origin)
            if origin_as_listed is None:
                return 403, _refused("Origin", origins, origin is None)
            canonical[b"origin"] = origin_as_listed
        method = scope["method"]
        if method != self.method:
            return 405, InvalidInput(
                self.method_refusal, method=_echo(method), allowed=[self.method]
            )
        if self.authenticate is not None:
            try:
                found = self.authenticate(Headers(scope=scope))
            except Unauthorized as exc:
                return 401, exc
            scope.setdefault("state", {})[CALLER_STATE] = found
        scope["headers"] = [
            (key, canonical[key.lower()].encode("latin-1") if key.lower() in canonical else value)
            for key, value in scope["headers"]
        ]
        return None


def _header(scope: Scope, name: bytes) -> list[str]:
    # Every occurrence: two Host headers are refused, not resolved to the first or the last.
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]


def _refused(header: str, values: list[str], malformed: bool) -> Forbidden:
    if not values:
        reason = "missing"
    elif len(values) > 1:
        reason = "repeated"
    else:
        reason = "malformed" if malformed else "not allowed"
    log.debug("/mcp refused: %s header %s (%r)", header, reason, [_echo(v) for v in values][:2])
    details: dict[str, object] = {"header": header, "reason": reason}
    if len(values) == 1:
        details["received"] = _echo(values[0])
    setting = f"LDIMS_MCP_ALLOWED_{header.upper()}S"
    message = f"The {header} header is {reason}: /mcp accepts only the names in {setting}."
    return Forbidden(message, **details)


def guard_route(
    route: Route,
    allowed_hosts: Iterable[str],
    allowed_origins: Iterable[str],
    authenticate: Callable[[Headers], object] | None = None,
) -> Route:
    """``route`` (the SDK's ``/mcp`` route) with its endpoint behind a :class:`TransportGuard`."""
    guard = TransportGuard(route.endpoint, allowed_hosts, allowed_origins, authenticate)
    return Route(route.path, endpoint=guard, name=route.name)


__all__ = [
    "CALLER_STATE",
    "Authority",
    "TransportGuard",
    "guard_route",
    "parse_host",
    "parse_origin",
]
