"""The legacy HTTP+SSE transport at ``/sse`` through the official SDK's SSE client, against the
real app under uvicorn with its workers: the same tools, resources and prompts as ``/mcp`` for
every toolset, callers and tenants from API keys, sessions bound to the key that opened them,
the Host/Origin guard, the session caps and the idle timeout."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from ldims.settings import Settings
from runtime import build_services, create_app
from tests.conftest import RedisServer, Stack, ThreadedServer, make_settings, wait_until

MEMO = b"The quokka memo: zebras graze near the river at dawn.\n"
GLOBEX = b"The globex plan: otters build a dam upstream.\n"
# What differs between two calls of the same tool: timings, fresh ids, rate-limit counters.
VOLATILE = {"executionTime", "elapsed", "latency_ms", "rate_limit", "session_id", "sessionId"}


class Env:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        ring = self.services.keys
        scopes = ["read", "ingest", "sql", "guide"]
        self.keys = {
            "acme": ring.create("acme", scopes).key,
            "acme-2": ring.create("acme", scopes).key,  # the same tenant, another key
            "globex": ring.create("globex", scopes).key,
        }
        self.docs: dict[str, str] = {}

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[key]}"}

    def upload(self, key: str, name: str, data: bytes) -> str:
        client = self.stack.client
        response = client.post(
            "/api/documents", files={"file": (name, data)}, headers=self.headers(key)
        )
        assert response.status_code == 202, response.text
        document_id: str = response.json()["documentId"]

        def final() -> str | None:
            body = client.get(f"/api/documents/{document_id}", headers=self.headers(key)).json()
            return body["status"] if body["status"] in ("completed", "failed") else None

        assert wait_until(final, 60, 0.1) == "completed", self.stack.log_tail()
        return document_id


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("sse")
    target = tmp / "target.sqlite3"
    with sqlite3.connect(target) as connection:
        connection.execute("CREATE TABLE otters (id INTEGER PRIMARY KEY, name TEXT)")
        connection.executemany("INSERT INTO otters (name) VALUES (?)", [("ada",), ("bob",)])
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/12",
        sql_url=f"sqlite:///{target}",
    )
    assert settings.sse_enabled  # on by default: the API binds to loopback
    stack = Stack(settings, tmp).start()
    environment = Env(stack)
    try:
        environment.docs["memo"] = environment.upload("acme", "memo.txt", MEMO)
        environment.docs["globex"] = environment.upload("globex", "plan.txt", GLOBEX)
        yield environment
    finally:
        stack.stop()
        environment.services.close()


@asynccontextmanager
async def over_sse(
    url: str, headers: dict[str, str], sessions: list[str] | None = None
) -> AsyncIterator[Client]:
    transport = sse_client(
        f"{url}/sse",
        headers=headers,
        on_session_created=None if sessions is None else sessions.append,
    )
    async with Client(transport) as client:  # type: ignore[arg-type]
        yield client


@asynccontextmanager
async def over_http(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,  # type: ignore[arg-type]
    ):
        yield client


def stable(value: Any) -> Any:
    """``value`` without what differs from call to call."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


async def catalogue(client: Client) -> dict[str, Any]:
    """Everything a client can list, as plain data."""
    return {
        "tools": [t.model_dump() for t in (await client.list_tools()).tools],
        "resources": [r.model_dump() for r in (await client.list_resources()).resources],
        "templates": [
            t.model_dump() for t in (await client.list_resource_templates()).resource_templates
        ],
        "prompts": [p.model_dump() for p in (await client.list_prompts()).prompts],
    }


def calls(env: Env) -> list[tuple[str, dict[str, Any]]]:
    """One call of a tool of each toolset (documents, qmd, proxy, sql, guide)."""
    memo = env.docs["memo"]
    return [
        ("searchDocuments", {"query": "quokka zebras", "filters": {"searchMode": "exact"}}),
        ("getDocumentStatus", {"documentId": memo}),
        ("search", {"query": "quokka"}),
        ("status", {}),
        ("read_doc_metadata", {"doc_id": memo}),
        ("read_doc_pages", {"doc_id": memo, "page_start": 1, "page_end": 1}),
        ("read-query", {"sql": "SELECT name FROM otters ORDER BY id"}),
        ("list_available_tools", {}),
    ]


