"""The bodies of the pipeline's tasks, as plain functions of a :class:`Runtime`.

Each step loads the document, checks that it is still the version the task was keyed by
(document id + content hash), does one thing and records the outcome. A task delivered
twice, or one overtaken by a newer version or a delete, finds nothing to do.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta

import redis

from indexer import DocumentIndex
from indexer.embedding import Embedder
from indexer.vectors import VectorStore
from ldims.blobs import BlobStore
from ldims.catalog import Catalog, Document, DocumentStatus, repository, utcnow
from ldims.errors import (
    OcrDeferred,
    PermanentError,
    ProcessingError,
    TransientError,
    passing_trouble,
)
from ldims.extracts import ExtractStore
from ldims.lifecycle import index as index_life
from ldims.lifecycle import states
from ldims.lifecycle.contents import keep_extraction
from ldims.lifecycle.index import IndexJob
from ldims.semantic import embedder_for, vector_store
from ldims.settings import Settings, get_settings
from workers.embed_scratch import Scratch
from workers.extraction import ExtractionLimits, ExtractionSandbox, OcrOptions, detect_format
from workers.fetch import fetch_to_store
from workers.heap import release_free_memory

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """What a worker process needs: settings, catalog, stores and (lazily) the index."""

    settings: Settings
    catalog: Catalog = field(init=False)
    blobs: BlobStore = field(init=False)
    extracts: ExtractStore = field(init=False)
    _lexicon_followed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.catalog = Catalog(self.settings.catalog_url)
        self.blobs = BlobStore(self.settings.blobs_dir)
        self.extracts = ExtractStore(self.settings.extracts_dir)

    @functools.cached_property
    def index(self) -> DocumentIndex:
        """The index, to read (a writer takes :attr:`index_writer`)."""
        return DocumentIndex(self.settings.index_dir, lexical=self.settings.qmd_lexicon)

    @property
    def index_writer(self) -> DocumentIndex:
        """The index as its single writer (the index worker) writes it: the first time, the
        qmd lexicon made to follow the qmd toolset (``lifecycle.index.follow_toolset``)."""
        if not self._lexicon_followed:
            index_life.follow_toolset(self.settings, self.index, self.catalog, self.extracts)
            self._lexicon_followed = True
        return self.index

    @functools.cached_property
    def vectors(self) -> VectorStore:
        return vector_store(self.settings)

    @functools.cached_property
    def embedder(self) -> Embedder:
        embedder = embedder_for(self.settings)
        if embedder is None:
            raise PermanentError("EMBEDDING_OFF", "Semantic search is off (LDIMS_EMBEDDING_MODEL).")
        return embedder

    @functools.cached_property
    def scratch(self) -> Scratch:
        """The embed stage's finished slices of documents embedded over several tasks."""
        return Scratch(self.settings.data_dir / "embed-scratch")

    @functools.cached_property
    def redis(self) -> redis.Redis:
        """Redis for the embed stage's rotation and rate (not the broker's connection)."""
        return redis.Redis.from_url(
            self.settings.effective_redis_url, socket_timeout=2, socket_connect_timeout=2
        )

    @functools.cached_property
    def heartbeats(self) -> Heartbeats:
        return Heartbeats(self.catalog, heartbeat_seconds(self.settings))

    @functools.cached_property
    def sandbox(self) -> ExtractionSandbox:
        return ExtractionSandbox(recycle_after=self.settings.extract_recycle_after)

    @functools.cached_property
    def limits(self) -> ExtractionLimits:
        return extraction_limits(self.settings)

    @functools.cached_property
    def deferring_limits(self) -> ExtractionLimits:
        """The extract workers' limits when the OCR workers read what needs OCR."""
        return replace(self.limits, ocr=replace(self.limits.ocr, defer=True))


def extraction_limits(settings: Settings) -> ExtractionLimits:
    """The extraction limits configured in ``settings``."""
    return ExtractionLimits(
        max_bytes=settings.max_upload_bytes,
        max_pages=settings.extract_max_pages,
        max_chars=settings.extract_max_chars,
        timeout_seconds=settings.extract_timeout_seconds,
        max_memory_mib=settings.extract_max_memory_mib,
        max_unzipped_bytes=settings.zip_max_unzipped_bytes,
        max_zip_ratio=settings.zip_max_ratio,
        tika_url=settings.tika_url,
        ocr=OcrOptions(
            mode=settings.ocr,
            languages=tuple(settings.ocr_languages),
            max_pages=settings.ocr_max_pages,
            dpi=settings.ocr_dpi,
            tessdata=str(settings.ocr_tessdata) if settings.ocr_tessdata else None,
        ),
    )


@functools.cache
def runtime() -> Runtime:
    """The runtime of this (forked) worker process, built on first use."""
    return Runtime(get_settings())


def _current(document: Document | None, sha256: str | None) -> bool:
    return (
        document is not None
        and document.sha256 == sha256
        and not DocumentStatus(document.status).is_final
    )


def heartbeat_seconds(settings: Settings) -> float:
    """How often a worker holding a document records that it is still alive."""
    return max(1.0, settings.stuck_after_seconds / 3)


