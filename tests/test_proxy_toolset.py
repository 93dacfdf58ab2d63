"""The proxy toolset (proxy seed ``002_8c9e3925c2dc2367.txt``) on a real stack — API, extract
and index workers, Redis, the catalog — with real corpus files, two tenants and API keys
made by the key ring: the five tools over the envelope (``/internal/mcp/execute``) and over
MCP with the official client, the limits of §8.2 walked like an exfiltrating model, tenant
isolation with no existence oracle, masking, trimming and the audit trail.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ldims.proxy.tokens import count_tokens
from runtime import build_services
from tests.conftest import RedisServer, Stack, make_settings

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docs"
PDF = CORPUS / "pdfplumber__federal-register-2020-17221.pdf"  # 15 pages, running headers
DOCX = CORPUS / "docling__word_sample.docx"  # headings: sections
RUNNING_HEADER = "Federal Register / Vol. 85, No. 152"

HANDBOOK = """# Operations handbook

Read this before you touch production.

## LDAP

The directory lives at ldap.example.internal. Ask Jane Smith (jane.smith@example.com,
+1 415 555 0132) for access. The bind password=Sup3rS3cret! is rotated monthly.

## Backups

{backups}

## Backups

A second section with the same heading keeps its own id.

## Контакты

Звоните Ивану по телефону +7 (495) 123-45-67 или пишите ivan@example.ru.
"""

BACKUPS = " ".join(
    f"Backup step {n} copies volume {n} to the vault and checks its sha256 sum."
    for n in range(1, 70)
)


class Env:
    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.services = build_services(stack.settings)
        ring = self.services.keys
        self.keys = {
            "admin": ring.create("acme", ["read", "ingest", "admin"]).key,
            "reader": ring.create("acme", ["read"], user="alice").key,
            "internal": ring.create("acme", ["read", "internal"]).key,
            "ingest_only": ring.create("acme", ["ingest"]).key,
            "globex": ring.create("globex", ["read", "ingest"]).key,
        }
        self.docs: dict[str, str] = {}

    def headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[key]}"}

    def upload(self, key: str, name: str, data: bytes) -> str:
        response = self.stack.client.post(
            "/api/documents", files={"file": (name, data)}, headers=self.headers(key)
        )
        assert response.status_code in (200, 201, 202), response.text
        document_id: str = response.json()["documentId"]
        self.wait(document_id, key)
        return document_id

    def wait(self, document_id: str, key: str) -> None:
        for _ in range(600):
            body = self.stack.client.get(
                f"/api/documents/{document_id}", headers=self.headers(key)
            ).json()
            if body["status"] in ("completed", "failed"):
                assert body["status"] == "completed", body
                return
            asyncio.run(asyncio.sleep(0.1))
        raise AssertionError(f"{document_id} not processed\n{self.stack.log_tail()}")

    def execute(
        self,
        tool: str,
        arguments: dict[str, Any],
        key: str = "reader",
        trace_id: str | None = "trace-1",
        user: dict[str, Any] | None = None,
    ) -> httpx.Response:
        body: dict[str, Any] = {"tool_name": tool, "arguments": arguments, "trace_id": trace_id}
        if user is not None:
            body["user"] = user
        return self.stack.client.post("/internal/mcp/execute", json=body, headers=self.headers(key))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("proxy")
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/11",
        doc_chunk_limit_tokens=400,
        mcp_rate_limit_calls=6,
        mcp_rate_limit_token_output=3000,
        mcp_proxy_max_output_bytes=12_000,
        mcp_proxy_doc_bytes_per_hour=30_000,
    )
    stack = Stack(settings, tmp).start()
    environment = Env(stack)
    try:
        environment.docs["handbook"] = environment.upload(
            "admin", "handbook.md", HANDBOOK.format(backups=BACKUPS).encode()
        )
        environment.docs["pdf"] = environment.upload("admin", "register.pdf", PDF.read_bytes())
        environment.docs["docx"] = environment.upload("admin", "sample.docx", DOCX.read_bytes())
        environment.docs["globex"] = environment.upload(
            "globex", "globex.md", b"# Globex plan\n\nThe globex plan is secret.\n"
        )
        yield environment
    finally:
        stack.stop()
        environment.services.close()


def ok(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert response.status_code == 200 and body["status"] == "ok", body
    return body["result"]  # type: ignore[no-any-return]


def error(response: httpx.Response) -> tuple[int, str, str]:
    body = response.json()
    assert body["status"] == "error", body
    assert set(body) == {"status", "error", "trace_id"}
    return response.status_code, body["error"]["code"], body["error"]["message"]


# --- the tools ---------------------------------------------------------------------------------


def test_metadata_lists_sections_with_stable_ids_pages_and_tags(env: Env) -> None:
    doc = env.docs["handbook"]
    meta = ok(env.execute("read_doc_metadata", {"doc_id": doc}))
    assert meta["title"] == "Operations handbook"
    assert meta["format"] == "text/markdown" and meta["page_count"] == 1
    ids = [section["section_id"] for section in meta["sections"]]
    assert ids == [
        "sec_operations_handbook",
        "sec_ldap",
        "sec_backups",
        "sec_backups_2",
        "sec_контакты",
    ]
    assert meta["sections"][1] == {
        "section_id": "sec_ldap",
        "heading": "LDAP",
        "level": 2,
        "page_start": 1,
        "page_end": 1,
    }
    # The same content uploaded again (a new document) gets the same section ids.
    again = env.upload("admin", "again.md", HANDBOOK.format(backups=BACKUPS).encode())
    assert [
        s["section_id"] for s in ok(env.execute("read_doc_metadata", {"doc_id": again}))["sections"]
    ] == ids
    docx = ok(env.execute("read_doc_metadata", {"doc_id": env.docs["docx"]}, trace_id="t-docx"))
    assert [s["heading"] for s in docx["sections"]][:2] == ["Swimming in the lake", "Let’s swim!"]
    assert docx["page_count"] == 2


def test_read_section_masks_pii_and_counts_tokens(env: Env) -> None:
    result = ok(
        env.execute("read_doc_section", {"doc_id": env.docs["handbook"], "section_id": "sec_ldap"})
    )
    text = result["text"]
    assert "ldap.example.internal" in text  # not PII: kept
    assert "jane.smith@example.com" not in text and "[EMAIL]" in text
    assert "555 0132" not in text and "[PHONE]" in text
    assert "Sup3rS3cret!" not in text and "password=[PASSWORD]" in text
    assert result["meta"]["masked"] == {"email": 1, "phone": 1, "password": 1}
    assert result["tokens"] == count_tokens(text)
    assert (result["page_start"], result["page_end"]) == (1, 1)
    russian = ok(
        env.execute(
            "read_doc_section",
            {"doc_id": env.docs["handbook"], "section_id": "sec_контакты"},
            trace_id="t-ru",
        )
    )
    assert "123-45-67" not in russian["text"] and "ivan@example.ru" not in russian["text"]
    assert russian["meta"]["masked"] == {"phone": 1, "email": 1}


def test_a_long_section_is_cut_at_a_sentence_end_within_the_token_limit(env: Env) -> None:
    result = ok(
        env.execute(
            "read_doc_section",
            {"doc_id": env.docs["handbook"], "section_id": "sec_backups"},
            trace_id="t-long",
        )
    )
    assert result["meta"]["truncated"] is True
    assert result["tokens"] <= 400 < result["tokens_total"]
    assert result["text"].endswith("sum.")  # a whole sentence
    assert BACKUPS.startswith(result["text"])


def test_read_pages_drops_running_headers_and_caps_pages_per_call(env: Env) -> None:
    pdf = env.docs["pdf"]
    result = ok(
        env.execute(
            "read_doc_pages", {"doc_id": pdf, "page_start": 2, "page_end": 3}, trace_id="p1"
        )
    )
    assert (result["page_start"], result["page_end"], result["page_count"]) == (2, 3, 15)
    assert result["text"].startswith("--- page 2 ---")
    assert RUNNING_HEADER not in result["text"]
    assert result["tokens"] <= 400
    status, code, message = error(
        env.execute(
            "read_doc_pages", {"doc_id": pdf, "page_start": 1, "page_end": 6}, trace_id="p2"
        )
    )
    assert (status, code) == (429, "RATE_LIMIT_EXCEEDED") and "5 pages" in message
    status, code, _ = error(
        env.execute(
            "read_doc_pages", {"doc_id": pdf, "page_start": 16, "page_end": 16}, trace_id="p3"
        )
    )
    assert (status, code) == (404, "RESOURCE_NOT_FOUND")
    status, code, _ = error(
        env.execute(
            "read_doc_pages", {"doc_id": pdf, "page_start": 3, "page_end": 2}, trace_id="p4"
        )
    )
    assert (status, code) == (400, "INVALID_INPUT")


def test_local_search_gives_snippets_with_pages_best_first(env: Env) -> None:
    result = ok(
        env.execute(
            "doc_local_search",
            {"doc_id": env.docs["pdf"], "query": "firearms background check", "max_results": 3},
            trace_id="s1",
        )
    )
    hits = result["results"]
    assert 1 <= len(hits) <= 3 and result["total_matches"] >= len(hits)
    assert hits[0]["score"] == 1.0
    assert [hit["score"] for hit in hits] == sorted((hit["score"] for hit in hits), reverse=True)
    assert all(1 <= hit["page"] <= 15 and "**" in hit["snippet"] for hit in hits)
    assert all(len(hit["snippet"]) <= 320 for hit in hits)
    status, code, _ = error(
        env.execute(
            "doc_local_search",
            {"doc_id": env.docs["pdf"], "query": "x", "max_results": 6},
            trace_id="s2",
        )
    )
    assert (status, code) == (400, "INVALID_INPUT")


def test_list_available_tools_and_unknown_tools(env: Env) -> None:
    assert ok(env.execute("list_available_tools", {}))["tools"] == [
        "read_doc_section",
        "read_doc_pages",
        "read_doc_metadata",
        "doc_local_search",
    ]
    status, code, _ = error(env.execute("rm_rf", {}))
    assert (status, code) == (404, "UNKNOWN_TOOL")


# --- isolation and identity --------------------------------------------------------------------


def test_another_tenants_document_answers_exactly_as_an_unknown_one(env: Env) -> None:
    foreign, unknown = env.docs["globex"], "no-such-document-0000000000000000"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("read_doc_metadata", {}),
        ("read_doc_section", {"section_id": "sec_globex_plan"}),
        ("read_doc_pages", {"page_start": 1, "page_end": 1}),
        ("doc_local_search", {"query": "globex plan"}),
    ]
    for number, (tool, extra) in enumerate(calls):
        answers = []
        for doc_id in (foreign, unknown):
            response = env.execute(tool, {"doc_id": doc_id, **extra}, trace_id=f"iso-{number}")
            status, code, message = error(response)
            answers.append((status, code, message.replace(doc_id, "<id>")))
        assert answers[0] == answers[1] == (404, "RESOURCE_NOT_FOUND", answers[0][2])
    # ... and over the REST routes of the documents toolset too.
    for path in ("/api/documents/{}", "/api/documents/{}/content"):
        bodies = []
        for doc_id in (foreign, unknown):
            response = env.stack.client.get(path.format(doc_id), headers=env.headers("reader"))
            body = json.dumps(response.json()).replace(doc_id, "<id>")
            bodies.append((response.status_code, body))
        assert bodies[0] == bodies[1] and bodies[0][0] == 404


def test_the_same_id_in_two_tenants_is_two_documents(env: Env) -> None:
    """The hostile finding: one id namespace let a tenant take an id first and lock the other
    out of it for ever. Ids are each tenant's own: both tenants hold ``invoice-2024-001``,
    each reads, searches and deletes only its own."""
    doc_id = "invoice-2024-001"
    bodies = {
        "globex": b"# Globex invoice\n\nPaid by wire.\n",
        "admin": b"# Acme invoice\n\nUnpaid.\n",
    }
    for key, body in bodies.items():  # globex takes the id first
        response = env.stack.client.post(
            "/api/documents",
            files={"file": ("invoice.md", body)},
            data={"documentId": doc_id},
            headers=env.headers(key),
        )
        assert response.status_code == 202 and response.json()["created"] is True, response.text
        env.wait(doc_id, key)
    acme = ok(env.execute("read_doc_metadata", {"doc_id": doc_id}, trace_id="same-id"))
    assert acme["title"] == "Acme invoice"
    found = env.stack.client.get(
        "/api/search",
        params={"query": "invoice", "searchMode": "exact"},
        headers=env.headers("globex"),
    ).json()
    assert [(hit["documentId"], hit["documentName"]) for hit in found["results"]] == [
        (doc_id, "invoice.md")
    ]
    assert "Paid by wire" in found["results"][0]["matchedContext"]
    deleted = env.stack.client.delete(f"/api/documents/{doc_id}", headers=env.headers("globex"))
    assert deleted.status_code == 200
    again = ok(env.execute("read_doc_metadata", {"doc_id": doc_id}, trace_id="same-id-2"))
    assert again["title"] == "Acme invoice"
    gone = env.stack.client.get(f"/api/documents/{doc_id}", headers=env.headers("globex"))
    assert gone.status_code == 404


def test_only_an_internal_key_may_act_for_another_user_or_tenant(env: Env) -> None:
    doc = env.docs["globex"]
    forged = {"user_id": "mallory", "tenant_id": "globex"}
    status, code, _ = error(env.execute("read_doc_metadata", {"doc_id": doc}, user=forged))
    assert (status, code) == (403, "ACCESS_DENIED")
    # The internal key of acme may name a user and a tenant: the envelope's user decides.
    meta = ok(
        env.execute(
            "read_doc_metadata",
            {"doc_id": doc},
            key="internal",
            user={"user_id": "bob", "tenant_id": "globex"},
            trace_id="internal-1",
        )
    )
    assert meta["title"] == "Globex plan"
    # A key naming its own tenant and user is fine.
    ok(
        env.execute(
            "read_doc_metadata",
            {"doc_id": env.docs["handbook"]},
            user={"user_id": "alice", "tenant_id": "acme"},
            trace_id="self-1",
        )
    )


def test_scopes_revocation_and_expiry_hold_at_once(env: Env) -> None:
    doc = env.docs["handbook"]
    status, code, _ = error(env.execute("read_doc_metadata", {"doc_id": doc}, key="ingest_only"))
    assert (status, code) == (403, "ACCESS_DENIED")
    ring = env.services.keys
    temporary = ring.create("acme", ["read"])
    env.keys["temporary"] = temporary.key
    ok(env.execute("read_doc_metadata", {"doc_id": doc}, key="temporary", trace_id="rev"))
    ring.revoke(temporary.id)
    status, code, _ = error(env.execute("read_doc_metadata", {"doc_id": doc}, key="temporary"))
    assert (status, code) == (401, "UNAUTHORIZED")
    expired = ring.create("acme", ["read"], expires_at=datetime.now(UTC) - timedelta(seconds=1))
    env.keys["expired"] = expired.key
    status, code, _ = error(env.execute("read_doc_metadata", {"doc_id": doc}, key="expired"))
    assert (status, code) == (401, "UNAUTHORIZED")
    rotated = ring.create("acme", ["read"])
    replacement = ring.rotate(rotated.id)
    env.keys["rotated"], env.keys["replacement"] = rotated.key, replacement.key
    assert error(env.execute("read_doc_metadata", {"doc_id": doc}, key="rotated"))[0] == 401
    ok(env.execute("read_doc_metadata", {"doc_id": doc}, key="replacement", trace_id="rot"))


# --- limits: a model walking a document ---------------------------------------------------------


def test_walking_pages_in_one_generation_stops_at_the_limits(env: Env) -> None:
    pdf = env.docs["pdf"]
    returned = 0
    refusals = []
    for page in range(1, 16):
        response = env.execute(
            "read_doc_pages",
            {"doc_id": pdf, "page_start": page, "page_end": page},
            key="admin",
            trace_id="walk-1",
        )
        if response.status_code == 200:
            returned += len(ok(response)["text"].encode())
        else:
            refusals.append(error(response)[:2])
    assert refusals and all(refusal == (429, "RATE_LIMIT_EXCEEDED") for refusal in refusals)
    assert returned <= 12_000  # MCP_PROXY_MAX_OUTPUT_BYTES of this stack
    # A new trace id may read on, but not past the document's hourly budget.
    total = returned
    for generation in range(2, 12):
        for page in range(1, 16):
            response = env.execute(
                "read_doc_pages",
                {"doc_id": pdf, "page_start": page, "page_end": page},
                key="admin",
                trace_id=f"walk-{generation}",
            )
            if response.status_code != 200:
                break
            total += len(ok(response)["text"].encode())
    assert total <= 30_000  # MCP_PROXY_DOC_BYTES_PER_HOUR of this stack
    response = env.execute(
        "read_doc_pages",
        {"doc_id": pdf, "page_start": 1, "page_end": 1},
        key="admin",
        trace_id="walk-new",
    )
    status, code, message = error(response)
    assert (status, code) == (429, "RATE_LIMIT_EXCEEDED")
    assert int(response.headers["Retry-After"]) >= 1 and "retry in" in message


def test_calls_per_document_per_generation(env: Env) -> None:
    doc = env.docs["docx"]
    answers = [
        env.execute("read_doc_metadata", {"doc_id": doc}, key="internal", trace_id="calls-1")
        for _ in range(7)
    ]
    assert [a.status_code for a in answers] == [200] * 6 + [429]
    assert error(answers[-1])[1] == "RATE_LIMIT_EXCEEDED"
    state = answers[5].json()["result"]["meta"]["rate_limit"]
    assert state["document_calls"] == 6 and state["document_calls_limit"] == 6


# --- MCP ---------------------------------------------------------------------------------------


def test_the_tools_over_mcp_with_the_official_client(env: Env) -> None:
    async def go() -> None:
        async with (
            httpx2.AsyncClient(headers=env.headers("reader"), timeout=60) as http,
            Client(streamable_http_client(f"{env.stack.api.url}/mcp", http_client=http)) as mcp,  # type: ignore[arg-type]
        ):
            names = {tool.name for tool in (await mcp.list_tools()).tools}
            assert {"read_doc_section", "read_doc_pages", "read_doc_metadata"} <= names
            result = await mcp.call_tool(
                "read_doc_section",
                {"doc_id": env.docs["handbook"], "section_id": "sec_ldap"},
                meta={"traceId": "mcp-1"},
            )
            assert not result.is_error
            assert result.structured_content["meta"]["masked"]["email"] == 1
            denied = await mcp.call_tool("read_doc_metadata", {"doc_id": env.docs["globex"]})
            assert denied.is_error
            assert denied.structured_content["errorCode"] == "RESOURCE_NOT_FOUND"

    asyncio.run(go())


# --- audit -------------------------------------------------------------------------------------


def test_every_call_is_audited_without_its_text(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ldims.proxy.audit")
    ok(
        env.execute(
            "read_doc_section",
            {"doc_id": env.docs["handbook"], "section_id": "sec_ldap"},
            trace_id="audit-1",
        )
    )
    error(env.execute("read_doc_metadata", {"doc_id": env.docs["globex"]}, trace_id="audit-2"))
    trail = env.stack.api.server.config.app.state.services.proxy.audit
    records = {r.trace_id: r for r in trail.query(tenant="acme", tool=None, limit=500)}
    good, bad = records["audit-1"], records["audit-2"]
    assert (good.tool, good.outcome, good.user_id) == ("read_doc_section", "ok", "alice")
    assert good.tokens > 0 and good.bytes > 0 and json.loads(good.masked)["email"] == 1
    assert good.key_id and good.latency_ms > 0
    assert (bad.outcome, bad.tokens) == ("RESOURCE_NOT_FOUND", 0)
    assert "audit-1" in caplog.text and "read_doc_section" in caplog.text
    for secret in ("ldap.example.internal", "Sup3rS3cret", "jane.smith"):
        assert secret not in caplog.text
        assert all(secret not in str(vars(r)) for r in records.values())


# --- in-document search: the searches' admission and time limit --------------------------------


def test_local_search_takes_a_slot_of_the_callers_share_and_keeps_the_time_limit(
    env: Env,
) -> None:
    # The finding: doc_local_search ran outside the searches' admission (a tenant's flood of
    # them took threads and CPU from everyone) and without a deadline.
    from ldims.caller import Caller
    from ldims.errors import LdimsError

    def services(**limits: Any) -> Any:
        return build_services(env.stack.settings.model_copy(update=limits))

    acme, globex = Caller("acme"), Caller("globex")
    search = {"doc_id": env.docs["handbook"], "query": "backups"}
    tight = services(
        search_concurrency_per_tenant=1, search_concurrency_per_key=1, search_queue_seconds=0
    )
    try:
        admission = tight.documents.search.admission
        with admission.slot(acme):  # acme's one search runs (say, a REST search)
            with pytest.raises(LdimsError) as refused:
                tight.proxy.call(acme, "doc_local_search", search, "adm-1")
            assert (refused.value.code, refused.value.http_status) == ("TOO_MANY_REQUESTS", 429)
            # another tenant's share is its own
            other = {"doc_id": env.docs["globex"], "query": "plan"}
            assert tight.proxy.call(globex, "doc_local_search", other, "adm-2")["results"]
            assert admission.running == 1  # the proxy's slot went back
        assert tight.proxy.call(acme, "doc_local_search", search, "adm-3")["results"]
        assert admission.running == 0
    finally:
        tight.close()
    hasty = services(search_timeout_seconds=1e-9)
    try:
        with pytest.raises(LdimsError) as late:
            hasty.proxy.call(acme, "doc_local_search", search, "late-1")
        assert (late.value.code, late.value.http_status) == ("SEARCH_TIMEOUT", 504)
        assert hasty.documents.search.admission.running == 0
    finally:
        hasty.close()