def test_sse_serves_what_mcp_serves_for_every_toolset(env: Env) -> None:
    url, headers = env.stack.api.url, env.headers("acme")

    async def go() -> None:
        async with over_sse(url, headers) as sse, over_http(url, headers) as http:
            listed = await catalogue(sse)
            assert listed == await catalogue(http)
            names = {tool["name"] for tool in listed["tools"]}
            for name, arguments in calls(env):
                assert name in names, sorted(names)
                by_sse = await sse.call_tool(name, arguments)
                by_http = await http.call_tool(name, arguments)
                assert not by_sse.is_error, (name, by_sse.content)
                assert stable(by_sse.structured_content) == stable(by_http.structured_content)
            # The guide: a session opened over SSE walks like one opened over /mcp.
            opened = await sse.call_tool("initiate_session", {"user_query": "where do I start"})
            assert not opened.is_error, opened.content
            # Resources and prompts of the toolsets, read over SSE.
            page = await sse.read_resource(f"ldims://docs/{env.docs['memo']}/pages/1")
            assert "quokka memo" in page.contents[0].text  # type: ignore[union-attr]
            table = await sse.read_resource("kwdb://table/otters")
            assert "name" in table.contents[0].text  # type: ignore[union-attr]
            prompt = listed["prompts"][0]
            arguments = {a["name"]: "otters" for a in prompt.get("arguments") or []}
            got = await sse.get_prompt(prompt["name"], arguments)
            assert got.messages, prompt["name"]
            # Errors in the seed's shape, as over /mcp.
            missing = await sse.call_tool("getDocumentStatus", {"documentId": "doc_nope"})
            assert missing.is_error
            assert missing.structured_content["errorCode"] == "RESOURCE_NOT_FOUND"

    asyncio.run(go())


def test_a_tenant_sees_only_its_own_documents_over_sse(env: Env) -> None:
    url = env.stack.api.url
    theirs = env.docs["memo"]  # acme's

    async def go() -> None:
        async with over_sse(url, env.headers("globex")) as globex:
            found = await globex.call_tool(
                "searchDocuments", {"query": "quokka", "filters": {"searchMode": "exact"}}
            )
            assert found.structured_content["totalMatches"] == 0
            own = await globex.call_tool(
                "searchDocuments", {"query": "otters", "filters": {"searchMode": "exact"}}
            )
            assert [r["documentId"] for r in own.structured_content["results"]] == [
                env.docs["globex"]
            ]
            foreign = await globex.call_tool("getDocumentStatus", {"documentId": theirs})
            unknown = await globex.call_tool("getDocumentStatus", {"documentId": "doc_nope"})
            assert foreign.is_error and unknown.is_error
            assert foreign.structured_content["errorCode"] == "RESOURCE_NOT_FOUND"
            # The same answer as for an id that does not exist (each echoes the id it was sent).
            assert str(foreign.structured_content).replace(theirs, "ID") == str(
                unknown.structured_content
            ).replace("doc_nope", "ID")

    asyncio.run(go())


