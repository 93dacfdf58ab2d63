"""Load harness: every read tool and resource of every toolset under concurrent official SDK
clients over Streamable HTTP, while documents are uploaded, replaced and deleted and a folder
collection changes; then a consistency check of catalog, index, vectors and folder collection.

What it does
------------
1. **The real stack.** ``ldims serve`` (embedded Redis, SQLite catalog, in-process Tika) on a
   fresh data folder, with ``--embedding-model`` (``use``, the fast bundled one, by default;
   its embed worker runs beside the load) and, when the machine's PostgreSQL answers, the
   ``sql`` toolset on a fresh database with one table (dropped afterwards). Every toolset the
   server then lists is driven: documents, qmd, proxy, guide and sql.
2. **A stable set**, tenant ``load``: ``--docs`` corpus files of every kind (read in place)
   uploaded through REST, and a folder collection ``notes`` of Markdown files added with
   ``ldims collection add``; all processed (and embedded) before the clock starts. The readers
   only ask for these, so every error they get is an error.
3. **Readers**: ``--clients`` ``mcp.Client`` sessions over HTTP, each in a loop for
   ``--seconds`` (after ``--warmup`` s not counted), taking the next operation from a fixed
   shuffled mix: ``searchDocuments`` (semantic and exact, with filters), ``getDocumentStatus``,
   the ``ldims://`` content, pages and lines resources, qmd ``search``, ``vsearch``, ``query``,
   ``get``, ``multi_get``, ``status`` and its ``qmd://`` resource, ``read-query`` and the
   ``kwdb://`` resources, a guide session (``initiate_session`` then ``navigate_session``),
   ``read_doc_pages``, ``read_doc_metadata``, ``doc_local_search`` and ``list_available_tools``
   (the proxy's rate limits raised: they would refuse one tenant's load; their own test is
   ``tests/test_proxy_toolset.py``). Per operation: calls, calls/s, p50/p95/p99 and errors by
   code.
4. **Writers**, meanwhile: every ``--write-every`` s a new document uploaded, one of the
   writer's earlier ones replaced by a new version and an older one deleted (REST); every 5 s
   a file of the folder added, edited or removed and ``ldims update`` run.
5. **RSS** of every process of the server's tree every 2 s, by role; growth from the end of
   the first fifth of the run to the largest later sample.
6. **Consistency**, once the writers stop and the pipeline is idle: every accepted document
   ``completed`` or ``failed`` with a code; the index holds exactly the completed documents,
   each at its catalog version (no orphan chunk, no missing document, no stale version); the
   vector store holds no document the catalog lacks and every document the catalog says is
   embedded; the folder collection's documents are exactly the folder's files.

Verdicts (exit status 1 if one fails): no unexpected error under load, no lost or stuck
document, consistency; in the long form also memory flat (≤ 10 % growth of every process
after warm-up).

How to run (from the project root)::

    .venv/bin/python bench/load.py                 # long form: 16 clients, 600 s
    .venv/bin/python bench/load.py --short         # CI form: 4 clients, 20 s

The report is printed and written to ``bench/results/load.md`` (``--output``); the long form
also writes ``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psycopg
from ingest import launch_serve, ldims_executable, stop_server, wait_healthy
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_load import error_code, wait_ready
from report import machine_line, markdown_table, ms, percentile, publish, publish_section
from servers import ProcessTree, Server, server_env

from ldims.caller import TENANT_HEADER
from ldims.catalog import Document
from ldims.settings import Settings
from workers.consistency import DESCRIPTIONS, inspect
from workers.pipeline import Runtime

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "load.md"
RELIABILITY = ROOT / "docs" / "reliability.md"
TENANT = "load"
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=3"
STABLE = (
    "docling__wiki.md",
    "poppler-test__russian.pdf",
    "pypdf__multilang.pdf",
    "docling__word_sample.docx",
    "tika__testWORD_various.docx",
    "unstructured__fake-power-point.pptx",
    "unstructured__2023-half-year-analyses-by-segment.xlsx",
    "tika__resume.html",
    "unstructured__fake-doc.rtf",
    "tika__russian.cp866.txt",
    "poi__stress009.docx",
    "docling__wiki_duck.html",
)
QUERIES = ("company", "duck", "report", "table", "Москва", "产品", "quarterly figures", "IBM")


@dataclass
class Op:
    """One operation's calls: latencies of the successful ones, errors by code."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)


