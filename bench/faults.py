"""Fault harness: while documents are ingested, each fault in turn — a process killed, a
service stopped, the disk full — and what it takes the system to recover.

What it does
------------
Two ``ldims serve`` in turn, each on a fresh data folder (the ``use`` embedding model, the
reconciler every 5 s, a document taken as stuck after 20 s):

* **embedded**: embedded Redis, SQLite, in-process Tika — as the quick start runs. Faults:
  ``kill -9`` of every process kind: the extract worker's pool child and Celery main process,
  the extractor process, the index writer (its pool child, possibly mid-commit: the stale Whoosh
  lock case), the embed and OCR workers' pool children, the OCR extractor, the embedded
  redis-server, and the API (``ldims serve`` itself).
* **external**: a redis-server without persistence, a PostgreSQL catalog, a Tika server
  (``LDIMS_TIKA_URL``) and the data folder on a small tmpfs, all the harness's own. Faults:
  Redis killed and started again empty (every queued task lost), Tika unreachable for a while,
  PostgreSQL crashed and restarted (``pg_ctl restart -m immediate``), the data folder's disk
  full for a while.

For each fault a batch of documents is uploaded — generated Markdown and files of the dev
corpus of every format (``CORPUS_FILES``: Tika's, a scan, and encrypted, truncated and malformed
files that must fail with their code), each made unique — by a client
that, like a real one, retries an upload refused for a transient reason (a transport error or
a 503) for up to two minutes. The fault comes while the batch is being processed. Then nothing
is done by hand except the fault's remedy: none for a kill (the supervisor of ``ldims serve``
starts a process again, the broker redelivers, the reconciler re-drives), ``ldims serve`` again
after the API was killed, the service back after an outage, the filler file removed after the
disk was full.

With each fault a replace and a delete are in flight: two documents of the fault's own tenant,
completed first, one replaced by a second version and the other deleted just before the fault.
After the recovery the first must be completed at version 2 and the second gone, and
``ldims check`` must find every store in agreement with the catalog (when it does not,
``ldims check --repair`` runs, and the report says what it found).

Per fault: the documents accepted, how many completed and failed (with their codes), uploads
refused on the way (codes), and the seconds from the remedy (or the kill) until every document
of the tenant was final and its vectors stored. A fault fails when a document is still
unfinished after ``--timeout`` s, a failure has no code, or an upload was refused with a 5xx
other than 503 or without a code.

How to run (from the project root; root, for the tmpfs)::

    .venv/bin/python bench/faults.py            # the long form (~50 minutes)
    .venv/bin/python bench/faults.py --short    # the short form of `make test` (~3 minutes)

The report is printed and written to ``bench/results/faults.md`` (``--output`` elsewhere); the
long form also writes its section of ``docs/reliability.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from ingest import launch_serve, ldims_executable, stop_server, wait_healthy, warm_up
from own_services import OwnPostgres, OwnRedis, OwnTika, SmallDisk
from report import machine_line, markdown_table, publish, publish_section
from servers import ProcessTree, Server, server_env

from ldims.caller import TENANT_HEADER
from ldims.catalog import Catalog, Document

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
RESULTS = Path(__file__).resolve().parent / "results" / "faults.md"
RELIABILITY = ROOT / "docs" / "reliability.md"
REASONS: set[str] = set()  # every failure's code and reason, for the report
# What each batch holds of the dev corpus: every format and the ways a file fails (encrypted,
# truncated, malformed), without the few giants (a 400-page PDF, War and Peace: ``--corpus
# all`` takes them too) that would make a batch minutes long. The short form takes the first 5.
CORPUS_FILES = (
    "docling__word_sample.docx",
    "pypdf__multilang.pdf",
    "docling__ocr_test.pdf",  # a scan: the OCR workers
    "unstructured__fake.doc",  # Tika
    "docling__powerpoint_sample.pptx",  # Tika
    "docling__xlsx_01.xlsx",
    "tika__testRTFVarious.rtf",
    "unstructured__winter-sports.epub",
    "docling__wiki_duck.html",
    "tika__russian.cp866.txt",
    "poppler-test__russian.pdf",
    "docling__wiki.md",
    "pdfplumber__password-example.pdf",  # encrypted
    "pdfjs__helloworld-bad.pdf",  # malformed
    "tika__testWORD_truncated.docx",  # truncated
    "unstructured__password_protected.xlsx",  # encrypted
)
SHORT_CORPUS = 5


@dataclass
class Run:
    """What the faults act on: the server of the stage and the services it uses."""

    stage: str
    data_dir: Path
    log_path: Path  # the server's; never on the data folder's disk, which a fault fills
    env: dict[str, str]
    args: argparse.Namespace
    server: Server | None = None
    redis: OwnRedis | None = None
    postgres: OwnPostgres | None = None
    tika: OwnTika | None = None
    disk: SmallDisk | None = None
    uploader: Uploader | None = None  # the batch's, while a fault runs

    @property
    def tree(self) -> ProcessTree:
        assert self.server is not None
        return ProcessTree(self.server.process.pid)

    def start_server(self) -> float:
        """``ldims serve`` on the stage's data folder; seconds until it answers and works."""
        started = time.monotonic()
        self.server = launch_serve(self.data_dir, self.env, log_path=self.log_path)
        wait_healthy(self.server, 180)
        return time.monotonic() - started

    def catalog(self) -> Catalog:
        return Catalog(
            self.env.get("LDIMS_DATABASE_URL") or f"sqlite:///{self.data_dir / 'catalog.sqlite3'}"
        )