def _held_by_a_live_worker(rt: Runtime, document: Document) -> bool:
    # A live holder touches the document every heartbeat; a dead one stops. Half a beat of
    # slack covers a slow commit without mistaking a worker killed long ago for a live one.
    if document.status != DocumentStatus.PROCESSING.value:
        return False
    age = utcnow() - document.status_changed_at
    return age < timedelta(seconds=1.5 * heartbeat_seconds(rt.settings))


class Heartbeats:
    """One thread per process that touches, every beat, the documents this process holds.

    A thread started and joined for every document cost more wall time than extracting a
    small file (bench/extract_overhead.py's profile of ``run_extract``); documents are held
    and let go far more often than a beat comes round.
    """

    def __init__(self, catalog: Catalog, seconds: float) -> None:
        self._catalog = catalog
        self._seconds = seconds
        self._held: dict[str, str] = {}  # document id -> the version held
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def holding(self, document_id: str, sha256: str) -> Iterator[None]:
        with self._lock:
            self._held[document_id] = sha256
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(document_id, None)

    def _beat(self) -> None:
        while True:
            time.sleep(self._seconds)
            with self._lock:
                held = list(self._held.items())
            for document_id, sha256 in held:
                try:
                    with self._catalog.session() as session:
                        states.touch(session, document_id, sha256)
                except Exception:  # a missed beat only risks a harmless duplicate
                    log.warning("heartbeat for %s failed", document_id, exc_info=True)


def heartbeat(
    rt: Runtime, document_id: str, sha256: str
) -> contextlib.AbstractContextManager[None]:
    """Touch the document every beat while the block runs, so nobody takes it as stuck."""
    return rt.heartbeats.holding(document_id, sha256)


def run_extract(
    rt: Runtime,
    document_id: str,
    sha256: str,
    first_delivery: bool,
    redelivered: bool = False,
    defer_ocr: bool = False,
) -> bool:
    """Extract the version ``sha256``; True when it is ready to be indexed.

    ``defer_ocr`` (the extract workers, with ``LDIMS_OCR_QUEUE``): a file that needs OCR is
    not read here; it is put in line for the OCR workers and ``OcrDeferred`` is raised, for
    the caller to send it there.

    ``first_delivery`` is False for Celery's own retries of this task (they continue an
    attempt already counted). ``redelivered`` marks a message the broker gave back because
    its holder died (a worker child killed, a whole worker restarted): it takes the document
    over at once. A fresh message finding the document held by a live worker (heartbeat
    recent) is a duplicate — the reconciler's re-drive of a document that was only slow —
    and is dropped, so waiting never counts as an interrupted attempt.
    """
    with rt.catalog.session() as session:
        document = repository.get_document(session, document_id)
        if document is None or not _current(document, sha256):
            log.info("extract %s: nothing to do (deleted, replaced or final)", document_id)
            return False
        if first_delivery and not redelivered and _held_by_a_live_worker(rt, document):
            log.info("extract %s: duplicate delivery, a live worker holds it", document_id)
            return False
        if first_delivery and document.attempts >= rt.settings.max_attempts:
            if states.fail(
                session,
                document_id,
                sha256,
                "WORKER_LOST",
                f"Processing was interrupted {document.attempts} times (worker killed, out of "
                "memory or over the hard time limit); giving up.",
            ):
                log.warning("document %s failed: %s", document_id, "WORKER_LOST")
            return False
        if first_delivery:
            states.start_processing(session, document_id, sha256)
        mime = document.format or "application/octet-stream"
    if not rt.extracts.exists(sha256, mime):
        path = rt.blobs.path(sha256)
        if not path.is_file():
            raise PermanentError("STORAGE_ERROR", "The stored original is missing.")
        limits = rt.deferring_limits if defer_ocr else rt.limits
        try:
            with heartbeat(rt, document_id, sha256):
                result = rt.sandbox.run(path, mime, limits)
        except OcrDeferred:
            with rt.catalog.session() as session:
                if not states.wait_for_ocr(session, document_id, sha256):
                    return False  # replaced or deleted meanwhile
            raise
        keep_extraction(rt.extracts, sha256, result)
    with rt.catalog.session() as session:
        return states.touch(session, document_id, sha256)


