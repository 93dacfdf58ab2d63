"""Extraction overhead benchmark: what does the extractor process cost per small document?

What it measures
----------------
The extract worker reads every file through :class:`ExtractionSandbox` (a watched child
process); :func:`extract_file` is the same extraction in the calling process. For small files
the child's overhead, not the extraction, can decide how many documents a worker gets through.

1. **Generated small documents**: ``--docs`` (500) documents from ``bench/ingest.py``'s
   ``make_documents`` (1–8 KB of .md/.txt, Latin, Cyrillic and Chinese lines), written to a
   temporary directory; the type is detected from the first 8 KiB with ``detect_format`` (as at
   upload, not timed). Each mode reads all of them once, in order, after one untimed call:

   * **in-process**: ``extract_file`` in this process (the floor: no isolation);
   * **sandbox, warm child**: ``ExtractionSandbox.run`` with a child that is never recycled
     during the run (the per-file cost of the isolation alone);
   * **sandbox, recycled every N** (``--recycle-after``, default 50 like
     ``LDIMS_EXTRACT_RECYCLE_AFTER``): the child replaced every N files, so every N-th file
     pays a child start (interpreter, imports, parsers, language model) — what a run of
     native-parser files costs; plain text itself no longer counts toward recycling.

   Per mode: per-document wall ms (p50, p95 of ``time.perf_counter`` around the call), docs/s
   (files over the mode's total wall time), and CPU ms per document in this process
   (``time.process_time``) and in the extractor children (``psutil`` ``cpu_times`` of the live
   child; for the recycled mode ``RUSAGE_CHILDREN`` of the children that ended, minus what the
   first one had spent before the run).

2. **Real corpus files**: the files of ``../shared/corpus/docs`` of at most 64 KiB whose type is
   text, Markdown, HTML, PDF or DOCX and that extract without error (read in place; Tika formats
   are left out so this process does not load iscc-tika), ``--corpus-repeat`` passes, in-process
   and in a warm child.

3. **Components**: the single operations the sandbox and its child perform per file, timed in
   isolation (mean of many calls): psutil process handle creation, ``memory_info``,
   ``children(recursive=True)`` (reads every process's stat file: grows with the machine's
   process count), the ``/proc/<pid>/task/*/children`` walk, pickling a result both ways, and a
   full ``gc.collect()`` in a fresh interpreter that has loaded every parser (``warm_up``),
   without and with ``gc.freeze()`` (run in a child: ``--gc-child``).

How to run (from the project root)::

    .venv/bin/python bench/extract_overhead.py
    .venv/bin/python bench/extract_overhead.py --docs 1000 --recycle-after 50

The Markdown tables are printed and written to ``bench/results/extract_overhead.md``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil
from ingest import make_documents
from report import machine_line, markdown_table, ms, percentile, publish

from ldims.errors import ProcessingError
from workers.extraction import ExtractionLimits, ExtractionSandbox, detect_format, extract_file

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "extract_overhead.md"
HEAD_BYTES = 8192  # what BlobStore keeps for type detection at upload
CORPUS_MAX_BYTES = 64 * 1024
CORPUS_TYPES = (
    "text/plain",
    "text/markdown",
    "text/html",
    "application/pdf",
    "application/zip",  # DOCX before the registry refines it; other ZIPs are dropped below
)
Job = tuple[Path, str]


@dataclass
class ModeRun:
    name: str
    times: list[float]
    wall: float
    parent_cpu: float
    child_cpu: float | None

    def row(self, baseline: float | None) -> list[str]:
        p50 = percentile(self.times, 50)
        count = len(self.times)
        slower = f"{p50 / baseline:.1f}×" if baseline and p50 else "—"
        child = "—" if self.child_cpu is None else f"{self.child_cpu / count * 1000:.2f}"
        return [
            self.name,
            str(count),
            ms(p50),
            ms(percentile(self.times, 95)),
            ms(max(self.times)),
            f"{count / self.wall:.0f}",
            f"{self.parent_cpu / count * 1000:.2f}",
            child,
            slower,
        ]


HEADER = [
    "mode",
    "docs",
    "p50 ms",
    "p95 ms",
    "max ms",
    "docs/s",
    "CPU ms/doc (this process)",
    "CPU ms/doc (extractor child)",
    "p50 vs in-process",
]


# --- the documents -----------------------------------------------------------------------------


def generated_jobs(count: int, directory: Path) -> list[Job]:
    jobs = []
    for doc in make_documents(count):
        path = directory / doc.name
        path.write_bytes(doc.data)
        jobs.append((path, detect_format(doc.data[:HEAD_BYTES], doc.name)))
    return jobs


def corpus_jobs(limits: ExtractionLimits) -> list[Job]:
    jobs = []
    for path in sorted(DOCS.iterdir()):
        if not path.is_file() or path.suffix == ".tsv" or path.stat().st_size > CORPUS_MAX_BYTES:
            continue
        mime = detect_format(path.read_bytes()[:HEAD_BYTES], path.name)
        if mime not in CORPUS_TYPES or (mime == "application/zip" and path.suffix != ".docx"):
            continue
        try:
            extract_file(path, mime, limits)
        except ProcessingError:
            continue
        jobs.append((path, mime))
    return jobs


# --- the modes ---------------------------------------------------------------------------------


def timed(jobs: Sequence[Job], call: Callable[[Path, str], object]) -> tuple[list[float], float]:
    times = []
    started = time.perf_counter()
    for path, mime in jobs:
        before = time.perf_counter()
        call(path, mime)
        times.append(time.perf_counter() - before)
    return times, time.perf_counter() - started


def in_process(name: str, jobs: Sequence[Job], limits: ExtractionLimits) -> ModeRun:
    extract_file(*jobs[0], limits)
    cpu = time.process_time()
    times, wall = timed(jobs, lambda path, mime: extract_file(path, mime, limits))
    return ModeRun(name, times, wall, time.process_time() - cpu, None)


def warm_child(name: str, jobs: Sequence[Job], limits: ExtractionLimits) -> ModeRun:
    with ExtractionSandbox(recycle_after=len(jobs) + 10) as sandbox:
        sandbox.run(*jobs[0], limits)
        assert sandbox.pid is not None
        child = psutil.Process(sandbox.pid)
        child_cpu = _cpu(child)
        cpu = time.process_time()
        times, wall = timed(jobs, lambda path, mime: sandbox.run(path, mime, limits))
        parent_cpu = time.process_time() - cpu
        assert sandbox.pid == child.pid, "the warm child was replaced during the run"
        child_cpu = _cpu(child) - child_cpu
    return ModeRun(name, times, wall, parent_cpu, child_cpu)


def recycled(name: str, jobs: Sequence[Job], limits: ExtractionLimits, every: int) -> ModeRun:
    # A fresh sandbox and a run that ``every`` divides: each child is started and ended inside
    # the run (one start per ``every`` files, as in a worker), so RUSAGE_CHILDREN holds their
    # whole CPU.
    jobs = jobs[: len(jobs) - len(jobs) % every]
    ended = _children_cpu()
    cpu = time.process_time()
    with ExtractionSandbox(recycle_after=len(jobs) + 10) as sandbox:
        done = 0

        def run(path: Path, mime: str) -> object:
            # Plain text no longer wears the child out (it is recycled after native-parser
            # files only): replaced here by hand every ``every`` files, as such files would.
            nonlocal done
            result = sandbox.run(path, mime, limits)
            done += 1
            if done % every == 0:
                sandbox.close()
            return result

        times, wall = timed(jobs, run)
        assert sandbox.pid is None, "the last file should have recycled the child"
    return ModeRun(name, times, wall, time.process_time() - cpu, _children_cpu() - ended)


def _cpu(process: psutil.Process) -> float:
    user, system = process.cpu_times()[:2]
    return float(user + system)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- components --------------------------------------------------------------------------------


def mean_seconds(call: Callable[[], object], count: int = 200) -> float:
    started = time.perf_counter()
    for _ in range(count):
        call()
    return (time.perf_counter() - started) / count


def proc_descendants(pid: int) -> list[int]:
    """Descendants from ``/proc/<pid>/task/*/children`` (what the kernel keeps per thread)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        for task in os.listdir(f"/proc/{current}/task"):
            with open(f"/proc/{current}/task/{task}/children") as file:
                children = [int(child) for child in file.read().split()]
            found += children
            todo += children
    return found


def component_rows(jobs: Sequence[Job], limits: ExtractionLimits) -> list[list[str]]:
    from workers.extraction.text import extract_text

    with ExtractionSandbox() as sandbox:
        sandbox.run(*jobs[0], limits)
        assert sandbox.pid is not None
        pid = sandbox.pid
        child = psutil.Process(pid)
        rows = [
            ("`psutil.Process(pid)`", mean_seconds(lambda: psutil.Process(pid))),
            ("`Process.memory_info()`", mean_seconds(child.memory_info)),
            ("`Process.children(recursive=True)`", mean_seconds(child.children)),
            ("`/proc/<pid>/task/*/children` walk", mean_seconds(lambda: proc_descendants(pid))),
        ]
    results = [extract_file(path, mime, limits) for path, mime in jobs[:200]]
    data = [(path.read_bytes(), mime) for path, mime in jobs[:200]]
    count = len(results)

    def each(call: Callable[[object], object], items: Sequence[object]) -> float:
        return mean_seconds(lambda: [call(item) for item in items], 3) / count

    rows += [
        (
            "pickle + unpickle of a result (protocol 5)",
            each(lambda result: pickle.loads(pickle.dumps(result, protocol=5)), results),
        ),
        (
            "`extract_text` (decode + sections, no language id)",
            each(lambda d: extract_text(*d), data),
        ),
        (
            "`extract_file` (all of it, in-process)",
            each(lambda j: extract_file(*j, limits), jobs[:200]),
        ),
    ]
    gc_times = json.loads(
        subprocess.run(
            [sys.executable, __file__, "--gc-child"],
            check=True,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            },
        ).stdout.splitlines()[-1]
    )
    rows += [
        (f"full `gc.collect()` after `warm_up` ({gc_times['objects']} objects)", gc_times["plain"]),
        ("full `gc.collect()` after `warm_up`, then `gc.freeze()`", gc_times["frozen"]),
    ]
    return [[name, f"{seconds * 1000:.3f}"] for name, seconds in rows]


def gc_child() -> int:
    """In a fresh interpreter: the cost of a full collection with every parser loaded."""
    from workers.extraction.registry import warm_up

    warm_up()
    objects = len(gc.get_objects())
    plain = min(mean_seconds(gc.collect, 1) for _ in range(10))
    gc.freeze()
    frozen = min(mean_seconds(gc.collect, 1) for _ in range(10))
    print(json.dumps({"objects": objects, "plain": plain, "frozen": frozen}))
    return 0


# --- report and main ---------------------------------------------------------------------------


def report(
    modes: list[ModeRun],
    corpus: list[ModeRun],
    corpus_files: list[Job],
    components: list[list[str]],
    args: argparse.Namespace,
    wall: float,
) -> str:
    base = percentile(modes[0].times, 50)
    corpus_base = percentile(corpus[0].times, 50) if corpus else None
    names = ", ".join(path.name for path, _ in corpus_files)
    parts = [
        "# Extraction overhead: small documents, in-process vs the extractor process",
        "",
        f"## {args.docs} generated documents (1–8 KB .md/.txt, Latin, Cyrillic and Chinese)",
        "",
        markdown_table(HEADER, [mode.row(base) for mode in modes]),
        "",
        f"## Real corpus files ≤ {CORPUS_MAX_BYTES // 1024} KiB ({len(corpus_files)} files × "
        f"{args.corpus_repeat} passes)",
        "",
        markdown_table(HEADER, [mode.row(corpus_base) for mode in corpus]),
        "",
        f"Files: {names}.",
        "",
        "## Components (ms per call)",
        "",
        markdown_table(["operation", "ms"], components),
        "",
        f"- Whole benchmark: {wall:.0f} s. Recycled mode: {args.recycle_after} files per child "
        "(LDIMS_EXTRACT_RECYCLE_AFTER's default is 50), its child starts counted in the run: "
        "one file in each child pays the start (the max column), so the percentiles hide it "
        "and docs/s and the child's CPU show it.",
        f"- Processes on the machine during the run: {len(psutil.pids())} "
        "(`children(recursive=True)` reads each one's stat file).",
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/extract_overhead.py --docs {args.docs} "
        f"--recycle-after {args.recycle_after} --corpus-repeat {args.corpus_repeat}`",
    ]
    return "\n".join(parts) + "\n"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=500, help="generated documents")
    parser.add_argument("--recycle-after", type=int, default=50, help="files per child")
    parser.add_argument("--corpus-repeat", type=int, default=5, help="passes over corpus files")
    parser.add_argument("--gc-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.gc_child:
        return gc_child()
    started = time.perf_counter()
    limits = ExtractionLimits()
    with tempfile.TemporaryDirectory(prefix="ldims-overhead-") as directory:
        jobs = generated_jobs(args.docs, Path(directory))
        print(f"{len(jobs)} generated documents ...", flush=True)
        modes = [
            in_process("in-process `extract_file`", jobs, limits),
            warm_child("sandbox, warm child", jobs, limits),
            recycled(
                f"sandbox, child recycled every {args.recycle_after}",
                jobs,
                limits,
                args.recycle_after,
            ),
        ]
        components = component_rows(jobs, limits)
    corpus_files = corpus_jobs(limits)
    print(f"{len(corpus_files)} corpus files ...", flush=True)
    repeated = corpus_files * args.corpus_repeat
    corpus = [
        in_process("in-process `extract_file`", repeated, limits),
        warm_child("sandbox, warm child", repeated, limits),
    ]
    text = report(modes, corpus, corpus_files, components, args, time.perf_counter() - started)
    publish(text, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
