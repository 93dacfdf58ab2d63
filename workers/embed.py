"""The embed stage: the vectors of completed documents' chunks, in bounded batches that are
fair between tenants and cannot jam.

A document is ``completed`` (and keyword-searchable) once indexed; its vectors follow here.
The catalog is the work list: a document whose recorded vectors (``vectors_sha256``,
``vectors_model``) are not of its version and the configured model needs embedding. An embed
task (woken by a nudge on the ``embed`` queue, see ``workers.tasks.embed_task``):

1. picks its work from the catalog, round-robin between tenants and their documents, in
   slices (:mod:`workers.embed_plan`), and claims it with a lease it renews while it works
   (:mod:`ldims.lifecycle.vector_work`) — two tasks never embed one document at once;
2. embeds the slices in model calls of at most ``LDIMS_EMBED_BATCH_MAX_TOKENS`` tokens,
   starting none after ``LDIMS_EMBED_BATCH_MAX_SECONDS`` (far inside the task's time limit); a
   call that fails is split down to the chunk it fails on, which is given up with its reason
   while the others get their vectors (:mod:`workers.embed_calls`);
3. keeps what it made: a document whose every chunk is done has its vectors written to the
   store (all such documents in one commit) and recorded — ``vectors_error`` naming the chunks
   given up, if any; a document not finished keeps its finished slices in its scratch folder
   (:mod:`workers.embed_scratch`) and its progress in the catalog, for the next task.

A model call that does not end — its worker killed, the call past the task's time limit —
leaves its end in the catalog; the document is then retried alone, halving the range that
holds the chunk at fault, and that chunk is given up after ``LDIMS_EMBED_MAX_ATTEMPTS`` tries
alone: never the same batch again, never retried for ever. No document fails for want of
vectors: it stays completed and keyword-searchable.

A document deleted or replaced between its check and its record has its rows removed again:
a delete's own removal (``delete_vectors``, run by the delete task) covers the other order, so
no stale vector outlives either.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

import numpy as np

from indexer import IndexedDocument
from indexer.embedding import Embedder
from indexer.vectors import VectorRow
from ldims.catalog import DocumentStatus, repository, utcnow
from ldims.errors import ProcessingError, TransientError
from ldims.lifecycle import vector_work
from ldims.lifecycle.vector_work import Candidate
from ldims.lifecycle.vectors import vector_rows
from workers import embed_scratch
from workers.embed_plan import Plan, Rotation, Segment, plan
from workers.embed_run import EmbedRun, Outcome, delete_vectors, passage
from workers.pipeline import IndexJob, Runtime

__all__ = [
    "Outcome",
    "delete_vectors",
    "embed_documents",
    "run_embed_batch",
    "run_embed_round",
    "sweep_scratch",
]

log = logging.getLogger(__name__)


def run_embed_round(rt: Runtime, owner: str | None = None) -> Outcome:
    """One embed task's work: pick (round-robin), claim, embed, keep. ``owner`` names the
    claims (a redelivered task takes its own claims back at once)."""
    owner = owner or uuid.uuid4().hex
    fingerprint = rt.embedder.fingerprint
    settings = rt.settings
    now = utcnow()
    rotation = Rotation(rt.redis, settings.redis_key_prefix)
    with rt.catalog.session() as session:
        tenants = vector_work.tenants_with_work(session, fingerprint, owner, now)
        if not tenants:
            return Outcome()
        order = rotation.order(tenants)[: settings.embed_batch_max_documents]
        work = vector_work.candidates(
            session, fingerprint, order, settings.embed_batch_max_documents, owner, now
        )
    chosen = plan(settings, {tenant: work[tenant] for tenant in order})
    rotation.led(order[0])
    deadline = time.monotonic() + settings.embed_batch_max_seconds
    return EmbedRun(rt, owner, deadline).execute(chosen)


def run_embed_batch(
    rt: Runtime, jobs: Sequence[IndexJob], force: bool = False
) -> dict[IndexJob, ProcessingError]:
    """Embed the versions ``jobs`` name, every chunk, now (the benchmarks' way; the embed
    task's is :func:`run_embed_round`): those still completed and needing vectors (``force``:
    even those embedded). Returns the jobs to try again later, with the error."""
    fingerprint = rt.embedder.fingerprint
    owner = f"batch-{uuid.uuid4().hex}"
    with rt.catalog.session() as session:
        if force:
            versions = [(job.document_id, job.sha256) for job in jobs]
            vector_work.forget(session, fingerprint, versions=versions)
        documents = repository.get_documents(session, {job.document_id for job in jobs})
    segments = []
    for job in dict.fromkeys(jobs):
        document = documents.get(job.document_id)
        if document is None or document.sha256 != job.sha256:
            continue
        chunks = document.chunk_count
        candidate = Candidate(document.id, document.tenant, job.sha256, chunks, 0, 0)
        segments.append(Segment(candidate, 0, 2**31 - 1))  # every chunk
    outcome = EmbedRun(rt, owner, float("inf")).execute(Plan(segments))
    with rt.catalog.session() as session:
        after = repository.get_documents(session, {job.document_id for job in jobs})
    later: dict[IndexJob, ProcessingError] = {}
    for job in jobs:
        document = after.get(job.document_id)
        if (
            document is not None
            and document.sha256 == job.sha256
            and document.status == DocumentStatus.COMPLETED.value
            and (document.vectors_sha256 != job.sha256 or document.vectors_model != fingerprint)
        ):
            code = "EMBEDDING_UNAVAILABLE" if outcome.retry_in else "EMBED_DEFERRED"
            later[job] = TransientError(code, "Left for a later batch.")
    return later


def embed_documents(
    embedder: Embedder, documents: Sequence[IndexedDocument], max_tokens: int
) -> list[tuple[list[VectorRow], np.ndarray]]:
    """The rows and vectors of each document's chunks; the model is called on the chunks of
    all of them together, in batches of at most ``max_tokens`` tokens (a longer chunk alone)
    — the benchmarks' (the embed stage's calls are :class:`workers.embed_calls.Calls`)."""
    texts = [passage(document, chunk) for document in documents for chunk in document.chunks]
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
        out.append((vector_rows(document, range(count)), vectors[first : first + count]))
        first += count
    return out


def sweep_scratch(rt: Runtime, fingerprint: str) -> int:
    """Remove the scratch of versions that no longer need embedding with ``fingerprint``."""
    kept = rt.scratch.kept()
    ids = {meta["document"] for _, meta in kept if meta.get("document")}
    if not ids:
        return 0
    with rt.catalog.session() as session:
        documents = repository.get_documents(session, ids)

    def still_needed(meta: dict[str, str]) -> bool:
        document = documents.get(meta.get("document", ""))
        return (
            document is not None
            and meta.get("model") == fingerprint
            and document.sha256 == meta.get("sha256")
            and document.status == DocumentStatus.COMPLETED.value
            and (
                document.vectors_sha256 != document.sha256 or document.vectors_model != fingerprint
            )
        )

    return embed_scratch.sweep(rt.scratch, still_needed, rt.settings.stuck_after_seconds)
