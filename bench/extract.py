"""Extraction benchmark: how fast, and in how much memory, does the worker read real documents?

What it measures
----------------
1. **The real worker path.** Every file of ``../shared/corpus/docs`` (listed in its
   ``manifest.tsv``, read in place) goes through :class:`ExtractionSandbox` — the watched child
   process the extract worker uses — with default :class:`ExtractionLimits` (``--tika-url``
   sets the Tika server; without it Tika formats run in-process with iscc-tika). The type is
   detected from the first 8 KiB with ``detect_format``, as at upload. The files of each type
   (ZIP/OLE2 refined as the registry does) run in a fresh child, so a format's peak RSS is not
   what an earlier format left behind; each child is warmed up with one small Markdown file,
   and that first call (interpreter start, the child loading its parsers, language model and
   Tika) is reported as the start-up and counted nowhere else. Then ``--repeat`` passes over
   the type's files; a file's time is the median of its passes (so a first-use cost in the
   first pass does not count), measured around ``sandbox.run`` (IPC and unpickling included).
   Files that raise are listed with their code in the failures table, including unexpected
   exceptions, so an extractor still being written cannot stop the benchmark.

   Per format (``result.format``): pages (``len(result.pages)``; a text file is one page),
   MB (10^6 bytes of input), pages/s and MB/s over the sum of the files' medians, the median
   of the per-file medians, and the peak RSS of the child (``sandbox.last_peak_rss``, sampled
   every 50 ms while a file is extracted; the maximum over the format's files in the first
   pass, when each file has been seen once, as in a worker; a child that keeps growing over the
   later passes is named in the notes).

2. **PDF baselines, same run, same PDFs** (those the worker extracted):

   * plain pdfplumber: ``pdfplumber.open``, ``page.extract_text()`` and ``page.close()`` per
     page, in a fresh child process (``python bench/extract.py --baseline-child``, which
     imports nothing but pdfplumber) timed the same way (median of ``--baseline-repeat``
     runs); its peak RSS is the child's ``ru_maxrss``;
   * LDIMS page text alone, in this process: the loop of ``workers/extraction/pdf.py``
     (pypdfium2 open with an empty password, ``get_textpage``, ``get_text_bounded``, close,
     control characters dropped, ``clean_text``) without table search, running-header
     detection or outline, median of ``--text-repeat`` runs.

   The speed-up is pdfplumber's total time over page text's total time on the PDFs both read
   (the same pages), checked against the target of 20×.

How to run (from the project root)::

    .venv/bin/python bench/extract.py
    .venv/bin/python bench/extract.py --repeat 5 --baseline-repeat 3 --tika-url http://localhost:9998

The Markdown tables are printed and written to ``bench/results/extract.md`` (overwritten).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from report import DASH, machine_line, publish

# LDIMS, pdfplumber and pypdfium2 are imported inside the functions that use them: the
# pdfplumber baseline child runs this same file, and its peak RSS must be pdfplumber's alone.
if TYPE_CHECKING:
    import ocr_pages

    from workers.extraction import ExtractionLimits, ExtractionSandbox

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "extract.md"
WARM_UP_FILE = "docling__wiki.md"
HEAD_BYTES = 8192  # what BlobStore keeps for type detection at upload
TARGET = 20.0
MB = 1_000_000
MIB = 1024 * 1024
PDF = "application/pdf"
FORMAT_NAMES = {
    PDF: "PDF",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "DOCX",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "PPTX",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "XLSX",
    "text/html": "HTML",
    "application/rtf": "RTF",
    "application/epub+zip": "EPUB",
    "application/msword": "DOC",
    "text/plain": "text",
    "text/markdown": "Markdown",
}
# As in workers/extraction/pdf.py: pdfium's soft-hyphen marks and broken-font noise.
_CONTROL = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")


def format_name(mime: str) -> str:
    return FORMAT_NAMES.get(mime, mime)


# --- corpus and the worker path ----------------------------------------------------------------


@dataclass(frozen=True)
class CorpusFile:
    path: Path
    size: int
    note: str  # the manifest's "exercises" column
    mime: str  # detected from the head, as at upload
    kind: str  # ZIP/OLE2 refined to the real type, as the registry does


@dataclass
class Outcome:
    """What the worker did with one file over the repeats."""

    file: CorpusFile
    times: list[float] = field(default_factory=list)
    peak_rss: int = 0  # over all passes
    first_peak: int = 0  # in the first pass
    growth: int = 0  # how far it raised the child's peak RSS in the first pass
    format: str = ""
    extractor: str = ""
    pages: int = 0
    chars: int = 0
    error: tuple[str, str, str] | None = None  # (exception type, code, message)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclass
class WorkerRun:
    outcomes: list[Outcome]
    startups: list[float]  # first call of each fresh child, warm-up file included
    warm_up_median: float
    idle_rss: int
    restarts: int
    tika_types: tuple[str, ...]


def load_corpus(docs: Path) -> list[CorpusFile]:
    from workers.extraction import detect_format

    files = []
    lines = (docs / "manifest.tsv").read_text(encoding="utf-8").splitlines()[1:]
    for line in lines:
        if not line.strip():
            continue
        name, *_, note = line.split("\t")
        path = docs / name
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
        mime = detect_format(head, name)
        files.append(CorpusFile(path, path.stat().st_size, note, mime, _kind(path, mime)))
    return files


def _kind(path: Path, mime: str) -> str:
    """The type the registry will dispatch on (ZIP/OLE2 refined), for grouping files."""
    from ldims.errors import PermanentError
    from workers.extraction.containers import refine_container_format

    try:
        return refine_container_format(path, mime)
    except PermanentError:
        return mime  # it fails in the worker too, with the same code


def run_once(sandbox: ExtractionSandbox, outcome: Outcome, limits: ExtractionLimits) -> None:
    """One extraction of ``outcome.file`` in the sandbox; a failure is recorded, not raised."""
    from ldims.errors import PermanentError

    started = time.perf_counter()
    try:
        result = sandbox.run(outcome.file.path, outcome.file.mime, limits)
    except PermanentError as exc:
        outcome.error = (type(exc).__name__, exc.code, exc.message)
        return
    except Exception as exc:  # an extractor still being written must not stop the benchmark
        message = getattr(exc, "message", None) or str(exc)
        outcome.error = (type(exc).__name__, getattr(exc, "code", DASH), message)
        return
    outcome.times.append(time.perf_counter() - started)
    outcome.peak_rss = max(outcome.peak_rss, sandbox.last_peak_rss)
    outcome.format, outcome.extractor = result.format, result.extractor
    outcome.pages, outcome.chars = len(result.pages), len(result.text)


def start_child(sandbox: ExtractionSandbox, warm: Outcome, limits: ExtractionLimits) -> float:
    """Stop the child, start a fresh one with the warm-up file; the seconds that first call took."""
    sandbox.close()
    warm.times.clear()
    run_once(sandbox, warm, limits)
    if warm.error or sandbox.pid is None:
        raise RuntimeError(f"warm-up extraction of {WARM_UP_FILE} failed: {warm.error}")
    return warm.times[0]


def groups_by_kind(outcomes: list[Outcome]) -> list[list[Outcome]]:
    groups: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        groups.setdefault(outcome.file.kind, []).append(outcome)
    order = list(FORMAT_NAMES)
    return [groups[kind] for kind in sorted(groups, key=lambda kind: _index(order, kind))]


def _index(order: list[str], kind: str) -> int:
    return order.index(kind) if kind in order else len(order)


def run_worker(files: list[CorpusFile], args: argparse.Namespace) -> WorkerRun:
    """Each type's files in a fresh child (so its peak RSS is its own), ``--repeat`` passes."""
    import psutil

    from workers.extraction import ExtractionLimits, ExtractionSandbox
    from workers.extraction.registry import TIKA_TYPES

    limits = ExtractionLimits(tika_url=args.tika_url)
    sandbox = ExtractionSandbox(recycle_after=args.recycle_after)
    outcomes = [Outcome(file) for file in files]
    warm = Outcome(next(f for f in files if f.path.name == WARM_UP_FILE))
    startups: list[float] = []
    restarts = 0
    try:
        startups.append(start_child(sandbox, warm, limits))
        idle_rss = psutil.Process(sandbox.pid).memory_info().rss
        for _ in range(3):
            run_once(sandbox, warm, limits)
        warm_median = statistics.median(warm.times[1:])
        for group in groups_by_kind(outcomes):
            print(f"worker: {len(group)} {format_name(group[0].file.kind)} files ...", flush=True)
            startups.append(start_child(sandbox, warm, limits))
            level = sandbox.last_peak_rss
            for number in range(args.repeat):
                for outcome in group:
                    if outcome.error is None:
                        run_once(sandbox, outcome, limits)
                        restarts += sandbox.pid is None  # recycled or killed: new child next
                    if number == 0 and outcome.error is None:
                        # The child keeps what it grew to, so the peak of a later file says
                        # little; the growth in the first pass names the file that needed it.
                        outcome.first_peak = outcome.peak_rss
                        outcome.growth = max(0, outcome.peak_rss - level)
                        level = max(level, outcome.peak_rss)
    finally:
        sandbox.close()
    return WorkerRun(outcomes, startups, warm_median, idle_rss, restarts, TIKA_TYPES)


