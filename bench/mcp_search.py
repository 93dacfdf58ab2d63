"""MCP search benchmark: how fast does ``searchDocuments`` answer SDK clients over HTTP?

What it measures
----------------
1. **The dev corpus, ingested through the pipeline's own code.** Every file of
   ``../shared/corpus/docs`` (listed in its ``manifest.tsv``, read in place) goes into a fresh
   temporary ``LDIMS_DATA_DIR`` the way an upload and the two Celery tasks would take it, but
   called directly in this process (no Redis, no Celery): the bytes through
   ``BlobStore.writer``, the type from ``detect_format``, a ``queued`` catalog row whose id is
   ``content_document_id`` (a second file with the same bytes is a duplicate, as at upload),
   then ``workers.pipeline.run_extract`` (the :class:`ExtractionSandbox` child, default limits)
   and ``run_index_batch`` of one document (``indexed_document`` + one commit per
   document, as the index worker leaves the index; ``--optimize`` merges it first). A
   ``ProcessingError`` ends the document ``failed`` through ``record_failure``, as the task
   would; a transient one is retried twice first. Every document belongs to tenant ``bench``
   and gets a collection, document type, submitter and creation date drawn from
   ``random.Random(--seed)``, so the filters have something to select.

2. **The server, in its own process** (so that the clients do not share its GIL):
   ``python bench/mcp_search.py --serve`` builds the real app with ``runtime.create_app(settings)``
   on that data dir, registers one more tool on ``app.state.mcp`` (the same ``LdimsMCP``):
   ``echo(text) -> text``, an ``async`` tool that does nothing, and runs it under uvicorn on a
   free port of 127.0.0.1 (``log_level=warning``). ``/mcp`` is LDIMS's own Streamable HTTP app
   (stateless, JSON responses, Host/Origin checks on). The echo tool goes through the same
   ``LdimsMCP.call_tool`` wrapper (time limit, error shapes) as ``searchDocuments``: it is the
   floor of the SDK plus LDIMS's wrapper, so ``searchDocuments`` / ``echo`` is what the search
   itself costs on top of that floor.

3. **The load.** ``--clients`` (8) SDK clients in this process, each with its own
   ``httpx2.AsyncClient`` (one keep-alive connection; header ``X-LDIMS-Tenant: bench``) and
   its own ``mcp.Client(streamable_http_client(url), mode=--mode)`` (``auto``: the 2026
   sessionless protocol; ``legacy``: the 2025-11-25 handshake), connected once before the
   timed phases. Each client calls in a closed loop, one call at a time: ``echo`` (with the
   query texts as its argument) and ``searchDocuments``, ``--seconds`` each, after
   ``--warmup`` seconds of each that are not counted. The tools take turns (``--rounds``, 4:
   echo 5 s, search 5 s, echo 5 s, …; each client goes on in its queries where its last turn
   stopped) so that the machine's drift between the two measurements weighs on both alike.
   A call's latency is the wall time of ``client.call_tool`` (serialisation, HTTP, the server,
   parsing and the SDK's output-schema validation). A call that raises, or returns ``isError``,
   counts as an error (by exception type or ``errorCode``) and is left out of the latencies.
   calls/s = successful calls / wall time of a tool's turns (each from its start to the end of
   its last call, which may start up to the end of the turn). Server and client CPU are read
   before and after each turn (``psutil`` for the server, ``time.process_time`` here), and so is
   the whole machine's (``psutil.cpu_times()``): the rest is what other processes took, which
   matters on a shared 2-CPU machine. The server's CPU per call also gives each tool's ceiling
   with a core to itself (calls / server CPU seconds), which the machine's load does not change
   much. ``searchDocuments`` reports its own ``executionTime`` (the wall time of its search: on
   the event loop, or in a worker thread when the searcher is busy or the search outgrows
   ``MCP_INLINE_SEARCH_SECONDS``, waiting included): its percentiles are reported too.

   The queries (``--queries``, default 1,000, ``random.Random(--seed)``) come from the text
   the corpus documents yielded: 45 % are 1-3 words drawn from each language's 2,000 most
   frequent words that the analyzer keeps (English/Latin-script 55 %, Russian 20 %, Chinese
   25 %, Chinese words cut by jieba), 40 % are 2-4 consecutive words of a line of a document
   (2-6 Han characters for Chinese lines), 15 % are English questions wrapping two words
   ("what does the documentation say about …"). 35 % carry filters (one or two of document
   type, date range, submitter, collection), 10 % run ``searchMode: "exact"``, and
   ``maxResults`` is 5 (70 %), 10 or 20. Client *i* starts at query ``i * queries / clients``.

4. **An in-process baseline:** the same queries, each once after 20 warm-up ones, through
   ``DocumentIndex.search`` in this process on one thread (after the server stopped): the
   search alone, without MCP, HTTP, pydantic or JSON.

Acceptance (from the issue): ``searchDocuments`` throughput ≥ 50 % of ``echo``'s, its p95
≤ 60 ms, and zero errors (both tools).

How to run (from the project root)::

    .venv/bin/python bench/mcp_search.py
    .venv/bin/python bench/mcp_search.py --quick            # 3 s per tool, 1 s warm-up
    .venv/bin/python bench/mcp_search.py --mode legacy --seconds 10

The Markdown tables are printed and written to ``bench/results/mcp_search.md`` (overwritten).
At the end the server gets SIGTERM (SIGKILL after 15 s) and the temporary data dir is removed,
also after an error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import rjieba
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_load import (
    busy_seconds,
    errors_text,
    per_call,
    stop_server,
    timed_call,
    wait_ready,
)
from report import DASH, machine_line, markdown_table, ms, percentile, publish
from servers import Server, free_port, launch

from indexer import DocumentIndex, QueryUnprocessable, SearchRequest
from indexer.analysis import keyword_analyzer
from ldims.caller import TENANT_HEADER
from ldims.catalog import Document, DocumentStatus, repository, utcnow
from ldims.documents import content_document_id
from ldims.errors import ProcessingError, TransientError
from ldims.settings import Settings
from workers.extraction import detect_format
from workers.pipeline import IndexJob, Runtime, record_failure, run_extract, run_index_batch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "mcp_search.md"
TENANT = "bench"
RATIO_TARGET = 0.5
P95_TARGET = 0.060  # s
MiB = 1024 * 1024
log = logging.getLogger("bench.mcp_search")

# --- the corpus, through the pipeline's code ---------------------------------------------------

COLLECTIONS = ("default", "default", "default", "archive", "legal")
DOCUMENT_TYPES = ("report", "manual", "book", "spreadsheet", "presentation", "letter")
SUBMITTERS = ("alice", "boris", "chen.wei", "dmitri", "eve", "fang")
EPOCH = date(2024, 1, 1)
SPAN_DAYS = 2 * 365


@dataclass
class CorpusFacts:
    files: int = 0
    indexed: int = 0
    duplicates: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    pages: int = 0
    chunks: int = 0
    segments: int = 0
    seconds: float = 0.0
    extract_seconds: float = 0.0  # inside run_extract
    index_seconds: float = 0.0  # inside run_index_batch
    slowest_index: tuple[str, float] = ("", 0.0)  # the file whose run_index_batch took longest
    optimized: bool = False
    # (document type, collection, submitter, created) of the indexed documents: filter values
    metadata: list[tuple[str, str, str, date]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)  # extracted text of each indexed document


def corpus_files(docs: Path) -> list[Path]:
    lines = (docs / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [docs / line.split("\t", 1)[0] for line in lines if line.strip()]


def store_blob(rt: Runtime, path: Path) -> tuple[str, int, bytes]:
    """The file through ``BlobStore.writer`` in 1 MiB pieces: (sha256, size, first bytes)."""
    writer = rt.blobs.writer(rt.settings.max_upload_bytes)
    with open(path, "rb") as handle:
        while piece := handle.read(MiB):
            writer.write(piece)
    stored = writer.commit()
    return stored.sha256, stored.size, writer.head


def add_document(rt: Runtime, path: Path, rng: random.Random) -> tuple[str, str, str] | None:
    """A queued catalog row for ``path`` as an upload makes it; None for a duplicate."""
    sha256, size, head = store_blob(rt, path)
    mime = detect_format(head, path.name)
    document_id = content_document_id(TENANT, sha256)
    created = datetime.combine(EPOCH, datetime.min.time(), UTC) + timedelta(
        seconds=rng.randrange(SPAN_DAYS * 86400)
    )
    with rt.catalog.session() as session:
        if repository.get_document(session, document_id) is not None:
            return None
        now = utcnow()
        session.add(
            Document(
                id=document_id,
                tenant=TENANT,
                collection=rng.choice(COLLECTIONS),
                name=path.name,
                format=mime,
                size=size,
                sha256=sha256,
                submitter=rng.choice(SUBMITTERS),
                document_type=rng.choice(DOCUMENT_TYPES),
                created_at=created,
                updated_at=now,
                status_changed_at=now,
                version=1,
                status=DocumentStatus.QUEUED.value,
                attempts=0,
            )
        )
    return document_id, sha256, mime


def process(rt: Runtime, document_id: str, sha256: str, facts: CorpusFacts) -> str | None:
    """The extract and index tasks' bodies; the failure code, or None when completed."""
    for attempt in range(3):
        try:
            started = time.perf_counter()
            try:
                extracted = run_extract(rt, document_id, sha256, first_delivery=attempt == 0)
            finally:
                facts.extract_seconds += time.perf_counter() - started
            if extracted:
                started = time.perf_counter()
                try:
                    job = IndexJob(document_id, sha256)
                    later = run_index_batch(rt, [job])
                    if job in later:
                        raise later[job]
                finally:
                    facts.index_seconds += time.perf_counter() - started
            return None
        except TransientError as exc:
            if attempt == 2:
                record_failure(rt, document_id, sha256, exc.code, exc.message)
                return exc.code
        except ProcessingError as exc:
            record_failure(rt, document_id, sha256, exc.code, exc.message)
            return exc.code
    return None  # pragma: no cover