def test_a_session_answers_only_the_key_that_opened_it(env: Env) -> None:
    url = env.stack.api.url
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}

    async def go() -> None:
        sessions: list[str] = []
        async with over_sse(url, env.headers("acme"), sessions) as acme:
            assert (await acme.list_tools()).tools
            (session,) = sessions
            async with httpx.AsyncClient(base_url=url, timeout=10) as raw:

                async def post(session_id: str, headers: dict[str, str]) -> httpx.Response:
                    return await raw.post(
                        f"/messages/?session_id={session_id}", json=ping, headers=headers
                    )

                own = await post(session, env.headers("acme"))
                assert own.status_code == 202
                unknown = await post("0" * 32, env.headers("globex"))
                assert unknown.status_code == 404
                assert unknown.json()["errorCode"] == "RESOURCE_NOT_FOUND"
                for other in ("globex", "acme-2"):  # another tenant, or another key of it
                    refused = await post(session, env.headers(other))
                    assert refused.status_code == 404
                    assert refused.json() == unknown.json()  # nothing tells the two apart
                malformed = await post("../" + session, env.headers("acme"))
                assert malformed.status_code == 404 and malformed.json() == unknown.json()
                without_key = await post(session, {})
                assert without_key.status_code == 401
                assert without_key.headers["www-authenticate"] == "Bearer"
                no_id = await raw.post("/messages/", json=ping, headers=env.headers("acme"))
                assert no_id.status_code == 400 and no_id.json()["errorCode"] == "INVALID_INPUT"
            # The session still works for its own key after the refusals.
            assert (await acme.list_tools()).tools

    asyncio.run(go())


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/sse", {"host": "evil.com"}, 421),
        ("GET", "/sse", {"host": "127.0.0.1:8200, evil.com"}, 421),
        ("GET", "/sse", {"origin": "http://127.0.0.1:8200@evil.com"}, 403),
        ("GET", "/sse", {"origin": "null"}, 403),
        ("POST", "/sse", {}, 405),
        ("DELETE", "/sse", {}, 405),
        ("GET", "/messages/?session_id=" + "0" * 32, {}, 405),
        ("POST", "/messages/?session_id=" + "0" * 32, {"host": "evil.com"}, 421),
        ("POST", "/messages/?session_id=" + "0" * 32, {"origin": "http://evil.com"}, 403),
        ("GET", "/sse", {"authorization": "Bearer nope"}, 401),
        ("GET", "/sse", {}, 401),
    ],
)
def test_the_guard_in_front_of_both_routes(
    env: Env, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    with httpx.Client(base_url=env.stack.api.url, timeout=5) as client:
        response = client.request(
            method, path, headers=headers, json={} if method == "POST" else None
        )
    assert response.status_code == status, response.text
    body = response.json()  # at once, in LDIMS's error body: no stream was opened
    assert body["isError"] is True
    if status == 405:
        assert response.headers["allow"] == ("GET" if path == "/sse" else "POST")


# --- caps and the idle timeout, on an app of their own -----------------------------------------


@pytest.fixture
def capped(tmp_path: Path, shared_redis: RedisServer) -> Iterator[str]:
    settings = Settings(
        data_dir=tmp_path,
        redis_url=shared_redis.url.rsplit("/", 1)[0] + "/13",
        mcp_sse_max_sessions=3,
        mcp_sse_max_sessions_per_caller=2,
        mcp_sse_idle_seconds=1.5,
    )
    running = ThreadedServer(create_app(settings), settings).start()  # as `ldims serve` runs
    yield running.url
    running.stop()


async def open_stream(
    client: httpx.AsyncClient, tenant: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, str, AsyncIterator[str]]:
    """A raw ``GET /sse`` of ``tenant`` (no keys on this app: the tenant header decides; or
    ``headers``), its endpoint event's URL, and the rest of its lines."""
    request = client.build_request("GET", "/sse", headers=headers or {"X-LDIMS-Tenant": tenant})
    response = await client.send(request, stream=True)
    assert response.status_code == 200, await response.aread()
    lines = response.aiter_lines()
    async for line in lines:
        if line.startswith("data: "):
            return response, line.removeprefix("data: "), lines
    raise AssertionError("no endpoint event")


def test_session_caps_total_and_per_caller(capped: str) -> None:
    async def go() -> None:
        async with httpx.AsyncClient(base_url=capped, timeout=10) as client:
            # Each kept whole: a dropped line iterator, collected, would close its stream.
            first = await open_stream(client, "acme")
            second = await open_stream(client, "acme")
            refused = await client.get("/sse", headers={"X-LDIMS-Tenant": "acme"})
            assert refused.status_code == 429
            assert refused.json()["errorCode"] == "TOO_MANY_SESSIONS"
            assert (
                refused.json()["errorDetails"]["limit"] == "LDIMS_MCP_SSE_MAX_SESSIONS_PER_CALLER"
            )
            assert int(refused.headers["retry-after"]) > 0
            third = await open_stream(client, "globex")  # another caller: its own place
            full = await client.get("/sse", headers={"X-LDIMS-Tenant": "initech"})
            assert full.status_code == 429, (full.headers, full.text[:500])
            assert full.json()["errorDetails"]["limit"] == "LDIMS_MCP_SSE_MAX_SESSIONS"
            # A client that goes away frees its place.
            await first[0].aclose()
            for _ in range(50):
                if await _opened(client, "acme"):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the closed session's place was not freed")
            await second[0].aclose()
            await third[0].aclose()

    asyncio.run(go())


async def _opened(client: httpx.AsyncClient, tenant: str) -> bool:
    """Whether a stream of ``tenant`` opens (it is closed again at once)."""
    request = client.build_request("GET", "/sse", headers={"X-LDIMS-Tenant": tenant})
    response = await client.send(request, stream=True)
    await response.aclose()
    assert response.status_code in (200, 429)
    return response.status_code == 200


def test_an_idle_session_is_closed_and_its_id_forgotten(capped: str) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

    async def go() -> None:
        async with httpx.AsyncClient(base_url=capped, timeout=10) as client:
            _stream, endpoint, lines = await open_stream(client, "acme")
            # A message moves the deadline on: at 1.0 s the session is still there.
            await asyncio.sleep(1.0)
            kept = await client.post(endpoint, json=ping, headers={"X-LDIMS-Tenant": "acme"})
            assert kept.status_code == 202
            started = asyncio.get_running_loop().time()
            async for _line in lines:
                pass  # the stream ends by itself, cleanly, once idle
            idle = asyncio.get_running_loop().time() - started
            assert 1.0 < idle < 5.0
            gone = await client.post(endpoint, json=ping, headers={"X-LDIMS-Tenant": "acme"})
            assert gone.status_code == 404

    asyncio.run(go())


def test_the_transport_is_off_when_asked_and_off_by_default_beyond_loopback(
    tmp_path: Path,
) -> None:
    assert Settings(data_dir=tmp_path, host="127.0.0.1").sse_enabled
    assert Settings(data_dir=tmp_path, host="::1").sse_enabled
    assert not Settings(data_dir=tmp_path, host="0.0.0.0").sse_enabled
    assert Settings(data_dir=tmp_path, host="0.0.0.0", mcp_sse=True).sse_enabled
    off = Settings(data_dir=tmp_path, mcp_sse=False)
    routes = {getattr(route, "path", None) for route in create_app(off).routes}
    assert "/mcp" in routes and "/sse" not in routes and "/messages" not in routes


# --- the per-tenant cap and a place freed at disconnect ------------------------------------------

TENANT_KEYS = {"acme-one": "acme", "acme-two": "acme", "globex-one": "globex"}


@pytest.fixture
def keyed(tmp_path: Path, shared_redis: RedisServer) -> Iterator[str]:
    settings = Settings(
        data_dir=tmp_path,
        redis_url=shared_redis.url.rsplit("/", 1)[0] + "/13",
        api_keys={hashlib.sha256(k.encode()).hexdigest(): t for k, t in TENANT_KEYS.items()},
        mcp_sse_max_sessions=10,
        mcp_sse_max_sessions_per_caller=2,
        mcp_sse_max_sessions_per_tenant=3,
    )
    running = ThreadedServer(create_app(settings), settings).start()
    yield running.url
    running.stop()


def test_a_tenants_keys_share_one_cap(keyed: str) -> None:
    def bearer(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    async def go() -> None:
        async with httpx.AsyncClient(base_url=keyed, timeout=10) as client:
            held = [
                await open_stream(client, "acme", bearer("acme-one")),
                await open_stream(client, "acme", bearer("acme-one")),
                await open_stream(client, "acme", bearer("acme-two")),  # the tenant's third
            ]
            refused = await client.get("/sse", headers=bearer("acme-two"))  # its key's second
            assert refused.status_code == 429, refused.text
            assert refused.json()["errorCode"] == "TOO_MANY_SESSIONS"
            assert refused.json()["errorDetails"] == {
                "limit": "LDIMS_MCP_SSE_MAX_SESSIONS_PER_TENANT",
                "maxSessions": 3,
            }
            held.append(await open_stream(client, "globex", bearer("globex-one")))
            for response, _endpoint, _lines in held:
                await response.aclose()

    asyncio.run(go())


def test_a_disconnected_clients_place_is_free_at_once(keyed: str) -> None:
    """Even when the client had sent bytes behind its ``GET /sse`` (the server then stops
    reading, and used to see the close only when a ping failed, 15-30 s later)."""
    address = urlsplit(keyed)
    assert address.hostname and address.port
    key = "Authorization: Bearer globex-one"
    head = f"GET /sse HTTP/1.1\r\nHost: {address.netloc}\r\n{key}\r\n\r\n".encode()

    async def opens() -> bool:
        headers = {"Authorization": "Bearer globex-one"}
        async with httpx.AsyncClient(base_url=keyed, timeout=10, headers=headers) as client:
            return await _opened(client, "globex")

    for _ in range(2):  # the per-caller cap is 2: both places are taken, then left
        sock = socket.create_connection((address.hostname, address.port), timeout=10)
        sock.sendall(head)
        received = b""
        while b"session_id=" not in received:
            received += sock.recv(4096)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: " + address.netloc.encode() + b"\r\n\r\n")
        time.sleep(0.2)
        sock.close()
    started = time.monotonic()
    wait_until(lambda: asyncio.run(opens()), 3.0, 0.1)
    assert time.monotonic() - started < 3.0