def run_index_batch(
    rt: Runtime, jobs: Sequence[IndexJob], completed: list[IndexJob] | None = None
) -> dict[IndexJob, ProcessingError]:
    """Index the versions ``jobs`` name and mark each document completed, in as few commits
    as ``LDIMS_INDEX_BATCH_MAX_BYTES`` of extraction results and
    ``LDIMS_INDEX_BATCH_MAX_DOCUMENTS`` a commit allow.

    Each job's outcome is its own. A job whose document was deleted, replaced or finished
    meanwhile is dropped, as is a second job for the same version. A document that cannot be
    written is taken out of its commit (the others are written without it) and tried alone;
    a permanent failure is recorded here. Returns the jobs to try again later, with their
    transient error. The jobs whose documents were completed are appended to ``completed``
    (their vectors come next).
    """
    later: dict[IndexJob, ProcessingError] = {}
    completed = completed if completed is not None else []
    max_bytes = rt.settings.index_batch_max_bytes
    # An index message may name many documents (an extract batch's): the bound on a commit's
    # documents holds here, not only on the messages a batch pulls.
    max_documents = rt.settings.index_batch_max_documents
    with rt.catalog.session() as session:
        documents = repository.get_documents(session, {job.document_id for job in jobs})
    chosen: dict[str, IndexJob] = {}
    for job in jobs:
        if _current(documents.get(job.document_id), job.sha256):
            chosen.setdefault(job.document_id, job)
    part: list[index_life.Loaded] = []
    size = 0
    for job in chosen.values():
        document = documents[job.document_id]
        mime = document.format or "application/octet-stream"
        try:
            nbytes = rt.extracts.path(job.sha256, mime).stat().st_size
        except FileNotFoundError:
            later[job] = TransientError("INDEX_ERROR", "The extraction result is not there yet.")
            continue
        if part and (size + nbytes > max_bytes or len(part) >= max_documents):
            _write(rt, part, later, completed)
            part, size = [], 0
        try:
            result = rt.extracts.load(job.sha256, mime)
            indexed = index_life.indexed_document(document, result)
            part.append(index_life.Loaded(job, result, indexed))
        except Exception as exc:
            _settle(rt, job, exc, later)
            continue
        size += nbytes
    if part:
        _write(rt, part, later, completed)
    return later


def _write(
    rt: Runtime,
    part: list[index_life.Loaded],
    later: dict[IndexJob, ProcessingError],
    completed: list[IndexJob],
) -> None:
    """Write ``part`` in one commit (a document that fails is tried alone), then complete."""
    try:
        failed = index_life.commit_part(rt.index_writer, part)
    except Exception as exc:
        # The commit itself failed (lock, disk): nothing of the part was written.
        error = _transient(exc)
        for loaded in part:
            later[loaded.job] = error
        return
    finally:
        # A commit (and its merge) leaves the long-lived writer's heap free but scattered.
        release_free_memory()
    written = [loaded for loaded in part if loaded not in failed]
    for loaded in failed:
        try:
            index_life.commit_part(rt.index_writer, [loaded], alone=True)
        except Exception as exc:
            _settle(rt, loaded.job, exc, later)
        else:
            written.append(loaded)
    index_life.complete_written(rt, written, completed)


def _transient(exc: Exception) -> ProcessingError:
    if isinstance(exc, ProcessingError):
        return exc
    trouble = passing_trouble(exc)
    if trouble is not None:
        log.warning("index commit: %s; retried later", trouble.code)
        return trouble
    log.error("index commit failed: %s", type(exc).__name__, exc_info=True)
    return TransientError("INDEX_ERROR", f"Writing the index failed ({type(exc).__name__}).")


def _settle(
    rt: Runtime, job: IndexJob, exc: Exception, later: dict[IndexJob, ProcessingError]
) -> None:
    """One document's own error: later when transient, else its failure recorded now."""
    exc = passing_trouble(exc) or exc
    if isinstance(exc, TransientError):
        later[job] = exc
        return
    if isinstance(exc, ProcessingError):
        code, message = exc.code, exc.message
    else:
        # Never the exception text in the reason: it may quote the document.
        log.error("index %s: unexpected %s", job.document_id, type(exc).__name__, exc_info=True)
        code, message = "INTERNAL_ERROR", f"Unexpected {type(exc).__name__}; see the worker log."
    record_failure(rt, job.document_id, job.sha256, code, message)


def run_fetch(rt: Runtime, document_id: str, url: str) -> str | None:
    """Download a webhook document's body; return its sha256 when extraction should follow."""
    with rt.catalog.session() as session:
        document = repository.get_document(session, document_id)
        if document is None or document.sha256 is not None or document.source_url != url:
            return None
        name = document.name
        if document.status == DocumentStatus.QUEUED.value:
            states.start_processing(session, document_id, None)
    blob, head = fetch_to_store(url, rt.settings, rt.blobs)
    with rt.catalog.session() as session:
        document = repository.get_document(session, document_id)
        if (
            document is None
            or document.sha256 is not None
            or document.source_url != url
            or DocumentStatus(document.status).is_final  # failed meanwhile (a duplicate fetch)
        ):
            return None
        states.fetched(document, blob.sha256, blob.size, detect_format(head, name))
    return blob.sha256


def still_waiting(rt: Runtime, document_id: str, sha256: str | None, code: str) -> None:
    """The document waits out a passing trouble ``code`` of the server (a full disk, the
    catalog away): marked alive, so the reconciler does not take the wait for a stall and count
    it as an interrupted attempt. Nothing is marked when the catalog is the trouble."""
    log.warning("document %s waits out %s", document_id, code)
    with contextlib.suppress(Exception), rt.catalog.session() as session:
        states.touch(session, document_id, sha256)


def record_failure(
    rt: Runtime, document_id: str, sha256: str | None, code: str, message: str
) -> None:
    """End the document ``failed`` with ``code``, unless a newer version replaced it."""
    with rt.catalog.session() as session:
        if states.fail(session, document_id, sha256, code, message):
            log.warning("document %s failed: %s", document_id, code)
