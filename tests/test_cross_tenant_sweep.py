"""The cross-tenant sweep: every REST route, and every MCP tool, resource template and prompt of
every toolset the server lists, asked by a caller of tenant *globex* for anything of tenant
*acme*, answers exactly as for a name that does not exist, and no answer to globex holds acme's
text, ids, paths or counts.

Real parts: ``ldims`` API and workers on Redis, the catalog, API keys of two tenants (so the key
decides the tenant), the official MCP client over HTTP. The sweep's tables must name every
route and everything the MCP server lists: a new one fails here until it has its probe.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ldims.documents import sign
from runtime import build_services
from tests.conftest import RedisServer, Stack, make_settings, settings_env

SECRET_WORD = "zqvelmorantic"  # only acme's documents hold it
ACME_TEXT = (
    f"# Acme merger plan\n\n## Terms\n\nThe {SECRET_WORD} merger closes in March.\n\n"
    "## People\n\nOlga Petrova signs for acme.\n"
)
GLOBEX_TEXT = "# Globex notes\n\n## Plans\n\nGlobex plans a picnic.\n"
UNKNOWN = "no-such-document-0000"
WEBHOOK_SECRETS = {"acme": "acme-webhook-secret-123", "globex": "globex-webhook-secret-456"}


class Env:
    def __init__(self, stack: Stack, folder: Path) -> None:
        self.stack = stack
        self.folder = folder
        self.services = build_services(stack.settings)
        ring = self.services.keys
        scopes = ["read", "ingest", "admin", "guide"]
        # initech uploads acme's very bytes (a duplicate must stay within its tenant); globex
        # asks for acme's things and holds nothing like them.
        self.keys = {
            tenant: ring.create(tenant, scopes).key for tenant in ("acme", "globex", "initech")
        }
        self.acme: dict[str, str] = {}

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def rest(self, tenant: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.stack.client.request(method, path, headers=self.headers(tenant), **kwargs)

    def upload(self, tenant: str, name: str, data: bytes) -> str:
        response = self.rest(tenant, "POST", "/api/documents", files={"file": (name, data)})
        assert response.status_code == 202, response.text
        document_id: str = response.json()["documentId"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            body = self.rest(tenant, "GET", f"/api/documents/{document_id}").json()
            if body["status"] in ("completed", "failed"):
                assert body["status"] == "completed", body
                return document_id
            time.sleep(0.1)
        raise AssertionError(f"{document_id} not processed\n{self.stack.log_tail()}")

    def cli(self, *args: str) -> str:
        ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
        assert ldims
        done = subprocess.run(
            [ldims, *args],
            env=settings_env(self.stack.settings),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def mcp(self, tenant: str, work: Any) -> Any:
        async def go() -> Any:
            async with (
                httpx2.AsyncClient(headers=self.headers(tenant), timeout=60) as http,
                Client(
                    streamable_http_client(f"{self.stack.api.url}/mcp", http_client=http)  # type: ignore[arg-type]
                ) as client,
            ):
                return await work(client)

        return asyncio.run(go())


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("sweep")
    folder = tmp / "acme-folder"
    folder.mkdir()
    (folder / "merger.md").write_text(ACME_TEXT)
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/12",
        mcp_write_tools=True,
        webhook_secrets=WEBHOOK_SECRETS,
    )
    stack = Stack(settings, tmp).start()
    environment = Env(stack, folder)
    try:
        environment.acme["doc"] = environment.upload("acme", "merger.md", ACME_TEXT.encode())
        environment.upload("globex", "notes.md", GLOBEX_TEXT.encode())
        environment.cli("collection", "add", str(folder), "--name", "vault", "--tenant", "acme")
        yield environment
    finally:
        stack.stop()
        environment.services.close()


def leaks(env: Env, answer: Any, *asked: Any) -> list[str]:
    """What of acme's an answer to globex shows, beyond what globex asked (``asked``: the
    arguments, which an answer may repeat)."""
    text = json.dumps(answer, default=str, ensure_ascii=False)
    for value in asked:
        for said in value.values() if isinstance(value, dict) else [value]:
            if isinstance(said, str) and said:
                text = text.replace(said, "")
    words = (SECRET_WORD, "merger", "Merger", "vault", "Olga", "Petrova", "March")
    found = [word for word in words if word in text]
    return found + [f"id {value}" for value in env.acme.values() if value in text]


def same_as_unknown(acme_answer: Any, unknown_answer: Any, names: tuple[str, str]) -> None:
    """The two answers are equal once the name asked for is taken out of each."""

    def masked(answer: Any, name: str) -> str:
        return json.dumps(answer, default=str, sort_keys=True).replace(name, "<NAME>")

    assert masked(acme_answer, names[0]) == masked(unknown_answer, names[1])


# --- REST --------------------------------------------------------------------------------------


def rest_answer(response: httpx.Response) -> tuple[int, Any]:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    if isinstance(body, dict):
        body.pop("traceId", None)
        body.pop("requestId", None)
    return response.status_code, body


REST_PROBES = {
    ("GET", "/api/documents/{document_id}"): "/api/documents/{id}",
    ("GET", "/api/documents/{document_id}/content"): "/api/documents/{id}/content",
    ("GET", "/api/documents/{document_id}/lines/{lines}"): "/api/documents/{id}/lines/1-3",
    ("DELETE", "/api/documents/{document_id}"): "/api/documents/{id}",
}
# Routes without another tenant's name in them, each checked below in its own way.
REST_OWN = {
    ("POST", "/api/documents"),
    ("POST", "/api/documents/bulk"),
    ("GET", "/api/documents"),
    ("GET", "/api/search"),
    ("GET", "/health"),
    ("POST", "/internal/mcp/execute"),
    ("POST", "/api/webhooks/ingest"),
}


def test_the_sweep_names_every_rest_route(env: Env) -> None:
    from runtime import create_app

    schema = create_app(env.stack.settings).openapi()
    routes = {(method.upper(), path) for path, item in schema["paths"].items() for method in item}
    assert routes == set(REST_PROBES) | REST_OWN


@pytest.mark.parametrize(("method", "path"), sorted(REST_PROBES))
def test_a_rest_route_answers_for_acmes_document_as_for_none(
    env: Env, method: str, path: str
) -> None:
    acme_id = env.acme["doc"]
    url = REST_PROBES[(method, path)]
    asked = rest_answer(env.rest("globex", method, url.format(id=acme_id)))
    unknown = rest_answer(env.rest("globex", method, url.format(id=UNKNOWN)))
    assert asked[0] == 404
    same_as_unknown(asked, unknown, (acme_id, UNKNOWN))
    # Acme's document is untouched (the DELETE above did nothing).
    assert env.rest("acme", "GET", f"/api/documents/{acme_id}").json()["status"] == "completed"


def test_the_routes_of_the_callers_own_never_show_acme(env: Env) -> None:
    listed = env.rest("globex", "GET", "/api/documents", params={"limit": 100}).json()
    assert listed["total"] == 1 and not leaks(env, listed)
    for mode in ("keyword", "exact", "semantic"):
        found = env.rest(
            "globex", "GET", "/api/search", params={"query": SECRET_WORD, "searchMode": mode}
        )
        assert found.status_code in (200, 422), found.text
        assert not leaks(env, found.json(), SECRET_WORD), mode
    health = env.stack.client.get("/health").json()
    assert "chunks" not in json.dumps(health)  # no key needed: no size of anybody's holdings
    # Acme's very bytes, uploaded by a third tenant: its own new document, not acme's duplicate.
    same = env.rest(
        "initech", "POST", "/api/documents", files={"file": ("merger.md", ACME_TEXT.encode())}
    )
    assert same.status_code == 202 and not same.json()["duplicate"], same.text
    assert same.json()["documentId"] != env.acme["doc"]
    bulk = env.rest(
        "initech", "POST", "/api/documents/bulk", files=[("file", ("m2.md", ACME_TEXT.encode()))]
    )
    assert bulk.status_code in (200, 202) and env.acme["doc"] not in bulk.text, bulk.text
    assert [item["duplicate"] for item in bulk.json()["documents"]] == [True]  # initech's own
    # The proxy's envelope endpoint: acme's document as an unknown one.
    envelope = {"tool_name": "read_doc_metadata", "trace_id": "t-1"}
    asked = env.rest(
        "globex",
        "POST",
        "/internal/mcp/execute",
        json={**envelope, "arguments": {"doc_id": env.acme["doc"]}},
    )
    unknown = env.rest(
        "globex",
        "POST",
        "/internal/mcp/execute",
        json={**envelope, "arguments": {"doc_id": UNKNOWN}},
    )
    assert asked.status_code == 404
    same_as_unknown(rest_answer(asked), rest_answer(unknown), (env.acme["doc"], UNKNOWN))


def test_a_webhook_signed_by_globex_cannot_touch_acmes_document(env: Env) -> None:
    def post(event: dict[str, Any]) -> httpx.Response:
        body = json.dumps(event).encode()
        stamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "X-LDIMS-Timestamp": stamp,
            "X-LDIMS-Signature": sign(WEBHOOK_SECRETS["globex"], stamp, body),
            "X-LDIMS-Tenant": "globex",
        }
        return env.stack.client.post("/api/webhooks/ingest", content=body, headers=headers)

    def delete(event_id: str, document_id: str) -> tuple[int, Any]:
        event = {"id": event_id, "type": "document.deleted", "document": {"id": document_id}}
        return rest_answer(post(event))

    # The event ids carry the name too, so that the answers differ by the name alone.
    asked = delete(f"evt-{env.acme['doc']}", env.acme["doc"])
    unknown = delete(f"evt-{UNKNOWN}", UNKNOWN)
    same_as_unknown(asked, unknown, (env.acme["doc"], UNKNOWN))  # deleting is idempotent
    assert env.rest("acme", "GET", f"/api/documents/{env.acme['doc']}").status_code == 200


# --- MCP ---------------------------------------------------------------------------------------


def tool_answer(result: Any) -> dict[str, Any]:
    return {
        "isError": result.is_error,
        "structured": result.structured_content,
        "text": [getattr(item, "text", None) for item in result.content],
    }


def acme_names(env: Env) -> dict[str, str]:
    """What of acme's a probe names, and a name of the same kind that does not exist."""
    return {
        "document": env.acme["doc"],
        "path": "vault/merger.md",
        "docid": "#" + env.acme["docid"],
        "session": env.acme["session"],
    }