def ingest(settings: Settings, files: list[Path], seed: int, optimize: bool) -> CorpusFacts:
    facts = CorpusFacts(files=len(files), optimized=optimize)
    rng = random.Random(seed)
    rt = Runtime(settings)
    rt.catalog.upgrade()
    started = time.perf_counter()
    try:
        for path in files:
            added = add_document(rt, path, rng)
            if added is None:
                facts.duplicates += 1
                continue
            document_id, sha256, mime = added
            indexing_before = facts.index_seconds
            code = process(rt, document_id, sha256, facts)
            indexing = facts.index_seconds - indexing_before
            if indexing > facts.slowest_index[1]:
                facts.slowest_index = (path.name, indexing)
            if code is not None:
                facts.failed[code] += 1
                continue
            with rt.catalog.session() as session:
                document = repository.get_document(session, document_id)
            assert document is not None
            result = rt.extracts.load(sha256, mime)
            facts.indexed += 1
            facts.pages += len(result.pages)
            facts.texts.append(result.text)
            facts.metadata.append(
                (
                    document.document_type or "",
                    document.collection,
                    document.submitter or "",
                    document.created_at.date(),
                )
            )
            print(f"  {path.name}: {len(result.pages)} pages", flush=True)
        if optimize:
            rt.index.optimize()
    finally:
        rt.sandbox.close()
    facts.seconds = time.perf_counter() - started
    facts.chunks = rt.index.ping()
    with rt.index.searcher() as searcher:
        facts.segments = len(searcher.leaf_searchers())
    rt.index.close()
    rt.catalog.dispose()
    return facts


