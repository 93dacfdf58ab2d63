"""``ldims ingest``: bulk upload through the REST API with a progress display and a summary.

Two phases, each with one progress display on stderr (stdout holds the summary): the upload,
``concurrency`` requests at a time, then the wait until every document is final. Small files
go ``--bulk`` to a request (``POST /api/documents/bulk``: one HTTP request, one catalog
transaction and one queue message for many files, several times cheaper per file than one
request each); larger ones, and the files of a bulk the server refused as a whole, go alone.
On a terminal the display is a tqdm bar with documents/s, the ETA and the counts so far;
anywhere else (a pipe, a log file, CI) it is one plain line every ``PROGRESS_EVERY`` seconds
and one when the phase ends, so a log gets a handful of lines rather than a redraw per
document.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import click
import httpx
from tqdm import tqdm

log = logging.getLogger(__name__)

FINAL = {"completed", "failed"}
#: Seconds between two progress lines when stderr is not a terminal.
PROGRESS_EVERY = 10.0
#: Seconds between two rounds of status checks while waiting.
POLL_EVERY = 0.5
#: Files up to this size go in bulk uploads (larger ones alone), at most BULK_BYTES a request.
BULK_FILE_BYTES = 1024 * 1024
BULK_BYTES = 16 * 1024 * 1024
# Loggers that write a line per HTTP request: httpx at INFO ("HTTP Request: POST …"),
# httpcore at DEBUG (a dozen lines per request). Held at WARNING during an ingest whatever
# LOG_LEVEL says: thousands of them would bury the bar; their warnings still show.
PER_REQUEST_LOGGERS = ("httpx", "httpcore")


@dataclass
class Outcome:
    path: Path
    document_id: str | None = None
    status: str = "rejected"
    reason: str = ""


def collect_files(paths: tuple[str, ...]) -> list[Path]:
    """Files named, and files under folders named (hidden ones skipped), in a stable order."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        else:
            files.append(path)
    return files


class Progress:
    """One phase's progress: a tqdm bar on a terminal, else a plain line now and then."""

    def __init__(self, desc: str, total: int, stream: TextIO, every: float = PROGRESS_EVERY):
        self.desc, self.total, self.stream, self.every = desc, total, stream, every
        self.done = 0
        self.counts: Counter[str] = Counter()
        self.started = self.printed = time.monotonic()
        self.bar = (
            tqdm(total=total, desc=desc, unit="doc", file=stream, dynamic_ncols=True)
            if stream.isatty()
            else None
        )

    def advance(self, status: str) -> None:
        """One more document reached ``status``."""
        self.done += 1
        self.counts[status] += 1
        if self.bar is not None:
            self.bar.set_postfix_str(self._postfix(), refresh=False)
            self.bar.update(1)
        else:
            self.tick()

    def tick(self) -> None:
        """Keep the display alive while nothing finishes (elapsed time, a periodic line)."""
        if self.bar is not None:
            self.bar.refresh()
        elif time.monotonic() - self.printed >= self.every:
            self._line()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:
            self._line()

    def _postfix(self) -> str:
        return ", ".join(f"{status}={n}" for status, n in sorted(self.counts.items()))

    def _line(self) -> None:
        self.printed = time.monotonic()
        # ncols=0: the same text as the bar (count, elapsed<ETA, rate, postfix), no bar.
        line = tqdm.format_meter(
            self.done,
            self.total,
            self.printed - self.started,
            ncols=0,
            prefix=self.desc,
            unit="doc",
            postfix=self._postfix() or None,
        )
        print(line, file=self.stream, flush=True)


