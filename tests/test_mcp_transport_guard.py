"""The /mcp transport guard: strict Host/Origin allow-lists and POST only.

The guard wraps a tiny real Starlette app that answers every method (and records each call), so
a refused request shows both in the status and in the inner app never having run. One test puts
it in front of the SDK's real Streamable HTTP route, as the API does.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from api.mcp.transport_guard import TransportGuard, guard_route
from tests.conftest import INITIALIZE

HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*", "mcp.internal:8200", "ldims"]
ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", "https://app.example"]
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
GOOD_HOST = "127.0.0.1:8000"


class Inner:
    """A real ASGI app answering 200 "ok" to any method on /mcp; remembers what reached it."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = False
        self.app = Starlette(
            routes=[Route("/mcp", self.endpoint, methods=METHODS)], lifespan=self.life
        )

    async def endpoint(self, request: Request) -> PlainTextResponse:
        self.calls.append(request.method)
        return PlainTextResponse("ok")

    @contextlib.asynccontextmanager
    async def life(self, _app: Starlette) -> AsyncIterator[None]:
        self.started = True
        yield


@pytest.fixture
def inner() -> Inner:
    return Inner()


@pytest.fixture
def client(inner: Inner) -> Iterator[TestClient]:
    # A port in base_url: a Host without one does not match "127.0.0.1:*" (as in the SDK).
    guard = TransportGuard(inner.app, HOSTS, ORIGINS)
    with TestClient(guard, base_url="http://127.0.0.1:8000") as client:
        yield client


# (Host, Origin or None, expected status): 200 reached the inner app, 421 Host, 403 Origin.
CASES = [
    # Host: what the allow-list admits
    (GOOD_HOST, None, 200),
    ("localhost:1234", None, 200),
    ("LocalHost:1234", None, 200),
    ("[::1]:8000", None, 200),
    ("[0:0:0:0:0:0:0:1]:8000", None, 200),
    ("mcp.internal:8200", None, 200),
    ("ldims", None, 200),
    ("127.0.0.1:65535", None, 200),
    # Host: tricks that passed the SDK's prefix match, and other malformed values
    ("127.0.0.1:8200, evil.com", None, 421),
    ("127.0.0.1:8200,evil.com", None, 421),
    ("127.0.0.1:8200@evil.com", None, 421),
    ("evil.com@127.0.0.1:8200", None, 421),
    ("user:pw@127.0.0.1:8200", None, 421),
    ("127.0.0.1:8200/evil", None, 421),
    ("127.0.0.1:8200 evil.com", None, 421),
    ("127.0.0.1:99999", None, 421),
    ("127.0.0.1:65536", None, 421),
    ("127.0.0.1:0", None, 421),
    ("127.0.0.1:080", None, 421),
    ("127.0.0.1:abc", None, 421),
    ("127.0.0.1:", None, 421),
    ("127.0.0.1:*", None, 421),
    ("127.0.0.1:8000:8000", None, 421),
    ("127.0.0.1.evil.com:8000", None, 421),
    ("localhost.evil.com:8000", None, 421),
    ("evil.com:8000", None, 421),
    ("", None, 421),
    # Host: ports — "name:*" wants a port, "name" none, "name:8200" that one
    ("127.0.0.1", None, 421),
    ("mcp.internal:8201", None, 421),
    ("mcp.internal", None, 421),
    ("ldims:80", None, 421),
    # Host: IPv6
    ("[::1]", None, 421),
    ("::1:8000", None, 421),
    ("[::2]:8000", None, 421),
    ("[::1%25eth0]:8000", None, 421),
    ("[::1]:8000]", None, 421),
    ("[127.0.0.1]:8000", None, 421),
    # Origin: admitted (none at all is above)
    (GOOD_HOST, "http://localhost:3000", 200),
    (GOOD_HOST, "HTTP://LOCALHOST:3000", 200),
    (GOOD_HOST, "http://127.0.0.1:8200", 200),
    (GOOD_HOST, "http://[::1]:8000", 200),
    (GOOD_HOST, "https://app.example", 200),
    # Origin: refused
    (GOOD_HOST, "http://127.0.0.1:8200@evil.com", 403),
    (GOOD_HOST, "http://127.0.0.1:8200.evil.com", 403),
    (GOOD_HOST, "http://localhost.evil.com:80", 403),
    (GOOD_HOST, "http://evil.com:8000", 403),
    (GOOD_HOST, "null", 403),
    (GOOD_HOST, "", 403),
    (GOOD_HOST, "http://user@127.0.0.1:8000", 403),
    (GOOD_HOST, "http://user:pw@localhost:3000", 403),
    (GOOD_HOST, "https://127.0.0.1:8000", 403),
    (GOOD_HOST, "ws://127.0.0.1:8000", 403),
    (GOOD_HOST, "http://127.0.0.1:8000/", 403),
    (GOOD_HOST, "http://127.0.0.1:8000/mcp", 403),
    (GOOD_HOST, "http://127.0.0.1:8000?x", 403),
    (GOOD_HOST, "http://127.0.0.1:8000, http://evil.com", 403),
    (GOOD_HOST, "http://127.0.0.1", 403),
    (GOOD_HOST, "127.0.0.1:8000", 403),
    (GOOD_HOST, "http://[::1]", 403),
    (GOOD_HOST, "http://[::1]:8000@evil.com", 403),
    (GOOD_HOST, "http://::1:8000", 403),
    (GOOD_HOST, "https://app.example:443", 403),
    (GOOD_HOST, "http://app.example", 403),
    # both wrong: the Host is checked first
    ("evil.com:8000", "http://evil.com", 421),
]