# --- queries -----------------------------------------------------------------------------------

ANALYZER = keyword_analyzer()
_LATIN = re.compile(r"[A-Za-zÀ-ÿ][A-Za-zÀ-ÿ'-]*[A-Za-zÀ-ÿ]")
_CYRILLIC = re.compile(r"[А-Яа-яЁё]+(?:-[А-Яа-яЁё]+)*")
_HAN_RUN = re.compile(r"[\u4e00-\u9fff]+")
_HAN_ONLY = re.compile(r"^[\u4e00-\u9fff]+$")
_WORD = re.compile(r"[A-Za-zÀ-ÿА-Яа-яЁё][A-Za-zÀ-ÿА-Яа-яЁё'-]*")
LANGUAGE_WEIGHTS = {"en": 0.55, "ru": 0.2, "zh": 0.25}
QUERY_WORDS = 2000
QUESTIONS = (
    "what does the documentation say about {} and {}",
    "find documents about {} {}",
    "which report mentions {} together with {}",
)


def kept(word: str) -> bool:
    """One token after the analyzer (no stop word, not split)."""
    return len([token.text for token in ANALYZER(word)]) == 1


def searchable(text: str) -> bool:
    """Something left after the analyzer: not only stop words (those are QUERY_UNPROCESSABLE)."""
    return any(True for _ in ANALYZER(text))