UNKNOWN_NAMES = {
    "document": UNKNOWN,
    "path": "vault/nothing-here.md",
    "docid": "#000000",
    "session": "no-such-session-0000",
}
# Each tool that takes a name of another tenant's: its arguments, ``{}`` standing for the name.
TOOL_PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "getDocumentStatus": ("document", {"documentId": "{}"}),
    "deleteDocument": ("document", {"documentId": "{}"}),
    "get": ("path", {"file": "{}"}),
    "multi_get": ("path", {"pattern": "{}"}),
    "navigate_session": ("session", {"session_id": "{}", "selected_option_id": "opt_1"}),
    "read_doc_section": ("document", {"doc_id": "{}", "section_id": "sec_terms"}),
    "read_doc_pages": ("document", {"doc_id": "{}", "page_start": 1, "page_end": 1}),
    "read_doc_metadata": ("document", {"doc_id": "{}"}),
    "doc_local_search": ("document", {"doc_id": "{}", "query": SECRET_WORD}),
}
# Tools that name nothing of anybody's: what globex gets must hold nothing of acme's.
TOOL_OWN: dict[str, dict[str, Any]] = {
    "searchDocuments": {"query": SECRET_WORD},
    "search": {"query": SECRET_WORD},
    "vsearch": {"query": f"{SECRET_WORD} merger"},
    "query": {"query": f"{SECRET_WORD} merger"},
    "status": {},
    "initiate_session": {"user_query": f"{SECRET_WORD} merger"},
    "list_available_tools": {},
    "ingestDocument": {"content": ACME_TEXT, "name": "copy.md"},
}
RESOURCE_PROBES = {
    "ldims://docs/{document_id}/extracted_content": "document",
    "ldims://docs/{document_id}/pages/{range}": "document",
    "ldims://docs/{document_id}/lines/{range}": "document",
    "qmd://{+path}": "path",
}