@dataclass
class Names:
    """The stable set's names the readers ask for."""

    documents: list[str]
    paths: list[str]
    sql: bool


class Budget:
    """The run's time: every wait is bounded by what is left of it, so the short form ends with
    a report naming the phase that ran out, before the test's own timeout would kill it mute."""

    def __init__(self, seconds: float) -> None:
        self.started = time.monotonic()
        self.ends = self.started + seconds
        self.phase = "start"

    def enter(self, phase: str) -> None:
        self.phase = phase
        print(f"[{time.monotonic() - self.started:6.1f}s] {phase}", file=sys.stderr, flush=True)

    def left(self, cap: float) -> float:
        """``cap`` seconds, or what is left of the run if less (at least one)."""
        return max(1.0, min(cap, self.ends - time.monotonic()))


BUDGET = Budget(float("inf"))


# --- setup -------------------------------------------------------------------------------------


def create_sql_database() -> str | None:
    """A fresh PostgreSQL database with one table, or None when no server answers."""
    name = f"ldims_load_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error:
        return None
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE orders (id int primary key, customer text, total numeric)")
        connection.execute(
            "INSERT INTO orders SELECT n, 'customer ' || n % 50, n * 1.5 "
            "FROM generate_series(1, 5000) AS n"
        )
    return name


def drop_sql_database(name: str | None) -> None:
    if name:
        with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# The proxy toolset's rate limits (one caller's calls a minute, a generation's calls and output,
# a document's bytes an hour) would refuse most of a load run's calls from one tenant: they are
# raised, so that the run measures throughput; tests/test_proxy_toolset.py tests them.
UNLIMITED_PROXY = {
    "LDIMS_MCP_RATE_LIMIT_CALLS": "1000000",
    "LDIMS_MCP_RATE_LIMIT_TOKEN_OUTPUT": "1000000000",
    "LDIMS_MCP_PROXY_MAX_OUTPUT_BYTES": "1000000000",
    "LDIMS_MCP_PROXY_CALLS_PER_MINUTE": "1000000",
    "LDIMS_MCP_PROXY_GENERATIONS_PER_HOUR": "1000000",
    "LDIMS_MCP_PROXY_DOC_BYTES_PER_HOUR": "1000000000000",
}


def server_settings(model: str, database: str | None) -> dict[str, str]:
    env = {"LDIMS_EMBEDDING_MODEL": model, **UNLIMITED_PROXY}
    if database:
        env["LDIMS_SQL_URL"] = f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    return env


def write_folder(folder: Path) -> None:
    for n in range(10):
        (folder / f"note-{n:02d}.md").write_text(
            f"# Note {n}\n\n## Quarterly figures\n\nThe duck report number {n} covers the "
            f"company's table of figures for region {n % 3}.\n"
        )


def cli(data_dir: Path, env: dict[str, str], *args: str) -> str:
    ldims = ldims_executable()
    done = subprocess.run(
        [str(ldims), *args, "--tenant", TENANT],
        env=server_env(data_dir) | env,
        cwd=data_dir,
        capture_output=True,
        text=True,
        timeout=BUDGET.left(300),
    )
    if done.returncode != 0:
        raise RuntimeError(f"ldims {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def upload(client: httpx.Client, name: str, data: bytes, **fields: str) -> str:
    response = client.post("/api/documents", files={"file": (name, data)}, data=fields)
    response.raise_for_status()
    return str(response.json()["documentId"])


def counts(client: httpx.Client) -> Counter[str]:
    found: Counter[str] = Counter()
    for status in ("queued", "processing", "completed", "failed"):
        response = client.get("/api/documents", params={"status": status, "limit": 1})
        response.raise_for_status()
        found[status] = int(response.json()["total"])
    return found


def wait_idle(client: httpx.Client, timeout: float) -> Counter[str]:
    """The counts once nothing is queued or processing (raise after ``timeout``)."""
    timeout = BUDGET.left(timeout)
    deadline = time.monotonic() + timeout
    while True:
        found = counts(client)
        if found["queued"] + found["processing"] == 0:
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"pipeline not idle after {timeout:.0f}s: {dict(found)}")
        time.sleep(0.5)


