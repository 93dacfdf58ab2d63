"""Ingest benchmark with scans: do text documents keep their pace when 5 % of an upload are
scanned pages that need OCR?

What it measures
----------------
``--docs`` documents: the small text and Markdown documents of ``bench/ingest.py`` (1-8 KB,
Latin, Cyrillic and Chinese lines, ``random.Random(42)``), every ``1 / --scan-share``-th one
replaced by a scan: an image-only PDF of one A4 page rendered by this script at
``--scan-dpi`` (200) from made-up English, Russian or Chinese lines in turn (DejaVu Serif; the
Chinese ones in WenQuanYi Micro Hei from ``tests/.fonts``, which ``tests/system_packages.sh``
unpacks; without it the Chinese scans are left out and the report says so). Each scan holds a
made-up word of its own, so a search shows its text was read.

Three runs, each a fresh ``ldims serve`` (embedded Redis, SQLite, ``--extract-workers`` 2,
semantic search off so nothing else competes), the documents uploaded 32 to a request from 4
threads (``POST /api/documents/bulk``, as ``ldims ingest`` sends them), in the same order:

1. **text only**: the text documents of the mix, without the scans (the pace to keep);
2. **mixed, OCR queue** (the default, ``LDIMS_OCR_QUEUE=true``): the extract workers hand each
   scan to the OCR worker (queue ``ocr``, one process at ``LDIMS_OCR_WORKER_NICE``, 19, or
   ``--ocr-nice``);
3. **mixed, OCR inline** (``LDIMS_OCR_QUEUE=false``): the extract workers read the scans
   themselves, as before the OCR queue existed.

For the text documents and for the scans apart: how many completed, upload → completed
p50/p95/max (from the start of the upload request to the document's ``extractedAt``, the
moment the index worker marked it completed; same machine, same clock) and when the last
one completed (seconds after the first upload). CPU seconds by role over the run (psutil,
the process tree of ``ldims serve``; the OCR worker's roles apart). After the run, one search
for each scan's made-up word (``searchMode=exact``) must find it on page 1.

How to run (from the project root)::

    .venv/bin/python bench/ingest_scans.py                  # 1,000 documents, 50 scans (~10 min)

The Markdown report is printed and written to ``bench/results/ingest_scans.md``.
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
from ingest import (
    BULK,
    CHINESE,
    CYRILLIC,
    Doc,
    Progress,
    RssSamples,
    Upload,
    final_documents,
    launch_serve,
    made_up_word,
    make_documents,
    poll_until,
    stop_server,
    upload_all,
    wait_healthy,
    warm_up,
)
from PIL import Image, ImageDraw, ImageFont
from report import DASH, machine_line, markdown_table, ms, percentile, publish
from servers import ProcessTree, Server

from ldims.settings import Settings

RESULTS = Path(__file__).resolve().parent / "results" / "ingest_scans.md"
ROOT = Path(__file__).resolve().parent.parent
LATIN_FONT = Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf")
CJK_FONT = ROOT / "tests" / ".fonts" / "wqy-microhei.ttc"
ENGLISH = [
    "The archive keeps every signed contract for ten years after it ends.",
    "Invoices above the approved budget need a second signature.",
    "The vendor audit found no gaps in the retention schedule.",
    "Meeting summary: the migration moves to the next sprint.",
    "Each incident report names an owner and a decision date.",
]
LANGUAGES = ("en", "ru", "zh")
SETUPS = (
    ("text only", False, "true"),
    ("mixed, OCR queue (default)", True, "true"),
    ("mixed, OCR inline (LDIMS_OCR_QUEUE=false)", True, "false"),
)


@dataclass(frozen=True)
class Scan:
    doc: Doc
    language: str
    word: str  # a made-up word printed on the page, to search for


def render_scan(number: int, language: str, word: str, rng: random.Random, dpi: int) -> bytes:
    """One A4 page, an image-only PDF: a heading with ``word``, then lines in ``language``."""
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    size = round(12 * dpi / 72)
    latin = ImageFont.truetype(str(LATIN_FONT), size)
    font = ImageFont.truetype(str(CJK_FONT), size) if language == "zh" else latin
    source = {"en": ENGLISH, "ru": CYRILLIC, "zh": CHINESE}[language]
    lines = [f"Scan {number:05d} {word}"]
    for _ in range(12):
        sentence = rng.choice(source)
        lines += [sentence] if language == "zh" else textwrap.wrap(sentence, 60)
    top = dpi
    for index, line in enumerate(lines):
        draw.text((dpi, top + index * round(size * 1.7)), line, font=latin if index == 0 else font)
    buffer = io.BytesIO()
    page.save(buffer, "PDF", resolution=dpi)
    return buffer.getvalue()


def make_mix(count: int, share: float, dpi: int) -> tuple[list[Doc], list[Scan], list[str]]:
    """The documents in upload order, the scans among them, and what was left out."""
    languages = [lang for lang in LANGUAGES if lang != "zh" or CJK_FONT.is_file()]
    left_out = [] if "zh" in languages else [f"Chinese scans (no font at {CJK_FONT})"]
    texts = make_documents(count)
    every = max(1, round(1 / share)) if share else 0
    rng = random.Random(7)
    docs: list[Doc] = []
    scans: list[Scan] = []
    for number, text in enumerate(texts):
        if every and number % every == every - 1:
            language = languages[len(scans) % len(languages)]
            word = made_up_word(rng)
            data = render_scan(number, language, word, rng, dpi)
            scan = Scan(Doc(f"scan-{number:05d}.pdf", data, "application/pdf"), language, word)
            scans.append(scan)
            docs.append(scan.doc)
        else:
            docs.append(text)
    return docs, scans, left_out


@dataclass
class Run:
    setup: str
    docs: list[Doc]
    uploads: list[Upload]
    final: dict[str, tuple[str, str | None, str | None]]
    start: float
    wall_origin: float
    cpu: dict[str, float]
    found_scans: int
    scans_searched: int

    def latencies(self, scans: bool) -> list[float]:
        """Upload start → extractedAt of each completed document of the kind."""
        out = []
        for upload in self.uploads:
            if not upload.document_id or self._is_scan(upload) != scans:
                continue
            status, extracted, _ = self.final.get(upload.document_id, ("", None, None))
            if status == "completed" and extracted:
                completed = datetime.fromisoformat(extracted).timestamp() - self.wall_origin
                out.append(completed - upload.start)
        return out

    def last_completed(self, scans: bool) -> float | None:
        ends = [
            datetime.fromisoformat(extracted).timestamp() - self.wall_origin - self.start
            for upload in self.uploads
            if upload.document_id and self._is_scan(upload) == scans
            for status, extracted, _ in [self.final.get(upload.document_id, ("", None, None))]
            if status == "completed" and extracted
        ]
        return max(ends) if ends else None

    def counts(self, scans: bool) -> Counter[str]:
        return Counter(
            self.final.get(u.document_id, ("not final", None, None))[0]
            for u in self.uploads
            if u.document_id and self._is_scan(u) == scans
        )

    def _is_scan(self, upload: Upload) -> bool:
        return self.docs[upload.index].name.startswith("scan-")


def start_server(
    data_dir: Path, extract_workers: int, ocr_queue: str, ocr_nice: int | None
) -> Server:
    env = {"LDIMS_EMBEDDING_MODEL": "none", "LDIMS_OCR_QUEUE": ocr_queue}
    if ocr_nice is not None:
        env["LDIMS_OCR_WORKER_NICE"] = str(ocr_nice)
    return launch_serve(data_dir, env, "--extract-workers", str(extract_workers))


def run_setup(
    args: argparse.Namespace, setup: str, docs: list[Doc], scans: list[Scan], ocr_queue: str
) -> Run:
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-bench-scans-"))
    server: Server | None = None
    try:
        server = start_server(data_dir, args.extract_workers, ocr_queue, args.ocr_nice)
        wait_healthy(server)
        warm_up(server)
        return measure(args, setup, docs, scans, server)
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)


def measure(
    args: argparse.Namespace, setup: str, docs: list[Doc], scans: list[Scan], server: Server
) -> Run:
    wall_origin, origin = time.time(), time.perf_counter()

    def clock() -> float:
        return time.perf_counter() - origin

    rss = RssSamples(1.0)
    sampler = _thread(rss.run, ProcessTree(server.process.pid), clock)
    rss.mark.set()
    time.sleep(1.1)  # the sampler takes the CPU mark first
    progress, uploads, uploaded = Progress(), [], threading.Event()

    def done() -> bool:
        accepted = sum(1 for u in uploads if u.document_id)
        return server.process.poll() is not None or (
            uploaded.is_set() and progress.final >= accepted
        )

    start = clock()
    poller = _thread(poll_until, server.url, progress, clock, done, start + args.timeout, 0.5)
    try:
        uploads.extend(upload_all(server.url, docs, 4, clock, 32))
    finally:
        uploaded.set()
        poller.join()
        rss.stop.set()
        sampler.join()
    final = final_documents(server.url)
    found = _found_scans(server.url, scans, uploads, docs)
    return Run(
        setup, docs, uploads, final, start, wall_origin, rss.cpu_by_role(), found, len(scans)
    )


def _found_scans(base_url: str, scans: list[Scan], uploads: list[Upload], docs: list[Doc]) -> int:
    """How many scans a search for their word finds, on page 1."""
    ids = {docs[u.index].name: u.document_id for u in uploads if u.document_id}
    found = 0
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for scan in scans:
            answer = client.get(
                "/api/search",
                params={"query": scan.word, "searchMode": "exact", "collection": BULK},
            ).json()
            pages = [
                hit.get("pageNumber")
                for hit in answer.get("results", [])
                if hit["documentId"] == ids.get(scan.doc.name)
            ]
            found += pages[:1] == [1]
    return found


def _thread(target: Callable[..., None], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def seconds(value: float | None) -> str:
    return DASH if value is None else f"{value:.1f}"


def latency_row(run: Run, scans: bool) -> list[str]:
    """A run's row for the text documents or the scans: counts, latencies, last completion."""
    counts, latencies = run.counts(scans=scans), run.latencies(scans=scans)
    return [
        run.setup,
        str(counts["completed"]),
        str(counts["failed"]),
        ms(percentile(latencies, 50)),
        ms(percentile(latencies, 95)),
        ms(max(latencies, default=None)),
        seconds(run.last_completed(scans=scans)),
    ]