@dataclass
class Injected:
    """What a fault did: a line for the report, and when its remedy was done (recovery counts
    from there)."""

    detail: str
    remedied_at: float = field(default_factory=time.monotonic)


@dataclass
class Fault:
    name: str
    stage: str
    inject: Callable[[Run], Injected]
    remedy: str
    short: bool = False  # part of the short form


@dataclass
class Outcome:
    fault: Fault
    detail: str
    documents: int
    statuses: Counter[str]
    codes: Counter[str]
    refused: Counter[str]
    seconds: float | None  # remedy → every document final and embedded; None: not in time
    churn: str = ""  # the replace and the delete in flight: "" when both ended right
    stores: str = ""  # what `ldims check` said after the recovery (and repaired)
    consistent: bool = False  # the stores agreed in the end


# --- the faults ---------------------------------------------------------------------------------


def busy(run: Run, role: str, wait: float = 60.0) -> list[int]:
    """The pids of ``role`` once one of them is busy with the batch (used 0.05 s of CPU since
    the call), or after ``wait`` s even if idle."""
    tree = run.tree
    before = {pid: cpu for pid, (r, _rss, cpu) in tree.sample().items() if r == role}
    deadline = time.monotonic() + wait
    while True:
        now = {pid: cpu for pid, (r, _rss, cpu) in tree.sample().items() if r == role}
        if now and (
            any(cpu - before.get(pid, 0.0) > 0.05 for pid, cpu in now.items())
            or time.monotonic() > deadline
        ):
            return list(now)
        if time.monotonic() > deadline + wait:
            return []
        time.sleep(0.02)


def kill(role: str, when: str | None = None) -> Callable[[Run], Injected]:
    """SIGKILL every process of ``role`` once it works on the batch (with ``when``: once half
    the batch was uploaded)."""

    def inject(run: Run) -> Injected:
        if when is not None:  # as soon as half the batch is in: the other half meets the fault
            assert run.uploader is not None
            run.uploader.halfway.wait(60)
        pids = [pid for pid, (r, _rss, _cpu) in run.tree.sample().items() if r == role]
        pids = pids if when is not None else busy(run, role)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return Injected(f"{len(pids)} killed" if pids else "NOTHING KILLED")

    return inject


def kill_api(run: Run) -> Injected:
    assert run.server is not None
    busy(run, "index pool child")
    run.server.process.kill()  # kill -9 of `ldims serve`: the API; its workers go with it
    run.server.process.wait(10)
    killed_at = time.monotonic()
    seconds = run.start_server()  # the remedy: `ldims serve` again
    return Injected(f"`ldims serve` again: answering after {seconds:.1f} s", killed_at)


def outage(service: str, what: str) -> Callable[[Run], Injected]:
    """Stop the stage's ``service`` (``redis`` or ``tika``) once extraction is under way; start
    it again after ``--outage`` seconds (Redis without persistence comes back empty)."""

    def inject(run: Run) -> Injected:
        own: OwnRedis | OwnTika | None = getattr(run, service)
        assert own is not None
        busy(run, "extract pool child")
        own.stop()
        time.sleep(run.args.outage)
        own.start()
        return Injected(f"{what} {run.args.outage:g} s")

    return inject