def vocabularies(texts: list[str]) -> dict[str, list[str]]:
    """Each language's most frequent words of the corpus that the analyzer keeps."""
    jieba = rjieba.Jieba()
    counts: dict[str, Counter[str]] = {"en": Counter(), "ru": Counter(), "zh": Counter()}
    for text in texts:
        counts["en"].update(w.lower() for w in _LATIN.findall(text) if len(w) >= 3)
        counts["ru"].update(w.lower() for w in _CYRILLIC.findall(text) if len(w) >= 3)
        for run in _HAN_RUN.findall(text):
            counts["zh"].update(w for w in jieba.cut(run) if len(w) >= 2 and _HAN_ONLY.match(w))
    vocab = {}
    for language, counter in counts.items():
        words = [w for w, _ in counter.most_common(QUERY_WORDS * 2) if kept(w)][:QUERY_WORDS]
        if words:
            vocab[language] = words
    return vocab


def phrase(rng: random.Random, texts: list[str]) -> str | None:
    """2-4 consecutive words (2-6 Han characters) of a random line of a random document."""
    text = rng.choice(texts)
    lines = [line for line in text.splitlines() if len(line.strip()) >= 12]
    if not lines:
        return None
    line = rng.choice(lines)
    runs = _HAN_RUN.findall(line)
    if runs and rng.random() < 0.7:
        run = max(runs, key=len)
        if len(run) >= 2:
            size = min(len(run), rng.randint(2, 6))
            start = rng.randrange(len(run) - size + 1)
            return run[start : start + size]
    words = [word for word in _WORD.findall(line) if len(word) >= 2]
    if len(words) < 2:
        return None
    size = min(len(words), rng.randint(2, 4))
    start = rng.randrange(len(words) - size + 1)
    return " ".join(words[start : start + size])


def query_text(rng: random.Random, vocab: dict[str, list[str]], texts: list[str]) -> str:
    while True:
        text = query_candidate(rng, vocab, texts)
        if text and searchable(text):
            return text


def query_candidate(
    rng: random.Random, vocab: dict[str, list[str]], texts: list[str]
) -> str | None:
    """Words of the vocabulary (45 %), a phrase of a document (40 %) or a question (15 %)."""
    roll = rng.random()
    if roll < 0.45:
        languages = [lang for lang in LANGUAGE_WEIGHTS if lang in vocab]
        weights = [LANGUAGE_WEIGHTS[lang] for lang in languages]
        language = rng.choices(languages, weights)[0]
        words = rng.sample(vocab[language], min(rng.randint(1, 3), len(vocab[language])))
        return ("" if language == "zh" else " ").join(words)
    if roll < 0.85:
        return phrase(rng, texts)
    if "en" in vocab and len(vocab["en"]) >= 2:
        return rng.choice(QUESTIONS).format(*rng.sample(vocab["en"], 2))
    return None


def query_filters(rng: random.Random, facts: CorpusFacts) -> dict[str, str]:
    """One or two filters whose values some indexed document has."""
    doc_type, collection, submitter, created = rng.choice(facts.metadata)
    choices = ["documentType", "dates", "submitter", "collection"]
    filters: dict[str, str] = {}
    for kind in rng.sample(choices, rng.randint(1, 2)):
        if kind == "documentType":
            filters["documentType"] = doc_type
        elif kind == "submitter":
            filters["submitter"] = submitter
        elif kind == "collection":
            filters["collection"] = collection
        else:
            before = timedelta(days=rng.randint(0, 180))
            filters["dateFrom"] = (created - before).isoformat()
            filters["dateTo"] = (
                created - before + timedelta(days=rng.randint(30, 365))
            ).isoformat()
    return filters


def make_queries(count: int, facts: CorpusFacts, seed: int) -> list[dict[str, Any]]:
    """``searchDocuments`` arguments."""
    rng = random.Random(seed + 1)
    vocab = vocabularies(facts.texts)
    queries = []
    for _ in range(count):
        arguments: dict[str, Any] = {"query": query_text(rng, vocab, facts.texts)}
        roll = rng.random()
        if roll >= 0.7:
            arguments["maxResults"] = 10 if roll < 0.9 else 20
        filters: dict[str, str] = query_filters(rng, facts) if rng.random() < 0.35 else {}
        if rng.random() < 0.1:
            filters["searchMode"] = "exact"
        if filters:
            arguments["filters"] = filters
        queries.append(arguments)
    return queries