def report(
    args: argparse.Namespace, runs: list[Run], scans: list[Scan], left_out: list[str]
) -> str:
    languages = Counter(scan.language for scan in scans)
    mix = ", ".join(f"{count} {language}" for language, count in sorted(languages.items()))
    lines = [
        "# Ingest with scans: text documents beside 5 % scanned pages",
        "",
        machine_line(),
        "",
        f"{args.docs} documents uploaded 32 a request from 4 threads to `ldims serve` "
        f"({args.extract_workers} extract workers, semantic search off); {len(scans)} of them "
        f"({args.scan_share:.0%}) are one-page image-only PDFs rendered at {args.scan_dpi} dpi "
        f"({mix}), the OCR worker at nice "
        f"{args.ocr_nice if args.ocr_nice is not None else Settings().ocr_worker_nice}. "
        "The text-only run uploads the same text documents without the scans."
        + (f" Left out: {'; '.join(left_out)}." if left_out else ""),
        "",
        "Text documents, upload start → completed:",
        "",
    ]
    header = ["run", "completed", "failed", "p50 ms", "p95 ms", "max ms", "last completed, s"]
    rows = [latency_row(run, scans=False) for run in runs]
    lines += [markdown_table(header, rows), "", "Scans, upload start → completed:", ""]
    rows = [
        [*latency_row(run, scans=True), f"{run.found_scans}/{run.scans_searched}"]
        for run in runs[1:]
    ]
    lines += [markdown_table([*header, "found by their word on page 1"], rows), ""]
    roles = sorted({role for run in runs for role, cpu in run.cpu.items() if cpu >= 0.05})
    lines += ["CPU seconds by role over the run:", ""]
    lines.append(
        markdown_table(
            ["role", *(run.setup for run in runs)],
            [[role, *(f"{run.cpu.get(role, 0.0):.1f}" for run in runs)] for role in roles],
        )
    )
    base, queued = runs[0].latencies(False), runs[1].latencies(False)
    inline = runs[2].latencies(False)
    p95 = [percentile(values, 95) for values in (base, queued, inline)]
    if all(value for value in p95):
        lines += [
            "",
            f"Text p95 beside the scans: {p95[1] / p95[0]:.2f}× the text-only run's with the "
            f"OCR queue, {p95[2] / p95[0]:.2f}× with OCR inline.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--scan-share", type=float, default=0.05)
    parser.add_argument("--scan-dpi", type=int, default=200)
    parser.add_argument("--extract-workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=1800.0, help="per run, seconds")
    parser.add_argument(
        "--ocr-nice", type=int, default=None, help="LDIMS_OCR_WORKER_NICE (default: its default)"
    )
    args = parser.parse_args()
    docs, scans, left_out = make_mix(args.docs, args.scan_share, args.scan_dpi)
    text_only = [doc for doc in docs if not doc.name.startswith("scan-")]
    runs = []
    for setup, mixed, ocr_queue in SETUPS:
        print(f"{setup} ...", flush=True)
        runs.append(run_setup(args, setup, docs if mixed else text_only, scans, ocr_queue))
    publish(report(args, runs, scans, left_out), RESULTS)


if __name__ == "__main__":
    main()