def postgres_restart(run: Run) -> Injected:
    assert run.postgres is not None
    busy(run, "index pool child")
    started = time.monotonic()
    run.postgres.restart()
    return Injected(f"crash and restart in {time.monotonic() - started:.1f} s")


def disk_full(run: Run) -> Injected:
    assert run.disk is not None and run.uploader is not None
    run.uploader.halfway.wait(60)  # half the batch in: the rest meets the full disk
    filled = run.disk.fill()
    time.sleep(run.args.outage)
    run.disk.free()  # the remedy: make room
    return Injected(f"full {run.args.outage:g} s ({filled / 2**20:.0f} MiB filler), then freed")


FAULTS = (
    Fault("kill -9 extract pool child", "embedded", kill("extract pool child"), "by itself"),
    Fault("kill -9 extractor process", "embedded", kill("extractor child"), "by itself", True),
    Fault("kill -9 extract worker (Celery main)", "embedded", kill("extract worker"), "by itself"),
    Fault(
        "kill -9 index writer (pool child, maybe mid-commit)",
        "embedded",
        kill("index pool child"),
        "by itself",
        True,
    ),
    Fault("kill -9 embed pool child", "embedded", kill("embed pool child"), "by itself"),
    Fault("kill -9 OCR pool child", "embedded", kill("ocr pool child"), "by itself"),
    Fault("kill -9 OCR extractor process", "embedded", kill("ocr extractor child"), "by itself"),
    Fault(
        "kill -9 embedded redis-server",
        "embedded",
        kill("redis", "halfway"),
        "by itself",
        True,
    ),
    Fault("kill -9 API (`ldims serve`)", "embedded", kill_api, "`ldims serve`", True),
    Fault(
        "external Redis killed, restarted empty",
        "external",
        outage("redis", "down, back empty after"),
        "Redis back",
        True,
    ),
    Fault("Tika server unreachable", "external", outage("tika", "unreachable"), "Tika back", True),
    Fault("PostgreSQL crashed and restarted", "external", postgres_restart, "by itself", True),
    Fault("data folder's disk full", "external", disk_full, "`rm` a file", True),
)


# --- one batch, one fault -----------------------------------------------------------------------


def batch(number: int, texts: int, corpus: list[str]) -> list[tuple[str, bytes]]:
    """Documents of one batch, unique to it (an empty file stays empty)."""
    files = []
    for n in range(texts):
        lines = "\n".join(f"Line {k} of report {number}-{n} on the archive." for k in range(400))
        files.append((f"b{number}-t{n}.md", f"# Report {number}-{n}\n\n{lines}\n".encode()))
    marker = f"\n%batch {number}\n".encode()  # PDFs, OLE and ZIP files tolerate trailing bytes
    for name in corpus:
        data = (DOCS / name).read_bytes()
        files.append((f"b{number}-{name}", data + marker if data else data))
    return files


class Uploader(threading.Thread):
    """Uploads a batch as a client would: an upload refused for a transient reason (no answer,
    503) is tried again, for up to two minutes."""

    def __init__(self, run: Run, files: list[tuple[str, bytes]], tenant: str) -> None:
        super().__init__(daemon=True)
        self.run_, self.files, self.tenant = run, files, tenant
        self.ids: set[str] = set()
        self.refused: Counter[str] = Counter()
        self.halfway = threading.Event()  # half the files were accepted

    def run(self) -> None:
        for name, data in self.files:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                assert self.run_.server is not None
                try:
                    with httpx.Client(
                        base_url=self.run_.server.url,
                        headers={TENANT_HEADER: self.tenant},
                        timeout=60,
                    ) as client:
                        response = client.post("/api/documents", files={"file": (name, data)})
                except httpx.TransportError:
                    self.refused["no answer"] += 1
                    time.sleep(1)
                    continue
                if response.status_code in (200, 202):
                    self.ids.add(response.json()["documentId"])
                    if len(self.ids) >= len(self.files) // 2:
                        self.halfway.set()
                    break
                code = _error_code(response)
                self.refused[f"{response.status_code} {code}"] += 1
                if response.status_code != 503:
                    break  # not transient: the client gives up on this file
                time.sleep(1)


def _error_code(response: httpx.Response) -> str:
    with contextlib.suppress(ValueError, AttributeError):
        return str(response.json().get("errorCode") or "NO CODE")
    return "NO CODE"