async def wait_vectors(url: str, timeout: float) -> int:
    """qmd ``status``'s ``needsEmbedding`` once it is 0, or when ``timeout`` runs out."""
    timeout = BUDGET.left(timeout)
    deadline = time.monotonic() + timeout
    async with session(url) as client:
        while True:
            status = (await client.call_tool("status", {})).structured_content or {}
            pending = int(status.get("needsEmbedding", 0))
            if pending == 0 or time.monotonic() > deadline:
                return pending
            await asyncio.sleep(1)


@contextlib.asynccontextmanager
async def session(url: str) -> Any:
    async with (
        httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,  # type: ignore[arg-type]
    ):
        yield client


# --- the readers -------------------------------------------------------------------------------

Call = Callable[[Client, random.Random], Awaitable[Any]]


def operations(names: Names) -> dict[str, Call]:
    """Each operation of the mix: a call that raises or returns an ``isError`` result on error."""

    def doc(rng: random.Random) -> str:
        return rng.choice(names.documents)

    def path(rng: random.Random) -> str:
        return rng.choice(names.paths)

    async def guide(client: Client, rng: random.Random) -> Any:
        started = await client.call_tool("initiate_session", {"user_query": "password reset"})
        if started.is_error:
            return started
        options = started.structured_content.get("options") or [{"id": "back"}]
        return await client.call_tool(
            "navigate_session",
            {
                "session_id": started.structured_content["session_id"],
                "selected_option_id": options[0]["id"],
            },
        )

    ops: dict[str, Call] = {
        "searchDocuments semantic": lambda c, r: c.call_tool(
            "searchDocuments", {"query": r.choice(QUERIES)}
        ),
        "searchDocuments exact, filtered": lambda c, r: c.call_tool(
            "searchDocuments",
            {"query": r.choice(QUERIES), "searchMode": "exact", "collection": "default"},
        ),
        "getDocumentStatus": lambda c, r: c.call_tool("getDocumentStatus", {"documentId": doc(r)}),
        "ldims:// extracted_content": lambda c, r: c.read_resource(
            f"ldims://docs/{doc(r)}/extracted_content"
        ),
        "ldims:// pages": lambda c, r: c.read_resource(f"ldims://docs/{doc(r)}/pages/1"),
        "ldims:// lines": lambda c, r: c.read_resource(f"ldims://docs/{doc(r)}/lines/1-20"),
        "qmd search": lambda c, r: c.call_tool("search", {"query": r.choice(QUERIES)}),
        "qmd vsearch": lambda c, r: c.call_tool("vsearch", {"query": r.choice(QUERIES)}),
        "qmd query": lambda c, r: c.call_tool("query", {"query": r.choice(QUERIES)}),
        "qmd get": lambda c, r: c.call_tool("get", {"file": path(r)}),
        "qmd multi_get": lambda c, r: c.call_tool("multi_get", {"pattern": "notes/note-0*.md"}),
        "qmd status": lambda c, r: c.call_tool("status", {}),
        "qmd:// resource": lambda c, r: c.read_resource(f"qmd://{path(r)}"),
        "guide session": guide,
        "read_doc_metadata": lambda c, r: c.call_tool("read_doc_metadata", {"doc_id": doc(r)}),
        "read_doc_pages": lambda c, r: c.call_tool(
            "read_doc_pages", {"doc_id": doc(r), "page_start": 1, "page_end": 1}
        ),
        "doc_local_search": lambda c, r: c.call_tool(
            "doc_local_search", {"doc_id": doc(r), "query": r.choice(QUERIES)}
        ),
        "list_available_tools": lambda c, r: c.call_tool("list_available_tools", {}),
    }
    if names.sql:
        ops["read-query"] = lambda c, r: c.call_tool(
            "read-query",
            {
                "sql": "SELECT customer, sum(total) FROM orders "
                f"WHERE id < {r.randint(10, 5000)} GROUP BY customer ORDER BY customer LIMIT 20"
            },
        )
        ops["kwdb:// table"] = lambda c, r: c.read_resource("kwdb://table/orders")
    return ops


