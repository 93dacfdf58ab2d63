"""Celery tasks: thin wrappers that call :mod:`workers.pipeline` and chain the next step.

Transient errors are retried with exponential backoff and jitter; a permanent error, or a
transient one that outlived its retries, ends the document ``failed`` with its code
(:meth:`PipelineTask.on_failure`). A passing trouble of the server (a full disk, the catalog
database away) is no fault of the document: it is retried for as long as it lasts, the
document ``processing`` meanwhile. Time limits come from settings.

A document failure is logged as one line, ``document <id> failed: <CODE>`` (by
:func:`workers.pipeline.record_failure`); only an unexpected exception (``INTERNAL_ERROR``)
also gets Celery's traceback.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Iterable
from typing import Any

from celery import Task
from celery.exceptions import SoftTimeLimitExceeded, TimeLimitExceeded
from celery.utils.time import get_exponential_backoff_interval
from kombu.exceptions import ChannelError, OperationalError

from ldims.catalog import utcnow
from ldims.errors import (
    OcrDeferred,
    PassingTrouble,
    ProcessingError,
    TransientError,
    passing_trouble_is_transient,
)
from ldims.lifecycle import index as index_life
from ldims.lifecycle import vector_work
from ldims.semantic import fingerprint_for
from ldims.settings import get_settings
from workers import batching, consistency, embed, pipeline, reconcile
from workers.celery_app import EXTRACT_QUEUE, INDEX_QUEUE, app
from workers.heap import release_free_memory
from workers.queues import EMBED_QUEUE, EXTRACT_SINGLE_QUEUE, OCR_QUEUE

log = logging.getLogger(__name__)
_settings = get_settings()
_RETRY = {
    "autoretry_for": (TransientError,),
    "retry_backoff": 2,
    "retry_backoff_max": _settings.retry_backoff_max_seconds,
    "retry_jitter": True,
    "max_retries": _settings.task_max_retries,
}
# The queues' waiting messages, pulled into batches by the extract and index tasks.
_extract_drain = batching.QueueDrain(app, EXTRACT_QUEUE, "ldims.extract")
_index_drain = batching.QueueDrain(app, INDEX_QUEUE, "ldims.index")
_embed_drain = batching.QueueDrain(app, EMBED_QUEUE, "ldims.embed")


def failure_of(exc: BaseException) -> tuple[str, str]:
    """The document's error code and reason for an exception that ended a task."""
    if isinstance(exc, ProcessingError):
        return exc.code, exc.message
    if isinstance(exc, SoftTimeLimitExceeded | TimeLimitExceeded):
        return "TIMEOUT", (
            f"Processing took longer than {_settings.task_soft_time_limit_seconds}s "
            "(LDIMS_TASK_SOFT_TIME_LIMIT_SECONDS)."
        )
    # Never the exception text: it may quote the document.
    return "INTERNAL_ERROR", f"Unexpected {type(exc).__name__}; see the worker log."


