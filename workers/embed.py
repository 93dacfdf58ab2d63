"""The embed stage: the vectors of indexed documents' chunks, written in batches.

A document is ``completed`` (and keyword-searchable) once indexed; its vectors follow here, on
their own queue and worker. The catalog records, per document, the version and model whose
vectors are stored (``vectors_sha256``, ``vectors_model``): a document whose record differs
from its version or from the configured model still needs embedding (``status`` counts it).

A batch embeds first (the slow part, no lock held), then writes every document's rows in one
vector-store commit, then records them. A document deleted or replaced between its check and
that record has its rows removed again: a delete's own removal (``delete_vectors``, run by
the delete task) covers the other order, so no stale vector outlives either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from indexer import Chunk, IndexedDocument, day_number
from indexer.embedding import Embedder, EmbedderUnavailable
from indexer.vectors import NO_DAY, VectorRow, VectorStore, VectorStoreBusy
from ldims.catalog import DocumentStatus, repository
from ldims.errors import ProcessingError, TransientError
from workers.pipeline import IndexJob, Runtime, indexed_document

log = logging.getLogger(__name__)


@dataclass
class _Embedded:
    job: IndexJob
    rows: list[VectorRow]
    vectors: np.ndarray


def run_embed_batch(
    rt: Runtime, jobs: Sequence[IndexJob], force: bool = False
) -> dict[IndexJob, ProcessingError]:
    """Embed the versions ``jobs`` name (those still completed and without vectors of this
    version and model; ``force``: even those), write them in one commit, record them.
    Returns the jobs to try again later (the model or store unavailable), with the error."""
    embedder, store = rt.embedder, rt.vectors
    later: dict[IndexJob, ProcessingError] = {}
    with rt.catalog.session() as session:
        documents = repository.get_documents(session, {job.document_id for job in jobs})
    deadline = time.monotonic() + rt.settings.embed_batch_max_seconds
    loaded: list[tuple[IndexJob, IndexedDocument]] = []
    taken: set[str] = set()
    for job in jobs:
        document = documents.get(job.document_id)
        if (
            document is None
            or document.sha256 != job.sha256
            or document.status != DocumentStatus.COMPLETED.value
            or job.document_id in taken
            or (
                not force
                and document.vectors_sha256 == job.sha256
                and document.vectors_model == embedder.fingerprint
            )
        ):
            continue  # gone, replaced, not indexed, a duplicate, or already embedded
        try:
            result = rt.extracts.load(job.sha256, document.format or "application/octet-stream")
        except FileNotFoundError:
            later[job] = TransientError("EMBED_ERROR", "The extraction result is not there.")
            continue
        taken.add(job.document_id)
        loaded.append((job, indexed_document(document, result)))
    done: list[_Embedded] = []
    try:
        # In slices, so a batch of long documents stops taking more once out of time.
        for start in range(0, len(loaded), 8):
            if done and time.monotonic() >= deadline:
                for job, _ in loaded[start:]:
                    later[job] = TransientError("EMBED_DEFERRED", "Left for the next batch.")
                break
            part = loaded[start : start + 8]
            embedded = embed_documents(
                embedder, [indexed for _, indexed in part], rt.settings.embed_batch_max_tokens
            )
            done += [
                _Embedded(job, rows, vectors)
                for (job, _), (rows, vectors) in zip(part, embedded, strict=True)
            ]
    except EmbedderUnavailable as exc:
        for job, _ in loaded[len(done) :]:  # done holds the first ones, in order
            later[job] = TransientError("EMBEDDING_UNAVAILABLE", str(exc))
    if done:
        _write(rt, store, embedder, done, later)
    return later


def embed_documents(
    embedder: Embedder, documents: Sequence[IndexedDocument], max_tokens: int
) -> list[tuple[list[VectorRow], np.ndarray]]:
    """The rows and vectors of each document's chunks; the model is called on the chunks of
    all of them together, in batches of at most ``max_tokens`` tokens (a longer chunk alone)
    — the embed stage's, and the benchmarks'."""
    texts = [_passage(document, chunk) for document in documents for chunk in document.chunks]
    parts: list[np.ndarray] = []
    batch: list[str] = []
    tokens = 0
    for text in texts:
        cost = embedder.tokens(text)
        if batch and tokens + cost > max_tokens:
            parts.append(embedder.passages(batch))
            batch, tokens = [], 0
        batch.append(text)
        tokens += cost
    if batch:
        parts.append(embedder.passages(batch))
    vectors = np.vstack(parts) if parts else np.zeros((0, embedder.dim), dtype=np.float32)
    out = []
    first = 0
    for document in documents:
        count = len(document.chunks)
        out.append((_rows(document), vectors[first : first + count]))
        first += count
    return out


def _rows(document: IndexedDocument) -> list[VectorRow]:
    day = day_number(document.created_at) if document.created_at else NO_DAY
    return [
        VectorRow(
            document_id=document.document_id,
            chunk=number,
            version=document.version,
            tenant=document.tenant,
            collection=document.collection,
            document_type=document.document_type,
            submitter=document.submitter,
            day=day,
        )
        for number in range(len(document.chunks))
    ]


def _passage(document: IndexedDocument, chunk: Chunk) -> str:
    # The title names what a passage is about where its own words do not (a page of a report).
    title = document.title or document.name
    return f"{title}\n{chunk.text}" if title and not chunk.text.startswith(title) else chunk.text


def _write(
    rt: Runtime,
    store: VectorStore,
    embedder: Embedder,
    done: list[_Embedded],
    later: dict[IndexJob, ProcessingError],
) -> None:
    try:
        with store.writer(embedder.fingerprint, embedder.dim) as writer:
            for embedded in done:
                writer.replace(embedded.job.document_id, embedded.rows, embedded.vectors)
    except VectorStoreBusy as exc:
        for embedded in done:
            later[embedded.job] = TransientError("VECTORS_BUSY", str(exc))
        return
    stale = []
    with rt.catalog.session() as session:
        for embedded in done:
            job = embedded.job
            if not repository.record_vectors(
                session, job.document_id, job.sha256, embedder.fingerprint
            ):
                stale.append(job.document_id)  # deleted or replaced while it was embedded
    if stale:
        delete_vectors(rt, stale)


def delete_vectors(rt: Runtime, document_ids: list[str]) -> None:
    """Remove the vectors of ``document_ids``."""
    store = rt.vectors
    fingerprint = store.fingerprint()
    if not document_ids or fingerprint is None:
        return
    try:
        with store.writer(fingerprint, store.dim() or 0) as writer:
            for document_id in document_ids:
                writer.delete(document_id)
    except VectorStoreBusy as exc:
        raise TransientError("VECTORS_BUSY", str(exc)) from exc


def sweep_vector_orphans(rt: Runtime) -> int:
    """Remove the vectors of documents the catalog no longer has; how many."""
    # The store first: a document created after the catalog's read has no vectors before it.
    stored = rt.vectors.document_ids()
    with rt.catalog.session() as session:
        known = repository.all_document_ids(session)
    orphans = sorted(stored - known)
    if orphans:
        delete_vectors(rt, orphans)
        log.info("removed the vectors of %d deleted documents", len(orphans))
    return len(orphans)