class _AboveTheBar:
    """A stream that writes each log record above the bars (tqdm clears and redraws them)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        tqdm.write(text, file=self.stream, end="")

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def quiet_console(stream: TextIO) -> Iterator[None]:
    """No log line per request; other records go above the bar when ``stream`` is a terminal.

    The root's handlers keep their formatter and filters (our request-id filter, which the
    format needs): only their stream is swapped. tqdm's ``logging_redirect_tqdm`` replaces
    the handler instead, and drops its filters before tqdm 4.70 (tqdm/tqdm#1581).
    """
    levels = {name: logging.getLogger(name).level for name in PER_REQUEST_LOGGERS}
    for name in PER_REQUEST_LOGGERS:
        logger = logging.getLogger(name)
        if logger.getEffectiveLevel() < logging.WARNING:
            logger.setLevel(logging.WARNING)
    swapped = []
    if stream.isatty():
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is stream:
                handler.setStream(_AboveTheBar(stream))  # type: ignore[arg-type]
                swapped.append(handler)
    try:
        yield
    finally:
        for handler in swapped:
            handler.setStream(stream)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def _upload(client: httpx.Client, path: Path, fields: dict[str, str]) -> Outcome:
    try:
        with path.open("rb") as handle:
            response = client.post(
                "/api/documents", files={"file": (path.name, handle)}, data=fields
            )
    except (OSError, httpx.HTTPError) as exc:
        return Outcome(path, reason=f"upload failed: {type(exc).__name__}")
    try:
        body = response.json()
    except ValueError:  # not our API's answer (a proxy's error page)
        body = {}
    if response.status_code in (200, 202):
        return Outcome(path, body["documentId"], body["status"])
    if "errorCode" not in body:
        return Outcome(path, reason=f"{response.status_code} {response.reason_phrase}")
    return Outcome(
        path, reason=f"{response.status_code} {body.get('errorCode')}: {body.get('errorMessage')}"
    )


def _outcome_of(path: Path, item: dict[str, object]) -> Outcome:
    """One file's outcome from its item of a bulk answer."""
    if item.get("documentId"):
        return Outcome(path, str(item["documentId"]), str(item.get("status")))
    return Outcome(path, reason=f"400 {item.get('errorCode')}: {item.get('message')}")


def _upload_bulk(client: httpx.Client, paths: list[Path], fields: dict[str, str]) -> list[Outcome]:
    """Upload ``paths`` in one bulk request. When the bulk as a whole is refused (one file too
    large for the server, an older server without bulk uploads), each goes alone instead,
    so every file gets its own outcome."""
    if len(paths) == 1:
        return [_upload(client, paths[0], fields)]
    contents: list[tuple[Path, bytes]] = []
    unreadable: dict[Path, Outcome] = {}
    for path in paths:
        try:
            contents.append((path, path.read_bytes()))
        except OSError as exc:
            unreadable[path] = Outcome(path, reason=f"upload failed: {type(exc).__name__}")
    answered: dict[Path, Outcome] = {}
    if contents:
        try:
            response = client.post(
                "/api/documents/bulk",
                files=[("file", (path.name, data)) for path, data in contents],
                data=fields,
            )
            items = response.json()["documents"] if response.status_code in (200, 202) else None
        except (httpx.HTTPError, ValueError, KeyError):
            items = None
        if items is not None and len(items) == len(contents):
            answered = {
                path: _outcome_of(path, item)
                for (path, _data), item in zip(contents, items, strict=True)
            }
        else:
            answered = {path: _upload(client, path, fields) for path, _data in contents}
    return [unreadable.get(path) or answered[path] for path in paths]


def bulk_groups(files: list[Path], bulk: int, concurrency: int) -> list[list[Path]]:
    """``files`` in upload requests: files up to ``BULK_FILE_BYTES`` together, at most ``bulk``
    and ``BULK_BYTES`` a request, but spread over ``concurrency`` requests when there are
    few; larger files alone."""
    small, groups = [], []
    for path in files:
        try:
            size = path.stat().st_size
        except OSError:
            size = 0  # its upload will say what is wrong with it
        if bulk > 1 and size <= BULK_FILE_BYTES:
            small.append((path, size))
        else:
            groups.append([path])
    per_request = max(1, min(bulk, -(-len(small) // concurrency)))
    current: list[Path] = []
    current_bytes = 0
    for path, size in small:
        if current and (len(current) >= per_request or current_bytes + size > BULK_BYTES):
            groups.append(current)
            current, current_bytes = [], 0
        current.append(path)
        current_bytes += size
    if current:
        groups.append(current)
    return groups


def _upload_all(
    client: httpx.Client,
    pool: ThreadPoolExecutor,
    files: list[Path],
    fields: dict[str, str],
    stream: TextIO,
    bulk: int,
    concurrency: int,
) -> list[Outcome]:
    progress = Progress("uploading", len(files), stream)
    position = {path: i for i, path in enumerate(files)}
    futures: dict[Future[list[Outcome]], list[Path]] = {
        pool.submit(_upload_bulk, client, group, fields): group
        for group in bulk_groups(files, bulk, concurrency)
    }
    outcomes: list[Outcome] = [Outcome(path) for path in files]
    pending = set(futures)
    try:
        while pending:
            # A timeout, not as_completed: the display moves on while a large file uploads.
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            for future in done:
                for outcome in future.result():
                    outcomes[position[outcome.path]] = outcome
                    progress.advance(outcome.status)
            progress.tick()
    except BaseException:  # Ctrl-C: leave the files not yet started, don't upload them all
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        progress.close()
    return outcomes


def _check(client: httpx.Client, outcome: Outcome) -> bool:
    """Refresh ``outcome`` from the API; False when the check itself failed."""
    try:
        body = client.get(f"/api/documents/{outcome.document_id}").json()
    except (httpx.HTTPError, ValueError):
        return False
    outcome.status = body.get("status", outcome.status)
    if outcome.status in FINAL:
        error = body.get("error") or {}
        outcome.reason = f"{error.get('code')}: {error.get('message')}" if error else ""
    return True


def _wait(
    client: httpx.Client,
    pool: ThreadPoolExecutor,
    outcomes: list[Outcome],
    timeout: float,
    stream: TextIO,
) -> None:
    # A duplicate of a document that failed earlier is final at once, but its reason is to
    # be asked for.
    pending = [
        o
        for o in outcomes
        if o.document_id and (o.status not in FINAL or (o.status == "failed" and not o.reason))
    ]
    if not pending:
        return
    deadline = time.monotonic() + timeout
    progress = Progress("processing", len(pending), stream)
    while pending and time.monotonic() < deadline:
        checked = list(pool.map(lambda o: _check(client, o), pending))
        if not all(checked):
            log.warning("%d status checks failed; trying again", checked.count(False))
        still = []
        for outcome in pending:
            if outcome.status in FINAL:
                progress.advance(outcome.status)
            else:
                still.append(outcome)
        pending = still
        progress.tick()
        if pending:
            time.sleep(POLL_EVERY)
    progress.close()
    for outcome in pending:
        outcome.reason = f"still {outcome.status} after {timeout:.0f}s"


def run_ingest(
    paths: tuple[str, ...],
    url: str,
    collection: str | None,
    document_type: str | None,
    submitter: str | None,
    tenant: str | None,
    api_key: str | None,
    wait: bool,
    timeout: float,
    concurrency: int,
    bulk: int = 32,
) -> int:
    """Upload everything; exit code 0 when nothing was rejected or failed."""
    if concurrency < 1:
        raise ValueError("concurrency must be 1 or more")
    if bulk < 1:
        raise ValueError("bulk must be 1 or more")
    files = collect_files(paths)
    fields = {
        key: value
        for key, value in {
            "collection": collection,
            "documentType": document_type,
            "submitter": submitter,
        }.items()
        if value
    }
    headers = {"X-LDIMS-Tenant": tenant} if tenant else {}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    stream = sys.stderr
    with (
        quiet_console(stream),
        httpx.Client(base_url=url, headers=headers, timeout=120, limits=limits) as client,
        ThreadPoolExecutor(max_workers=concurrency) as pool,
    ):
        outcomes = _upload_all(client, pool, files, fields, stream, bulk, concurrency)
        if wait:
            _wait(client, pool, outcomes, timeout, stream)
    counts = Counter(o.status for o in outcomes)
    click.echo("\n" + ", ".join(f"{status}: {n}" for status, n in sorted(counts.items())))
    for outcome in outcomes:
        if outcome.status not in ("completed", "queued", "processing") or outcome.reason:
            click.echo(f"  {outcome.status:<10} {outcome.path}  {outcome.reason}")
    bad = (
        counts["failed"]
        + counts["rejected"]
        + (sum(1 for o in outcomes if o.status not in FINAL) if wait else 0)
    )
    return 1 if bad else 0