class PipelineTask(Task):  # type: ignore[misc]
    """Records the failure on the document when a task gives up."""

    # Failures of the document, not of our code: Celery logs them without a traceback (and
    # ``workers.celery_app`` drops even that line); the record_failure line names them.
    throws = (ProcessingError, SoftTimeLimitExceeded)

    def on_failure(
        self, exc: BaseException, task_id: str, args: Any, kwargs: Any, einfo: Any
    ) -> None:
        code, message = failure_of(exc)
        pipeline.record_failure(pipeline.runtime(), *self._version(args, kwargs), code, message)

    def retry(  # type: ignore[override]
        self,
        args: Any = None,
        kwargs: Any = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> Any:
        """Celery's retry; a passing trouble of the server is retried for as long as it lasts
        (the backoff capped at ``LDIMS_RETRY_BACKOFF_MAX_SECONDS``), never counted against
        the document's retries, and the document is marked alive meanwhile."""
        if isinstance(exc, PassingTrouble):
            max_retries = self.request.retries + 1
            document = self._version(self.request.args, self.request.kwargs)
            pipeline.still_waiting(pipeline.runtime(), *document, exc.code)
        return super().retry(args, kwargs, exc, throw, eta, countdown, max_retries, **options)

    def _version(self, args: Any, kwargs: Any) -> tuple[str, str | None]:
        """The document and version (None: not fetched yet) the task's arguments name."""
        args, kwargs = args or (), kwargs or {}
        document_id = args[0] if args else kwargs.get("document_id")
        sha256 = (
            None
            if self.name == "ldims.fetch"
            else (args[1] if len(args) > 1 else kwargs.get("sha256"))
        )
        return document_id, sha256


def _send(task: Task, *args: Any) -> None:
    """Publish the next step; if Redis is away, the reconciler will send it later."""
    try:
        task.apply_async(args=args)
    except OperationalError:
        log.warning(
            "could not publish %s for %s; the reconciler will re-drive it", task.name, args[0]
        )


@app.task(bind=True, base=PipelineTask, name="ldims.fetch", **_RETRY)
def fetch(self: Task, document_id: str, url: str) -> None:
    with passing_trouble_is_transient():
        sha256 = pipeline.run_fetch(pipeline.runtime(), document_id, url)
    if sha256:
        _send(extract, document_id, sha256)


@app.task(bind=True, base=PipelineTask, name="ldims.extract", **_RETRY)
def extract(self: Task, document_id: str, sha256: str, more: list[list[str]] | None = None) -> None:
    """Extract this version (and ``more``: a bulk upload names many), then the versions waiting
    behind it in the queue, up to ``LDIMS_EXTRACT_BATCH_MAX_DOCUMENTS`` in all, none started
    after ``LDIMS_EXTRACT_BATCH_MAX_SECONDS``; each alone in the extractor process with its
    own outcome; the extracted ones go to the index in few messages.

    One task for many small files spares each the Celery delivery, events and publish that
    cost more than extracting it (``bench/ingest.py``'s CPU by role).
    """
    rt = pipeline.runtime()
    ready = _ReadyForIndex()
    run = _ExtractRun(rt, ready, time.monotonic() + _settings.extract_batch_max_seconds)
    delivered = batching.Item(
        (document_id, sha256, more) if more else (document_id, sha256),
        self.request.retries,
        redelivered=batching.redelivered(self.request.delivery_info),
    )
    items: Iterable[batching.Item] = [delivered]
    if not more:
        # One document as before: a transient error retries this task (autoretry).
        job = pipeline.IndexJob(document_id, sha256)
        if _extract_or_defer(rt, job, delivered):
            ready.add(job)
        run.documents, items = 1, []
    limit = _settings.extract_batch_max_documents
    pulled = _extract_drain.pull(limit - 1) if 1 + len(more or []) < limit else iter(())
    try:
        for item in itertools.chain(items, pulled):
            ready.send_if_waited()
            if item.due_in() > 0:  # a retry whose backoff has not run out: wait there
                _later(extract, item.args, None, item.retries, item.due_in())
                item.acknowledge()
            else:
                run.take(item)
            if run.documents >= limit or run.out_of_time():
                break
    except SoftTimeLimitExceeded as exc:  # a document's extraction ran out of time
        run.timed_out(exc)
    finally:
        ready.send()


class _ExtractRun:
    """The documents of an extract batch, one after the other, each with its own outcome."""

    def __init__(self, rt: pipeline.Runtime, ready: _ReadyForIndex, deadline: float) -> None:
        self.rt = rt
        self.ready = ready
        self.deadline = deadline
        self.documents = 0
        # The item being extracted, its versions, and the position of the one in the extractor.
        self.current: tuple[batching.Item, list[pipeline.IndexJob], int] | None = None

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def take(self, item: batching.Item) -> None:
        """Extract the versions ``item`` names; those not started in time go back to the queue
        in one message. The item is acknowledged once the extracted ones are sent on."""
        jobs = _jobs_of(item.args)
        for position, job in enumerate(jobs):
            if position and self.out_of_time():
                _send_extract(jobs[position:])
                break
            self.current = (item, jobs, position)
            _extract_one(self.rt, job, item, self.ready)
            self.documents += 1
        self.current = None
        self.ready.hold(item)

    def timed_out(self, exc: SoftTimeLimitExceeded) -> None:
        """The document in the extractor ran out of time: it failed; the rest of its item go
        back to the queue."""
        if self.current is None:
            return
        item, jobs, position = self.current
        code, message = failure_of(exc)
        job = jobs[position]
        pipeline.record_failure(self.rt, job.document_id, job.sha256, code, message)
        if jobs[position + 1 :]:
            _send_extract(jobs[position + 1 :])
        self.current = None
        self.ready.hold(item)


def _send_extract(jobs: list[pipeline.IndexJob]) -> None:
    _send(extract, *_message_args(jobs))


def _extract_one(
    rt: pipeline.Runtime, job: pipeline.IndexJob, item: batching.Item, ready: _ReadyForIndex
) -> None:
    """Extract one version of a batch and record its outcome, as its own task would have."""
    try:
        if _extract_or_defer(rt, job, item):
            ready.add(job)
    except SoftTimeLimitExceeded:
        raise
    except TransientError as exc:
        _later(extract, (job.document_id, job.sha256), exc, item.retries)
    except Exception as exc:
        if not isinstance(exc, ProcessingError):
            log.error(
                "extract %s: unexpected %s", job.document_id, type(exc).__name__, exc_info=True
            )
        code, message = failure_of(exc)
        pipeline.record_failure(rt, job.document_id, job.sha256, code, message)


def _extract_or_defer(rt: pipeline.Runtime, job: pipeline.IndexJob, item: batching.Item) -> bool:
    """Extract one version; True when it is ready to be indexed. A file that needs OCR is sent
    to the OCR workers instead (``LDIMS_OCR_QUEUE``): a scan never holds up this batch."""
    try:
        with passing_trouble_is_transient():
            return pipeline.run_extract(
                rt,
                job.document_id,
                job.sha256,
                item.retries == 0,
                item.redelivered,
                defer_ocr=_settings.ocr_queue_enabled,
            )
    except OcrDeferred:
        _send(ocr, job.document_id, job.sha256)
        return False


@app.task(bind=True, base=PipelineTask, name="ldims.ocr", **_RETRY)
def ocr(self: Task, document_id: str, sha256: str) -> None:
    """Extract, reading its scanned pages or images by OCR, a version an extract worker handed
    on; then send it to the index. One file a task, on workers of its own (queue ``ocr``)."""
    rt = pipeline.runtime()
    redelivered = batching.redelivered(self.request.delivery_info)
    with passing_trouble_is_transient():
        ready = pipeline.run_extract(
            rt, document_id, sha256, self.request.retries == 0, redelivered
        )
    if ready:
        _send(index, document_id, sha256)


class _ReadyForIndex:
    """Extracted versions waiting to be sent to the index in one message, with the pulled
    messages to acknowledge once it is sent (a worker dying before that gives them back)."""

    # How long an extracted document may wait for the others of its batch before it is sent.
    SEND_AFTER_SECONDS = 0.25

    def __init__(self) -> None:
        self.jobs: list[pipeline.IndexJob] = []
        self.pulled: list[batching.Item] = []
        self.since = 0.0

    def add(self, job: pipeline.IndexJob) -> None:
        if not self.jobs:
            self.since = time.monotonic()
        self.jobs.append(job)

    def hold(self, item: batching.Item) -> None:
        """Acknowledge ``item`` (its versions' outcomes are recorded, or they are on their way
        to the index) with the next message to the index."""
        self.pulled.append(item)

    def send_if_waited(self) -> None:
        if self.jobs and time.monotonic() - self.since >= self.SEND_AFTER_SECONDS:
            self.send()

    def send(self) -> None:
        if self.jobs:
            _send(index, *_message_args(self.jobs))
        batching.Batch(self.pulled).acknowledge()
        self.jobs, self.pulled = [], []


def _message_args(jobs: list[pipeline.IndexJob]) -> tuple[Any, ...]:
    """The arguments of an extract or index message naming ``jobs`` (see :func:`_jobs_of`)."""
    first, *more = jobs
    args: tuple[Any, ...] = (first.document_id, first.sha256)
    if more:
        args += ([[job.document_id, job.sha256] for job in more],)
    return args


def _jobs_of(args: tuple[Any, ...]) -> list[pipeline.IndexJob]:
    """The versions an extract or index message names: ``(document_id, sha256[, more])``,
    ``more`` a list of further ``[document_id, sha256]`` (a bulk's or an extract batch's)."""
    document_id, sha256, *rest = args
    more = rest[0] if rest else []
    return [pipeline.IndexJob(document_id, sha256), *(pipeline.IndexJob(*job) for job in more)]


@app.task(bind=True, name="ldims.index")
def index(self: Task, document_id: str, sha256: str, more: list[list[str]] | None = None) -> None:
    """Index this version (and ``more``) and the others waiting in the queue, in batches (see
    :mod:`workers.batching`); each document's outcome is recorded on its own."""
    args = (document_id, sha256, more) if more else (document_id, sha256)
    batch = batching.Batch([batching.Item(args, self.request.retries)])
    limit = _settings.index_batch_max_documents
    documents = len(_jobs_of(args))
    # Messages until the batch names ``limit`` documents (a message may name many).
    if documents < limit:
        for item in _index_drain.pull(limit - 1, _settings.index_batch_wait_seconds):
            batch.items.append(item)
            documents += len(_jobs_of(item.args))
            if documents >= limit:
                break
    retries: dict[pipeline.IndexJob, int] = {}
    for item in batch.items:
        for job in _jobs_of(item.args):
            retries[job] = max(retries.get(job, 0), item.retries)
    completed: list[pipeline.IndexJob] = []
    try:
        later: dict[pipeline.IndexJob, ProcessingError | None] = dict(
            pipeline.run_index_batch(pipeline.runtime(), list(retries), completed)
        )
    except Exception as exc:  # the batch as a whole (a time limit, the catalog): each alone
        log.warning(
            "index batch of %d failed (%s); each document is retried alone",
            len(retries),
            type(exc).__name__,
        )
        later = dict.fromkeys(retries)
    for job, error in later.items():
        _later(index_one, (job.document_id, job.sha256), error, retries[job])
    send_to_embed(completed)
    batch.acknowledge()


def send_to_embed(jobs: list[pipeline.IndexJob]) -> None:
    """Wake the embed stage for the vectors of ``jobs`` (the catalog says what they need),
    when semantic search is on."""
    if jobs and _settings.semantic_enabled:
        _nudge_embed(0.0)


# Nudges an embed task takes off the queue at once: they all mean the same.
_NUDGES = 1000


@app.task(bind=True, name="ldims.embed")
def embed_task(self: Task, *_old_args: Any, **_old_kwargs: Any) -> None:
    """Embed a batch of what the catalog says needs vectors (see :mod:`workers.embed`), then
    wake the next task while work is left.

    The message is a nudge ("there is work"): it names nothing (messages of older versions
    named documents; their arguments are ignored), so the nudges waiting in the queue are
    taken off with it, and one is sent on. A nudge lost with Redis loses nothing: the
    reconciler sends one while documents still need vectors.
    """
    batching.Batch(list(_embed_drain.pull(_NUDGES, 0.0))).acknowledge()
    if {EXTRACT_QUEUE, INDEX_QUEUE} & _busy_queues():
        # Documents wait for extraction or the index: they go first (the worker's low CPU
        # priority alone still took a tenth of a bulk ingest's CPU from the gaps it left).
        _nudge_embed(_settings.embed_defer_seconds)
        return
    try:
        outcome = embed.run_embed_round(pipeline.runtime(), self.request.id)
    except Exception as exc:  # the catalog away: no claim outlives its lease
        log.warning("embed batch failed (%s); retried later", type(exc).__name__)
        _nudge_embed(_settings.embed_retry_seconds)
        return
    if outcome.chunks or outcome.given_up:
        log.info(
            "embedded %d chunks (%d documents stored, %d chunks given up)",
            outcome.chunks,
            outcome.documents,
            outcome.given_up,
        )
    if outcome.more or outcome.retry_in:
        _nudge_embed(outcome.retry_in)


def _later(
    task: Task,
    args: tuple[Any, ...],
    error: ProcessingError | None,
    retries: int,
    countdown: float = 0.0,
) -> None:
    """Send the document ``args`` names to ``task`` alone, on its one-at-a-time queue: after
    a backoff for its own transient ``error`` (or record its failure when out of retries);
    without one (a failed batch), after ``countdown``.
    """
    document_id, sha256 = args
    if isinstance(error, PassingTrouble):
        # The server's trouble, not the document's: waited out, never failed for.
        pipeline.still_waiting(pipeline.runtime(), document_id, sha256, error.code)
    elif error is not None and retries >= _settings.task_max_retries:
        pipeline.record_failure(pipeline.runtime(), document_id, sha256, error.code, error.message)
        return
    options: dict[str, Any] = {}
    if error is not None:
        options = {
            "countdown": get_exponential_backoff_interval(
                2, retries, _settings.retry_backoff_max_seconds, full_jitter=True
            ),
            "retries": retries + 1,
        }
    elif countdown:
        options = {"countdown": countdown, "retries": retries}
    if task is extract:
        options["queue"] = EXTRACT_SINGLE_QUEUE
    try:
        task.apply_async(args=args, **options)
    except OperationalError:
        log.warning(
            "could not publish %s for %s; the reconciler will re-drive it", task.name, document_id
        )


@app.task(bind=True, base=PipelineTask, name="ldims.index_one", **_RETRY)
def index_one(self: Task, document_id: str, sha256: str) -> None:
    """Index one version in a commit of its own (a retry, or a document out of a failed batch)."""
    job = pipeline.IndexJob(document_id, sha256)
    with passing_trouble_is_transient():
        later = pipeline.run_index_batch(pipeline.runtime(), [job])
    if job in later:
        raise later[job]


@app.task(name="ldims.delete_from_index", **_RETRY)
def delete_from_index(document_ids: list[str]) -> None:
    rt = pipeline.runtime()
    embed.delete_vectors(rt, index_life.delete_from_index(rt, document_ids))


@app.task(name="ldims.reindex_documents", **_RETRY)
def reindex_documents(jobs: list[list[str]]) -> None:
    """Index completed versions again (``ldims check --repair``, ``ldims reindex``'s catch-up)."""
    index_life.reindex_completed(pipeline.runtime(), [(key, sha256) for key, sha256 in jobs])


@app.task(name="ldims.optimize_index", **_RETRY)
def optimize_index() -> None:
    """Merge the index's segments into one, unless documents wait to be indexed (a merge of a
    large index holds the writer for minutes; the commits' own merge policy keeps the
    segments few meanwhile)."""
    if INDEX_QUEUE in _busy_queues():
        log.info("optimize skipped: documents are waiting for the index")
        return
    try:
        index_life.optimize_index(pipeline.runtime())
    finally:
        release_free_memory()  # the merge leaves the long-lived writer's heap scattered


def _busy_queues() -> frozenset[str]:
    """The pipeline queues that still hold messages waiting for a worker."""
    busy = set()
    with app.connection_for_read() as connection:
        for name in (EXTRACT_QUEUE, INDEX_QUEUE, EMBED_QUEUE, OCR_QUEUE):
            try:
                waiting = connection.default_channel.queue_declare(
                    queue=name, passive=True
                ).message_count
            except ChannelError:  # Redis drops an empty list: the queue is simply empty
                waiting = 0
            if waiting:
                busy.add(name)
    return frozenset(busy)


@app.task(name="ldims.reconcile")
def run_reconcile() -> dict[str, int]:
    rt = pipeline.runtime()
    busy = _busy_queues()
    report = reconcile.find_stuck(rt, busy)
    for document_id, url in report.fetch:
        _send(fetch, document_id, url)
    for document_id, sha256 in report.extract:
        _send(extract, document_id, sha256)
    for document_id, sha256 in report.ocr:
        _send(ocr, document_id, sha256)
    for document_id, sha256 in report.index:
        _send(index, document_id, sha256)
    # The stores' cheap agreement (`ldims check` is the whole one, by the same code): chunks
    # and vectors of documents the catalog no longer has (a delete whose task was lost).
    found = consistency.inspect(rt, deep=False)
    consistency.repair(rt, found, **_repairers(rt))
    report.orphans_removed = len(found.index_orphans) + len(found.vector_orphans)
    if report.orphans_removed:
        log.warning("reconciler: removed %d orphaned documents", report.orphans_removed)
    vectors = 0
    if _settings.semantic_enabled:
        fingerprint = fingerprint_for(_settings)  # without loading the model in this process
        assert fingerprint is not None
        embed.sweep_scratch(rt, fingerprint)
        if EMBED_QUEUE not in busy:
            vectors = _redrive_vectors(rt)
    return {
        "redriven": len(report.fetch) + len(report.extract) + len(report.ocr) + len(report.index),
        "vectors_redriven": vectors,
        "failed": len(report.failed),
        "orphans_removed": report.orphans_removed,
    }


def _repairers(rt: pipeline.Runtime) -> dict[str, Any]:
    """How a repair run in the index worker (the single index writer) acts: on the index
    itself, and through the other stages' queues."""
    return {
        "index_again": lambda jobs: index_life.reindex_completed(rt, jobs),
        "drop_from_index": lambda ids: index_life.delete_from_index(rt, ids),
        "extract_again": lambda jobs: [_send(extract, key, sha256) for key, sha256 in jobs],
        "nudge_embed": lambda: _nudge_embed(0.0),
    }


def _nudge_embed(countdown: float) -> None:
    """Wake an embed task after ``countdown`` seconds; if Redis is away, the reconciler wakes
    one later."""
    try:
        # No time limits in the message: the embed workers' own settings rule (Celery would
        # stamp the sender's, and the index worker's are not the embed worker's).
        embed_task.apply_async(countdown=countdown or None, time_limit=None, soft_time_limit=None)
    except OperationalError:
        log.warning("could not wake the embed stage; the reconciler will")


def _redrive_vectors(rt: pipeline.Runtime) -> int:
    """Wake the embed stage when documents need vectors that no live task holds (a nudge lost
    with Redis, a model changed, a worker killed): how many."""
    fingerprint = fingerprint_for(_settings)
    assert fingerprint is not None
    with rt.catalog.session() as session:
        waiting = vector_work.claimable(session, fingerprint, utcnow())
    if waiting:
        _nudge_embed(0.0)
    return waiting
