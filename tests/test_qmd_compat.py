"""LDIMS's qmd toolset against the real qmd 2.8.3 (npm ``@tobilu/qmd`` on Node 22) on the same
folder of Markdown files: nested folders, a name with spaces, non-ASCII names, a file over
10 KB and a context; 300 Cranfield abstracts for the searches.

Compared: the docids; ``get`` texts and line numbers (``:line``, ``fromLine``/``maxLines``);
``multi_get``'s selection, skips and truncation notices; ``status`` counts; and ``search``,
whose top-3 files must agree with qmd's BM25 on at least 80 % of the queries (the agreement is
printed). Deliberate differences from qmd 2.8.3, each checked as such:

- the seed's six tools (qmd 2.8.3 has ``query``, ``get``, ``multi_get``, ``status``): qmd's
  BM25 ``search`` is its CLI's, ours is an MCP tool;
- ``get``/``multi_get`` default to ``lineNumbers: false`` and ``maxBytes`` 10240 (the
  seed's); the comparisons pass both explicitly;
- the skip notice names ``get`` (qmd 2.8.3 still says ``qmd_get``, a tool it no longer has);
- an unknown collection is an error listing the real ones (qmd's MCP answers nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ldims.catalog import repository
from runtime import build_services
from tests.conftest import CORPUS, RedisServer, Stack, make_settings, wait_until
from tests.qmd_reference import QmdReference

TENANT = "acme"
NAME = "kb"
ABSTRACTS = 300
QUERIES = 60  # Cranfield queries turned into two-word searches (see search_queries)
AGREEMENT_TARGET = 0.8
_WORD = re.compile(r"[a-z]+")
_STOP = (
    "what which when where have been there their them they does done with from that this "
    "these those must were made used using into such some any also only about over under upon "
    "than then available known information work works paper papers problem problems results "
    "method methods effect effects case cases obtained given should would could more most "
    "very"
)
_COMMON = frozenset(_STOP.split(" "))


def build_folder(root: Path) -> None:
    abstracts = [
        json.loads(line)
        for line in (CORPUS / "ir" / "cranfield" / "corpus.jsonl").read_text().splitlines()
    ][:ABSTRACTS]
    for abstract in abstracts:
        number = int(abstract["id"])
        folder = root / "cranfield" / f"part {number // 100}"
        folder.mkdir(parents=True, exist_ok=True)
        body = abstract["text"].replace(" . ", " .\n")
        (folder / f"{number:04d}.md").write_text(f"# {abstract['title']}\n\n{body}\n")
    (root / "Meeting Notes").mkdir()
    (root / "Meeting Notes" / "Team Sync 2025.md").write_text(
        "# Weekly Sync\n\nDiscussed the wind tunnel schedule.\n\n## Actions\n\n- book the tunnel\n"
    )
    (root / "заметки").mkdir()
    (root / "заметки" / "база данных.md").write_text(
        "# Заметки о базе\n\nАэродинамическая труба и пограничный слой.\n"
    )
    (root / "中文笔记.md").write_text("## 风洞\n\n风洞试验的记录。\n")
    lines = ["# Long Log", ""] + [
        f"{n}: the boundary layer measurement number {n} was logged." for n in range(1, 300)
    ]
    (root / "logs").mkdir()
    (root / "logs" / "long log.md").write_text("\n".join(lines) + "\n")
    (root / "README.md").write_text("plain readme without a heading\nsecond line\n")


def search_queries() -> list[str]:
    """The first two uncommon words (4+ letters) of each of the first Cranfield queries."""
    rows = (CORPUS / "ir" / "cranfield" / "queries.jsonl").read_text().splitlines()[:QUERIES]
    queries = []
    for row in rows:
        words = [w for w in _WORD.findall(json.loads(row)["text"]) if len(w) > 3]
        kept = [w for w in words if w not in _COMMON]
        if len(kept) >= 2:
            queries.append(" ".join(kept[:2]))
    return queries


class Both:
    def __init__(self, stack: Stack, qmd: QmdReference, folder: Path) -> None:
        self.stack, self.qmd, self.folder = stack, qmd, folder
        self.url = stack.api.url


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Both]:
    tmp = tmp_path_factory.mktemp("compat")
    folder = tmp / "docs"
    folder.mkdir()
    build_folder(folder)
    qmd = QmdReference(tmp / "qmd")
    qmd.collection_add(folder, NAME)
    qmd.context_add(f"qmd://{NAME}/cranfield", "Cranfield aeronautics abstracts")
    redis_url = shared_redis.url.rsplit("/", 1)[0] + "/10"
    # Embedding on, no embed worker: nothing has vectors, as in qmd without models.
    settings = make_settings(tmp, redis_url, embedding_model="use")
    stack = Stack(settings, tmp).start()
    services = build_services(settings)
    try:
        caller_qmd = services.qmd
        from ldims.caller import Caller

        caller = Caller(tenant=TENANT)
        caller_qmd.library.add(caller, str(folder), NAME)
        caller_qmd.library.add_context(
            caller, f"qmd://{NAME}/cranfield", "Cranfield aeronautics abstracts"
        )

        def settled() -> bool:
            with services.catalog.session() as session:
                counts = repository.count_by_status(session, TENANT)
            return counts["queued"] + counts["processing"] == 0

        wait_until(settled, 180, 0.2)
        yield Both(stack, qmd, folder)
    finally:
        services.close()
        stack.stop()


@contextlib.asynccontextmanager
async def ldims_session(url: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"X-LDIMS-Tenant": TENANT}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,  # type: ignore[arg-type]
    ):
        yield client


def ldims_calls(url: str, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def go() -> list[Any]:
        async with ldims_session(url) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(go())


def texts(result: Any) -> list[tuple[str, str, str]]:
    """(type, uri, text) of each content item (a resource's text, or the text)."""
    out = []
    for item in result.content:
        if item.type == "resource":
            out.append(("resource", item.resource.uri, item.resource.text))
        else:
            out.append(("text", "", item.text))
    return out


def markdown_files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.md"))


# --- docids and get ----------------------------------------------------------------------------
def test_the_same_docids(both: Both) -> None:
    rows = json.loads(
        both.qmd.run("multi-get", "**/*.md", "--format", "json", "--max-bytes", "1000000").stdout
    )
    docids = {row["file"].removeprefix(f"qmd://{NAME}/"): row["docid"] for row in rows}
    assert sorted(docids) == markdown_files(both.folder)
    calls = [("get", {"file": docid}) for docid in docids.values()]
    answers = ldims_calls(both.url, calls)
    references = both.qmd.mcp_call(calls)  # one qmd server for all (a start costs seconds)
    for (path, docid), answer, reference in zip(docids.items(), answers, references, strict=True):
        assert not answer.is_error, (path, docid, answer.content)
        assert answer.content[0].resource.uri == reference.content[0].resource.uri


GETS: list[dict[str, Any]] = [
    {"file": f"{NAME}/cranfield/part 0/0001.md"},
    {"file": f"{NAME}/cranfield/part 0/0001.md:3"},
    {"file": f"{NAME}/cranfield/part 0/0001.md:3:2"},
    {"file": f"{NAME}/logs/long log.md", "fromLine": 100, "maxLines": 5},
    {"file": f"{NAME}/logs/long log.md:250"},
    {"file": "Meeting Notes/Team Sync 2025.md"},
    {"file": f"{NAME}/заметки/база данных.md"},
    {"file": f"{NAME}/中文笔记.md", "maxLines": 1},
    {"file": "README.md"},
]


@pytest.mark.parametrize("line_numbers", [True, False])
def test_get_gives_the_same_texts_and_line_numbers(both: Both, line_numbers: bool) -> None:
    calls = [("get", {**arguments, "lineNumbers": line_numbers}) for arguments in GETS]
    ours = ldims_calls(both.url, calls)
    theirs = both.qmd.mcp_call(calls)
    for arguments, mine, reference in zip(GETS, ours, theirs, strict=True):
        assert texts(mine) == texts(reference), arguments


# --- multi_get ---------------------------------------------------------------------------------
MULTI_GETS: list[dict[str, Any]] = [
    {"pattern": "cranfield/part 0/000*.md", "maxLines": 2},
    {"pattern": f"{NAME}/logs/*.md"},  # over 10 KB: skipped
    {"pattern": "README.md, Meeting Notes/Team Sync 2025.md, missing.md", "maxLines": 1},
    {"pattern": "**/*笔记.md"},
]


@pytest.mark.parametrize("line_numbers", [True, False])
def test_multi_get_selects_skips_and_truncates_alike(both: Both, line_numbers: bool) -> None:
    calls = [
        ("multi_get", {**arguments, "maxBytes": 10240, "lineNumbers": line_numbers})
        for arguments in MULTI_GETS
    ]
    ours = ldims_calls(both.url, calls)
    theirs = both.qmd.mcp_call(calls)
    for arguments, mine, reference in zip(MULTI_GETS, ours, theirs, strict=True):
        expected = [
            # Deliberate: qmd 2.8.3's notice names the tool qmd_get, which it no longer has.
            (kind, uri, text.replace("Use 'qmd_get' with", "Use 'get' with"))
            for kind, uri, text in texts(reference)
        ]
        assert texts(mine) == expected, arguments
    skipped = texts(ours[1])
    assert skipped[0][0] == "text" and skipped[0][2].startswith(
        f"[SKIPPED: {NAME}/logs/long log.md"
    )


# --- status ------------------------------------------------------------------------------------
def test_status_counts_alike(both: Both) -> None:
    (ours,) = ldims_calls(both.url, [("status", {})])
    (theirs,) = both.qmd.mcp_call([("status", {})])
    mine, reference = ours.structured_content, theirs.structured_content
    for key in ("totalDocuments", "needsEmbedding", "hasVectorIndex"):
        assert mine[key] == reference[key], key
    strip = [
        {k: c[k] for k in ("name", "path", "pattern", "documents")}
        for c in reference["collections"]
    ]
    assert [
        {k: c[k] for k in ("name", "path", "pattern", "documents")} for c in mine["collections"]
    ] == strip
    assert mine["totalDocuments"] == len(markdown_files(both.folder))


# --- search --------------------------------------------------------------------------------------
def test_search_agrees_with_qmds_bm25_on_the_top_three(both: Both) -> None:
    queries = search_queries()
    assert len(queries) >= 30
    ours = ldims_calls(both.url, [("search", {"query": q, "limit": 10}) for q in queries])
    compared = agreed = 0
    disagreements = []
    for query, mine in zip(queries, ours, strict=True):
        reference = both.qmd.search(query, limit=10)
        theirs = [row["file"].removeprefix("qmd://") for row in reference][:3]
        found = [hit["file"] for hit in mine.structured_content["results"]][:3]
        if not theirs and not found:
            continue  # neither finds every word: nothing to compare
        compared += 1
        if set(found) == set(theirs):
            agreed += 1
        else:
            disagreements.append((query, found, theirs))
        # The docids of the files both found are the same.
        ids = {h["file"]: h["docid"] for h in mine.structured_content["results"]}
        for row in reference:
            file = row["file"].removeprefix("qmd://")
            if file in ids:
                assert ids[file] == row["docid"]
    share = agreed / compared
    print(f"\nsearch top-3 agreement with qmd 2.8.3: {agreed}/{compared} = {share:.0%}")
    for query, found, theirs in disagreements:
        print(f"  {query!r}: LDIMS {found} / qmd {theirs}")
    assert compared >= 30
    assert share >= AGREEMENT_TARGET


def test_an_unknown_collection_is_an_error_where_qmd_answers_nothing(both: Both) -> None:
    (ours,) = ldims_calls(both.url, [("search", {"query": "wing", "collection": "nope"})])
    assert ours.is_error and ours.structured_content["errorCode"] == "UNKNOWN_COLLECTION"
    assert ours.structured_content["errorDetails"]["collections"] == [NAME]
    # Deliberate: qmd's CLI refuses it too, its MCP query answers an empty list.
    refused = both.qmd.run("search", "-c", "nope", "--", "wing", check=False)
    assert refused.returncode == 1 and "Collection not found: nope" in refused.stderr