# --- PDF baselines -----------------------------------------------------------------------------


def pdfplumber_text(path: str) -> tuple[int, int]:
    """Plain pdfplumber text extraction of every page: (pages, characters)."""
    import pdfplumber

    chars = 0
    with pdfplumber.open(path) as pdf:
        for page in pdf.pages:
            chars += len(page.extract_text() or "")
            page.close()
        return len(pdf.pages), chars


def pdfium_page_text(path: str) -> tuple[int, int]:
    """LDIMS's page-text step alone (the loop of workers/extraction/pdf.py): (pages, chars)."""
    import pypdfium2

    from workers.extraction.common import clean_text

    pdf = pypdfium2.PdfDocument(path, password="")
    try:
        chars = 0
        for index in range(len(pdf)):
            try:
                page = pdf.get_page(index)
            except pypdfium2.PdfiumError:
                continue  # a broken page stays empty, as in the extractor
            try:
                textpage = page.get_textpage()
                try:
                    chars += len(clean_text(_CONTROL.sub("", textpage.get_text_bounded())))
                finally:
                    textpage.close()
            finally:
                page.close()
        return len(pdf), chars
    finally:
        pdf.close()


def time_files(
    function: Callable[[str], tuple[int, int]], paths: Sequence[str], repeat: int
) -> dict[str, dict]:
    """Per path: the times of ``repeat`` calls, pages and characters, or the error."""
    report: dict[str, dict] = {}
    for path in paths:
        times = []
        try:
            for _ in range(repeat):
                started = time.perf_counter()
                pages, chars = function(path)
                times.append(time.perf_counter() - started)
        except Exception as exc:  # a baseline that cannot read a file leaves it out, named
            report[path] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        report[path] = {"times": times, "pages": pages, "chars": chars}
    return report


