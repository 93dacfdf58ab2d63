"""Hostile arguments, property-based (hypothesis): every tool and resource template of every
toolset (documents with its write tools, qmd, proxy, sql on a real PostgreSQL, guide), over the
official MCP client and real HTTP, gets arguments drawn from its own input schema and arguments
that break it (wrong types, unknown fields, huge and control-character strings). Every call
answers within the time limit, as a result or an ``isError`` result with a machine-readable
code (a JSON-RPC error only for what the protocol itself refuses), and no answer holds a stack
trace or a path of the server's files."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import httpx2
import psycopg
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.conftest import DOCS, PG_ADMIN, RedisServer, Stack, make_settings

TENANT = {"X-LDIMS-Tenant": "fuzz"}
SECONDS = 20.0  # one call at most (the server's own limit is LDIMS_MCP_REQUEST_TIMEOUT_SECONDS)
LEAKS = re.compile(
    r"Traceback|File \"|site-packages|/usr/lib/python|\.py\", line|/tmp/|/work/|"
    r"sqlalchemy\.|psycopg\.|whoosh\.|NoneType"
)
TOOLS = (
    "searchDocuments",
    "getDocumentStatus",
    "ingestDocument",
    "deleteDocument",
    "search",
    "vsearch",
    "query",
    "get",
    "multi_get",
    "status",
    "read-query",
    "write-query",
    "initiate_session",
    "navigate_session",
    "read_doc_section",
    "read_doc_pages",
    "read_doc_metadata",
    "doc_local_search",
    "list_available_tools",
)
NASTY_TEXT = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=50),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\u202e\u200b\ufeff",
            "../../../../etc/passwd",
            "%00%2e%2e/",
            "' OR 1=1 --",
            "*:*",
            "a" * 100_000,
            "(" * 5000,
            '"' * 999,
            "NOT AND OR ~ ^ * ?",
            "ldims://docs/../../x",
            "#" * 64,
            "-1",
            "1e309",
        ]
    ),
)
JUNK = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | NASTY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(NASTY_TEXT, children, max_size=4)
    ),
    max_leaves=12,
)


def from_schema(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """Values a JSON Schema of the tools' kind allows (object, string, integer, number, boolean,
    array, null, enum, anyOf, $ref), at its bounds as often as between them.
    (hypothesis-jsonschema no longer runs on current Hypothesis.)"""
    defs = defs if defs is not None else schema.get("$defs", {})
    if "$ref" in schema:
        return from_schema(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema or "oneOf" in schema:
        return st.one_of([from_schema(s, defs) for s in schema.get("anyOf", schema.get("oneOf"))])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return st.one_of([from_schema({**schema, "type": k}, defs) for k in kind])
    if kind == "string":
        low, high = schema.get("minLength", 0), min(schema.get("maxLength", 300), 5000)
        return st.one_of(
            st.text(min_size=low, max_size=min(high, 60)),
            st.text(alphabet='(*"~-:#/. aZ\x00', min_size=max(low, high - 2), max_size=high),
        )
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if "exclusiveMinimum" in schema:
            low = schema["exclusiveMinimum"] + 1
        if kind == "integer":
            return st.integers(min_value=low, max_value=high)
        return st.floats(min_value=low, max_value=high, allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = from_schema(schema.get("items", {}), defs) if schema.get("items") else JUNK
        return st.lists(items, max_size=min(schema.get("maxItems", 5), 5))
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {name: from_schema(properties[name], defs) for name in required},
            optional={
                name: from_schema(sub, defs)
                for name, sub in properties.items()
                if name not in required
            },
        )
    return JUNK


class Session:
    """One MCP session over HTTP, driven from the synchronous tests through a portal."""

    def __init__(self, portal: BlockingPortal, client: Client, url: str) -> None:
        self.portal, self.client, self.url = portal, client, url

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[float, Any]:
        async def go() -> Any:
            with anyio.fail_after(SECONDS):
                try:
                    return await self.client.call_tool(name, arguments)
                except MCPError as exc:
                    return exc

        started = time.monotonic()
        answer = self.portal.call(go)
        return time.monotonic() - started, answer

    def read(self, uri: str) -> tuple[float, Any]:
        async def go() -> Any:
            with anyio.fail_after(SECONDS):
                try:
                    return await self.client.read_resource(uri)
                except MCPError as exc:
                    return exc

        started = time.monotonic()
        answer = self.portal.call(go)
        return time.monotonic() - started, answer


@pytest.fixture(scope="module")
def sql_url() -> Iterator[str]:
    name = f"ldims_fuzz_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
        connection.execute("CREATE TABLE orders (id int primary key, customer text, total numeric)")
        connection.execute("INSERT INTO orders VALUES (1, 'Ann', 10.5), (2, 'Bo', 3)")
    yield url
    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def session(
    tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer, sql_url: str
) -> Iterator[Session]:
    tmp = tmp_path_factory.mktemp("fuzz")
    settings_ = make_settings(
        tmp, shared_redis.url.rsplit("/", 1)[0] + "/13", mcp_write_tools=True, sql_url=sql_url
    )
    stack = Stack(settings_, tmp).start()
    try:
        for name in ("docling__wiki.md", "poppler-test__russian.pdf"):
            response = stack.client.post(
                "/api/documents", files={"file": (name, (DOCS / name).read_bytes())}, headers=TENANT
            )
            assert response.status_code == 202, response.text
        with start_blocking_portal() as portal:
            http = portal.wrap_async_context_manager(httpx2.AsyncClient(headers=TENANT, timeout=60))
            with http as client:
                transport = streamable_http_client(f"{stack.api.url}/mcp", http_client=client)  # type: ignore[arg-type]
                with portal.wrap_async_context_manager(Client(transport)) as mcp:
                    yield Session(portal, mcp, stack.api.url)
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def schemas(session: Session) -> dict[str, dict[str, Any]]:
    async def listed() -> Any:
        return await session.client.list_tools()

    return {tool.name: tool.input_schema for tool in session.portal.call(listed).tools}


def check(seconds: float, answer: Any) -> None:
    """Within the time, in the contract's shape, and nothing of the server's insides."""
    assert seconds < SECONDS
    if isinstance(answer, MCPError):
        # The protocol's own refusals (invalid params), never an internal error.
        assert answer.error.code != -32603, answer.error.message
        assert not LEAKS.search(answer.error.message), answer.error.message
        return
    texts = [getattr(item, "text", "") or "" for item in getattr(answer, "content", [])]
    for text in texts:
        assert not LEAKS.search(text), text[:500]
    if getattr(answer, "is_error", False):
        structured = answer.structured_content or {}
        code = structured.get("errorCode") or (structured.get("error") or {}).get("code")
        assert isinstance(code, str) and code.isupper(), (structured, texts)


def test_every_tool_is_fuzzed(schemas: dict[str, dict[str, Any]]) -> None:
    assert set(schemas) == set(TOOLS)


@pytest.mark.parametrize("tool", TOOLS)
def test_arguments_of_the_tools_own_schema(
    session: Session, schemas: dict[str, dict[str, Any]], tool: str
) -> None:
    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(arguments=from_schema(schemas[tool]))
    def property_(arguments: dict[str, Any]) -> None:
        check(*session.call(tool, arguments))

    property_()


@pytest.mark.parametrize("tool", TOOLS)
def test_arguments_that_break_the_schema(session: Session, tool: str) -> None:
    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
    )
    @given(arguments=st.dictionaries(NASTY_TEXT, JUNK, max_size=5))
    def property_(arguments: dict[str, Any]) -> None:
        check(*session.call(tool, arguments))

    property_()


TEMPLATES = (
    "ldims://docs/{}/extracted_content",
    "ldims://docs/{}/pages/1-2",
    "ldims://docs/{}/lines/1-5",
    "ldims://docs/x/pages/{}",
    "ldims://docs/x/lines/{}",
    "qmd://{}",
    "kwdb://table/{}",
    "kwdb://db_info/{}",
)


@pytest.mark.parametrize("template", TEMPLATES)
def test_resource_uris_with_hostile_parts(session: Session, template: str) -> None:
    @settings(
        max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
    )
    @given(part=NASTY_TEXT)
    def property_(part: str) -> None:
        with contextlib.suppress(ValueError):  # a URI the client itself cannot send
            check(*session.read(template.replace("{}", part[:2000])))

    property_()


WORD = st.sampled_from(["the", "war", "peace", "Москва", "北京", "café", "a", "IBM", "x" * 300])
TERM = st.one_of(
    WORD,
    WORD.map(lambda w: f"{w}*"),
    WORD.map(lambda w: f"{w[:2]}?{w[2:]}"),
    WORD.map(lambda w: f"{w}~2"),
    WORD.map(lambda w: f"{w}^9"),
    WORD.map(lambda w: f"title:{w}"),
    st.tuples(WORD, WORD).map(lambda p: f'"{p[0]} {p[1]}"'),
    st.tuples(WORD, WORD).map(lambda p: f"[{p[0]} TO {p[1]}]"),
    st.text(alphabet=st.characters(codec="utf-8", categories=["Cc", "Cf", "Zs", "So", "Lo"])),
)
QUERY = st.recursive(
    TERM,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from([" AND ", " OR ", " NOT ", " ", " -"]), inner).map(
            "".join
        ),
        inner.map(lambda q: f"({q})"),
        inner.map(lambda q: f"NOT {q}"),
        inner.map(lambda q: q * 40),  # long
    ),
    max_leaves=20,
)


@pytest.mark.parametrize("mode", ["keyword", "exact", "semantic"])
def test_search_queries_from_a_grammar_of_operators(session: Session, mode: str) -> None:
    """Whoosh's operators, wildcards, ranges, fields, unicode, control characters and huge
    lengths, over MCP and REST: an answer or a 4xx with the seed's code, in bounded time,
    never a 5xx."""
    with httpx.Client(base_url=session.url, headers=TENANT, timeout=SECONDS + 5) as client:

        @settings(
            max_examples=40,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
        )
        @given(query=QUERY)
        def property_(query: str) -> None:
            # Over MCP whole; over REST within what a URL carries (httpx refuses 64 KiB).
            check(*session.call("searchDocuments", {"query": query, "searchMode": mode}))
            started = time.monotonic()
            response = client.get("/api/search", params={"query": query[:8000], "searchMode": mode})
            assert time.monotonic() - started < SECONDS
            assert response.status_code < 500, (query[:200], response.text[:500])
            assert not LEAKS.search(response.text), response.text[:500]
            if response.status_code >= 400:
                assert response.json()["errorCode"] in ("INVALID_INPUT", "QUERY_UNPROCESSABLE")

        property_()