async def reader(
    url: str, ops: dict[str, Call], results: dict[str, Op], seed: int, start: float, end: float
) -> None:
    rng = random.Random(seed)
    order = list(ops) * 3
    rng.shuffle(order)
    async with session(url) as client:
        for name in itertools.cycle(order):
            now = time.monotonic()
            if now >= end:
                return
            began = time.perf_counter()
            try:
                answer = await asyncio.wait_for(ops[name](client, rng), 60)
            except Exception as exc:  # a JSON-RPC error, a timeout, a dropped connection
                code = getattr(getattr(exc, "error", None), "code", None)
                outcome = f"{type(exc).__name__} {code}" if code else type(exc).__name__
            else:
                outcome = error_code(answer) if getattr(answer, "is_error", False) else None
            if now < start:
                continue  # warm-up
            op = results.setdefault(name, Op())
            if outcome is None:
                op.latencies.append(time.perf_counter() - began)
            else:
                op.errors[outcome] += 1


# --- the writers -------------------------------------------------------------------------------


@dataclass
class Writes:
    uploads: int = 0
    replaces: int = 0
    deletes: int = 0
    folder_updates: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    accepted: set[str] = field(default_factory=set)


def write_loop(
    url: str,
    data_dir: Path,
    env: dict[str, str],
    folder: Path,
    every: float,
    stop: threading.Event,
    writes: Writes,
) -> None:
    rng = random.Random(7)
    mine: list[str] = []
    last_folder = time.monotonic()
    # A connection idle past uvicorn's keep-alive (5 s; `ldims update` takes seconds) may be
    # closed by the server just as it is reused: the client lets it go first.
    limits = httpx.Limits(keepalive_expiry=2.0)
    with httpx.Client(
        base_url=url, headers={TENANT_HEADER: TENANT}, timeout=60, limits=limits
    ) as client:
        for n in itertools.count():
            if stop.wait(every):
                return
            step = "upload"
            try:
                body = f"# Churn {n}\n\nThe churn document {n} mentions the duck report.\n"
                mine.append(upload(client, f"churn-{n}.md", body.encode(), collection="churn"))
                writes.uploads += 1
                writes.accepted.add(mine[-1])
                if len(mine) > 3:
                    step, target = "replace", rng.choice(mine[-3:])
                    upload(
                        client, "churn.md", f"{body}\nVersion {n}.\n".encode(), documentId=target
                    )
                    writes.replaces += 1
                if len(mine) > 6:
                    step, gone = "delete", mine.pop(0)
                    client.delete(f"/api/documents/{gone}").raise_for_status()
                    writes.accepted.discard(gone)
                    writes.deletes += 1
            except httpx.HTTPError as exc:
                writes.errors[f"{step}: {type(exc).__name__}"] += 1
            if time.monotonic() - last_folder >= 5:
                last_folder = time.monotonic()
                change_folder(folder, rng, n)
                try:
                    cli(data_dir, env, "update")
                    writes.folder_updates += 1
                except RuntimeError:
                    writes.errors["ldims update"] += 1