def to_request(arguments: dict[str, Any]) -> SearchRequest:
    """The ``SearchRequest`` that ``searchDocuments`` builds from these arguments."""
    filters = arguments.get("filters", {})
    return SearchRequest(
        tenant=TENANT,
        query=arguments["query"],
        mode="exact" if filters.get("searchMode") == "exact" else "keyword",
        limit=arguments.get("maxResults", 5),
        collection=filters.get("collection"),
        document_type=filters.get("documentType"),
        submitter=filters.get("submitter"),
        date_from=date.fromisoformat(filters["dateFrom"]) if "dateFrom" in filters else None,
        date_to=date.fromisoformat(filters["dateTo"]) if "dateTo" in filters else None,
    )


# --- the server process ------------------------------------------------------------------------


def serve(data_dir: Path, port: int) -> None:
    """``--serve``: the LDIMS app plus an ``echo`` tool under uvicorn (the child process)."""
    import uvicorn

    from runtime import create_app

    logging.basicConfig(level=logging.WARNING)  # before MCPServer's basicConfig(INFO)
    app = create_app(Settings(data_dir=data_dir, log_level="WARNING"))

    @app.state.mcp.tool(name="echo", description="Return the text unchanged (benchmark floor).")
    async def echo(text: str) -> str:
        return text

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(data_dir: Path) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port)]
    return launch(command, data_dir, f"http://127.0.0.1:{port}/mcp")


# --- the load ----------------------------------------------------------------------------------


@dataclass
class Phase:
    tool: str
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    hits: list[int] = field(default_factory=list)
    # searchDocuments' own searchMetadata.executionTime: its search, wherever it ran
    search_times: list[float] = field(default_factory=list)
    wall: float = 0.0
    server_cpu: float = 0.0  # seconds
    client_cpu: float = 0.0
    machine_cpu: float = 0.0  # every process of the machine, these two included

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.calls / self.wall if self.wall else 0.0


async def call_loop(
    client: Client,
    tool: str,
    calls: list[dict[str, Any]],
    positions: list[int],
    slot: int,
    end: float,
    phase: Phase,
) -> None:
    """Client ``slot`` calls in a closed loop until ``end``, going on in ``calls`` from
    ``positions[slot]`` (kept for its next round)."""
    while time.perf_counter() < end:
        arguments = calls[positions[slot] % len(calls)]
        positions[slot] += 1
        structured = await timed_call(client, tool, arguments, phase)
        if structured is not None and tool == "searchDocuments":
            phase.hits.append(len(structured.get("results", ())))
            execution = structured.get("searchMetadata", {}).get("executionTime", "")
            with contextlib.suppress(ValueError):
                phase.search_times.append(float(execution.rstrip("s")))


def start_positions(clients: int, calls: list[dict[str, Any]]) -> list[int]:
    """Client *i* starts at call ``i * len(calls) / clients``."""
    step = len(calls) // clients
    return [number * step for number in range(clients)]


async def run_phase(
    clients: list[Client],
    tool: str,
    calls: list[dict[str, Any]],
    seconds: float,
    server_process: psutil.Process,
    phase: Phase | None = None,
    positions: list[int] | None = None,
) -> Phase:
    """``seconds`` of calls by every client, added to ``phase`` (a new one by default)."""
    phase = phase or Phase(tool, len(clients), seconds)
    positions = positions or start_positions(len(clients), calls)
    cpu_before = server_process.cpu_times()
    client_before = time.process_time()
    machine_before = busy_seconds()
    started = time.perf_counter()
    end = started + seconds
    async with anyio.create_task_group() as group:
        for slot, client in enumerate(clients):
            group.start_soon(call_loop, client, tool, calls, positions, slot, end, phase)
    phase.wall += time.perf_counter() - started
    phase.client_cpu += time.process_time() - client_before
    phase.machine_cpu += busy_seconds() - machine_before
    cpu_after = server_process.cpu_times()
    phase.server_cpu += (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    return phase


async def run_load(
    server: Server, args: argparse.Namespace, queries: list[dict[str, Any]]
) -> tuple[list[Phase], list[str], str]:
    tools = await wait_ready(server, TENANT, args.mode)
    missing = {"echo", "searchDocuments"} - set(tools)
    if missing:
        raise RuntimeError(f"the server does not offer {sorted(missing)}; it has {tools}")
    echo_calls = [{"text": q["query"]} for q in queries]
    process = psutil.Process(server.process.pid)
    phases = []
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(args.clients):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60)
            )
            transport = streamable_http_client(server.url, http_client=http)
            clients.append(await stack.enter_async_context(Client(transport, mode=args.mode)))
        protocol = str(clients[0].protocol_version)
        work = (("echo", echo_calls), ("searchDocuments", queries))
        for tool, calls in work:
            if args.warmup > 0:
                await run_phase(clients, tool, calls, args.warmup, process)
        # The tools take turns in rounds, so that the machine's drift (other work, clock
        # speed) weighs on both alike rather than on whichever ran second.
        positions = {tool: start_positions(len(clients), calls) for tool, calls in work}
        phases = [Phase(tool, len(clients), args.seconds) for tool, _ in work]
        for _ in range(args.rounds):
            for phase, (tool, calls) in zip(phases, work, strict=True):
                slice_seconds = args.seconds / args.rounds
                await run_phase(
                    clients, tool, calls, slice_seconds, process, phase, positions[tool]
                )
        for phase in phases:
            print(
                f"{phase.tool}: {phase.calls} calls in {phase.wall:.1f}s "
                f"({phase.rate:.1f}/s), errors {sum(phase.errors.values())}",
                flush=True,
            )
    return phases, tools, protocol


