"""qmd benchmark: ``ldims update`` beside qmd's own ``update`` on one 3,000-file folder, the
qmd tools over MCP HTTP with 8 clients beside ``echo`` on the same server, and the same calls
to qmd's own MCP HTTP server.

1. **The folder.** ``--files`` (3,000) Markdown files in 50 folders, each a Cranfield abstract
   (``../shared/corpus/ir/cranfield``, read in place) with a line of its own, so no two are
   the same.
2. **Updates.** The real qmd 2.8.3 (``tests/qmd_reference.py``, Node 22) adds the folder as a
   collection (its first scan: read, hash, index in FTS5, synchronously), then, after 1 % of
   the files changed, runs ``qmd update``. LDIMS does the same through ``ldims serve`` (the
   real pipeline: embedded Redis, extract, index and embed workers with the bundled ``use``
   model): ``ldims collection add`` and ``ldims update`` — the command's own time (scan, store,
   record, queue) and the time until every document is ``completed`` (keyword-searchable), and
   when the vectors are all written. Both see the same folder states, qmd first.
3. **MCP load.** ``ldims serve`` stopped, a server of ``create_app`` plus an ``echo`` tool on
   the same data dir (one uvicorn process, as ``bench/mcp_search.py``'s), 8 SDK clients in this
   process, phases in turns: ``echo``; ``search`` (two-word queries, qmd's BM25); ``query``
   (hybrid: keyword and dense lists, the query vector embedded once per distinct query, then
   cached); ``get`` (a file, a third of them with a ``:line:count`` window); ``multi_get`` (a
   glob of about 10 files, 20 lines each).
4. **Side by side.** ``qmd mcp --http`` (qmd 2.8.3, Node 22) over the index its own ``collection
   add`` and ``update`` built of the same folder, driven by the same clients with the same
   calls: ``search`` (qmd's is ``query`` with one ``lex`` sub-query, no reranking), ``get``
   and ``multi_get`` (qmd's hybrid ``query`` needs its local language models, which are not on
   this machine). Calls/s, latencies and the server's CPU per call
   (its whole process tree) of each.

Prints the tables and writes them to ``bench/results/qmd.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
from ingest import stop_server as stop_group
from mcp_load import stop_process, stop_server, wait_ready
from mcp_search import Phase, Rotation, Work, connect, run_phase, serve
from report import machine_line, markdown_table, ms, percentile, publish
from servers import Server, free_port, launch, server_env

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ldims.catalog import Catalog, repository  # noqa: E402
from ldims.semantic import fingerprint_for  # noqa: E402
from ldims.settings import Settings  # noqa: E402
from tests.qmd_reference import NODE, QMD_BIN, QmdReference  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "qmd.md"
CRANFIELD = ROOT.parent / "shared" / "corpus" / "ir" / "cranfield"
TENANT = "bench"  # mcp_search.connect's tenant header
NAME = "kb"
FOLDERS = 50
QUERY_VECTORS = 40  # distinct `query` texts
TOOLS = ("echo", "search", "query", "get", "multi_get")
log = logging.getLogger("bench.qmd")


# --- the folder --------------------------------------------------------------------------------
def abstracts() -> list[dict[str, str]]:
    return [json.loads(line) for line in (CRANFIELD / "corpus.jsonl").read_text().splitlines()]


def build_folder(root: Path, count: int, seed: int) -> list[Path]:
    rng = random.Random(seed)
    source = abstracts()
    words = sorted({w for a in source for w in a["text"].split() if w.isalpha() and len(w) > 4})
    files = []
    for number in range(count):
        abstract = source[number % len(source)]
        folder = root / f"topic {number % FOLDERS:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        own = " ".join(rng.sample(words, 6))
        body = abstract["text"].replace(" . ", " .\n")
        path = folder / f"note-{number:05d}.md"
        path.write_text(f"# {abstract['title']}\n\n{body}\n\nNote {number}: {own}\n")
        files.append(path)
    return files


def change(files: list[Path], share: float, seed: int) -> int:
    rng = random.Random(seed + 1)
    chosen = rng.sample(files, max(1, int(len(files) * share)))
    for path in chosen:
        path.write_text(path.read_text() + "\nEdited: one more line.\n")
    return len(chosen)


# --- LDIMS: ldims serve and its CLI ---------------------------------------------------------------
@dataclass
class Timing:
    command: float  # the CLI's own wall time
    completed: float  # until every document is completed (from the command's start)
    vectors: float | None  # until every vector is written
    summary: str


class Ldims:
    def __init__(self, data_dir: Path, model: str) -> None:
        self.data_dir = data_dir
        self.env = {"LDIMS_EMBEDDING_MODEL": model, "LDIMS_DEFAULT_TENANT": TENANT}
        self.settings = Settings(data_dir=data_dir, embedding_model=model)
        self.server: Server | None = None

    def start(self) -> None:
        port = free_port()
        command = [str(Path(sys.executable).parent / "ldims"), "serve"]
        env = self.env | {"LDIMS_PORT": str(port)}
        self.server = launch(command, self.data_dir, f"http://127.0.0.1:{port}/mcp", env)
        anyio.run(wait_ready, self.server, TENANT)

    def stop(self) -> None:
        if self.server is not None:
            stop_server(self.server)
            self.server = None

    def cli(self, *args: str) -> str:
        command = [str(Path(sys.executable).parent / "ldims"), *args]
        done = subprocess.run(
            command,
            env=server_env(self.data_dir) | self.env,
            cwd=self.data_dir,
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if done.returncode:
            raise RuntimeError(f"ldims {' '.join(args)}: {done.stderr}\n{done.stdout}")
        return done.stdout

    def timed(self, *args: str) -> Timing:
        catalog = Catalog(self.settings.catalog_url)
        started = time.perf_counter()
        out = self.cli(*args)
        command = time.perf_counter() - started
        completed = vectors = None
        deadline = started + 3600
        fingerprint = fingerprint_for(self.settings)
        while time.perf_counter() < deadline:
            with catalog.session() as session:
                counts = repository.count_by_status(session, TENANT)
                pending = 0
                if fingerprint is not None:
                    pending = repository.pending_vectors(session, fingerprint, TENANT)[0]
            busy = counts["queued"] + counts["processing"]
            now = time.perf_counter() - started
            if not busy and completed is None:
                completed = now
            if not busy and not pending:
                vectors = now if fingerprint is not None else None
                break
            time.sleep(0.2)
        catalog.dispose()
        if completed is None:
            raise RuntimeError(f"not completed within an hour: {counts}")
        line = next((x for x in out.splitlines() if x.startswith("Indexed:")), out.strip())
        return Timing(command, completed, vectors, line)


def qmd_timed(call: Any) -> tuple[float, str]:
    started = time.perf_counter()
    out = call()
    line = next((x for x in out.splitlines() if x.startswith("Indexed:")), out.strip()[:200])
    return time.perf_counter() - started, line


# --- the MCP load ------------------------------------------------------------------------------
def start_bench_server(data_dir: Path, model: str) -> Server:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--data-dir"]
    command += [str(data_dir), "--port", str(port), "--model", model]
    folder = data_dir / "bench-serve"
    folder.mkdir(exist_ok=True)
    return launch(
        command, folder, f"http://127.0.0.1:{port}/mcp", {"LDIMS_DATA_DIR": str(data_dir)}
    )


def start_qmd_http(qmd: QmdReference) -> Server:
    """``qmd mcp --http`` on a free port, over the index its ``collection add`` and
    ``update`` built (its own process group: the launcher runs the server in a child)."""
    port = free_port()
    command = [str(NODE), str(QMD_BIN), "mcp", "--http", "--port", str(port)]
    return launch(
        command, qmd.work, f"http://127.0.0.1:{port}/mcp", qmd.env, qmd.work / "mcp-http.log"
    )


@dataclass
class Calls:
    echo: list[dict[str, Any]]
    search: list[dict[str, Any]]
    query: list[dict[str, Any]]
    get: list[dict[str, Any]]
    multi_get: list[dict[str, Any]]


def make_calls(files: list[Path], root: Path, count: int, seed: int) -> Calls:
    rng = random.Random(seed + 2)
    source = abstracts()
    pairs = []
    while len(pairs) < count:
        a = rng.choice(source)["title"].split()
        kept = [w for w in a if w.isalpha() and len(w) > 4]
        if len(kept) >= 2:
            pairs.append(" ".join(rng.sample(kept, 2)))
    gets = []
    for _ in range(count):
        path = f"{NAME}/{rng.choice(files).relative_to(root).as_posix()}"
        if rng.random() < 1 / 3:
            path += f":{rng.randint(1, 8)}:5"
        gets.append({"file": path, "lineNumbers": True})
    globs = [
        {
            "pattern": f"topic {rng.randrange(FOLDERS):02d}/note-0{rng.randrange(50):02d}*.md",
            "maxLines": 20,
        }
        for _ in range(count)
    ]
    return Calls(
        echo=[{"text": p} for p in pairs],
        search=[{"query": p} for p in pairs],
        # Few distinct: after the warm-up their vectors come from the cache, so the phase
        # measures the hybrid search (a new query's embedding: bench/embed.py, mcp_search.py).
        query=[{"query": p} for p in pairs[:QUERY_VECTORS]],
        get=gets,
        multi_get=globs,
    )


class TreeCpu:
    """The CPU times of a process and its descendants (qmd's launcher runs the server in a
    child Node), as ``psutil.Process.cpu_times`` gives one process's."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.root = psutil.Process(pid)

    def cpu_times(self) -> Any:
        import psutil

        user = system = 0.0
        for process in [self.root, *self.root.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                user += times.user
                system += times.system
        return SimpleNamespace(user=user, system=system)


Spec = tuple[str, str, list[dict[str, Any]]]  # a phase's label, tool and arguments


def ldims_specs(calls: Calls, tools: Sequence[str]) -> list[Spec]:
    return [(tool, tool, getattr(calls, tool)) for tool in tools]


def qmd_specs(calls: Calls) -> list[Spec]:
    """The side-by-side phases on qmd's server: its BM25 search is ``query`` with one ``lex``
    sub-query and no reranking (no language model: qmd's own fast path)."""
    lex = [
        {"searches": [{"type": "lex", "query": call["query"]}], "rerank": False}
        for call in calls.search
    ]
    return [
        ("search", "query", lex),
        ("get", "get", calls.get),
        ("multi_get", "multi_get", calls.multi_get),
    ]


async def run_load(server: Server, specs: Sequence[Spec], args: argparse.Namespace) -> list[Phase]:
    await wait_ready(server, TENANT)
    process = TreeCpu(server.process.pid)
    async with contextlib.AsyncExitStack() as stack:
        clients = await connect(stack, server, args.clients, "auto")
        works = [
            Work(label, tool, clients, process, Rotation(feed, args.clients))  # type: ignore[arg-type]
            for label, tool, feed in specs
        ]
        for work in works:  # warm-up: searchers, caches, the query vectors
            await run_phase(work, args.warmup)
        phases = [Phase(w.label, w.tool, args.clients, args.seconds) for w in works]
        for _ in range(args.rounds):
            for work, phase in zip(works, phases, strict=True):
                await run_phase(work, args.seconds / args.rounds, phase)
    return phases


# --- the report --------------------------------------------------------------------------------
@dataclass
class Updates:
    files: int
    changed: int
    qmd_add: tuple[float, str]
    qmd_update: tuple[float, str]
    ldims_add: Timing
    ldims_update: Timing
    documents: int = 0
    notes: list[str] = field(default_factory=list)


def update_rows(updates: Updates) -> list[list[str]]:
    def seconds(value: float | None) -> str:
        return f"{value:.1f}" if value is not None else "—"

    return [
        [
            "first scan",
            "qmd `collection add`",
            seconds(updates.qmd_add[0]),
            "—",
            "—",
            updates.qmd_add[1],
        ],
        [
            "first scan",
            "LDIMS `ldims collection add`",
            seconds(updates.ldims_add.command),
            seconds(updates.ldims_add.completed),
            seconds(updates.ldims_add.vectors),
            updates.ldims_add.summary,
        ],
        [
            f"rescan, {updates.changed} changed",
            "qmd `update`",
            seconds(updates.qmd_update[0]),
            "—",
            "—",
            updates.qmd_update[1],
        ],
        [
            f"rescan, {updates.changed} changed",
            "LDIMS `ldims update`",
            seconds(updates.ldims_update.command),
            seconds(updates.ldims_update.completed),
            seconds(updates.ldims_update.vectors),
            updates.ldims_update.summary,
        ],
    ]


def load_rows(phases: Sequence[Phase]) -> list[list[str]]:
    echo = phases[0].rate or 1.0
    rows = []
    for phase in phases:
        errors = sum(phase.errors.values())
        rows.append(
            [
                f"`{phase.tool}`",
                str(phase.clients),
                str(phase.calls),
                f"{phase.rate:.1f}",
                f"{phase.rate / echo:.0%}",
                ms(percentile(phase.latencies, 50)),
                ms(percentile(phase.latencies, 95)),
                ms(percentile(phase.latencies, 99)),
                f"{errors}" + (f" ({dict(phase.errors)})" if errors else ""),
            ]
        )
    return rows


def side_by_side_rows(ldims: Sequence[Phase], qmd: Sequence[Phase]) -> list[list[str]]:
    ours = {phase.label: phase for phase in ldims}
    rows = []
    for theirs in qmd:
        mine = ours[theirs.label]

        def cpu(phase: Phase) -> str:
            calls = len(phase.latencies)
            return f"{phase.server_cpu / calls * 1000:.1f}" if calls else "—"

        rows.append(
            [
                f"`{theirs.label}`",
                f"{mine.rate:.1f}",
                f"{theirs.rate:.1f}",
                f"{mine.rate / theirs.rate:.2f}×" if theirs.rate else "—",
                f"{ms(percentile(mine.latencies, 50))} / {ms(percentile(mine.latencies, 95))}",
                f"{ms(percentile(theirs.latencies, 50))} / {ms(percentile(theirs.latencies, 95))}",
                f"{cpu(mine)} / {cpu(theirs)}",
                f"{sum(mine.errors.values())} / {sum(theirs.errors.values())}",
            ]
        )
    return rows


def report(
    args: argparse.Namespace, updates: Updates, phases: Sequence[Phase], qmd: Sequence[Phase]
) -> str:
    lines = ["# qmd benchmark", "", "## Updates: LDIMS beside qmd 2.8.3 on the same folder", ""]
    lines.append(
        markdown_table(
            ["scan", "system", "command s", "all completed s", "all vectors s", "its report"],
            update_rows(updates),
        )
    )
    lines += [
        "",
        f"- Folder: {updates.files} Markdown files in {FOLDERS} folders (Cranfield abstracts, each "
        f"with a line of its own), {updates.changed} of them then edited (1 %). qmd first, LDIMS "
        "second on each state of the folder.",
        "- qmd: `collection add` and `update` read, hash and index every file in FTS5 before "
        "they return (no models: it embeds nothing). LDIMS: *command* is `ldims collection add` "
        "/ `ldims update` alone (scan; a file of the same size and time not read; the others "
        "hashed, stored and recorded; extract messages queued); *all completed* until the "
        "pipeline of `ldims serve` (extract, index: Whoosh and qmd's FTS5 rows) has every "
        f"document completed and searchable; *all vectors* until the embed worker (`{args.model}`) "
        "wrote the last vector.",
        *updates.notes,
        "",
        "## The qmd tools over MCP HTTP, beside `echo` on the same server",
        "",
        markdown_table(
            [
                "tool",
                "clients",
                "calls",
                "calls/s",
                "of echo",
                "p50 ms",
                "p95 ms",
                "p99 ms",
                "errors",
            ],
            load_rows(phases),
        ),
        "",
        f"- {updates.documents} documents of collection `{NAME}`, one tenant. One uvicorn "
        "process (`create_app` + `echo`), the SDK clients in this process, phases in "
        f"{args.rounds} turns of {args.seconds / args.rounds:.0f} s each after a warm-up of "
        f"{args.warmup:.0f} s per tool.",
        "- `search`: two words of a Cranfield title (qmd's BM25: every word, FTS5); `query`: "
        f"{QUERY_VECTORS} such queries, whose vectors come from the cache after the warm-up "
        "(the model's cost per new query is bench/embed.py's), keyword and dense lists fused by "
        "RRF; `get`: a file, a third of them with a "
        "`:line:5` window, line-numbered; `multi_get`: a glob naming about ten files, "
        "`maxLines` 20.",
        "",
        "## LDIMS beside qmd 2.8.3 over MCP HTTP: the same folder, the same calls",
        "",
        markdown_table(
            [
                "tool",
                "LDIMS calls/s",
                "qmd calls/s",
                "LDIMS ÷ qmd",
                "LDIMS p50 / p95 ms",
                "qmd p50 / p95 ms",
                "server CPU-ms a call (LDIMS / qmd)",
                "errors (LDIMS / qmd)",
            ],
            side_by_side_rows(phases, qmd),
        ),
        "",
        f"- qmd: `qmd mcp --http` (Node 22) over the index its `collection add` and `update` "
        f"built of the same folder; LDIMS: the server of the table above. {args.clients} SDK "
        "clients of this process each, the same arguments in the same order, the same turns. "
        "qmd 2.8.3's MCP server has no `search` tool: its BM25 search is `query` with one "
        "`lex` sub-query and `rerank: false` (no language model). Its hybrid `query` is left "
        "out: it needs its local language models, which this machine has not (no network).",
        "- calls/s count answered calls. LDIMS's `search` errors are `TOO_MANY_REQUESTS`: 8 "
        "clients of one tenant over its share of the search slots "
        "(`LDIMS_SEARCH_CONCURRENCY_PER_TENANT`, 3 running and as many waiting for the qmd "
        "tools), refused with `Retry-After` by design; qmd has no such bound.",
        "",
        machine_line(),
        "",
        f"Command: `python bench/qmd.py {' '.join(sys.argv[1:])}`",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--model", default="use", help="embedding model of ldims serve")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="per tool, over all turns")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--calls", type=int, default=2000, help="distinct arguments per tool")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.data_dir, args.port, args.model)
        return 0
    logging.basicConfig(level=logging.WARNING)
    work = Path(tempfile.mkdtemp(prefix="ldims-qmd-bench-"))
    ldims = Ldims(work / "data", args.model)
    (work / "data").mkdir()
    try:
        folder = work / "folder"
        files = build_folder(folder, args.files, args.seed)
        print(f"{len(files)} files in {folder}", flush=True)
        qmd = QmdReference(work / "qmd")
        qmd_add = qmd_timed(lambda: qmd.collection_add(folder, NAME))
        print(f"qmd collection add: {qmd_add}", flush=True)
        ldims.start()
        ldims_add = ldims.timed("collection", "add", str(folder), "--name", NAME)
        print(f"ldims collection add: {ldims_add}", flush=True)
        changed = change(files, 0.01, args.seed)
        qmd_update = qmd_timed(qmd.update)
        print(f"qmd update: {qmd_update}", flush=True)
        ldims_update = ldims.timed("update")
        print(f"ldims update: {ldims_update}", flush=True)
        ldims.stop()
        updates = Updates(len(files), changed, qmd_add, qmd_update, ldims_add, ldims_update)
        catalog = Catalog(ldims.settings.catalog_url)
        with catalog.session() as session:
            updates.documents = sum(repository.count_by_status(session, TENANT).values())
        catalog.dispose()
        calls = make_calls(files, folder, args.calls, args.seed)
        tools = TOOLS if args.model != "none" else tuple(t for t in TOOLS if t != "query")
        server = start_bench_server(work / "data", args.model)
        try:
            phases = anyio.run(run_load, server, ldims_specs(calls, tools), args)
        finally:
            stop_process(server.process)
        qmd_server = start_qmd_http(qmd)
        try:
            qmd_phases = anyio.run(run_load, qmd_server, qmd_specs(calls), args)
        finally:
            stop_group(qmd_server)
    finally:
        ldims.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, updates, phases, qmd_phases)
    publish(text, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