def change_folder(folder: Path, rng: random.Random, n: int) -> None:
    """Add, edit or remove one extra file (the stable notes stay as they are)."""
    extra = sorted(folder.glob("extra-*.md"))
    roll = rng.random()
    if extra and roll < 0.3:
        rng.choice(extra).unlink()
    elif extra and roll < 0.6:
        rng.choice(extra).write_text(f"# Extra, edited {n}\n\nThe duck report, edited.\n")
    else:
        (folder / f"extra-{n:05d}.md").write_text(f"# Extra {n}\n\nA new duck report.\n")


# --- memory ------------------------------------------------------------------------------------


def sample_rss(
    tree: ProcessTree, samples: list[tuple[float, Counter[str]]], stop: threading.Event
) -> None:
    while not stop.wait(2.0):
        by_role: Counter[str] = Counter()
        for role, rss, _cpu in tree.sample().values():
            by_role[role] += rss
        samples.append((time.monotonic(), by_role))


def rss_rows(
    samples: list[tuple[float, Counter[str]]], warm_end: float
) -> list[tuple[str, int, int, int, float]]:
    """(role, after warm-up, end, peak later, growth) in bytes; growth of peak over warm-up."""
    later = [by_role for moment, by_role in samples if moment >= warm_end]
    if not later:
        return []
    base = later[0]
    rows = []
    for role in sorted(base):
        peak = max(by_role.get(role, 0) for by_role in later)
        start, end = base[role], later[-1].get(role, 0)
        rows.append((role, start, end, peak, (peak - start) / start if start else 0.0))
    return rows


# --- consistency -------------------------------------------------------------------------------


def consistency(data_dir: Path, folder: Path, model: str) -> list[str]:
    """What disagrees between the catalog and every store (``ldims check``'s inspection:
    index versions, qmd's lexicon, vectors, originals, extractions, nothing stuck) and
    between the folder and its collection (empty: all agree)."""
    settings = Settings(data_dir=data_dir, embedding_model=model)
    runtime = Runtime(settings)
    try:
        found = inspect(runtime)
        with runtime.catalog.session() as session_:
            documents = list(session_.query(Document).filter(Document.tenant == TENANT))
    finally:
        runtime.catalog.dispose()
    problems = [
        f"{len(items)} {DESCRIPTIONS[kind]}: {items[:5]}"
        for kind, items in found.kinds().items()
        if items
    ]
    unfinished = [d.id for d in documents if d.status not in ("completed", "failed")]
    if unfinished:
        problems.append(f"{len(unfinished)} documents not final: {unfinished[:5]}")
    if failed_without_code := [
        d.id for d in documents if d.status == "failed" and not d.error_code
    ]:
        problems.append(f"{len(failed_without_code)} failed without a code")
    files = {f"{path.name}" for path in folder.glob("*.md")}
    in_collection = {d.source_path for d in documents if d.collection == "notes" and d.source_path}
    if files != in_collection:
        problems.append(
            f"folder and collection differ: only on disk {sorted(files - in_collection)[:5]}, "
            f"only in the catalog {sorted(in_collection - files)[:5]}"
        )
    return problems