# --- the in-process baseline ---------------------------------------------------------------------


@dataclass
class Baseline:
    latencies: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    unprocessable: int = 0
    cpu: float = 0.0


def run_baseline(index_dir: Path, queries: list[dict[str, Any]]) -> Baseline:
    index = DocumentIndex(index_dir)
    baseline = Baseline()
    requests = [to_request(q) for q in queries]
    for request in requests[:20]:
        with contextlib.suppress(QueryUnprocessable):
            index.search(request)
    cpu_before = time.process_time()
    for request in requests:
        started = time.perf_counter()
        try:
            found = index.search(request)
        except QueryUnprocessable:
            baseline.unprocessable += 1
            continue
        baseline.latencies.append(time.perf_counter() - started)
        baseline.hits.append(len(found.hits))
    baseline.cpu = time.process_time() - cpu_before
    index.close()
    return baseline


# --- report ------------------------------------------------------------------------------------

HEADER = ["tool", "clients", "seconds", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors"]
COST_HEADER = [
    "tool",
    "search p50 ms",
    "search p95 ms",
    "server CPU ms/call",
    "server CPU",
    "client CPU ms/call",
    "client CPU",
    "other processes' CPU",
    "mean hits",
    "no hits",
]


def phase_row(phase: Phase) -> list[str]:
    return [
        f"`{phase.tool}`",
        str(phase.clients),
        f"{phase.seconds:g}",
        str(phase.calls),
        f"{phase.rate:.1f}",
        ms(percentile(phase.latencies, 50)),
        ms(percentile(phase.latencies, 95)),
        ms(percentile(phase.latencies, 99)),
        errors_text(phase.errors),
    ]


def baseline_row(baseline: Baseline) -> list[str]:
    calls = len(baseline.latencies)
    total = sum(baseline.latencies)
    return [
        "in-process `DocumentIndex.search` (1 thread, no MCP)",
        "1",
        f"{total:.1f}",
        str(calls),
        f"{calls / total:.1f}" if total else DASH,
        ms(percentile(baseline.latencies, 50)),
        ms(percentile(baseline.latencies, 95)),
        ms(percentile(baseline.latencies, 99)),
        f"{baseline.unprocessable} unprocessable" if baseline.unprocessable else "0",
    ]


def hits_cells(hits: list[int]) -> list[str]:
    if not hits:
        return [DASH, DASH]
    return [f"{sum(hits) / len(hits):.1f}", f"{sum(1 for h in hits if h == 0) / len(hits):.0%}"]


def cost_rows(phases: list[Phase], baseline: Baseline) -> list[list[str]]:
    rows = []
    for phase in phases:
        others = max(phase.machine_cpu - phase.server_cpu - phase.client_cpu, 0.0)
        hits = hits_cells(phase.hits) if phase.tool == "searchDocuments" else [DASH, DASH]
        rows.append(
            [
                f"`{phase.tool}`",
                ms(percentile(phase.search_times, 50)),
                ms(percentile(phase.search_times, 95)),
                per_call(phase.server_cpu, phase.calls),
                f"{phase.server_cpu / phase.wall:.0%}",
                per_call(phase.client_cpu, phase.calls),
                f"{phase.client_cpu / phase.wall:.0%}",
                f"{others / phase.wall:.0%}",
                *hits,
            ]
        )
    rows.append(
        [
            "in-process `DocumentIndex.search`",
            ms(percentile(baseline.latencies, 50)),
            ms(percentile(baseline.latencies, 95)),
            per_call(baseline.cpu, len(baseline.latencies)),
            DASH,
            DASH,
            DASH,
            DASH,
            *hits_cells(baseline.hits),
        ]
    )
    return rows


def verdicts(phases: list[Phase]) -> list[tuple[bool, str]]:
    echo, search = phases
    ratio = search.rate / echo.rate if echo.rate else 0.0
    p95 = percentile(search.latencies, 95)
    errors = sum(echo.errors.values()) + sum(search.errors.values())
    ratio_ok = ratio >= RATIO_TARGET
    p95_ok = p95 is not None and p95 <= P95_TARGET
    return [
        (
            ratio_ok,
            f"**{'PASS' if ratio_ok else 'FAIL'}** throughput: `searchDocuments` "
            f"{search.rate:.1f} calls/s is {ratio:.0%} of `echo`'s {echo.rate:.1f} calls/s "
            f"(target ≥ {RATIO_TARGET:.0%}).",
        ),
        (
            p95_ok,
            f"**{'PASS' if p95_ok else 'FAIL'}** latency: `searchDocuments` p95 {ms(p95)} ms "
            f"(target ≤ {P95_TARGET * 1000:.0f} ms).",
        ),
        (
            errors == 0,
            f"**{'PASS' if errors == 0 else 'FAIL'}** errors: {errors} "
            f"(`echo` {errors_text(echo.errors)}, `searchDocuments` "
            f"{errors_text(search.errors)}; target 0).",
        ),
    ]


def ceiling_line(phases: list[Phase]) -> str:
    """Calls/s of a server process with a core to itself: what the machine's load cannot hide."""
    echo, search = phases
    if not echo.calls or not search.calls or not echo.server_cpu or not search.server_cpu:
        return ""
    echo_cap, search_cap = echo.calls / echo.server_cpu, search.calls / search.server_cpu
    return (
        f"With a whole core, the server's CPU per call would cap `searchDocuments` at "
        f"{search_cap:.0f} calls/s and `echo` at {echo_cap:.0f} calls/s "
        f"({search_cap / echo_cap:.0%})."
    )


def corpus_line(facts: CorpusFacts) -> str:
    failed = ", ".join(f"{code} {n}" for code, n in sorted(facts.failed.items())) or "none"
    merge = (
        "merged into one segment (--optimize)"
        if facts.optimized
        else "as the index worker leaves it"
    )
    return (
        f"Corpus: {facts.files} files of `../shared/corpus/docs`; {facts.indexed} documents "
        f"indexed ({facts.pages} pages, {facts.chunks} chunks, {facts.segments} index "
        f"segment(s), {merge}), {sum(facts.failed.values())} failed ({failed}), "
        f"{facts.duplicates} duplicate(s) of another file's bytes; the ingest took "
        f"{facts.seconds:.1f}s (not counted): {facts.extract_seconds:.1f}s in `run_extract`, "
        f"{facts.index_seconds:.1f}s in `run_index_batch` (the longest: {facts.slowest_index[0]}, "
        f"{facts.slowest_index[1]:.1f}s)."
    )


def notes(
    args: argparse.Namespace,
    facts: CorpusFacts,
    queries: list[dict[str, Any]],
    protocol: str,
    tools: list[str],
) -> list[str]:
    filtered = sum("filters" in q and set(q["filters"]) - {"searchMode"} != set() for q in queries)
    exact = sum(q.get("filters", {}).get("searchMode") == "exact" for q in queries)
    han = sum(bool(_HAN_RUN.search(q["query"])) for q in queries)
    cyrillic = sum(bool(_CYRILLIC.search(q["query"])) for q in queries)
    samples = ", ".join(json.dumps(q["query"], ensure_ascii=False) for q in queries[:6])
    return [
        corpus_line(facts),
        f"Queries: {len(queries)} (seed {args.seed}); {han} with Chinese, {cyrillic} with "
        f"Russian, the rest Latin script; {filtered} with filters, {exact} in exact mode. "
        f"First ones: {samples}.",
        f"Server: `python bench/mcp_search.py --serve` (uvicorn, one process, its own GIL) "
        f"serving `create_app(settings)` + an `echo` tool; tools listed: {', '.join(tools)}. "
        f"Clients: {args.clients} `mcp.Client`s in this process, mode `{args.mode}` "
        f"(protocol {protocol}), one `httpx2.AsyncClient` each; {args.warmup:g}s warm-up "
        f"per tool not counted, then the tools take {args.rounds} turns each of "
        f"{args.seconds / args.rounds:g}s (echo, search, echo, …), each client going on in "
        "its queries where its last turn stopped. Latency and calls/s count successful calls "
        "only.",
        "search p50/p95: the `executionTime` that `searchDocuments` reports (wall time of its "
        "search, on the event loop or, when the searcher is busy or the search outgrows "
        "`LDIMS_MCP_INLINE_SEARCH_SECONDS`, in a worker thread, waiting included; "
        "the baseline: its own latency). "
        "CPU columns: CPU seconds (user + system) used during the phase per successful call, "
        "and as a share of one core over the phase's wall time (the server is one process, "
        "so 100 % is its ceiling; the clients run in this process). Other processes' CPU: "
        f"what the rest of the machine ({os.cpu_count()} CPUs) used meanwhile, as a share of "
        "one core too; what they take, the server and the clients do not get.",
    ]


def report(
    args: argparse.Namespace,
    facts: CorpusFacts,
    phases: list[Phase],
    baseline: Baseline,
    queries: list[dict[str, Any]],
    protocol: str,
    tools: list[str],
) -> str:
    echo, search = phases
    ratio = search.rate / echo.rate if echo.rate else 0.0
    parts = [
        "# MCP search benchmark",
        "",
        markdown_table(HEADER, [phase_row(p) for p in phases] + [baseline_row(baseline)]),
        "",
        f"Ratio: `searchDocuments` / `echo` throughput = {search.rate:.1f} / {echo.rate:.1f} "
        f"= **{ratio:.0%}**. {ceiling_line(phases)}",
        "",
        *(line for _, line in verdicts(phases)),
        "",
        "## Where the time goes",
        "",
        markdown_table(COST_HEADER, cost_rows(phases, baseline)),
        "",
        *(f"- {line}" for line in notes(args, facts, queries, protocol, tools)),
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/mcp_search.py{command_flags(args)}`",
    ]
    return "\n".join(parts) + "\n"


def command_flags(args: argparse.Namespace) -> str:
    flags = " --quick" if args.quick else f" --seconds {args.seconds:g} --warmup {args.warmup:g}"
    flags += f" --rounds {args.rounds} --clients {args.clients} --mode {args.mode}"
    flags += f" --queries {args.queries}"
    flags += f" --seed {args.seed}" + " --optimize" * args.optimize
    return flags


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per tool")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds per tool")
    parser.add_argument(
        "--rounds", type=int, default=4, help="turns each tool takes (--seconds split evenly)"
    )
    parser.add_argument("--quick", action="store_true", help="3 s per tool, 1 s warm-up")
    parser.add_argument("--clients", type=int, default=8, help="concurrent SDK clients")
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto", help="MCP mode")
    parser.add_argument("--queries", type=int, default=1000, help="distinct search queries")
    parser.add_argument("--seed", type=int, default=42, help="seed of metadata and queries")
    parser.add_argument("--optimize", action="store_true", help="merge the index first")
    parser.add_argument("--docs", type=Path, default=DOCS, help="corpus folder (manifest.tsv)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 3.0, 1.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port)
        return 0
    logging.basicConfig(level=logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-mcp-bench-"))
    server: Server | None = None
    try:
        settings = Settings(data_dir=data_dir, log_level="WARNING")
        files = corpus_files(args.docs)
        print(f"ingesting {len(files)} files into {data_dir} ...", flush=True)
        facts = ingest(settings, files, args.seed, args.optimize)
        print(corpus_line(facts), flush=True)
        queries = make_queries(args.queries, facts, args.seed)
        server = start_server(data_dir)
        phases, tools, protocol = anyio.run(run_load, server, args, queries)
        stop_server(server)
        baseline = run_baseline(settings.index_dir, queries)
    except BaseException:
        if server is not None:
            print(f"server log tail:\n{server.log_tail()}")
        raise
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)
    text = report(args, facts, phases, baseline, queries, protocol, tools)
    publish(text, RESULTS)
    return 0 if all(ok for ok, _ in verdicts(phases)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