@pytest.mark.parametrize(("host", "origin", "status"), CASES)
def test_host_and_origin(
    client: TestClient, inner: Inner, host: str, origin: str | None, status: int
) -> None:
    headers = {"Host": host} | ({} if origin is None else {"Origin": origin})
    response = client.post("/mcp", headers=headers)
    assert response.status_code == status, response.text
    if status == 200:
        assert response.text == "ok" and inner.calls == ["POST"]
        return
    assert inner.calls == []
    body = response.json()
    assert body["isError"] is True and body["errorCode"] == "FORBIDDEN"
    assert body["errorDetails"]["header"] == ("Host" if status == 421 else "Origin")
    assert body["errorDetails"]["received"] == (host if status == 421 else origin)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "POST"])
def test_other_methods_get_405_without_reaching_the_app(
    client: TestClient, inner: Inner, method: str
) -> None:
    response = client.request(method, "/mcp", headers={"Origin": "http://localhost:3000"})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert inner.calls == []
    if method != "HEAD":  # no body to a HEAD
        body = response.json()
        assert body["errorCode"] == "INVALID_INPUT" and body["isError"] is True
        assert body["errorMessage"].startswith("Method not allowed")
        assert body["errorDetails"] == {"method": method, "allowed": ["POST"]}


@pytest.mark.parametrize(
    ("headers", "status"),
    [({"Host": "evil.com:8000"}, 421), ({"Origin": "http://evil.com"}, 403)],
)
def test_host_and_origin_are_checked_before_the_method(
    client: TestClient, inner: Inner, headers: dict[str, str], status: int
) -> None:
    assert client.get("/mcp", headers=headers).status_code == status
    assert inner.calls == []


@pytest.mark.parametrize("name", ["Host", "Origin"])
def test_a_repeated_header_is_refused_even_when_both_are_allowed(
    client: TestClient, inner: Inner, name: str
) -> None:
    value = GOOD_HOST if name == "Host" else "http://localhost:3000"
    response = client.post("/mcp", headers=[(name, value), (name, value)])
    assert response.status_code == (421 if name == "Host" else 403)
    assert response.json()["errorDetails"] == {"header": name, "reason": "repeated"}
    assert inner.calls == []