@pytest.fixture(scope="module")
def acme_session(env: Env) -> Env:
    """Acme's qmd docid and a guide session of acme's, made through MCP."""

    async def work(client: Client) -> None:
        found = await client.call_tool("search", {"query": SECRET_WORD})
        env.acme["docid"] = found.structured_content["results"][0]["docid"].lstrip("#")
        started = await client.call_tool("initiate_session", {"user_query": "password reset"})
        assert not started.is_error, started.content
        env.acme["session"] = started.structured_content["session_id"]

    env.mcp("acme", work)
    return env


def test_the_sweep_names_every_tool_resource_and_prompt(acme_session: Env) -> None:
    async def work(client: Client) -> tuple[set[str], set[str], set[str], list[str]]:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        prompts = {prompt.name for prompt in (await client.list_prompts()).prompts}
        listed = [str(resource.uri) for resource in (await client.list_resources()).resources]
        return tools, templates, prompts, listed

    tools, templates, prompts, listed = acme_session.mcp("globex", work)
    assert tools == set(TOOL_PROBES) | set(TOOL_OWN)
    assert templates == set(RESOURCE_PROBES)
    assert prompts == {"query"}
    assert not leaks(acme_session, listed)


@dataclass(frozen=True)
class Probe:
    """A tool's probe: the arguments naming acme's thing, or a made-up one of its kind."""

    tool: str
    names: tuple[str, str]  # acme's, made up

    def arguments(self, name: str) -> dict[str, Any]:
        template = TOOL_PROBES[self.tool][1]
        return {key: name if value == "{}" else value for key, value in template.items()}

    def answers(self, env: Env, tenant: str) -> tuple[Any, Any]:
        """What ``tenant`` is answered for acme's name, and for the made-up one."""

        async def work(client: Client) -> tuple[Any, Any]:
            asked = await client.call_tool(self.tool, self.arguments(self.names[0]))
            unknown = await client.call_tool(self.tool, self.arguments(self.names[1]))
            return tool_answer(asked), tool_answer(unknown)

        return env.mcp(tenant, work)  # type: ignore[no-any-return]


