"""A key for the proxy toolset only, and one document id for the proxy's limits (issue 33,
finding 4), on a real stack over real HTTP: REST, ``/internal/mcp/execute`` and MCP with
the official client.

- ``proxy`` scope: the proxy tools and nothing that reads whole documents — REST content,
  lines, documents, search; the documents and qmd tools; ``ldims://`` and ``qmd://``
  resources, their lists and templates; qmd's prompt. ``read`` keeps the proxy tools.
- The limits keyed on the raw ``doc_id`` while the lookup stripped it: `` doc`` was a new
  document to the limiter (a fresh call cap and budget: 154 KB of a 160 KB document read).
  Every spelling of an id now counts as the id, or is refused before it counts.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from runtime import build_services
from tests.conftest import RedisServer, Stack, make_settings, settings_env, wait_until

TEXT = "# Plant manual\n\n" + "\n\n".join(
    f"## Part {n}\n\n" + " ".join(f"Step {n}.{m} turns valve {m} of line {n}." for m in range(40))
    for n in range(1, 8)
)
CALLS_PER_DOCUMENT = 3
DOC_BYTES_PER_HOUR = 6000


class Env:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        ring = self.services.keys
        self.keys = {
            "admin": ring.create("acme", ["read", "ingest"]).key,
            "read": ring.create("acme", ["read"]).key,
            "proxy": ring.create("acme", ["proxy"]).key,
            "limits": ring.create("acme", ["proxy"]).key,  # its own limits, for one test
            "budget": ring.create("acme", ["proxy"]).key,
        }
        self.doc_id = ""

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[key]}"}

    def get(self, key: str, path: str, **params: Any) -> httpx.Response:
        return self.stack.client.get(path, headers=self.headers(key), params=params)

    def execute(self, key: str, tool: str, arguments: dict[str, Any], trace: str) -> httpx.Response:
        body = {"tool_name": tool, "arguments": arguments, "trace_id": trace}
        return self.stack.client.post(
            "/internal/mcp/execute", json=body, headers=self.headers(key)
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy_scope")
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/13",
        mcp_rate_limit_calls=CALLS_PER_DOCUMENT,
        mcp_proxy_doc_bytes_per_hour=DOC_BYTES_PER_HOUR,
        doc_chunk_limit_tokens=400,
    )
    stack = Stack(settings, tmp).start()
    environment = Env(stack)
    try:
        response = stack.client.post(
            "/api/documents",
            files={"file": ("manual.md", TEXT.encode())},
            data={"documentId": "manual-1"},
            headers=environment.headers("admin"),
        )
        assert response.status_code in (200, 201, 202), response.text
        environment.doc_id = response.json()["documentId"]
        wait_until(
            lambda: environment.get("admin", f"/api/documents/{environment.doc_id}").json()[
                "status"
            ]
            == "completed",
            120,
            0.1,
        )
        yield environment
    finally:
        stack.stop()
        environment.services.close()


# --- the proxy scope ------------------------------------------------------------------------------


def test_rest_gives_a_proxy_key_nothing_that_reads_documents(env: Env) -> None:
    doc = env.doc_id
    reads = [
        ("/api/documents", {}),
        (f"/api/documents/{doc}", {}),
        (f"/api/documents/{doc}/content", {}),
        (f"/api/documents/{doc}/lines/1-5", {}),
        ("/api/search", {"query": "valve", "searchMode": "keyword"}),
    ]
    for path, params in reads:
        refused = env.get("proxy", path, **params)
        assert refused.status_code == 403, (path, refused.text)
        assert refused.json()["errorCode"] == "FORBIDDEN", refused.text
        assert env.get("read", path, **params).status_code == 200, path
    for key in ("proxy", "read"):  # the proxy tools: proxy, or read as before
        answer = env.execute(key, "read_doc_metadata", {"doc_id": doc}, f"scope-{key}")
        assert answer.status_code == 200 and answer.json()["result"]["doc_id"] == doc
    assert env.execute("admin", "read_doc_metadata", {"doc_id": doc}, "x").status_code == 200


def _error_code(result: Any) -> str:
    return str(result.structured_content.get("errorCode")) if result.structured_content else ""


def test_mcp_gives_a_proxy_key_the_proxy_tools_only(env: Env) -> None:
    doc = env.doc_id

    async def go(key: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with (
            httpx2.AsyncClient(headers=env.headers(key), timeout=60) as http,
            Client(streamable_http_client(f"{env.stack.api.url}/mcp", http_client=http)) as mcp,  # type: ignore[arg-type]
        ):
            proxied = await mcp.call_tool("read_doc_metadata", {"doc_id": doc})
            seen["proxy_tool"] = (proxied.is_error, proxied.structured_content)
            for tool, arguments in (
                ("searchDocuments", {"query": "valve"}),
                ("getDocumentStatus", {"documentId": doc}),
                ("search", {"query": "valve"}),
                ("get", {"file": f"#{doc}"}),
                ("status", {}),
            ):
                result = await mcp.call_tool(tool, arguments)
                seen[tool] = (result.is_error, _error_code(result))
            for uri in (
                f"ldims://docs/{doc}/extracted_content",
                f"ldims://docs/{doc}/lines/1-3",
                "qmd://default/manual.md",
            ):
                try:
                    read = await mcp.read_resource(uri)
                    seen[uri] = ("read", read.contents[0].text[:40])  # type: ignore[union-attr]
                except MCPError as exc:
                    seen[uri] = ("error", (exc.error.data or {}).get("errorCode"))
            seen["tools"] = sorted(t.name for t in (await mcp.list_tools()).tools)
            templates = await mcp.list_resource_templates()
            seen["templates"] = sorted(t.uri_template for t in templates.resource_templates)
            seen["prompts"] = sorted(p.name for p in (await mcp.list_prompts()).prompts)
            try:
                prompt = await mcp.get_prompt("query")
                seen["prompt"] = ("got", len(prompt.messages))
            except MCPError as exc:
                seen["prompt"] = ("error", (exc.error.data or {}).get("errorCode"))
        return seen

    proxy, read = asyncio.run(go("proxy")), asyncio.run(go("read"))
    assert proxy["proxy_tool"][0] is False and proxy["proxy_tool"][1]["doc_id"] == doc
    for tool in ("searchDocuments", "getDocumentStatus", "search", "get", "status"):
        assert proxy[tool] == (True, "FORBIDDEN"), (tool, proxy[tool])
        assert read[tool][1] != "FORBIDDEN", (tool, read[tool])
    for uri in (f"ldims://docs/{doc}/extracted_content", f"ldims://docs/{doc}/lines/1-3"):
        assert proxy[uri] == ("error", "FORBIDDEN"), (uri, proxy[uri])
        assert read[uri][0] == "read", (uri, read[uri])
    assert proxy["qmd://default/manual.md"] == ("error", "FORBIDDEN")
    assert read["qmd://default/manual.md"][1] != "FORBIDDEN"
    # Lists leave out what the key cannot use: nothing of ldims:// or qmd://, no qmd prompt.
    assert not [t for t in proxy["templates"] if t.startswith(("ldims://", "qmd://"))]
    assert {"ldims://docs/{document_id}/extracted_content", "qmd://{+path}"} <= set(
        read["templates"]
    )
    assert "query" not in proxy["prompts"] and "query" in read["prompts"]
    # Tools too: the proxy key sees the proxy tools only.
    assert "read_doc_metadata" in proxy["tools"] and "searchDocuments" not in proxy["tools"]
    assert not {"search", "get", "getDocumentStatus"} & set(proxy["tools"])
    assert {"read_doc_metadata", "searchDocuments", "search", "get"} <= set(read["tools"])
    assert proxy["prompt"] == ("error", "FORBIDDEN") and read["prompt"][0] == "got"
    assert proxy["proxy_tool"][1]["doc_id"] == read["proxy_tool"][1]["doc_id"]


def test_keys_create_takes_the_proxy_scope(env: Env) -> None:
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims
    created = subprocess.run(
        [ldims, "keys", "create", "--tenant", "acme", "--scope", "proxy"],
        env=settings_env(env.stack.settings),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert created.returncode == 0, created.stderr
    assert "scopes proxy" in created.stderr
    key = created.stdout.strip()
    headers = {"Authorization": f"Bearer {key}"}
    content = env.stack.client.get(f"/api/documents/{env.doc_id}/content", headers=headers)
    assert content.status_code == 403 and content.json()["errorCode"] == "FORBIDDEN"
    body = {"tool_name": "read_doc_metadata", "arguments": {"doc_id": env.doc_id}}
    answer = env.stack.client.post("/internal/mcp/execute", json=body, headers=headers)
    assert answer.status_code == 200, answer.text


# --- one id for limits, audit and lookup ----------------------------------------------------------

VARIANTS = [" {id}", "{id} ", "\u00a0{id}", "\t{id}\u2003", "\u3000{id}\n"]


def test_every_spelling_of_an_id_shares_one_call_cap_and_one_audit_id(env: Env) -> None:
    doc = env.doc_id
    spellings = [doc, *(variant.format(id=doc) for variant in VARIANTS)]
    codes = []
    for spelling in spellings:
        answer = env.execute("limits", "read_doc_metadata", {"doc_id": spelling}, "one-trace")
        codes.append((answer.status_code, answer.json().get("error", {}).get("code")))
        if answer.status_code == 200:
            assert answer.json()["result"]["doc_id"] == doc
    assert codes[:CALLS_PER_DOCUMENT] == [(200, None)] * CALLS_PER_DOCUMENT
    assert codes[CALLS_PER_DOCUMENT:] == [(429, "RATE_LIMIT_EXCEEDED")] * (
        len(spellings) - CALLS_PER_DOCUMENT
    ), codes
    # Spellings that are not the id are refused before they count (ids are case-sensitive:
    # another case is another, unknown, id; %20 and a zero-width space are not id characters).
    for spelling, status in ((f"%20{doc}", 400), (f"{doc}\u200b", 400), (doc.upper(), 404)):
        answer = env.execute("limits", "read_doc_metadata", {"doc_id": spelling}, "other-trace")
        assert answer.status_code == status, (spelling, answer.text)
    # One audit id for every call on the document, whatever its spelling.
    key_id = env.services.keys.caller(env.keys["limits"]).key_id  # type: ignore[union-attr]

    def audited() -> list[Any] | None:
        rows = env.services.proxy.audit.query(tenant="acme", limit=1000)
        mine = [row for row in rows if row.key_id == key_id]
        return mine if len(mine) >= len(spellings) + 3 else None

    rows = wait_until(audited, 30)
    on_document = [row.doc_id for row in rows if row.outcome in ("ok", "RATE_LIMIT_EXCEEDED")]
    assert on_document and set(on_document) == {doc}, on_document


def test_new_spellings_and_new_generations_share_one_document_budget(env: Env) -> None:
    doc = env.doc_id
    returned = 0
    refused = None
    spellings = [doc, *(variant.format(id=doc) for variant in VARIANTS)] * 3
    for number, spelling in enumerate(spellings):
        arguments = {"doc_id": spelling, "page_start": 1, "page_end": 1}
        answer = env.execute("budget", "read_doc_pages", arguments, f"gen-{number}")
        if answer.status_code != 200:
            refused = answer.json()["error"]
            break
        returned += answer.json()["result"]["meta"]["rate_limit"]["returned_bytes"]
    # The document's hourly budget ran out for all its spellings and generations at once.
    assert refused is not None and refused["code"] == "RATE_LIMIT_EXCEEDED", refused
    assert DOC_BYTES_PER_HOUR // 2 < returned <= DOC_BYTES_PER_HOUR


def test_an_id_spelled_with_spaces_over_mcp_is_the_id(env: Env) -> None:
    async def go() -> Any:
        async with (
            httpx2.AsyncClient(headers=env.headers("proxy"), timeout=60) as http,
            Client(streamable_http_client(f"{env.stack.api.url}/mcp", http_client=http)) as mcp,  # type: ignore[arg-type]
        ):
            return await mcp.call_tool("read_doc_metadata", {"doc_id": f"\u00a0{env.doc_id} "})

    result = asyncio.run(go())
    assert not result.is_error and result.structured_content["doc_id"] == env.doc_id
