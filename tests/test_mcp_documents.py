"""The MCP `documents` toolset through the official SDK client: over real HTTP in both protocol
eras (2026-07-28 sessionless, 2025-11-25 initialize), in memory, and over stdio (`ldims mcp`).

One stack (API + real extract and index workers) serves a small corpus of real files for two
tenants; a document in every state: completed, failed (encrypted PDF), processing, unknown and
another tenant's.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import shutil
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from api.mcp import build_mcp_server
from ldims.catalog import Catalog, Document
from runtime import build_services, create_app
from tests.conftest import (
    ACCEPT,
    DOCS,
    INITIALIZE,
    RedisServer,
    Stack,
    key_of,
    make_settings,
    settings_env,
    wait_until,
)

MODES = ["auto", "legacy"]
QMD_TOOLS = {"search", "vsearch", "query", "get", "multi_get", "status"}
PROXY_TOOLS = {
    "read_doc_section",
    "read_doc_pages",
    "read_doc_metadata",
    "doc_local_search",
    "list_available_tools",
}
FEDERAL = "pdfplumber__federal-register-2020-17221.pdf"  # 15 pages, English
ZH_TEXT = "本款固态硬盘是一款微型尺寸的产品，无需驱动程序就可支持主流操作系统。"


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Stack]:
    """The stack, its documents by role in ``stack.ids``."""
    tmp = tmp_path_factory.mktemp("mcp")
    redis_url = shared_redis.url.rsplit("/", 1)[0] + "/7"  # a database of its own
    settings = make_settings(tmp, redis_url, mcp_max_content_chars=1000, mcp_write_tools=True)
    stack = Stack(settings, tmp).start()
    ids: dict[str, str] = {}

    def upload(role: str, name: str, data: bytes, tenant: str = "acme", **fields: str) -> None:
        response = stack.client.post(
            "/api/documents",
            files={"file": (name, data)},
            data=fields,
            headers={"X-LDIMS-Tenant": tenant},
        )
        assert response.status_code == 202, response.text
        ids[role] = response.json()["documentId"]

    upload(
        "federal",
        FEDERAL,
        (DOCS / FEDERAL).read_bytes(),
        documentType="regulation",
        submitter="faa",
        createdAt="2020-08-01T00:00:00Z",
    )
    upload(
        "zh",
        "ssd.txt",
        ZH_TEXT.encode(),
        documentType="manual",
        submitter="li",
        createdAt="2023-05-01T00:00:00Z",
    )
    upload(
        "ru",
        "russian.txt",
        (DOCS / "tika__russian.cp866.txt").read_bytes(),
        documentType="novel",
        submitter="ivan",
        createdAt="2021-01-01T00:00:00Z",
    )
    upload("failed", "password.pdf", (DOCS / "pdfplumber__password-example.pdf").read_bytes())
    upload("rival", "rival.txt", b"horizontal stabilizer secret of the rival", tenant="rival")
    upload("default", "note.txt", "квартальный отчёт default tenant note".encode(), "default")
    for role, document_id in ids.items():
        tenant = {"rival": "rival", "default": "default"}.get(role, "acme")
        final = wait_until(
            lambda document_id=document_id, tenant=tenant: _final(stack, document_id, tenant), 120
        )
        assert final["status"] == ("failed" if role == "failed" else "completed"), final
    # A document whose extraction is under way (its task is not ours to run).
    catalog = Catalog(settings.catalog_url)
    with catalog.session() as session:
        session.add(
            Document(
                id=key_of("doc-busy", "acme"),
                tenant="acme",
                collection="default",
                name="busy.pdf",
                status="processing",
                status_changed_at=datetime.now(UTC),
            )
        )
    catalog.dispose()
    ids["processing"] = "doc-busy"
    stack.ids = ids  # type: ignore[attr-defined]
    # Completed documents are searchable once the index worker has written them.
    wait_until(lambda: _indexed(stack, "horizontal stabilizer", ids["federal"]), 60)
    yield stack
    stack.stop()


def _final(stack: Stack, document_id: str, tenant: str) -> dict[str, Any] | None:
    body = stack.client.get(
        f"/api/documents/{document_id}", headers={"X-LDIMS-Tenant": tenant}
    ).json()
    return body if body["status"] in ("completed", "failed") else None


def _indexed(stack: Stack, query: str, document_id: str) -> bool:
    found = stack.client.get(
        "/api/search", params={"query": query}, headers={"X-LDIMS-Tenant": "acme"}
    ).json()
    return document_id in {hit["documentId"] for hit in found["results"]}


@contextlib.asynccontextmanager
async def http_client(
    url: str, mode: str, tenant: str | None = "acme", **headers: str
) -> AsyncIterator[Client]:
    if tenant:
        headers["X-LDIMS-Tenant"] = tenant
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        yield client


def ids_of(result: Any) -> list[str]:
    return [hit["documentId"] for hit in result.structured_content["results"]]


# --- listing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_tools_and_resource_templates_are_listed_with_schemas(corpus: Stack, mode: str) -> None:
    async def check() -> None:
        async with http_client(corpus.api.url, mode) as client:
            expected = "2026-07-28" if mode == "auto" else "2025-11-25"
            assert client.protocol_version == expected
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools) == {
                "searchDocuments",
                "getDocumentStatus",
                "ingestDocument",
                "deleteDocument",
                "initiate_session",  # the guide, qmd and proxy toolsets are on by default too
                "navigate_session",
                *QMD_TOOLS,
                *PROXY_TOOLS,
            }
            search = tools["searchDocuments"]
            schema = search.input_schema
            assert schema["required"] == ["query"]
            assert schema["properties"]["maxResults"]["default"] == 5
            assert search.output_schema is not None
            assert "totalMatches" in search.output_schema["properties"]
            assert search.annotations is not None and search.annotations.read_only_hint
            assert "extracted_content resource" in (search.description or "")
            templates = (await client.list_resource_templates()).resource_templates
            assert {t.uri_template for t in templates} == {
                "ldims://docs/{document_id}/extracted_content",
                "ldims://docs/{document_id}/pages/{range}",
                "ldims://docs/{document_id}/lines/{range}",
                "qmd://{+path}",
            }

    run(check())


def test_write_tools_are_off_by_default(tmp_path: Path, shared_redis: RedisServer) -> None:
    services = build_services(make_settings(tmp_path, shared_redis.url))
    services.catalog.upgrade()

    async def names() -> set[str]:
        async with Client(build_mcp_server(services)) as client:
            return {tool.name for tool in (await client.list_tools()).tools}

    assert run(names()) == {
        "searchDocuments",
        "getDocumentStatus",
        "initiate_session",
        "navigate_session",
        *QMD_TOOLS,
        *PROXY_TOOLS,
    }
    services.catalog.dispose()


def test_toolsets_are_switched_on_by_settings(tmp_path: Path, shared_redis: RedisServer) -> None:
    services = build_services(make_settings(tmp_path, shared_redis.url, toolsets=[]))
    services.catalog.upgrade()

    async def listing() -> tuple[int, int]:
        async with Client(build_mcp_server(services)) as client:
            tools = (await client.list_tools()).tools
            templates = (await client.list_resource_templates()).resource_templates
            return len(tools), len(templates)

    assert run(listing()) == (0, 0)
    services.catalog.dispose()
    telepathy = make_settings(tmp_path, shared_redis.url, toolsets=["documents", "telepathy"])
    with pytest.raises(ValueError, match="unknown toolsets"):
        build_mcp_server(build_services(telepathy))


def test_instructions_describe_the_callers_holdings(corpus: Stack) -> None:
    async def instructions(tenant: str) -> str:
        async with http_client(corpus.api.url, "auto", tenant) as client:
            return client.instructions or ""

    acme = run(instructions("acme"))
    assert "LDIMS holds 5 documents for you in 1 collection(s): default (5)." in acme
    assert "1 are still being processed" in acme and "1 failed" in acme
    assert "searchDocuments" in acme
    assert "LDIMS holds 1 documents" in run(instructions("rival"))


# --- searchDocuments ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_search_finds_documents_with_every_filter(corpus: Stack, mode: str) -> None:
    ids = corpus.ids  # type: ignore[attr-defined]

    async def check() -> None:
        async with http_client(corpus.api.url, mode) as client:

            async def search(query: str, **options: Any) -> Any:
                result = await client.call_tool("searchDocuments", {"query": query, **options})
                assert not result.is_error, result.content
                # The text is the same result as a JSON string (the seed's content format).
                assert json.loads(result.content[0].text) == result.structured_content
                return result

            found = await search("horizontal stabilizer")
            body = found.structured_content
            assert ids_of(found) == [ids["federal"]]  # never the rival tenant's document
            hit = body["results"][0]
            assert hit["relevanceScore"] > 0.5 and "**" in hit["matchedContext"]
            assert 1 <= hit["pageNumber"] <= 15
            assert hit["uri"] == f"ldims://docs/{ids['federal']}/pages/{hit['pageNumber']}"
            assert hit["metadata"]["documentType"] == "regulation"
            assert hit["metadata"]["submitter"] == "faa"
            assert hit["metadata"]["createdAt"].startswith("2020-08-01")
            assert body["totalMatches"] == 1 and body["isError"] is False
            assert body["searchMetadata"]["searchMode"] == "semantic"
            assert "keyword" in body["searchMetadata"]["note"]

            # exact: no stemming; semantic: stems
            exact = {"searchMode": "exact"}
            assert ids_of(await search('"horizontal stabilizer"', filters=exact)) == [
                ids["federal"]
            ]
            assert ids_of(await search("stabilizers", filters=exact)) == []
            assert ids_of(await search("stabilizers")) == [ids["federal"]]
            # Chinese 2-character word, Russian inflected forms
            assert ids_of(await search("硬盘")) == [ids["zh"]]
            assert ids_of(await search("поднимаются медленно")) == [ids["ru"]]
            # each filter narrows inside the query
            assert ids_of(await search("硬盘", filters={"documentType": "manual"})) == [ids["zh"]]
            assert ids_of(await search("硬盘", filters={"documentType": "regulation"})) == []
            assert ids_of(await search("硬盘", filters={"submitter": "li"})) == [ids["zh"]]
            assert ids_of(await search("硬盘", filters={"submitter": "faa"})) == []
            assert ids_of(await search("硬盘", filters={"collection": "default"})) == [ids["zh"]]
            assert ids_of(await search("硬盘", filters={"collection": "archive"})) == []
            assert ids_of(await search("硬盘", filters={"dateFrom": "2023-01-01"})) == [ids["zh"]]
            assert ids_of(await search("硬盘", filters={"dateTo": "2022-12-31"})) == []
            window = {"dateFrom": "2020-07-01T00:00:00Z", "dateTo": "2020-08-31"}
            assert ids_of(await search("stabilizer", filters=window)) == [ids["federal"]]
            # no results is a successful empty result
            empty = await search("zebra unicorn")
            assert empty.structured_content["results"] == []
            assert empty.structured_content["totalMatches"] == 0
            # explain says why; minScore above the hit's score leaves it out, and the count
            explained = (await search("horizontal stabilizer", explain=True)).structured_content
            why = explained["results"][0]["explain"]
            assert why["relevanceScore"] == explained["results"][0]["relevanceScore"]
            assert why["keywordRank"] == 1 and why["model"] == "keyword" and why["coverage"] > 0
            assert explained["searchMetadata"]["minScore"] == 0.002
            plain = (await search("horizontal stabilizer")).structured_content["results"][0]
            assert "explain" not in plain
            above = await search("horizontal stabilizer", minScore=1.0)
            assert above.structured_content["results"] == []
            assert above.structured_content["totalMatches"] == 0
            # maxResults above the hard limit is capped, and says so
            capped = await search("stabilizer", maxResults=500)
            assert capped.structured_content["searchMetadata"]["maxResults"] == 50
            assert "capped" in capped.structured_content["searchMetadata"]["note"]

    run(check())


def test_search_errors_carry_the_seeds_codes(corpus: Stack) -> None:
    async def check() -> None:
        async with http_client(corpus.api.url, "auto") as client:

            async def error(arguments: dict[str, Any]) -> dict[str, Any]:
                result = await client.call_tool("searchDocuments", arguments)
                assert result.is_error
                body = result.structured_content
                assert json.loads(result.content[0].text) == body
                assert body["isError"] is True
                return body  # type: ignore[no-any-return]

            for arguments, field in (
                ({"query": "   "}, "query"),
                ({"query": ""}, "query"),
                ({}, "query"),
                ({"query": "x", "maxResults": 0}, "maxResults"),
                ({"query": "x", "filters": {"searchMode": "fuzzy"}}, "filters.searchMode"),
                ({"query": "x", "filters": {"dateFrom": "yesterday"}}, "filters.dateFrom"),
                (
                    {"query": "x", "filters": {"dateFrom": "2024-02-01", "dateTo": "2024-01-01"}},
                    "filters.dateFrom",
                ),
                ({"query": "x", "filters": {"color": "red"}}, "filters.color"),
                ({"query": "x", "minScore": 1.5}, "minScore"),
                ({"query": "x", "minScore": "high"}, "minScore"),
                ({"query": "x", "explain": "yes"}, "explain"),
            ):
                body = await error(arguments)
                assert body["errorCode"] == "INVALID_INPUT", (arguments, body)
                assert body["errorDetails"]["field"] == field, (arguments, body)
            unprocessable = await error({"query": "!!! ??? ..."})
            assert unprocessable["errorCode"] == "QUERY_UNPROCESSABLE"
            with pytest.raises(MCPError) as unknown:  # a protocol error, as the spec says
                await client.call_tool("noSuchTool", {})
            assert unknown.value.code == -32602 and "noSuchTool" in unknown.value.message

    run(check())


def test_search_timeout_and_backend_errors(tmp_path: Path, shared_redis: RedisServer) -> None:
    """SEARCH_TIMEOUT after MCP_REQUEST_TIMEOUT_SECONDS; BACKEND_API_ERROR when the index is
    unreadable (the reason stays in the server log, not in the answer)."""
    settings = make_settings(tmp_path, shared_redis.url, mcp_request_timeout_seconds=0.000001)
    services = build_services(settings)
    services.catalog.upgrade()

    async def call(server: Any) -> dict[str, Any]:
        async with Client(server) as client:
            result = await client.call_tool("searchDocuments", {"query": "anything"})
            assert result.is_error
            return result.structured_content  # type: ignore[no-any-return]

    assert run(call(build_mcp_server(services)))["errorCode"] == "SEARCH_TIMEOUT"

    broken = make_settings(tmp_path / "broken", shared_redis.url)
    broken_services = build_services(broken)
    broken_services.catalog.upgrade()
    broken.index_dir.write_text("a file where the index folder should be")
    body = run(call(build_mcp_server(broken_services)))
    assert body["errorCode"] == "BACKEND_API_ERROR"
    assert str(broken.index_dir) not in json.dumps(body)
    services.catalog.dispose()
    broken_services.catalog.dispose()


def test_with_keys_on_every_mcp_method_needs_a_valid_key(corpus: Stack) -> None:
    key = "k-" + "m" * 30
    settings = corpus.settings.model_copy(
        update={"api_keys": {hashlib.sha256(key.encode()).hexdigest(): "acme"}}
    )
    from tests.conftest import ApiServer

    server = ApiServer(settings).start()
    try:
        url = f"{server.url}/mcp"
        for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic eA=="}):
            refused = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, **auth})
            assert refused.status_code == 401, auth
            assert refused.headers["www-authenticate"] == "Bearer"
            assert refused.json()["errorCode"] == "UNAUTHORIZED"
        listed = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 2, "method": "prompts/list", "params": {}},
            headers={**ACCEPT, "MCP-Protocol-Version": "2025-06-18"},
        )
        assert listed.status_code == 401 and "prompts" not in listed.text

        async def check() -> set[str]:
            async with http_client(server.url, "auto", Authorization=f"Bearer {key}") as client:
                return {tool.name for tool in (await client.list_tools()).tools}

        assert "searchDocuments" in run(check())
    finally:
        server.stop()


# --- resources -----------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_reading_documents_in_every_state(corpus: Stack, mode: str) -> None:
    ids = corpus.ids  # type: ignore[attr-defined]

    async def check() -> None:
        async with http_client(corpus.api.url, mode) as client:
            zh = await client.read_resource(f"ldims://docs/{ids['zh']}/extracted_content")
            content = zh.contents[0]
            assert ZH_TEXT in content.text
            assert content.meta["documentName"] == "ssd.txt"
            assert content.meta["format"].startswith("text/plain")
            assert content.meta["extractedAt"] and content.meta["truncated"] is False

            async def failure(uri: str) -> MCPError:
                with pytest.raises(MCPError) as caught:
                    await client.read_resource(uri)
                return caught.value

            busy = await failure(f"ldims://docs/{ids['processing']}/extracted_content")
            assert busy.data["errorCode"] == "PROCESSING" and busy.data["status"] == 202
            assert busy.data["retryAfterSeconds"] > 0
            failed = await failure(f"ldims://docs/{ids['failed']}/extracted_content")
            assert failed.data["errorCode"] == "CONTENT_UNAVAILABLE_OR_FAILED"
            assert failed.data["status"] == 409
            assert failed.data["errorDetails"]["failureCode"] == "ENCRYPTED"
            unknown = await failure("ldims://docs/no-such-doc/extracted_content")
            assert unknown.data["errorCode"] == "RESOURCE_NOT_FOUND"
            assert unknown.data["status"] == 404 and unknown.code == -32002
            foreign = await failure(f"ldims://docs/{ids['rival']}/extracted_content")
            # another tenant's document: exactly as an unknown one (no existence oracle)
            assert foreign.data["errorCode"] == "RESOURCE_NOT_FOUND"
            assert foreign.data["status"] == 404 and foreign.code == unknown.code
            assert json.dumps(foreign.data).replace(ids["rival"], "<id>") == json.dumps(
                unknown.data
            ).replace("no-such-doc", "<id>")
            bad_range = await failure(f"ldims://docs/{ids['zh']}/pages/two")
            assert bad_range.data["errorCode"] == "INVALID_INPUT"
            past_end = await failure(f"ldims://docs/{ids['zh']}/pages/9")
            assert past_end.data["errorCode"] == "RESOURCE_NOT_FOUND"

    run(check())


def test_a_long_document_is_read_in_bounded_parts_that_chain(corpus: Stack) -> None:
    """MCP_MAX_CONTENT_CHARS is 1000 here: the 15-page PDF comes in parts, each naming the
    next, and together they hold every page once."""
    federal = corpus.ids["federal"]  # type: ignore[attr-defined]

    async def check() -> list[int]:
        seen: list[int] = []
        async with http_client(corpus.api.url, "auto") as client:
            uri: str | None = f"ldims://docs/{federal}/extracted_content"
            for _ in range(40):
                if uri is None:
                    break
                content = (await client.read_resource(uri)).contents[0]
                assert content.meta["pageCount"] == 15
                assert len(content.text) <= 1000 + 200  # the limit plus the continuation line
                first, last = map(int, content.meta["pages"].split("-"))
                seen += range(first, last + 1)
                uri = content.meta.get("nextUri")
                if uri:
                    assert uri in content.text  # the agent sees where to go on
            assert uri is None
        return seen

    seen = run(check())
    assert sorted(set(seen)) == list(range(1, 16))


def test_document_status_in_every_state(corpus: Stack) -> None:
    ids = corpus.ids  # type: ignore[attr-defined]

    async def check() -> None:
        async with http_client(corpus.api.url, "legacy") as client:

            async def status(document_id: str) -> dict[str, Any]:
                result = await client.call_tool("getDocumentStatus", {"documentId": document_id})
                return result.structured_content  # type: ignore[no-any-return]

            done = await status(ids["federal"])
            assert done["status"] == "completed" and done["ready"] and done["pageCount"] == 15
            failed = await status(ids["failed"])
            assert failed["status"] == "failed" and failed["error"]["code"] == "ENCRYPTED"
            busy = await status(ids["processing"])
            assert busy["status"] == "processing" and busy["retryAfterSeconds"] > 0
            assert (await status("no-such-doc"))["errorCode"] == "RESOURCE_NOT_FOUND"
            assert (await status(ids["rival"]))["errorCode"] == "RESOURCE_NOT_FOUND"

    run(check())


def test_ingest_and_delete_through_mcp(corpus: Stack) -> None:
    async def check() -> None:
        async with http_client(corpus.api.url, "auto") as client:
            text = "Runbook: restart the zeppelin gateway before noon."
            added = await client.call_tool(
                "ingestDocument",
                {"name": "runbook.md", "content": text, "documentType": "runbook"},
            )
            assert not added.is_error, added.content
            body = added.structured_content
            assert body["statusCode"] == 202 and body["status"] == "queued"
            document_id = body["documentId"]
            again = await client.call_tool(
                "ingestDocument", {"name": "runbook.md", "content": text}
            )
            assert again.structured_content["statusCode"] == 200
            assert again.structured_content["duplicate"] is True
            for _ in range(600):
                status = await client.call_tool("getDocumentStatus", {"documentId": document_id})
                if status.structured_content["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            assert status.structured_content["status"] == "completed"
            for _ in range(600):
                found = await client.call_tool("searchDocuments", {"query": "zeppelin"})
                if ids_of(found) == [document_id]:
                    break
                await asyncio.sleep(0.1)
            assert ids_of(found) == [document_id]
            encoded = base64.b64encode(b"second runbook about zeppelin hangars").decode()
            other = await client.call_tool(
                "ingestDocument", {"name": "two.txt", "contentBase64": encoded}
            )
            assert other.structured_content["statusCode"] == 202
            both = await client.call_tool("ingestDocument", {"name": "x.txt"})
            assert both.structured_content["errorCode"] == "INVALID_INPUT"
            bad = await client.call_tool("ingestDocument", {"name": "x", "contentBase64": "%%"})
            assert bad.structured_content["errorDetails"]["field"] == "contentBase64"
            gone = await client.call_tool("deleteDocument", {"documentId": document_id})
            assert gone.structured_content == {"documentId": document_id, "deleted": True}
            second = other.structured_content["documentId"]
            assert not (await client.call_tool("deleteDocument", {"documentId": second})).is_error
            after = await client.call_tool("getDocumentStatus", {"documentId": document_id})
            assert after.structured_content["errorCode"] == "RESOURCE_NOT_FOUND"

    run(check())


# --- in memory and stdio -----------------------------------------------------------------------
def test_in_memory_client_is_the_default_tenant(corpus: Stack) -> None:
    services = build_services(corpus.settings)
    ids = corpus.ids  # type: ignore[attr-defined]

    async def check() -> None:
        async with Client(build_mcp_server(services)) as client:
            found = await client.call_tool("searchDocuments", {"query": "квартальный отчёт"})
            assert ids_of(found) == [ids["default"]]
            assert ids_of(await client.call_tool("searchDocuments", {"query": "硬盘"})) == []

    run(check())
    services.catalog.dispose()


@pytest.mark.parametrize("mode", MODES)
def test_stdio_server_serves_the_same_tools(corpus: Stack, mode: str) -> None:
    ids = corpus.ids  # type: ignore[attr-defined]
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims, "the ldims command is installed with the package"
    parameters = StdioServerParameters(
        command=ldims, args=["mcp", "--tenant", "acme"], env=settings_env(corpus.settings)
    )

    async def check() -> None:
        async with Client(parameters, mode=mode) as client:
            assert "LDIMS holds 5 documents" in (client.instructions or "")
            found = await client.call_tool("searchDocuments", {"query": "horizontal stabilizer"})
            assert ids_of(found) == [ids["federal"]]
            content = await client.read_resource(f"ldims://docs/{ids['zh']}/extracted_content")
            assert ZH_TEXT in content.contents[0].text
            with pytest.raises(MCPError) as caught:
                await client.read_resource(f"ldims://docs/{ids['processing']}/extracted_content")
            assert caught.value.data["errorCode"] == "PROCESSING"

    run(check())


# --- transport security and protocol versions ----------------------------------------------------


def test_a_foreign_origin_or_host_is_refused(corpus: Stack) -> None:
    url = f"{corpus.api.url}/mcp"
    ok = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, "Origin": corpus.api.url})
    assert ok.status_code == 200 and ok.json()["result"]["protocolVersion"] == "2025-06-18"
    foreign = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, "Origin": "https://evil.test"})
    assert foreign.status_code == 403
    host = httpx.post(url, json=INITIALIZE, headers={**ACCEPT, "Host": "evil.test"})
    assert host.status_code == 421


def test_an_unsupported_protocol_version_gets_the_specs_error(corpus: Stack) -> None:
    headers = {**ACCEPT, "MCP-Protocol-Version": "2099-01-01"}
    response = httpx.post(f"{corpus.api.url}/mcp", json=INITIALIZE, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] in (-32602, -32022)


# --- one search for REST and MCP -----------------------------------------------------------------
PARITY_REQUESTS: list[dict[str, Any]] = [
    {"query": "horizontal stabilizer"},
    {"query": "stabilizers"},
    {"query": '"horizontal stabilizer"', "filters": {"searchMode": "exact"}},
    {"query": "stabilizers", "filters": {"searchMode": "exact"}},
    {"query": "硬盘"},
    {"query": "поднимаются медленно"},
    {"query": "secret rival"},  # the rival tenant's words: nothing for acme
    {"query": "硬盘", "filters": {"documentType": "manual"}},
    {"query": "硬盘", "filters": {"documentType": "regulation"}},
    {"query": "硬盘", "filters": {"submitter": "li"}},
    {"query": "硬盘", "filters": {"collection": "archive"}},
    {"query": "硬盘", "filters": {"dateFrom": "2023-01-01"}},
    {
        "query": "stabilizer",
        "filters": {"dateFrom": "2020-07-01T00:00:00Z", "dateTo": "2020-08-31"},
    },
    {"query": "the aircraft stabilizer rule", "maxResults": 1},
    {"query": "the aircraft stabilizer rule", "maxResults": 3, "offset": 1},
    {"query": "stabilizer", "maxResults": 50},
    {"query": "stabilizer", "maxResults": 51},  # above the hard limit: lowered, and said
    {"query": "stabilizer", "maxResults": 500},
    {"query": "stabilizer AND NOT zebra"},
    {"query": "stabilizer (aircraft OR helicopter"},  # bad syntax: runs as plain words
    {"query": "zebra unicorn"},
    # refused alike
    {"query": "stabilizer", "maxResults": 501},
    {"query": "stabilizer", "maxResults": 0},
    {"query": "stabilizer", "offset": 10_001},
    {"query": "stabilizer", "offset": -1},
    {"query": "   "},
    {"query": "x" * 2001},
    {"query": "!!! ??? ..."},
    {"query": "x", "filters": {"searchMode": "fuzzy"}},
    {"query": "x", "filters": {"dateFrom": "yesterday"}},
    {"query": "x", "filters": {"dateTo": "2024-02-30"}},
    {"query": "x", "filters": {"dateFrom": "2024-02-01", "dateTo": "2024-01-01"}},
]


def _rest_params(request: dict[str, Any]) -> dict[str, Any]:
    params = {key: value for key, value in request.items() if key != "filters"}
    params.update(request.get("filters", {}))
    return params


def _comparable(body: dict[str, Any]) -> dict[str, Any]:
    if body.get("isError"):
        return {"errorCode": body["errorCode"], "field": body.get("errorDetails", {}).get("field")}
    body = json.loads(json.dumps(body))
    body["searchMetadata"].pop("executionTime")
    return body


def test_rest_and_mcp_search_give_the_same_answers(corpus: Stack) -> None:
    """One search entry point: the same results, field names, caps and errors on both."""

    async def over_mcp() -> list[dict[str, Any]]:
        async with http_client(corpus.api.url, "auto") as client:
            answers = []
            for request in PARITY_REQUESTS:
                result = await client.call_tool("searchDocuments", request)
                answers.append(_comparable(result.structured_content))
            return answers

    mcp_answers = run(over_mcp())
    for request, mcp_answer in zip(PARITY_REQUESTS, mcp_answers, strict=True):
        response = corpus.client.get(
            "/api/search", params=_rest_params(request), headers={"X-LDIMS-Tenant": "acme"}
        )
        rest_answer = _comparable(response.json())
        assert rest_answer == mcp_answer, request
        if mcp_answer.get("errorCode"):
            assert response.status_code in (400, 422), (request, response.status_code)
        else:
            assert response.status_code == 200
    answered = [a for a in mcp_answers if "results" in a]
    assert len(answered) >= 20 and any(a["results"] for a in answered)
    assert {a.get("errorCode") for a in mcp_answers} >= {"INVALID_INPUT", "QUERY_UNPROCESSABLE"}
    capped = mcp_answers[PARITY_REQUESTS.index({"query": "stabilizer", "maxResults": 500})]
    assert capped["searchMetadata"]["maxResults"] == 50
    assert "capped" in capped["searchMetadata"]["note"]


def test_mcp_search_takes_strict_integers(corpus: Stack) -> None:
    async def check() -> None:
        async with http_client(corpus.api.url, "auto") as client:
            for bad in ("5", True, 5.5, 10**12):
                result = await client.call_tool(
                    "searchDocuments", {"query": "x", "maxResults": bad}
                )
                assert result.is_error, bad
                assert result.structured_content["errorCode"] == "INVALID_INPUT"
                assert result.structured_content["errorDetails"]["field"] == "maxResults"

    run(check())
    for bad in ("true", "5.5", "1000000000000"):
        response = corpus.client.get(
            "/api/search",
            params={"query": "x", "maxResults": bad},
            headers={"X-LDIMS-Tenant": "acme"},
        )
        assert response.status_code == 400, bad
        assert response.json()["errorDetails"]["field"] == "maxResults"


def test_rest_search_answers_search_timeout_past_its_deadline(corpus: Stack) -> None:
    slow = corpus.settings.model_copy(
        update={"search_timeout_seconds": 1e-9, "mcp_inline_search_seconds": 0}
    )
    with TestClient(create_app(slow), base_url="http://127.0.0.1") as client:
        response = client.get(
            "/api/search", params={"query": "stabilizer"}, headers={"X-LDIMS-Tenant": "acme"}
        )
        assert response.status_code == 504, response.text
        assert response.json()["errorCode"] == "SEARCH_TIMEOUT"
        # the same request within its time is answered
        fine = corpus.settings.model_copy(update={"search_timeout_seconds": 30})
    with TestClient(create_app(fine), base_url="http://127.0.0.1") as client:
        response = client.get(
            "/api/search", params={"query": "stabilizer"}, headers={"X-LDIMS-Tenant": "acme"}
        )
        assert response.status_code == 200 and response.json()["totalMatches"] == 1


def test_lines_are_numbered_as_search_hits_number_them(corpus: Stack) -> None:
    ids = corpus.ids  # type: ignore[attr-defined]
    acme = {"X-LDIMS-Tenant": "acme"}
    found = corpus.client.get(
        "/api/search", params={"query": "horizontal stabilizer"}, headers=acme
    )
    hit = found.json()["results"][0]
    start = hit["lineStart"]
    end = min(hit["lineEnd"], start + 4)  # within this stack's 1,000-character parts
    rest = corpus.client.get(f"/api/documents/{ids['federal']}/lines/{start}-{end}", headers=acme)
    assert rest.status_code == 200, rest.text
    body = rest.json()
    assert body["lines"] == f"{start}-{end}" and body["truncated"] is False
    numbered = body["text"].split("\n")
    assert int(numbered[0].split(":")[0]) == start and int(numbered[-1].split(":")[0]) == end
    text = " ".join(line.split(": ", 1)[1] for line in numbered if ": " in line).lower()
    assert text.strip()

    async def over_mcp() -> Any:
        async with http_client(corpus.api.url, "auto") as client:
            return await client.read_resource(f"ldims://docs/{ids['federal']}/lines/{start}-{end}")

    contents = run(over_mcp()).contents[0]
    assert contents.text == body["text"]
    # another tenant's document is not readable by lines either
    rival = corpus.client.get(
        f"/api/documents/{ids['federal']}/lines/1-3", headers={"X-LDIMS-Tenant": "rival"}
    )
    assert rival.status_code == 404
    long = corpus.client.get(f"/api/documents/{ids['federal']}/lines/1-100000", headers=acme).json()
    assert long["truncated"] is True and long["nextUri"].startswith(
        f"ldims://docs/{ids['federal']}/lines/"
    )
    assert (
        corpus.client.get(f"/api/documents/{ids['federal']}/lines/0-3", headers=acme).status_code
        == 400
    )