def settled(run: Run, tenant: str, ids: set[str]) -> tuple[bool, Counter[str], Counter[str]]:
    """(every document of the tenant final and embedded, statuses, failure codes)."""
    catalog = run.catalog()
    try:
        with catalog.session() as session:
            rows = list(session.query(Document).filter(Document.tenant == tenant))
    finally:
        catalog.dispose()
    statuses = Counter(d.status for d in rows)
    codes = Counter(d.error_code or "NO CODE" for d in rows if d.status == "failed")
    REASONS.update(f"{d.error_code}: {d.error_message}" for d in rows if d.status == "failed")
    known = {d.public_id for d in rows}
    final = ids <= known and statuses["completed"] + statuses["failed"] == len(rows)
    embedded = run.env["LDIMS_EMBEDDING_MODEL"] == "none" or all(
        d.vectors_sha256 == d.sha256 or not d.chunk_count for d in rows if d.status == "completed"
    )
    return final and embedded, statuses, codes


class Churn:
    """A replace and a delete in flight when the fault comes: two documents of the fault's
    own tenant, completed first; then one replaced by a new version and the other deleted,
    just before the fault. In the end the first is completed at version 2 and the second
    gone (404), and ``ldims check`` finds every store in agreement."""

    def __init__(self, run: Run, tenant: str) -> None:
        self.run, self.tenant = run, tenant
        self.replaced, self.deleted = "", ""

    def _client(self) -> httpx.Client:
        assert self.run.server is not None
        return httpx.Client(
            base_url=self.run.server.url, headers={TENANT_HEADER: self.tenant}, timeout=60
        )

    def prepare(self, wait: float = 60.0) -> None:
        with self._client() as client:
            ids = []
            for name in ("replaced.md", "deleted.md"):
                body = f"# {name}\n\nThe {self.tenant} document {name}, first version.\n"
                response = client.post("/api/documents", files={"file": (name, body.encode())})
                response.raise_for_status()
                ids.append(response.json()["documentId"])
            self.replaced, self.deleted = ids
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                states = {client.get(f"/api/documents/{d}").json()["status"] for d in ids}
                if states == {"completed"}:
                    return
                time.sleep(0.2)
        raise RuntimeError(f"the churn documents of {self.tenant} did not complete: {states}")

    def change(self) -> None:
        with self._client() as client:
            body = f"# replaced\n\nThe {self.tenant} document, second version.\n"
            client.post(
                "/api/documents",
                files={"file": ("replaced.md", body.encode())},
                data={"documentId": self.replaced},
            ).raise_for_status()
            client.delete(f"/api/documents/{self.deleted}").raise_for_status()

    def outcome(self) -> str:
        """ "" when the replace and the delete both ended as they should; else what did not."""
        with self._client() as client:
            replaced = client.get(f"/api/documents/{self.replaced}")
            deleted = client.get(f"/api/documents/{self.deleted}")
        wrong = []
        if replaced.status_code != 200 or (
            replaced.json().get("status"),
            replaced.json().get("version"),
        ) != ("completed", 2):
            wrong.append(f"replaced: {replaced.status_code} {replaced.text[:200]}")
        if deleted.status_code != 404:
            wrong.append(f"deleted: {deleted.status_code}")
        return "; ".join(wrong)


def check_stores(run: Run, wait: float = 60.0) -> tuple[bool, str]:
    """``ldims check`` as an operator runs it after a recovery; when it finds something,
    ``ldims check --repair``, then ``ldims check`` until it agrees (or ``wait`` runs out)."""

    def ldims_check(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ldims_executable()), "check", *options],
            env=server_env(run.data_dir) | run.env,
            cwd=run.data_dir,
            capture_output=True,
            text=True,
            timeout=120,
        )

    first = ldims_check()
    if first.returncode == 0:
        return True, "consistent"
    found = "; ".join(line for line in first.stdout.splitlines() if line[:1].isdigit())
    repaired = ldims_check("--repair")
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        time.sleep(2)
        if ldims_check().returncode == 0:
            return True, f"found {found or first.stderr[-300:]}; repaired"
    return False, f"found {found or first.stderr[-300:]}; repair: {repaired.stdout[-300:]}"


