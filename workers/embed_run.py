"""One embed task's run of its plan: claim the documents, load their texts and progress,
embed the chunks in bounded model calls, keep what was made (see :mod:`workers.embed`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
from celery.exceptions import SoftTimeLimitExceeded

from indexer import Chunk, IndexedDocument
from indexer.embedding import Embedder
from indexer.vectors import VectorStoreBusy
from ldims.catalog import Document, DocumentStatus, repository, utcnow
from ldims.lifecycle import states, vector_work
from ldims.lifecycle import vectors as vector_life
from ldims.lifecycle.index import indexed_document
from ldims.lifecycle.vector_work import Candidate
from workers import embed_scratch
from workers.backlog import EmbedRates
from workers.embed_calls import Calls, EmbedderDown, OutOfTime
from workers.embed_plan import Plan
from workers.embed_scratch import Progress
from workers.pipeline import Runtime

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What one embed task did, and whether another should follow."""

    chunks: int = 0  # embedded by this task
    documents: int = 0  # whose vectors it wrote to the store
    given_up: int = 0  # chunks given up by this task
    more: bool = False  # work may be left
    retry_in: float = 0.0  # seconds another task should wait (the model or the store away)


@dataclass(eq=False)
class _Work:
    """A claimed document of this task."""

    candidate: Candidate
    indexed: IndexedDocument | None = None
    passages: list[str] = field(default_factory=list)
    progress: Progress | None = None
    start: int = 0  # chunks done when loaded
    cursor: int = 0  # the next chunk to take
    made: dict[int, np.ndarray] = field(default_factory=dict)  # chunk -> vector (this task)
    failed: dict[int, str] = field(default_factory=dict)  # chunk -> reason (this task)
    moved: bool = False  # progress was made (or a chunk given up)
    interrupted: bool = False  # in the model call the task stopped in
    load_error: str | None = None

    @property
    def document_id(self) -> str:
        return self.candidate.document_id

    @property
    def total(self) -> int:
        return len(self.indexed.chunks) if self.indexed else 0