def baseline_child(repeat: int) -> int:
    """``--baseline-child``: pdfplumber over the paths on stdin, JSON report on stdout."""
    paths = json.load(sys.stdin)
    import pdfplumber  # noqa: F401  (loaded before timing: start-up is not per file)

    report = time_files(pdfplumber_text, paths, repeat)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    json.dump({"files": report, "peak_rss": peak_kib * 1024}, sys.stdout)
    return 0


def run_pdfplumber_child(paths: list[str], repeat: int) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--baseline-child"]
    command += ["--baseline-repeat", str(repeat)]
    done = subprocess.run(command, input=json.dumps(paths), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"pdfplumber baseline child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


@dataclass
class PdfComparison:
    outcomes: list[Outcome]  # PDFs the worker and both baselines read
    plumber: dict[str, dict]
    page_text: dict[str, dict]
    plumber_rss: int
    left_out: list[str]  # "file: reason" for PDFs a baseline could not read


def compare_pdfs(worker: WorkerRun, args: argparse.Namespace) -> PdfComparison:
    pdfs = [o for o in worker.outcomes if o.error is None and o.format == PDF]
    paths = [str(o.file.path) for o in pdfs]
    print(f"pdfplumber baseline on {len(paths)} PDFs (child process) ...", flush=True)
    plumber = run_pdfplumber_child(paths, args.baseline_repeat)
    print("LDIMS page text (pypdfium2) in-process ...", flush=True)
    if paths:
        pdfium_page_text(min(paths, key=lambda path: Path(path).stat().st_size))  # load modules
    page_text = time_files(pdfium_page_text, paths, args.text_repeat)
    both, left_out = [], []
    for outcome in pdfs:
        key = str(outcome.file.path)
        errors = [m[key]["error"] for m in (plumber["files"], page_text) if "error" in m[key]]
        if errors:
            left_out.append(f"{outcome.file.path.name}: {'; '.join(errors)}")
        else:
            both.append(outcome)
    return PdfComparison(both, plumber["files"], page_text, plumber["peak_rss"], left_out)


# --- report ------------------------------------------------------------------------------------


def median_of(entry: dict) -> float:
    return statistics.median(entry["times"])


def rate(amount: float, seconds: float) -> str:
    return DASH if seconds <= 0 else f"{amount / seconds:.1f}"


def mib(value: int) -> str:
    return f"{value / MIB:.0f}" if value else DASH


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def extractor_label(group: list[Outcome], worker: WorkerRun, tika_url: str | None) -> str:
    names = ", ".join(sorted({o.extractor for o in group}))
    if group[0].format not in worker.tika_types:
        return names
    return f"{names} (Tika server {tika_url})" if tika_url else f"{names} (in-process iscc-tika)"


def format_rows(worker: WorkerRun, tika_url: str | None) -> list[list[str]]:
    groups: dict[str, list[Outcome]] = {}
    for outcome in worker.outcomes:
        if outcome.error is None:
            groups.setdefault(outcome.format, []).append(outcome)
    order = list(FORMAT_NAMES)
    rows = []
    for mime in sorted(groups, key=lambda m: order.index(m) if m in order else len(order)):
        group = groups[mime]
        seconds = sum(o.median for o in group)
        pages = sum(o.pages for o in group)
        size = sum(o.file.size for o in group) / MB
        rows.append(
            [
                format_name(mime),
                extractor_label(group, worker, tika_url),
                str(len(group)),
                str(pages),
                f"{size:.2f}",
                f"{seconds:.2f}",
                rate(pages, seconds),
                rate(size, seconds),
                f"{statistics.median(o.median for o in group) * 1000:.1f}",
                mib(max(o.first_peak for o in group)),
            ]
        )
    return rows


FORMAT_HEADER = [
    "format",
    "extractor",
    "files",
    "pages",
    "MB",
    "total s",
    "pages/s",
    "MB/s",
    "median ms/file",
    "peak RSS MiB",
]


def comparison_rows(cmp: PdfComparison) -> tuple[list[list[str]], float]:
    keys = [str(o.file.path) for o in cmp.outcomes]
    pages = sum(o.pages for o in cmp.outcomes)
    size = sum(o.file.size for o in cmp.outcomes) / MB
    plumber_s = sum(median_of(cmp.plumber[k]) for k in keys)
    text_s = sum(median_of(cmp.page_text[k]) for k in keys)
    worker_s = sum(o.median for o in cmp.outcomes)

    def row(name: str, where: str, seconds: float, chars: int, rss: str) -> list[str]:
        speed = f"{plumber_s / seconds:.1f}×" if seconds > 0 else DASH
        return [
            name,
            where,
            f"{seconds:.2f}",
            rate(pages, seconds),
            rate(size, seconds),
            str(chars),
            rss,
            speed,
        ]

    rows = [
        row(
            "pdfplumber `extract_text()`",
            "plain child process",
            plumber_s,
            sum(cmp.plumber[k]["chars"] for k in keys),
            mib(cmp.plumber_rss),
        ),
        row(
            "LDIMS page text only (pypdfium2)",
            "in-process",
            text_s,
            sum(cmp.page_text[k]["chars"] for k in keys),
            DASH,
        ),
        row(
            "LDIMS full PDF extraction (text+tables+outline)",
            "ExtractionSandbox child",
            worker_s,
            sum(o.chars for o in cmp.outcomes),
            mib(max((o.first_peak for o in cmp.outcomes), default=0)),
        ),
    ]
    return rows, (plumber_s / text_s if text_s > 0 else 0.0)


COMPARISON_HEADER = [
    "method",
    "where",
    "total s",
    "pages/s",
    "MB/s",
    "chars",
    "peak RSS MiB",
    "speed vs pdfplumber",
]


def per_pdf_rows(cmp: PdfComparison) -> list[list[str]]:
    rows = []
    for o in sorted(cmp.outcomes, key=lambda o: -o.pages):
        key = str(o.file.path)
        plumber, text = median_of(cmp.plumber[key]), median_of(cmp.page_text[key])
        rows.append(
            [
                o.file.path.name,
                str(o.pages),
                f"{o.file.size / 1024:.0f}",
                f"{o.median * 1000:.1f}",
                f"{text * 1000:.1f}",
                f"{plumber * 1000:.1f}",
                f"{plumber / text:.1f}×" if text > 0 else DASH,
                f"{cmp.page_text[key]['chars']} / {cmp.plumber[key]['chars']}",
            ]
        )
    return rows


PER_PDF_HEADER = [
    "PDF",
    "pages",
    "KiB",
    "worker ms",
    "page text ms",
    "pdfplumber ms",
    "page text speed-up",
    "chars pdfium / pdfplumber",
]


def failure_rows(worker: WorkerRun) -> list[list[str]]:
    rows = []
    for o in worker.outcomes:
        if o.error is None:
            continue
        kind, code, message = o.error
        if message.startswith(("The parser could not read", "The extractor crashed")):
            kind += " (parser exception in the child)"
        message = " ".join(message.split())[:160].replace("|", "/")
        rows.append([o.file.path.name, format_name(o.file.mime), code, kind, message, o.file.note])
    return rows


FAILURE_HEADER = ["file", "type", "code", "raised", "message", "manifest says"]


def notes(
    worker: WorkerRun, cmp: PdfComparison, args: argparse.Namespace, wall: float
) -> list[str]:
    ok = [o for o in worker.outcomes if o.error is None]
    pdf_pages = sum(o.pages for o in cmp.outcomes)
    growths = sorted(ok, key=lambda o: -o.growth)[:4]
    lines = [
        f"Corpus: {len(worker.outcomes)} files in {DOCS} ({len(ok)} extracted, "
        f"{len(worker.outcomes) - len(ok)} failed); each extracted file {args.repeat}× "
        "(median per file).",
        f"Worker start-up: a fresh child's first call ({WARM_UP_FILE}; the child's start: "
        "interpreter, parsers, language model, Tika) took "
        f"{statistics.median(worker.startups) * 1000:.0f} ms (median of "
        f"{len(worker.startups)} starts, {min(worker.startups) * 1000:.0f}-"
        f"{max(worker.startups) * 1000:.0f} ms), the same file afterwards "
        f"{worker.warm_up_median * 1000:.1f} ms; child RSS at rest after it "
        f"{worker.idle_rss / MIB:.0f} MiB (part of every peak below). Each type ran in a fresh "
        f"child; unplanned child restarts {worker.restarts} (recycle after "
        f"{args.recycle_after} files; the worker's own setting is LDIMS_EXTRACT_RECYCLE_AFTER).",
        "Files that raised the child's peak RSS most (first pass, over the type's earlier "
        "files): "
        + ", ".join(f"{o.file.path.name} +{o.growth / MIB:.0f} MiB" for o in growths)
        + ".",
        "Child RSS over the repeats of the same files (first pass → all passes): "
        + (", ".join(growing_formats(ok)) or "no format grew by more than 10%")
        + ".",
        "Tika formats: "
        + (f"Tika server at {args.tika_url}." if args.tika_url else "in-process iscc-tika."),
        f"PDF comparison: {len(cmp.outcomes)} PDFs, {pdf_pages} pages; pdfplumber "
        f"{args.baseline_repeat}× per file, page text {args.text_repeat}× per file (median)."
        + (f" Left out: {'; '.join(cmp.left_out)}." if cmp.left_out else ""),
        "Peak RSS: worker = child RSS sampled every 50 ms (`last_peak_rss`, a lower bound); "
        "pdfplumber = the child's `ru_maxrss` (exact). Both include the Python interpreter.",
        f"Whole benchmark: {wall:.0f} s.",
    ]
    return lines


def growing_formats(ok: list[Outcome]) -> list[str]:
    """Formats whose child kept growing after every file had been seen once (leak or heap)."""
    first: dict[str, int] = {}
    final: dict[str, int] = {}
    for o in ok:
        first[o.format] = max(first.get(o.format, 0), o.first_peak)
        final[o.format] = max(final.get(o.format, 0), o.peak_rss)
    return [
        f"{format_name(mime)} {first[mime] / MIB:.0f} → {final[mime] / MIB:.0f} MiB"
        for mime in first
        if final[mime] > first[mime] * 1.1
    ]


def command_line(args: argparse.Namespace) -> str:
    command = (
        f".venv/bin/python bench/extract.py --repeat {args.repeat} "
        f"--baseline-repeat {args.baseline_repeat} --text-repeat {args.text_repeat} "
        f"--recycle-after {args.recycle_after}"
    )
    return command + (f" --tika-url {args.tika_url}" if args.tika_url else "")


def report(
    worker: WorkerRun,
    cmp: PdfComparison,
    args: argparse.Namespace,
    wall: float,
    ocr: tuple[list[ocr_pages.OcrRow], list[str]] | None = None,
) -> str:
    comparison, speed_up = comparison_rows(cmp)
    verdict = "PASS" if speed_up >= TARGET else "FAIL"
    failures = failure_rows(worker)
    parts = [
        "# Extraction benchmark",
        "",
        "## Worker path (ExtractionSandbox), per format",
        "",
        table(FORMAT_HEADER, format_rows(worker, args.tika_url)),
        "",
        "## PDF: page text vs pdfplumber (same PDFs, same run)",
        "",
        table(COMPARISON_HEADER, comparison),
        "",
        f"**Target: LDIMS page text ≥ {TARGET:.0f}× pdfplumber's speed — {verdict} "
        f"({speed_up:.1f}×).**",
        "",
        table(PER_PDF_HEADER, per_pdf_rows(cmp)),
        "",
        *(_ocr_section(ocr) if ocr else []),
        f"## Files that did not extract ({len(failures)})",
        "",
        table(FAILURE_HEADER, failures) if failures else "None.",
        "",
        *(f"- {line}" for line in notes(worker, cmp, args, wall)),
        "",
        machine_line(),
        "",
        f"Command: `{command_line(args)}`",
    ]
    return "\n".join(parts) + "\n"


def _ocr_section(ocr: tuple[list[ocr_pages.OcrRow], list[str]]) -> list[str]:
    import ocr_pages  # noqa: PLC0415 (not in the pdfplumber baseline child)

    rows, lines = ocr
    return [
        "## OCR: scanned pages through the worker path (Tesseract, 300 dpi)",
        "",
        table(ocr_pages.HEADER, ocr_pages.table_rows(rows)),
        "",
        "The text-layer path for comparison: the `application/pdf` row of the per-format table "
        "above (the same sandbox, PDFs with a text layer). CER: character error rate of the "
        "recognized text against the paragraphs the pages were rendered from "
        "(`bench/ocr_pages.py`).",
        "",
        *lines,
        "",
    ]


# --- main --------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=3, help="worker passes over the corpus")
    parser.add_argument(
        "--baseline-repeat", type=int, default=1, help="pdfplumber runs per PDF (it is slow)"
    )
    parser.add_argument(
        "--text-repeat", type=int, default=5, help="LDIMS page-text runs per PDF (it is fast)"
    )
    parser.add_argument(
        "--recycle-after",
        type=int,
        default=1_000_000,
        help="files per sandbox child (default: never recycle, so no start-up is timed)",
    )
    parser.add_argument("--tika-url", default=None, help="Tika server URL (default in-process)")
    parser.add_argument(
        "--ocr-pages", type=int, default=5, help="scanned pages a language for OCR (0: none)"
    )
    parser.add_argument(
        "--scan-pages", type=int, default=20, help="pages of the scan timed to searchable"
    )
    parser.add_argument("--baseline-child", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.baseline_child:
        return baseline_child(args.baseline_repeat)
    started = time.perf_counter()
    files = load_corpus(DOCS)
    print(f"{len(files)} corpus files; warming up the sandbox child ...", flush=True)
    worker = run_worker(files, args)
    comparison = compare_pdfs(worker, args)
    ocr = None
    if args.ocr_pages:
        import ocr_pages  # noqa: PLC0415 (not in the pdfplumber baseline child)

        print("OCR: scanned pages through the worker path ...", flush=True)
        ocr = ocr_pages.run(args.ocr_pages, args.scan_pages)
    text = report(worker, comparison, args, time.perf_counter() - started, ocr)
    publish(text, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