def probe_of(env: Env, tool: str) -> Probe:
    kind = TOOL_PROBES[tool][0]
    return Probe(tool, (acme_names(env)[kind], UNKNOWN_NAMES[kind]))


@pytest.mark.parametrize("tool", sorted(TOOL_PROBES))
def test_a_tool_answers_for_acmes_name_as_for_none(acme_session: Env, tool: str) -> None:
    probe = probe_of(acme_session, tool)
    asked, unknown = probe.answers(acme_session, "globex")
    assert not leaks(acme_session, asked, probe.arguments(probe.names[0]))
    same_as_unknown(asked, unknown, probe.names)
    status = acme_session.rest("acme", "GET", f"/api/documents/{acme_session.acme['doc']}")
    assert status.json()["status"] == "completed"  # deleteDocument did nothing


@pytest.mark.parametrize("tool", sorted(set(TOOL_PROBES) - {"deleteDocument"}))
def test_the_probes_reach_acmes_things_for_acme(acme_session: Env, tool: str) -> None:
    # The control: asked by acme, the same probe answers otherwise than for a made-up name,
    # so the sweep's equality above is not two refusals of a probe that reaches nothing.
    probe = probe_of(acme_session, tool)
    asked, unknown = probe.answers(acme_session, "acme")
    names = probe.names
    masked = [
        json.dumps(a, sort_keys=True).replace(n, "<NAME>")
        for a, n in zip((asked, unknown), names, strict=True)
    ]
    assert masked[0] != masked[1]


@pytest.mark.parametrize("tool", sorted(TOOL_OWN))
def test_a_tool_of_the_callers_own_never_shows_acme(acme_session: Env, tool: str) -> None:
    async def work(client: Client) -> Any:
        return tool_answer(await client.call_tool(tool, TOOL_OWN[tool]))

    if tool == "ingestDocument":
        # Acme's text, by a third tenant: its own document, never acme's as a duplicate.
        answer = acme_session.mcp("initech", work)
        assert not answer["isError"] and acme_session.acme["doc"] not in json.dumps(answer)
        return
    answer = acme_session.mcp("globex", work)
    assert not leaks(acme_session, answer, TOOL_OWN[tool]), answer


@pytest.mark.parametrize("template", sorted(RESOURCE_PROBES))
def test_a_resource_answers_for_acmes_name_as_for_none(acme_session: Env, template: str) -> None:
    kind = RESOURCE_PROBES[template]
    names = (acme_names(acme_session)[kind], UNKNOWN_NAMES[kind])

    def uri(name: str) -> str:
        return (
            template.replace("{document_id}", name).replace("{range}", "1").replace("{+path}", name)
        )

    async def read(client: Client, name: str) -> dict[str, Any]:
        try:
            result = await client.read_resource(uri(name))
        except Exception as exc:  # a JSON-RPC error: its code and message
            error = getattr(exc, "error", None)
            return {"code": getattr(error, "code", None), "message": re.sub(r"\s+", " ", str(exc))}
        return {"contents": [getattr(c, "text", None) for c in result.contents]}

    async def work(client: Client) -> tuple[Any, Any]:
        return await read(client, names[0]), await read(client, names[1])

    asked, unknown = acme_session.mcp("globex", work)
    assert "code" in asked and not leaks(acme_session, asked, uri(names[0]), names[0])
    same_as_unknown(asked, unknown, names)


def test_the_prompt_is_the_same_for_both_tenants(acme_session: Env) -> None:
    async def work(client: Client) -> Any:
        prompt = await client.get_prompt("query")
        return [getattr(message.content, "text", None) for message in prompt.messages]

    assert acme_session.mcp("globex", work) == acme_session.mcp("acme", work)
