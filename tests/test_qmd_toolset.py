"""The qmd toolset through the official SDK client over real HTTP and stdio, and qmd's CLI:
every item of the seed's checklist (``001_5eeeaedc5ef6dae9.txt``), each default, and the
error cases — on a real folder collection processed by real workers (extract, index, embed
with the bundled USE model), for two tenants.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from indexer.calibration import DEFAULT_FLOOR
from ldims.caller import Caller
from ldims.catalog import repository
from runtime import build_services
from tests.conftest import RedisServer, Stack, Worker, make_settings, settings_env, wait_until

TENANT = "acme"
BIG_LINES = 400  # big.md: "Line N …" on line N + 2, over 10 KB


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def write_folder(root: Path) -> None:
    (root / "notes" / "sub").mkdir(parents=True)
    (root / "Meeting Notes").mkdir()
    (root / "alpha.md").write_text(
        "# Project Alpha\n\nAlpha is a kubernetes deployment tool.\nIt uses a database.\n"
    )
    (root / "plain.md").write_text("plain text about the database and redis\n")
    (root / "notes" / "h2.md").write_text(
        "## Second Level Title\n\nContent about kubernetes deployment.\n"
    )
    (root / "notes" / "sub" / "deep.md").write_text(
        "# Deep Note\n\nkubernetes database migration\n"
    )
    (root / "Meeting Notes" / "Team Sync 2025.md").write_text(
        "# Weekly Sync\n\nDiscussed the database migration.\n"
    )
    (root / "заметки.md").write_text("# Заметки\n\nБаза данных и кластер kubernetes.\n")
    big = ["# Big File", ""] + [
        f"Line {n} of the big file about zebras and giraffes." for n in range(1, BIG_LINES)
    ]
    big[150] = "Line 149 mentions the quokka exactly once."
    (root / "big.md").write_text("\n".join(big) + "\n")
    (root / "notes" / "skip.txt").write_text("not selected by the mask\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "secret.md").write_text("# Hidden\n\nkubernetes\n")
    (root / "link.md").symlink_to(root / "alpha.md")


class Env:
    """The stack, the folder, and a way to wait for the pipeline."""

    def __init__(self, stack: Stack, folder: Path, embed: Worker) -> None:
        self.stack, self.folder, self.embed = stack, folder, embed
        self.services = build_services(stack.settings)
        self.qmd = self.services.qmd
        self.caller = Caller(tenant=TENANT)
        self.url = stack.api.url

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
        assert ldims
        done = subprocess.run(
            [ldims, *args, "--tenant", TENANT],
            env=settings_env(self.stack.settings),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert done.returncode == 0, done.stderr
        return done

    def settled(self, vectors: bool = False) -> None:
        """Wait until every document of the tenant is final (and embedded)."""

        def done() -> bool:
            with self.services.catalog.session() as session:
                counts = repository.count_by_status(session, TENANT)
                pending = repository.pending_vectors(
                    session, self.services.documents.fingerprint or "", TENANT
                )[0]
            busy = counts["queued"] + counts["processing"]
            return busy == 0 and (not vectors or pending == 0)

        wait_until(done, 120, 0.2)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("qmd")
    folder = tmp / "docs"
    folder.mkdir()
    write_folder(folder)
    redis_url = shared_redis.url.rsplit("/", 1)[0] + "/9"
    settings = make_settings(tmp, redis_url, embedding_model="use")
    stack = Stack(settings, tmp).start()
    embed = Worker(settings, "embed", tmp / "embed.log")  # started by the vsearch test
    environment = Env(stack, folder, embed)
    try:
        yield environment
    finally:
        embed.stop()
        stack.stop()
        environment.services.close()


@pytest.fixture(scope="module")
def added(env: Env) -> Env:
    """The folder added as collection ``docs`` through the CLI, processed."""
    done = env.cli("collection", "add", str(env.folder), "--name", "docs")
    assert "Indexed: 7 new, 0 updated, 0 unchanged, 0 removed" in done.stdout
    env.cli("context", "add", "qmd://docs/notes", "Notes of the team")
    env.settled()
    return env


@contextlib.asynccontextmanager
async def http(url: str, tenant: str = TENANT, mode: str = "auto") -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"X-LDIMS-Tenant": tenant}, timeout=60) as client,
        Client(streamable_http_client(f"{url}/mcp", http_client=client), mode=mode) as mcp,  # type: ignore[arg-type]
    ):
        yield mcp


def call(url: str, name: str, arguments: dict[str, Any], tenant: str = TENANT) -> Any:
    async def go() -> Any:
        async with http(url, tenant) as client:
            return await client.call_tool(name, arguments)

    return run(go())


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content  # type: ignore[no-any-return]


def error_code(result: Any) -> str:
    assert result.is_error
    return result.structured_content["errorCode"]  # type: ignore[no-any-return]


def files(result: Any) -> list[str]:
    return [hit["file"] for hit in structured(result)["results"]]


# --- the surface ---------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_six_tools_the_template_and_the_prompt_with_the_seeds_defaults(
    added: Env, mode: str
) -> None:
    async def check() -> None:
        async with http(added.url, mode=mode) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert {"search", "vsearch", "query", "get", "multi_get", "status"} <= set(tools)
            # vsearch and query: the calibrated scale, default the server's floor (None).
            for name, min_score in (("search", 0), ("vsearch", None), ("query", None)):
                schema = tools[name].input_schema
                assert schema["required"] == ["query"]
                assert schema["properties"]["limit"]["default"] == 10
                assert schema["properties"]["minScore"]["default"] == min_score
                assert "collection" in schema["properties"]
                assert tools[name].output_schema is not None
                assert set(tools[name].output_schema["$defs"]["QmdHit"]["properties"]) >= {
                    "docid",
                    "file",
                    "title",
                    "score",
                    "context",
                    "snippet",
                }
            get = tools["get"].input_schema
            assert get["required"] == ["file"]
            assert get["properties"]["lineNumbers"]["default"] is False
            assert {"fromLine", "maxLines"} <= set(get["properties"])
            multi = tools["multi_get"].input_schema
            assert multi["properties"]["maxBytes"]["default"] == 10240
            assert multi["properties"]["lineNumbers"]["default"] is False
            assert tools["status"].input_schema.get("required", []) == []
            templates = (await client.list_resource_templates()).resource_templates
            qmd = [t for t in templates if t.uri_template == "qmd://{+path}"]
            assert qmd and qmd[0].mime_type == "text/markdown"
            listed = (await client.list_resources()).resources
            assert not [r for r in listed if str(r.uri).startswith("qmd://")]  # no list
            prompts = {p.name: p for p in (await client.list_prompts()).prompts}
            guide = await client.get_prompt("query", {})
            text = guide.messages[0].content.text  # type: ignore[union-attr]
            assert "query" in prompts and guide.messages[0].role == "user"
            for tool in ("search", "vsearch", "query", "get", "multi_get", "status"):
                assert f"**{tool}**" in text

    run(check())


# --- search, vsearch, query ----------------------------------------------------------------------
def test_search_answers_every_field_with_absolute_line_numbers_in_the_snippet(added: Env) -> None:
    result = call(added.url, "search", {"query": "quokka"})
    (hit,) = structured(result)["results"]
    assert hit["file"] == "docs/big.md" and hit["title"] == "Big File"
    sha = (added.folder / "big.md").read_bytes()
    assert hit["docid"] == "#" + hashlib.sha256(sha).hexdigest()[:6]
    assert hit["line"] == 151 and "151: Line 149 mentions the quokka" in hit["snippet"]
    assert hit["snippet"].startswith("150: ") and 0 < hit["score"] <= 1
    assert hit["context"] is None
    assert len(hit["snippet"]) < 400
    assert result.content[0].text.startswith('Found 1 result for "quokka":')
    notes = structured(call(added.url, "search", {"query": "kubernetes deployment"}))
    by_file = {h["file"]: h for h in notes["results"]}
    assert by_file["docs/notes/h2.md"]["context"] == "Notes of the team"
    assert by_file["docs/notes/h2.md"]["title"] == "Second Level Title"  # qmd's ## title


def test_search_wants_every_word_and_honours_limit_and_min_score(added: Env) -> None:
    both = files(call(added.url, "search", {"query": "database migration"}))
    assert set(both) == {"docs/notes/sub/deep.md", "docs/Meeting Notes/Team Sync 2025.md"}
    one = files(call(added.url, "search", {"query": "kubernetes", "limit": 1}))
    assert len(one) == 1
    scores = [
        h["score"] for h in structured(call(added.url, "search", {"query": "database"}))["results"]
    ]
    assert len(scores) == 4
    at_least = {"query": "database", "minScore": min(scores)}
    assert len(structured(call(added.url, "search", at_least))["results"]) == 4
    above = {"query": "database", "minScore": round(max(scores) + 0.01, 2)}
    assert structured(call(added.url, "search", above))["results"] == []
    none = call(added.url, "search", {"query": "nonexistentword"})
    assert structured(none)["results"] == []
    assert none.content[0].text == 'No results found for "nonexistentword"'


def test_an_unknown_collection_is_an_error_naming_the_real_ones(added: Env) -> None:
    for tool in ("search", "query"):
        result = call(added.url, tool, {"query": "kubernetes", "collection": "nope"})
        assert error_code(result) == "UNKNOWN_COLLECTION"
        assert result.structured_content["errorDetails"]["collections"] == ["docs"]
    scoped = files(call(added.url, "search", {"query": "kubernetes", "collection": "docs"}))
    assert "docs/alpha.md" in scoped


def test_vsearch_is_an_error_without_vectors_then_finds_by_meaning(env: Env, added: Env) -> None:
    # The embed worker has been stopped since the start: no vectors yet.
    assert error_code(call(added.url, "vsearch", {"query": "container orchestration"})) == (
        "NO_VECTORS"
    )
    status = structured(call(added.url, "status", {}))
    assert status["hasVectorIndex"] is False and status["needsEmbedding"] == 7
    env.embed.start()
    env.settled(vectors=True)
    status = structured(call(added.url, "status", {}))
    assert status["hasVectorIndex"] is True and status["needsEmbedding"] == 0
    found = structured(call(added.url, "vsearch", {"query": "giraffes and zebras grazing"}))
    assert found["results"][0]["file"] == "docs/big.md"
    # Calibrated scores: the default leaves out what falls below the server's floor.
    assert all(h["score"] >= DEFAULT_FLOOR for h in found["results"])
    loose = structured(
        call(added.url, "vsearch", {"query": "giraffes and zebras grazing", "minScore": 0})
    )
    assert len(loose["results"]) > len(found["results"])
    assert min(h["score"] for h in loose["results"]) < DEFAULT_FLOOR
    hybrid = call(added.url, "query", {"query": "kubernetes database migration", "explain": True})
    best = structured(hybrid)["results"][0]
    assert best["file"] == "docs/notes/sub/deep.md" and best["score"] > 0.5
    assert best["explain"]["model"] == "hybrid" and best["explain"]["fusedRank"] == 1
    assert (
        "explain" not in structured(call(added.url, "query", {"query": "kubernetes"}))["results"][0]
    )


# --- get -----------------------------------------------------------------------------------------
def resource_text(result: Any) -> str:
    assert not result.is_error, result.content
    (item,) = result.content
    assert item.type == "resource" and item.resource.mime_type == "text/markdown"
    return item.resource.text  # type: ignore[no-any-return]


def test_get_by_path_docid_uri_and_line_suffixes(added: Env) -> None:
    alpha = (added.folder / "alpha.md").read_text()
    whole = call(added.url, "get", {"file": "docs/alpha.md"})
    assert resource_text(whole) == alpha  # lineNumbers off by default (the seed's)
    assert whole.content[0].resource.uri == "qmd://docs/alpha.md"
    docid = "#" + hashlib.sha256(alpha.encode()).hexdigest()[:6]
    assert resource_text(call(added.url, "get", {"file": docid})) == alpha
    numbered = resource_text(call(added.url, "get", {"file": "alpha.md:3", "lineNumbers": True}))
    assert numbered.startswith("3: Alpha is a kubernetes deployment tool.\n4: ")
    window = resource_text(
        call(added.url, "get", {"file": "docs/big.md:150:2", "lineNumbers": True})
    )
    assert (
        window == "150: Line 148 of the big file about zebras and giraffes.\n"
        "151: Line 149 mentions the quokka exactly once."
    )
    explicit = resource_text(
        call(added.url, "get", {"file": "docs/big.md:10", "fromLine": 20, "maxLines": 1})
    )
    assert explicit == "Line 18 of the big file about zebras and giraffes."
    spaced = call(added.url, "get", {"file": "qmd://docs/Meeting%20Notes/Team%20Sync%202025.md"})
    assert "Discussed the database migration." in resource_text(spaced)
    assert spaced.content[0].resource.uri == "qmd://docs/Meeting%20Notes/Team%20Sync%202025.md"
    cyrillic = call(added.url, "get", {"file": "docs/заметки.md"})
    assert (
        cyrillic.content[0].resource.uri
        == "qmd://docs/%D0%B7%D0%B0%D0%BC%D0%B5%D1%82%D0%BA%D0%B8.md"
    )
    with_context = resource_text(call(added.url, "get", {"file": "notes/h2.md"}))
    assert with_context.startswith("<!-- Context: Notes of the team -->\n\n## Second Level Title")


def test_get_of_a_missing_file_suggests_similar_paths(added: Env) -> None:
    result = call(added.url, "get", {"file": "alpa.md"})
    assert error_code(result) == "RESOURCE_NOT_FOUND"
    details = result.structured_content["errorDetails"]
    assert details["similarFiles"][0] == "alpha.md"
    assert "Did you mean one of these?\n  - alpha.md" in result.structured_content["errorMessage"]
    for hostile in ("../../etc/passwd", "/etc/passwd", "docs/../../x.md", "qmd://docs/../alpha.md"):
        assert error_code(call(added.url, "get", {"file": hostile})) == "RESOURCE_NOT_FOUND"


# --- multi_get -----------------------------------------------------------------------------------
def test_multi_get_globs_lists_docids_skips_and_truncates(added: Env) -> None:
    result = call(added.url, "multi_get", {"pattern": "notes/**/*.md", "maxLines": 1})
    texts = [item.resource.text for item in result.content]
    assert texts == [
        "<!-- Context: Notes of the team -->\n\n## Second Level Title\n\n"
        "[... truncated 3 more lines]",
        "<!-- Context: Notes of the team -->\n\n# Deep Note\n\n[... truncated 3 more lines]",
    ]
    docid = "#" + hashlib.sha256((added.folder / "plain.md").read_bytes()).hexdigest()[:6]
    listed = call(added.url, "multi_get", {"pattern": f"big.md, alpha.md, {docid}, missing.md"})
    kinds = [(item.type, getattr(item, "text", "")[:40]) for item in listed.content]
    assert kinds[0] == ("text", "Errors:\nFile not found: missing.md")
    size = round(len((added.folder / "big.md").read_text()) / 1024)
    assert listed.content[1].text == (
        f"[SKIPPED: docs/big.md - File too large ({size}KB > 10KB). Use 'get' with "
        'file="docs/big.md" to retrieve.]'
    )
    assert [item.resource.uri for item in listed.content[2:]] == [
        "qmd://docs/alpha.md",
        "qmd://docs/plain.md",
    ]
    bigger = call(
        added.url, "multi_get", {"pattern": "big.md", "maxBytes": 100000, "lineNumbers": True}
    )
    assert bigger.content[0].resource.text.startswith("1: # Big File\n2: \n3: Line 1 ")
    nothing = call(added.url, "multi_get", {"pattern": "nomatch*.md"})
    assert (
        not nothing.is_error
        and nothing.content[0].text == "Errors:\nNo files matched pattern: nomatch*.md"
    )
    assert error_code(call(added.url, "multi_get", {"pattern": ","})) == "RESOURCE_NOT_FOUND"


# --- the resource --------------------------------------------------------------------------------
def test_the_resource_decodes_once_or_twice_falls_back_to_a_suffix_and_refuses_dot_dot(
    added: Env,
) -> None:
    async def check() -> None:
        async with http(added.url) as client:
            for uri in (
                "qmd://docs/Meeting%20Notes/Team%20Sync%202025.md",
                "qmd://docs/Meeting%2520Notes/Team%2520Sync%25202025.md",  # encoded twice
                "qmd://docs/Meeting Notes/Team Sync 2025.md",
                "qmd://Team%20Sync%202025.md",  # suffix
            ):
                read = await client.read_resource(uri)
                assert read.contents[0].text.startswith("1: # Weekly Sync\n2: \n3: Discussed"), uri
            with pytest.raises(MCPError) as caught:
                await client.read_resource("qmd://docs/../alpha.md")
            assert caught.value.data["errorCode"] == "INVALID_INPUT"
            with pytest.raises(MCPError) as caught:
                await client.read_resource("qmd://docs/none.md")
            assert caught.value.data["errorCode"] == "RESOURCE_NOT_FOUND"

    run(check())


# --- the other tenant ----------------------------------------------------------------------------
def test_another_tenant_sees_none_of_it(added: Env) -> None:
    assert (
        structured(call(added.url, "search", {"query": "kubernetes"}, tenant="rival"))["results"]
        == []
    )
    assert error_code(call(added.url, "get", {"file": "docs/alpha.md"}, tenant="rival")) == (
        "RESOURCE_NOT_FOUND"
    )
    status = structured(call(added.url, "status", {}, tenant="rival"))
    assert status == {
        "totalDocuments": 0,
        "needsEmbedding": 0,
        "hasVectorIndex": False,
        "collections": [],
        "embeddingBacklog": {  # its own: nothing of acme's backlog or rate
            "documents": 0,
            "chunks": 0,
            "failedDocuments": 0,
            "chunksPerSecond": None,
            "etaSeconds": 0.0,
            "summary": "0 documents (0 chunks) to embed; no recent rate; done in: nothing to "
            "do; 0 documents with failed chunks",
        },
    }
    result = call(
        added.url, "search", {"query": "kubernetes", "collection": "docs"}, tenant="rival"
    )
    assert error_code(result) == "UNKNOWN_COLLECTION"
    assert result.structured_content["errorDetails"]["collections"] == []


# --- stdio ---------------------------------------------------------------------------------------
def test_stdio_serves_the_same_tools(added: Env) -> None:
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims
    parameters = StdioServerParameters(
        command=ldims, args=["mcp", "--tenant", TENANT], env=settings_env(added.stack.settings)
    )

    over_http = call(added.url, "search", {"query": "kubernetes"})

    async def check() -> None:
        async with Client(parameters) as client:
            over_stdio = await client.call_tool("search", {"query": "kubernetes"})
            assert structured(over_stdio) == structured(over_http)
            got = await client.call_tool("get", {"file": "alpha.md", "lineNumbers": True})
            assert resource_text(got).startswith("1: # Project Alpha")
            assert structured(await client.call_tool("status", {}))["totalDocuments"] == 7

    run(check())


def test_the_cli_prints_what_the_tools_return(added: Env) -> None:
    found = json.loads(added.cli("search", "quokka", "--json").stdout)
    assert found[0]["file"] == "docs/big.md" and found[0]["line"] == 151
    got = added.cli("get", "docs/big.md:151:1").stdout
    assert "151: Line 149 mentions the quokka exactly once." in got
    contexts = added.cli("context", "list").stdout
    assert "notes" in contexts and "Notes of the team" in contexts


# --- the library's life: update, edit, delete, rename, remove ------------------------------------
def test_status_follows_update_edit_delete_rename_and_remove(added: Env) -> None:
    folder = added.folder
    status = structured(call(added.url, "status", {}))
    assert status["totalDocuments"] == 7
    (docs,) = status["collections"]
    assert (docs["name"], docs["path"], docs["pattern"], docs["documents"]) == (
        "docs",
        str(folder),
        "**/*.md",
        7,
    )
    assert docs["lastUpdated"].endswith("Z")
    unchanged = added.cli("update").stdout
    assert "Indexed: 0 new, 0 updated, 7 unchanged, 0 removed" in unchanged
    (folder / "plain.md").write_text("plain text about the database and postgres\n")
    (folder / "gamma.md").write_text("# Gamma\n\nnew file about kubernetes\n")
    (folder / "alpha.md").unlink()
    changed = added.cli("update").stdout
    assert "Indexed: 1 new, 1 updated, 5 unchanged, 1 removed" in changed
    added.settled()
    assert structured(call(added.url, "status", {}))["totalDocuments"] == 7
    assert "docs/gamma.md" in files(call(added.url, "search", {"query": "kubernetes"}))
    assert files(call(added.url, "search", {"query": "postgres"})) == ["docs/plain.md"]
    assert files(call(added.url, "search", {"query": "redis"})) == []
    assert error_code(call(added.url, "get", {"file": "docs/alpha.md"})) == "RESOURCE_NOT_FOUND"
    added.cli("collection", "rename", "docs", "kb")
    added.settled()
    renamed = structured(call(added.url, "status", {}))["collections"]
    assert [(c["name"], c["documents"]) for c in renamed] == [("kb", 7)]
    assert "kb/gamma.md" in files(
        call(added.url, "search", {"query": "kubernetes", "collection": "kb"})
    )
    listed = added.cli("collection", "list").stdout
    assert "kb (qmd://kb/)" in listed and "Files:    7" in listed
    removed = added.cli("collection", "remove", "kb").stdout
    assert "Deleted 7 documents" in removed
    assert structured(call(added.url, "status", {}))["totalDocuments"] == 0
    missing = added.cli("collection", "show", "kb", check=False)
    assert missing.returncode == 1 and "Collection not found: kb" in missing.stderr


def test_update_watch_follows_the_folder(added: Env, tmp_path: Path) -> None:
    folder = tmp_path / "watched"
    folder.mkdir()
    (folder / "first.md").write_text("# First\n\nthe first note about ocelots\n")
    added.cli("collection", "add", str(folder), "--name", "watched")
    ldims = shutil.which("ldims", path=str(Path(sys.executable).parent))
    assert ldims
    watcher = subprocess.Popen(
        [ldims, "update", "--watch", "-c", "watched", "--tenant", TENANT],
        env=settings_env(added.stack.settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # A file made after the first scan, before the watcher is live, is not lost: the
        # watcher scans once more when it is live, and only then says "Watching".
        wait_until(lambda: "All collections updated" in _peek(watcher), 30)
        (folder / "early.md").write_text("# Early\n\nan early note about ocelots\n")
        wait_until(lambda: "Watching 1 folder" in _peek(watcher), 30)
        added.settled()
        assert sorted(files(call(added.url, "search", {"query": "ocelots"}))) == [
            "watched/early.md",
            "watched/first.md",
        ]
        (folder / "second.md").write_text("# Second\n\nanother note about ocelots\n")
        (folder / "first.md").unlink()

        def followed() -> bool:
            found = files(call(added.url, "search", {"query": "ocelots"}))
            return sorted(found) == ["watched/early.md", "watched/second.md"]

        try:
            wait_until(followed, 60, 0.5)
        except AssertionError:
            found = files(call(added.url, "search", {"query": "ocelots"}))
            printed = _peek(watcher)
            raise AssertionError(f"search finds {found}; the watcher printed:\n{printed}") from None
        printed = _peek(watcher)
    finally:
        watcher.terminate()
        watcher.wait(10)
        if watcher.stdout is not None:
            watcher.stdout.close()
    # One update per change the watcher saw (the add and the delete may come as one or two).
    reports = [line for line in printed.splitlines() if line.startswith("watched: Indexed:")]
    assert reports and "1 removed" in reports[-1]
    added.cli("collection", "remove", "watched")


_OUTPUT: dict[int, str] = {}


def _peek(process: subprocess.Popen[str]) -> str:
    """What ``process`` printed so far (read without blocking)."""
    assert process.stdout is not None
    text = _OUTPUT.get(process.pid, "")
    while select.select([process.stdout], [], [], 0)[0]:
        chunk = os.read(process.stdout.fileno(), 65536).decode(errors="replace")
        if not chunk:
            break
        text += chunk
    _OUTPUT[process.pid] = text
    return text
