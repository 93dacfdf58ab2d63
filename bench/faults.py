"""Fault harness, first part: ``kill -9`` of each worker process kind while documents are
being ingested, and what it takes the system to recover by itself.

What it does
------------
One ``ldims serve`` (embedded Redis, SQLite, the fast ``use`` embedding model, the reconciler
every 5 s and a document taken as stuck after 20 s) on a fresh data folder. For each fault in
turn, a batch of documents is uploaded — generated text and Markdown, a DOCX, a PDF and a
scanned PDF of the corpus (each made unique, so none is a duplicate of an earlier batch's) —
and once the batch is being processed every process of the fault's role is killed with
SIGKILL: the extract worker's pool child, the extractor process, the index writer (its pool
child, possibly mid-commit: the stale Whoosh lock case), the embed worker's pool child, the
OCR worker's pool child and its extractor process. Then nothing is done by hand: Celery's main
processes start new pool children, the broker gives the unacknowledged messages back, the
reconciler re-drives what was lost.

Per fault: the documents, how many completed and failed (with their codes), the seconds from
the kill until every document of the batch was final and its vectors stored, and whether the
role had a live process again. A fault fails when a document is still unfinished after
``--timeout`` s or a failure has no code. Recovery times include embedding the whole batch
(most of them); what matters is that it ends, with nothing done by hand.

Not yet here (issue 20): the API killed, Redis (embedded and external) stopped and restarted,
Tika unreachable, PostgreSQL restarted, the data folder's disk full.

How to run (from the project root)::

    .venv/bin/python bench/faults.py

The report is printed and written to ``bench/results/faults.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from ingest import launch_serve, stop_server, wait_healthy, warm_up
from report import machine_line, markdown_table, publish
from servers import ProcessTree, Server

from ldims.caller import TENANT_HEADER
from ldims.catalog import Catalog, Document

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "faults.md"
TENANT = "faults"
FAULTS = (
    ("extract pool child", "extract pool child"),
    ("extractor process", "extractor child"),
    ("index writer (pool child, maybe mid-commit)", "index pool child"),
    ("embed pool child", "embed pool child"),
    ("OCR pool child", "ocr pool child"),
    ("OCR extractor process", "ocr extractor child"),
)
SETTINGS = {
    "LDIMS_EMBEDDING_MODEL": "use",
    "LDIMS_STUCK_AFTER_SECONDS": "20",
    "LDIMS_RECONCILE_INTERVAL_SECONDS": "5",
}


@dataclass
class Outcome:
    fault: str
    killed: int
    documents: int
    statuses: Counter[str]
    codes: Counter[str]
    seconds: float | None  # kill → every document final and embedded; None: not in time
    back: bool


def batch(number: int, texts: int) -> list[tuple[str, bytes]]:
    """Documents of one batch, unique to it."""
    files = []
    for n in range(texts):
        lines = "\n".join(f"Line {k} of report {number}-{n} on the archive." for k in range(400))
        files.append((f"b{number}-t{n}.md", f"# Report {number}-{n}\n\n{lines}\n".encode()))
    marker = f"\n%batch {number}\n".encode()  # PDFs and ZIP-based files tolerate trailing bytes
    for name in ("docling__word_sample.docx", "pypdf__multilang.pdf", "docling__ocr_test.pdf"):
        files.append((f"b{number}-{name}", (DOCS / name).read_bytes() + marker))
    return files


def kill_role(tree: ProcessTree, role: str, wait: float) -> int:
    """SIGKILL every process of ``role`` once one of them is busy with the batch (it used 0.05 s
    of CPU since the call; else after ``wait`` s, idle); how many were killed."""
    before = {pid: cpu for pid, (r, _rss, cpu) in tree.sample().items() if r == role}
    deadline = time.monotonic() + wait
    while True:
        now = {pid: cpu for pid, (r, _rss, cpu) in tree.sample().items() if r == role}
        busy = any(cpu - before.get(pid, 0.0) > 0.05 for pid, cpu in now.items())
        if now and (busy or time.monotonic() > deadline):
            for pid in now:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            return len(now)
        if time.monotonic() > deadline + wait:
            return 0
        time.sleep(0.02)


def settled(data_dir: Path, ids: set[str]) -> tuple[bool, Counter[str], Counter[str]]:
    """(every document final and embedded, statuses, failure codes) from the catalog."""
    catalog = Catalog(f"sqlite:///{data_dir / 'catalog.sqlite3'}")
    try:
        with catalog.session() as session:
            rows = [
                d
                for d in session.query(Document).filter(Document.tenant == TENANT)
                if d.public_id in ids
            ]
    finally:
        catalog.dispose()
    statuses = Counter(d.status for d in rows)
    codes = Counter(d.error_code or "NO CODE" for d in rows if d.status == "failed")
    final = len(rows) == len(ids) and statuses["completed"] + statuses["failed"] == len(ids)
    embedded = all(
        d.vectors_sha256 == d.sha256 or not d.chunk_count for d in rows if d.status == "completed"
    )
    return final and embedded, statuses, codes


def run_fault(
    server: Server, data_dir: Path, number: int, fault: str, role: str, args: argparse.Namespace
) -> Outcome:
    tree = ProcessTree(server.process.pid)
    ids: set[str] = set()
    files = batch(number, args.texts)

    def upload() -> None:
        with httpx.Client(
            base_url=server.url, headers={TENANT_HEADER: TENANT}, timeout=60
        ) as client:
            for name, data in files:
                response = client.post("/api/documents", files={"file": (name, data)})
                response.raise_for_status()
                ids.add(response.json()["documentId"])

    uploader = threading.Thread(target=upload, daemon=True)
    uploader.start()  # the kill comes while documents still arrive
    killed = kill_role(tree, role, 60.0)
    uploader.join()
    killed_at = time.monotonic()
    seconds = None
    statuses: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    while time.monotonic() - killed_at < args.timeout:
        done, statuses, codes = settled(data_dir, ids)
        if done:
            seconds = time.monotonic() - killed_at
            break
        time.sleep(0.5)
    back = any(r == role for r, _rss, _cpu in tree.sample().values()) or role.endswith(
        "extractor child"
    )  # an extractor process starts again with the next file that needs it
    return Outcome(fault, killed, len(ids), statuses, codes, seconds, back)


def report(outcomes: list[Outcome], args: argparse.Namespace) -> tuple[str, bool]:
    rows = []
    passed = True
    for o in outcomes:
        ok = o.seconds is not None and o.killed > 0 and o.back and "NO CODE" not in o.codes
        passed &= ok
        rows.append(
            [
                o.fault,
                str(o.killed),
                str(o.documents),
                str(o.statuses["completed"]),
                ", ".join(f"{c} {n}" for c, n in o.codes.items()) or "0",
                "—" if o.seconds is None else f"{o.seconds:.1f}",
                "yes" if o.back else "no",
                "PASS" if ok else "FAIL",
            ]
        )
    text = "\n".join(
        [
            "# Fault harness: kill -9 of each worker process kind during ingestion",
            "",
            machine_line(),
            "",
            f"`ldims serve` (embedded Redis, SQLite, `use` embeddings, reconciler every 5 s, "
            f"stuck after 20 s); each fault on a batch of {args.texts} generated Markdown "
            "documents, a DOCX, a PDF and a scanned PDF of the corpus, killed once the batch "
            "was being processed; recovery = every document of the batch final and embedded.",
            "",
            markdown_table(
                [
                    "fault (SIGKILL)",
                    "processes killed",
                    "documents",
                    "completed",
                    "failed (codes)",
                    "recovered in s",
                    "role back",
                    "verdict",
                ],
                rows,
            ),
            "",
            f"Command: `{' '.join(['.venv/bin/python', 'bench/faults.py', *sys.argv[1:]])}`",
        ]
    )
    return text + "\n", passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=120, help="generated documents a batch")
    parser.add_argument("--timeout", type=float, default=300.0, help="per fault, seconds")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="ldims-faults-"))
    server: Server | None = None
    outcomes = []
    try:
        server = launch_serve(data_dir, SETTINGS)
        wait_healthy(server, 120)
        warm_up(server, 120)
        for number, (fault, role) in enumerate(FAULTS, start=1):
            print(f"{fault} ...", flush=True)
            outcomes.append(run_fault(server, data_dir, number, fault, role, args))
    finally:
        if server is not None:
            stop_server(server)
        shutil.rmtree(data_dir, ignore_errors=True)
    text, passed = report(outcomes, args)
    publish(text, RESULTS)
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