class EmbedRun:
    """One task's execution of a plan."""

    def __init__(self, rt: Runtime, owner: str, deadline: float) -> None:
        self.rt = rt
        self.owner = owner
        self.deadline = deadline
        self.embedder: Embedder = rt.embedder
        self.fingerprint = self.embedder.fingerprint
        self.work: dict[str, _Work] = {}
        self.outcome = Outcome()
        self.in_flight: list[_Work] = []  # the documents of the current (or last) model call

    def execute(self, chosen: Plan) -> Outcome:
        self.outcome.more = bool(chosen.segments)
        self._claim(chosen)
        if not self.work:
            return self.outcome
        started = time.time()
        with self._lease():
            try:
                self._load()
                self._embed(self._sequence(chosen))
            except EmbedderDown as exc:
                log.warning("the embedding model does not answer (%s); retried later", exc)
                self.outcome.retry_in = self.rt.settings.embed_retry_seconds
            except (OutOfTime, SoftTimeLimitExceeded) as exc:
                log.warning("embed batch stopped (%s); its work is kept", type(exc).__name__)
                for work in self.in_flight:
                    work.interrupted = True
            self._finish()
        EmbedRates.of(self.rt.settings, self.rt.redis).record(
            self._chunks_by_tenant(), started, time.time()
        )
        return self.outcome

    # --- claim ---------------------------------------------------------------------------
    def _claim(self, chosen: Plan) -> None:
        now = utcnow()
        until = now + timedelta(seconds=self.rt.settings.embed_lease_seconds)
        with self.rt.catalog.session() as session:
            for candidate in chosen.candidates:
                if vector_work.claim(session, candidate, self.fingerprint, self.owner, now, until):
                    self.work[candidate.document_id] = _Work(candidate)

    @contextmanager
    def _lease(self) -> Iterator[None]:
        """Renew this task's claims every third of their length while the block runs."""
        stop = threading.Event()
        seconds = self.rt.settings.embed_lease_seconds

        def renew() -> None:
            while not stop.wait(seconds / 3):
                try:
                    until = utcnow() + timedelta(seconds=seconds)
                    with self.rt.catalog.session() as session:
                        vector_work.renew(session, list(self.work), self.owner, until)
                except Exception:  # a missed renewal only risks a second embedding
                    log.warning("could not renew the embed claims", exc_info=True)

        thread = threading.Thread(target=renew, name="embed-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)

    # --- load ----------------------------------------------------------------------------
    def _load(self) -> None:
        with self.rt.catalog.session() as session:
            documents = repository.get_documents(session, set(self.work))
        for work in self.work.values():
            document = documents.get(work.document_id)
            if (
                document is None
                or document.sha256 != work.candidate.sha256
                or document.status != DocumentStatus.COMPLETED.value
            ):
                continue  # deleted, replaced or reprocessed since it was picked
            self._load_one(work, document)

    def _load_one(self, work: _Work, document: Document) -> None:
        sha256 = work.candidate.sha256
        try:
            result = self.rt.extracts.load(sha256, document.format or "application/octet-stream")
            indexed = indexed_document(document, result)
            work.passages = [passage(indexed, chunk) for chunk in indexed.chunks]
            texts = embed_scratch.digest(work.passages)
            progress = self.rt.scratch.open(work.document_id, sha256, self.fingerprint, texts)
        except Exception as exc:  # tried again, and given up after LDIMS_EMBED_MAX_ATTEMPTS
            log.warning(
                "embed %s: its text could not be read (%s)", work.document_id, type(exc).__name__
            )
            work.load_error = "its extracted text could not be read"
            return
        work.indexed, work.progress = indexed, progress
        work.start = work.cursor = work.progress.done()
        tries, limit = work.candidate.attempts, self.rt.settings.embed_max_attempts
        if work.candidate.suspect == 1 and tries >= limit and work.start < work.total:
            # Its calls were interrupted again and again, down to this chunk alone.
            where = _where(work.indexed, work.start)
            work.progress.give_up(
                work.start,
                f"{where}: embedding it was interrupted {tries} times (the worker was killed "
                "or ran past its time limit)",
            )
            self.outcome.given_up += 1
            work.moved = True
            work.cursor = work.progress.done()

    # --- embed ---------------------------------------------------------------------------
    def _sequence(self, chosen: Plan) -> list[tuple[_Work, int]]:
        """The chunks to embed, turn by turn (a document's from where it stands)."""
        sequence: list[tuple[_Work, int]] = []
        for segment in chosen.segments:
            work = self.work.get(segment.candidate.document_id)
            if work is None or work.indexed is None or (work.moved and chosen.alone):
                continue
            end = min(work.cursor + segment.count, work.total)
            sequence += [(work, chunk) for chunk in range(work.cursor, end)]
            work.cursor = end
        return sequence

    def _embed(self, sequence: list[tuple[_Work, int]]) -> None:
        calls = Calls(self.embedder, self.deadline)
        limit = self.rt.settings.embed_batch_max_tokens
        batch: list[tuple[_Work, int]] = []
        tokens = 0
        for work, chunk in sequence:
            cost = self.embedder.tokens(work.passages[chunk])
            if batch and tokens + cost > limit:
                self._call(calls, batch)
                batch, tokens = [], 0
                if time.monotonic() >= self.deadline:
                    return  # out of time: the rest waits for the next task
            batch.append((work, chunk))
            tokens += cost
        if batch:
            self._call(calls, batch)

    def _call(self, calls: Calls, batch: list[tuple[_Work, int]]) -> None:
        ends: dict[str, int] = {}
        for work, chunk in batch:
            ends[work.document_id] = chunk + 1
        held = {work.document_id: work for work, _ in batch}
        over = [work.document_id for work in self.in_flight if work.document_id not in ends]
        with self.rt.catalog.session() as session:  # left behind if the call never ends
            vector_work.in_flight(session, self.owner, ends, over)
        self.in_flight = list(held.values())
        vectors, failed = calls.embed([work.passages[chunk] for work, chunk in batch])
        for position, (work, chunk) in enumerate(batch):
            if position in failed:
                assert work.indexed is not None
                work.failed[chunk] = f"{_where(work.indexed, chunk)}: {failed[position]}"
            else:
                work.made[chunk] = vectors[position]

    # --- keep ----------------------------------------------------------------------------
    def _finish(self) -> None:
        complete: list[_Work] = []
        for work in self.work.values():
            if work.progress is None:
                continue
            self._fold(work)
            if work.progress.done() >= work.total:
                complete.append(work)
        stored = self._store(complete)
        stale: list[str] = []
        with self.rt.catalog.session() as session:
            for work in self.work.values():
                progress = work.progress
                if work in stored and progress is not None:
                    error = _summary(progress.failed)
                    if states.record_vectors(
                        session, work.document_id, work.candidate.sha256, self.fingerprint, error
                    ):
                        continue
                    stale.append(work.document_id)  # deleted or replaced while embedded
                elif self._given_up(work) and states.record_vectors(
                    session,
                    work.document_id,
                    work.candidate.sha256,
                    self.fingerprint,
                    work.load_error,
                ):
                    continue
                done = progress.done() if progress is not None and work.moved else None
                end = work.candidate.suspect_end  # a suspect whose first half passed: the rest
                if end is not None and end <= (work.candidate.done if done is None else done):
                    end = None
                vector_work.release(
                    session,
                    work.document_id,
                    work.candidate.sha256,
                    self.owner,
                    done,
                    interrupted=work.interrupted,
                    unreadable=work.load_error is not None,
                    suspect_end=end,
                )
        for work in stored:
            if work.document_id not in stale and work.progress is not None:
                self.rt.scratch.remove_version(work.progress)
        if stale:
            for document_id in stale:
                self.rt.scratch.remove(document_id)
            delete_vectors(self.rt, stale)

    def _given_up(self, work: _Work) -> bool:
        """Whether a document whose text cannot be read has been tried often enough."""
        limit = self.rt.settings.embed_max_attempts
        return work.load_error is not None and work.candidate.attempts + 1 >= limit

    def _fold(self, work: _Work) -> None:
        """Add this task's vectors of the document to its progress (from where it stood,
        without a gap: what follows a gap waits), and its given-up chunks."""
        progress = work.progress
        assert progress is not None
        chunk, run, first = work.start, [], work.start
        while chunk < work.total:
            if chunk in work.failed:
                if run:
                    progress.add(first, np.asarray(run))
                progress.give_up(chunk, work.failed[chunk])
                self.outcome.given_up += 1
                run, first = [], chunk + 1
            elif chunk in work.made:
                run.append(work.made[chunk])
            else:
                break
            chunk += 1
        if run:
            progress.add(first, np.asarray(run))
        if chunk > work.start:
            work.moved = True

    def _store(self, complete: list[_Work]) -> list[_Work]:
        """Write the complete documents' vectors in one commit; the ones written. The others
        keep theirs in their scratch for the next task (the store busy: these too)."""
        try:
            if complete:
                self._write(complete)
        except (VectorStoreBusy, OSError) as exc:  # busy, or the disk full: tried again
            log.warning(
                "embed batch: %s; its vectors are kept for the next task", type(exc).__name__
            )
            self.outcome.retry_in = self.rt.settings.embed_retry_seconds
            complete = []
        for work in self.work.values():
            if work.progress is not None and work not in complete:
                work.progress.flush()
        self.outcome.documents = len(complete)
        return complete

    def _write(self, complete: list[_Work]) -> None:
        written = []
        for work in complete:
            assert work.progress is not None and work.indexed is not None
            chunks, vectors = work.progress.vectors(work.total)
            if vectors is None:
                vectors = np.zeros((0, self.embedder.dim), np.float32)
            written.append((work.indexed, chunks, vectors))
        vector_life.replace_vectors(self.rt.vectors, self.fingerprint, self.embedder.dim, written)

    def _chunks_by_tenant(self) -> dict[str, int]:
        made: dict[str, int] = {}
        for work in self.work.values():
            made[work.candidate.tenant] = made.get(work.candidate.tenant, 0) + len(work.made)
        self.outcome.chunks = sum(made.values())
        return made


def _summary(failed: dict[int, str]) -> str | None:
    """The reason a document's vectors failed: its first chunk given up, and how many more."""
    if not failed:
        return None
    first = min(failed)
    more = len(failed) - 1
    return failed[first] + (f"; {more} more chunks have no vector" if more else "")


def _where(document: IndexedDocument, number: int) -> str:
    chunk = document.chunks[number]
    lines = (
        f"line {chunk.line_start}"
        if chunk.line_start == chunk.line_end
        else f"lines {chunk.line_start}-{chunk.line_end}"
    )
    return f"chunk {number} (page {chunk.page}, {lines})"


def passage(document: IndexedDocument, chunk: Chunk) -> str:
    # The title names what a passage is about where its own words do not (a page of a report).
    title = document.title or document.name
    return f"{title}\n{chunk.text}" if title and not chunk.text.startswith(title) else chunk.text


def delete_vectors(rt: Runtime, document_ids: list[str]) -> None:
    """Remove the vectors of ``document_ids`` and their embed scratch."""
    for document_id in document_ids:
        rt.scratch.remove(document_id)
    vector_life.delete_vectors(rt.vectors, document_ids)