def run_fault(run: Run, number: int, fault: Fault) -> Outcome:
    tenant = f"faults-{number}"  # the batch's documents are all its tenant holds
    churn = Churn(run, f"faults-{number}-churn")
    churn.prepare()
    uploader = run.uploader = Uploader(run, batch(number, run.args.texts, run.args.corpus), tenant)
    uploader.start()  # the fault comes while documents still arrive
    churn.change()  # and while a replace and a delete are on their way
    injected = fault.inject(run)
    uploader.join()
    seconds = None
    statuses: Counter[str] = Counter()
    codes: Counter[str] = Counter()
    wrong = "not settled"
    while time.monotonic() - injected.remedied_at < run.args.timeout:
        with contextlib.suppress(Exception):  # the catalog may be the one restarting
            done, statuses, codes = settled(run, tenant, uploader.ids)
            wrong = churn.outcome()
            if done and not wrong:
                seconds = time.monotonic() - injected.remedied_at
                break
        time.sleep(0.5)
    outcome = Outcome(
        fault, injected.detail, len(uploader.ids), statuses, codes, uploader.refused, seconds
    )
    outcome.churn = wrong
    if seconds is not None:
        outcome.consistent, outcome.stores = check_stores(run)
    return outcome


# --- the two stages ---------------------------------------------------------------------------


def embeddings(args: argparse.Namespace) -> str:
    # The short form leaves vectors out (the load harness's short form checks them).
    return "no embeddings" if args.short else "`use` embeddings"


def settings(args: argparse.Namespace) -> dict[str, str]:
    return {
        "LDIMS_EMBEDDING_MODEL": "none" if args.short else "use",
        "LDIMS_STUCK_AFTER_SECONDS": str(args.stuck_after),
        "LDIMS_RECONCILE_INTERVAL_SECONDS": "5",
    }


def keep_log(run: Run) -> None:
    """The server's log outlives the stage's folder (for the failures' tracebacks)."""
    assert run.server is not None
    with contextlib.suppress(OSError):
        shutil.copy(
            run.server.log_path, Path(tempfile.gettempdir()) / f"ldims-faults-{run.stage}.log"
        )


@contextlib.contextmanager
def serving(run: Run) -> Iterator[Run]:
    """The stage's ``ldims serve``, up and warm; stopped (its log kept) at the end."""
    try:
        run.start_server()
        assert run.server is not None
        warm_up(run.server, 180)
        yield run
    finally:
        if run.server is not None:
            stop_server(run.server)
            keep_log(run)


@contextlib.contextmanager
def embedded_stage(args: argparse.Namespace) -> Iterator[Run]:
    scratch = Path(tempfile.mkdtemp(prefix="ldims-faults-"))
    data_dir = scratch / "data"
    data_dir.mkdir()
    try:
        with serving(Run("embedded", data_dir, scratch / "serve.log", settings(args), args)) as run:
            yield run
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def external_stage(args: argparse.Namespace) -> Iterator[Run]:
    scratch = Path(tempfile.mkdtemp(prefix="ldims-faults-ext-"))
    disk = SmallDisk(scratch / "disk", args.disk_mib).mount()
    data_dir, log_path = scratch / "disk" / "data", scratch / "serve.log"
    run = Run("external", data_dir, log_path, settings(args), args, disk=disk)
    try:
        run.redis = OwnRedis(scratch / "redis").start()
        run.postgres = OwnPostgres().start()
        run.tika = OwnTika(scratch / "tika.log").start()
        run.env.update(
            LDIMS_REDIS_URL=run.redis.url,
            LDIMS_DATABASE_URL=run.postgres.url,
            LDIMS_TIKA_URL=run.tika.url,
        )
        run.data_dir.mkdir(parents=True)
        with serving(run):
            yield run
    finally:
        for service in (run.tika, run.postgres, run.redis):
            if service is not None:
                service.stop()
        disk.unmount()
        shutil.rmtree(scratch, ignore_errors=True)


# --- the report ---------------------------------------------------------------------------------


def verdict(o: Outcome) -> bool:
    bad_refusals = [r for r in o.refused if r != "no answer" and not r.startswith("503 ")]
    return (
        o.seconds is not None
        and "NOTHING" not in o.detail
        and "NO CODE" not in o.codes
        and not any("NO CODE" in r for r in o.refused)
        and not bad_refusals
        and o.documents > 0
        and not o.churn
        and o.consistent
    )