# --- the run -----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the CI form: 4 clients, 20 s")
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--warmup", type=float, default=None)
    parser.add_argument("--write-every", type=float, default=0.5)
    parser.add_argument("--embedding-model", default="use")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds the whole run may take (short form: 300; long form: no limit)",
    )
    args = parser.parse_args()
    global BUDGET
    BUDGET = Budget(args.budget or (300.0 if args.short else float("inf")))
    clients = args.clients or (4 if args.short else 16)
    seconds = args.seconds or (20.0 if args.short else 600.0)
    warmup = args.warmup if args.warmup is not None else (5.0 if args.short else 60.0)
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-load-"))
    folder = data_dir.parent / f"{data_dir.name}-notes"
    folder.mkdir()
    write_folder(folder)
    database = create_sql_database()
    env = server_settings(args.embedding_model, database)
    server: Server | None = None
    text, passed = "", False
    try:
        BUDGET.enter("starting ldims serve")
        server = launch_serve(data_dir, env)
        wait_healthy(server, BUDGET.left(120))
        asyncio.run(
            wait_ready(
                Server(server.process, f"{server.url}/mcp", server.log_path),
                TENANT,
                timeout=BUDGET.left(60),
            )
        )
        BUDGET.enter("stable set: uploading and processing")
        names, setup = prepare(server.url, data_dir, env, folder, args.embedding_model, database)
        BUDGET.enter("readers and writers")
        ops = operations(names)
        results: dict[str, Op] = {}
        writes = Writes()
        stop = threading.Event()
        samples: list[tuple[float, Counter[str]]] = []
        sampler = threading.Thread(
            target=sample_rss, args=(ProcessTree(server.process.pid), samples, stop), daemon=True
        )
        writer = threading.Thread(
            target=write_loop,
            args=(server.url, data_dir, env, folder, args.write_every, stop, writes),
            daemon=True,
        )
        start = time.monotonic() + warmup
        end = start + seconds
        sampler.start()
        writer.start()

        async def readers() -> None:
            await asyncio.gather(
                *(reader(server.url, ops, results, n, start, end) for n in range(clients))
            )

        asyncio.run(readers())
        stop.set()
        BUDGET.enter("writers stopping")
        writer.join(BUDGET.left(120))
        sampler.join(10)
        BUDGET.enter("pipeline settling")
        with httpx.Client(
            base_url=server.url, headers={TENANT_HEADER: TENANT}, timeout=60
        ) as client:
            settled = wait_idle(client, 600)
        BUDGET.enter("consistency check")
        problems = consistency(data_dir, folder, args.embedding_model)
        warm_end = start + (seconds / 5 if not args.short else 0)
        text, passed = report(
            args,
            clients,
            seconds,
            warmup,
            setup,
            results,
            writes,
            settled,
            problems,
            rss_rows(samples, warm_end),
            names,
        )
    except (RuntimeError, subprocess.TimeoutExpired, httpx.HTTPError) as exc:
        text = stalled(args, exc, server)
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(folder, ignore_errors=True)
        drop_sql_database(database)
    publish(text, args.output)
    if not args.short and passed:
        publish_section(RELIABILITY, "load", "## Under load\n\n" + text.split("\n", 1)[1])
    sys.exit(0 if passed else 1)


def stalled(args: argparse.Namespace, exc: BaseException, server: Server | None) -> str:
    """The report of a run that could not finish: the phase, what went wrong, the server's log."""
    elapsed = time.monotonic() - BUDGET.started
    lines = [
        f"# Load harness ({'short' if args.short else 'long'} form)",
        "",
        machine_line(),
        "",
        f'**FAIL** the run ended in the phase "{BUDGET.phase}" after {elapsed:.0f} s: '
        f"{type(exc).__name__}: {str(exc)[:2000]}",
        "",
        "The server's log, last lines:",
        "",
        "```",
        server.log_tail(80) if server is not None else "(no server)",
        "```",
    ]
    return "\n".join(lines) + "\n"


def prepare(
    url: str, data_dir: Path, env: dict[str, str], folder: Path, model: str, database: str | None
) -> tuple[Names, str]:
    """Upload the stable set, add the folder, wait for all of it; the names readers ask for."""
    started = time.monotonic()
    with httpx.Client(base_url=url, headers={TENANT_HEADER: TENANT}, timeout=120) as client:
        documents = [upload(client, name, (DOCS / name).read_bytes()) for name in STABLE]
        cli(data_dir, env, "collection", "add", str(folder), "--name", "notes")
        settled = wait_idle(client, 600)
        statuses = {d: client.get(f"/api/documents/{d}").json()["status"] for d in documents}
    BUDGET.enter("stable set: waiting for vectors")
    pending = asyncio.run(wait_vectors(url, 600)) if model != "none" else 0
    if pending:  # a few dozen documents' vectors take seconds: the embed stage is stuck
        raise RuntimeError(f"{pending} chunks still without vectors")
    # The readers ask only for what completed (a corpus file that fails is not their error).
    completed = [d for d in documents if statuses[d] == "completed"]
    paths = [f"notes/{path.name}" for path in sorted(folder.glob("*.md"))]
    setup = (
        f"stable set: {len(STABLE)} corpus files and {len(paths)} folder notes, "
        f"{settled['completed']} completed, {settled['failed']} failed, all with vectors, "
        f"ready in {time.monotonic() - started:.0f}s"
    )
    return Names(completed, paths, database is not None), setup