@pytest.mark.parametrize(
    ("headers", "reason"),
    [([], "missing"), ([(b"host", "lócalhost:8000".encode("latin-1"))], "malformed")],
)
def test_a_missing_or_non_ascii_host_is_refused(
    inner: Inner, headers: list[tuple[bytes, bytes]], reason: str
) -> None:
    # HTTP clients add a Host and send ASCII, so this ASGI call is made by hand (HTTP/1.0 may
    # omit the Host; a raw client may send any byte).
    guard = TransportGuard(inner.app, HOSTS, ORIGINS)
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": headers}
    scope |= {"http_version": "1.0", "scheme": "http", "root_path": "", "query_string": b""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    anyio.run(guard, scope, receive, send)
    assert sent[0]["status"] == 421
    assert json.loads(sent[1]["body"])["errorDetails"]["reason"] == reason
    assert inner.calls == []


def test_echoed_values_are_cut_and_logged_only_at_debug(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="api.mcp.transport_guard")
    origin = "http://" + "a" * 500 + ".evil.com"
    response = client.post("/mcp", headers={"Origin": origin})
    assert response.status_code == 403
    received = response.json()["errorDetails"]["received"]
    assert received == origin[:100] + "…"
    assert origin not in response.text
    records = [r for r in caplog.records if r.name == "api.mcp.transport_guard"]
    assert records and all(r.levelno == logging.DEBUG for r in records)
    assert origin not in caplog.text


def test_lifespan_passes_through(inner: Inner) -> None:
    with TestClient(TransportGuard(inner.app, HOSTS, ORIGINS)):
        assert inner.started


@pytest.mark.parametrize(
    ("hosts", "origins"),
    [
        (["127.0.0.1:*:*"], []),
        (["*"], []),
        (["localhost, evil.com"], []),
        (["localhost:99999"], []),
        ([], ["http://localhost:*/"]),
        ([], ["localhost:*"]),
        ([], ["http://localhost:8*"]),
        ([], ["*"]),
    ],
)
def test_a_malformed_allow_list_entry_fails_at_start(hosts: list[str], origins: list[str]) -> None:
    with pytest.raises(ValueError, match="not a valid allowed"):
        TransportGuard(Inner().app, hosts, origins)


# Without the guard the GET below never ends (the SDK streams pings): fail in seconds, not 300.
@pytest.mark.timeout(20)
def test_in_front_of_the_sdks_streamable_http_route() -> None:
    server = MCPServer("guarded")
    # As api.mcp builds it: the SDK's own (prefix) check stays on as a second layer.
    security = TransportSecuritySettings(allowed_hosts=HOSTS, allowed_origins=ORIGINS)
    sdk_app = server.streamable_http_app(
        stateless_http=True, json_response=True, transport_security=security
    )
    routes = [guard_route(route, HOSTS, ORIGINS) for route in sdk_app.routes]
    app = Starlette(routes=routes, lifespan=lambda _app: server.session_manager.run())
    accept = {"Accept": "application/json, text/event-stream"}
    with TestClient(app, base_url="http://127.0.0.1:8000") as client:
        origin = {**accept, "Origin": "http://localhost:3000"}
        ok = client.post("/mcp", json=INITIALIZE, headers=origin)
        assert ok.status_code == 200 and ok.json()["result"]["protocolVersion"] == "2025-06-18"
        stream = client.get("/mcp", headers={"Accept": "text/event-stream"})
        assert stream.status_code == 405 and stream.headers["allow"] == "POST"
        foreign = {**accept, "Origin": "http://127.0.0.1:8200@evil.com"}
        refused = client.post("/mcp", json=INITIALIZE, headers=foreign)
        # The SDK's prefix match lets this Origin through: the 403 is the guard's.
        assert refused.status_code == 403 and refused.json()["errorCode"] == "FORBIDDEN"


@pytest.mark.parametrize(
    ("host", "origin", "seen"),
    [
        ("LOCALHOST:8000", "http://LOCALHOST:3000", ("LocalHost:8000", "HTTP://LocalHost:3000")),
        ("localhost:9", None, ("LocalHost:9", None)),
        ("[0:0::1]:8000", None, ("[0::1]:8000", None)),
        ("MCP.internal:8200", "https://APP.example", ("Mcp.Internal:8200", "https://app.example")),
    ],
)
def test_the_app_sees_host_and_origin_as_the_allow_list_spells_them(
    host: str, origin: str | None, seen: tuple[str, str | None]
) -> None:
    """One spelling past the guard, the allow-list's: the SDK's own exact-string check (which
    is given the same list) then agrees with the guard's case-insensitive one (over the real
    server: tests/test_mcp_http_guard.py)."""

    async def echo(request: Request) -> PlainTextResponse:
        seen = [request.headers["host"], request.headers.get("origin")]
        return PlainTextResponse(json.dumps(seen))

    app = Starlette(routes=[Route("/mcp", echo, methods=["POST"])])
    hosts = ["LocalHost:*", "Mcp.Internal:8200", "[0::1]:*"]
    origins = ["HTTP://LocalHost:*", "https://app.example"]
    guard = TransportGuard(app, hosts, origins)
    with TestClient(guard, base_url="http://127.0.0.1:8000") as client:
        headers = {"Host": host} | ({} if origin is None else {"Origin": origin})
        response = client.post("/mcp", headers=headers)
    assert response.status_code == 200, response.text
    assert tuple(json.loads(response.text)) == seen