def report(outcomes: list[Outcome], args: argparse.Namespace, command: str) -> tuple[str, bool]:
    rows = []
    for o in outcomes:
        rows.append(
            [
                o.fault.name,
                o.fault.stage,
                o.detail,
                o.fault.remedy,
                str(o.documents),
                str(o.statuses["completed"]),
                ", ".join(f"{c} {n}" for c, n in sorted(o.codes.items())) or "0",
                ", ".join(f"{c} ×{n}" for c, n in sorted(o.refused.items())) or "0",
                "—" if o.seconds is None else f"{o.seconds:.1f}",
                o.churn or "as sent",
                o.stores or "—",
                "PASS" if verdict(o) else "FAIL",
            ]
        )
    passed = bool(outcomes) and all(verdict(o) for o in outcomes)
    text = "\n".join(
        [
            "# Fault harness: processes killed, services stopped, the disk full during ingestion",
            "",
            machine_line(),
            "",
            f"Each fault on a batch of {args.texts} generated Markdown documents and "
            f"{len(args.corpus)} files of the dev corpus ({', '.join(args.corpus)}), each made "
            "unique, uploaded by a client that retries transient refusals; "
            f"{embeddings(args)}, reconciler every 5 s, stuck after {args.stuck_after} s. "
            "*embedded*: embedded Redis, SQLite, in-process "
            "Tika. *external*: Redis without persistence, PostgreSQL, Tika server, the data "
            f"folder on a {args.disk_mib} MiB tmpfs. Recovered = from the remedy (or the kill) "
            "until every document of the batch is final and embedded. With each fault a "
            "replace and a delete are in flight (a document replaced by a second version and "
            "another deleted, just before the fault): the first must end completed at version "
            "2, the second gone; then `ldims check` compares every store with the catalog "
            "(and `--repair` mends what it finds, said in the column).",
            "",
            markdown_table(
                [
                    "fault",
                    "stage",
                    "what happened",
                    "remedy",
                    "documents",
                    "completed",
                    "failed (codes)",
                    "uploads refused",
                    "recovered in s",
                    "replace and delete in flight",
                    "`ldims check`",
                    "verdict",
                ],
                rows,
            ),
            "",
            "Failure reasons: " + ("; ".join(sorted(REASONS)) or "none") + ".",
            "",
            f"**{'PASS' if passed else 'FAIL'}**: every accepted document ended completed or "
            "failed with a code, every refusal was a 503 with a code, every fault recovered, "
            "every replace and delete in flight ended right and the stores agreed.",
            "",
            f"Command: `{command}`",
        ]
    )
    return text + "\n", passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="the short form of `make test`")
    parser.add_argument("--texts", type=int, default=None, help="generated documents a batch")
    parser.add_argument(
        "--timeout", type=float, default=None, help="per fault, seconds (600; short form 120)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument(
        "--corpus-all", action="store_true", help="the whole dev corpus in every batch"
    )
    parser.add_argument("--only", default="", help="only the faults whose name holds this")
    args = parser.parse_args()
    args.texts = args.texts if args.texts is not None else (6 if args.short else 120)
    if args.corpus_all:
        args.corpus = sorted(p.name for p in DOCS.iterdir() if "__" in p.name)
    else:
        args.corpus = list(CORPUS_FILES[:SHORT_CORPUS] if args.short else CORPUS_FILES)
    # Killed by a signal, the harness still stops its servers and services (``finally``).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args.outage = 6.0 if args.short else 20.0
    # Recovery of the long form's batch, most of it embedding 136 documents, took 184-280 s.
    args.timeout = args.timeout if args.timeout is not None else (120.0 if args.short else 600.0)
    args.stuck_after = 10 if args.short else 20
    args.disk_mib = 512
    faults = [f for f in FAULTS if (f.short or not args.short) and args.only in f.name]
    command = " ".join([".venv/bin/python", "bench/faults.py", *sys.argv[1:]])
    outcomes: list[Outcome] = []
    number = 0
    for stage, enter in (("embedded", embedded_stage), ("external", external_stage)):
        if not any(f.stage == stage for f in faults):
            continue
        with enter(args) as run:
            for fault in (f for f in faults if f.stage == stage):
                number += 1
                print(f"{fault.name} ...", flush=True)
                outcomes.append(run_fault(run, number, fault))
                print(f"  {outcomes[-1].seconds}", flush=True)
    text, passed = report(outcomes, args, command)
    publish(text, args.output)
    if not args.short and not args.only:
        publish_section(RELIABILITY, "faults", "## Faults\n\n" + text.split("\n", 1)[1])
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