def report(
    args: argparse.Namespace,
    clients: int,
    seconds: float,
    warmup: float,
    setup: str,
    results: dict[str, Op],
    writes: Writes,
    settled: Counter[str],
    problems: list[str],
    rss: list[tuple[str, int, int, int, float]],
    names: Names,
) -> tuple[str, bool]:
    rows = []
    unexpected = 0
    for name, op in sorted(results.items()):
        calls = len(op.latencies) + sum(op.errors.values())
        unexpected += sum(op.errors.values())
        rows.append(
            [
                name,
                str(calls),
                f"{len(op.latencies) / seconds:.1f}",
                ms(percentile(op.latencies, 50)),
                ms(percentile(op.latencies, 95)),
                ms(percentile(op.latencies, 99)),
                ", ".join(f"{code} {n}" for code, n in op.errors.most_common()) or "0",
            ]
        )
    total = sum(len(op.latencies) for op in results.values())
    lines = [
        f"# Load harness ({'short' if args.short else 'long'} form)",
        "",
        machine_line(),
        "",
        f"`ldims serve` (embedded Redis, SQLite, embedding model `{args.embedding_model}`, "
        f"{'the sql toolset on PostgreSQL' if names.sql else 'no sql toolset: no PostgreSQL'}); "
        f"{clients} SDK clients over Streamable HTTP for {seconds:.0f} s after {warmup:.0f} s "
        f"of warm-up; {setup}.",
        "",
        markdown_table(
            ["operation", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors"], rows
        ),
        "",
        f"All operations: {total / seconds:.1f} successful calls/s.",
        "",
        f"Writers meanwhile: {writes.uploads} uploads, {writes.replaces} replacements, "
        f"{writes.deletes} deletes, {writes.folder_updates} folder updates (`ldims update`); "
        f"errors: {dict(writes.errors) or 0}. Afterwards: {settled['completed']} completed, "
        f"{settled['failed']} failed, {settled['queued'] + settled['processing']} unfinished.",
        "",
    ]
    if rss:
        lines += [
            "RSS by role (MiB): after warm-up, at the end, largest later sample, growth:",
            "",
            markdown_table(
                ["role", "after warm-up", "end", "peak", "growth"],
                [
                    [role, f"{a / 2**20:.0f}", f"{b / 2**20:.0f}", f"{c / 2**20:.0f}", f"{g:+.1%}"]
                    for role, a, b, c, g in rss
                ],
            ),
            "",
        ]
    verdicts = [
        (
            "no unexpected error under load",
            unexpected == 0 and not writes.errors,
            f"{unexpected} reader errors, {sum(writes.errors.values())} writer errors",
        ),
        (
            "no lost or stuck document",
            settled["queued"] + settled["processing"] == 0,
            f"{settled['queued'] + settled['processing']} unfinished",
        ),
        (
            "catalog, index, vectors and folder collection agree",
            not problems,
            "; ".join(problems) or "all agree",
        ),
    ]
    if not args.short:
        worst = max((g for *_, g in rss), default=0.0)
        verdicts.append(
            ("memory flat (≤ 10 % growth after warm-up)", worst <= 0.10, f"largest {worst:+.1%}")
        )
    for title, ok, detail in verdicts:
        lines.append(f"**{'PASS' if ok else 'FAIL'}** {title}: {detail}.")
    command = " ".join(["bench/load.py", *sys.argv[1:]])
    lines += ["", f"Command: `.venv/bin/python {command}`"]
    return "\n".join(lines) + "\n", all(ok for _, ok, _ in verdicts)


if __name__ == "__main__":
    main()
