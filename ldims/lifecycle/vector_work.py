"""The embed stage's work in the catalog: which documents still need vectors, by tenant, the
claims (leases) of the tasks embedding them, their progress, and the backlog.

The catalog is the embed queue: a document needs vectors while its recorded vectors are of
another version or model (:func:`repository._needs_vectors`); Redis only carries the nudges
that wake an embed task. A task claims a document with a lease (``vectors_lease_owner``,
``vectors_lease_until``) that it renews while it works: two tasks never embed the same
document at once, and a killed worker's documents are free again once its lease runs out.

Before each model call a task writes, for each document in the call, where the call ends
(``vectors_suspect_end``), and clears it once the call is over. A worker killed mid-call (or
a call past the time limit) leaves it: the chunk at fault lies between the document's
progress (``vectors_done``) and that end, and the next tries halve the range
(:mod:`workers.embed_plan`). ``vectors_attempts`` counts the tries of one chunk alone (and the
failed reads of a document's text), to give it up after ``LDIMS_EMBED_MAX_ATTEMPTS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from ldims.catalog.models import Document, DocumentStatus
from ldims.catalog.repository import _needs_vectors


@dataclass(frozen=True)
class Candidate:
    """A document that needs vectors, as the embed stage plans it."""

    document_id: str
    tenant: str
    sha256: str
    chunks: int | None  # of the indexed version (None: a row from before chunks were counted)
    done: int  # chunks embedded so far (kept in the scratch)
    attempts: int  # tries of its suspect chunk alone, or failed reads of its text
    suspect_end: int | None = None  # a call that ended before this chunk was interrupted

    @property
    def suspect(self) -> int:
        """Chunks from ``done`` among which one interrupted a call (0: none suspected)."""
        return max(0, (self.suspect_end or 0) - self.done)


def _free(now: datetime, owner: str):  # type: ignore[no-untyped-def]
    """Not claimed, its claim run out, or claimed by ``owner`` (a redelivered task)."""
    return (
        Document.vectors_lease_until.is_(None)
        | (Document.vectors_lease_until < now)
        | (Document.vectors_lease_owner == owner)
    )


def tenants_with_work(session: Session, fingerprint: str, owner: str, now: datetime) -> list[str]:
    """The tenants with a document that needs vectors and is free to claim."""
    query = (
        select(Document.tenant)
        .where(_needs_vectors(fingerprint), _free(now, owner))
        .distinct()
        .order_by(Document.tenant)
    )
    return list(session.scalars(query))


def candidates(
    session: Session,
    fingerprint: str,
    tenants: list[str],
    per_tenant: int,
    owner: str,
    now: datetime,
) -> dict[str, list[Candidate]]:
    """Up to ``per_tenant`` free documents needing vectors of each of ``tenants``, the one
    completed first first (one query)."""
    if not tenants:
        return {}
    rank = (
        func.row_number()
        .over(
            partition_by=Document.tenant,
            order_by=(Document.status_changed_at, Document.id),
        )
        .label("rank")
    )
    ranked = (
        select(
            Document.id,
            Document.tenant,
            Document.sha256,
            Document.chunk_count,
            Document.vectors_done,
            Document.vectors_attempts,
            Document.vectors_suspect_end,
            rank,
        )
        .where(_needs_vectors(fingerprint), _free(now, owner), Document.tenant.in_(tenants))
        .subquery()
    )
    query = select(ranked).where(ranked.c.rank <= per_tenant).order_by(ranked.c.rank)
    found: dict[str, list[Candidate]] = {tenant: [] for tenant in tenants}
    for row in session.execute(query):
        found[row.tenant].append(
            Candidate(
                row.id,
                row.tenant,
                row.sha256,
                row.chunk_count,
                row.vectors_done or 0,
                row.vectors_attempts or 0,
                row.vectors_suspect_end,
            )
        )
    return found


def claim(
    session: Session,
    candidate: Candidate,
    fingerprint: str,
    owner: str,
    now: datetime,
    until: datetime,
) -> bool:
    """Claim the candidate's version for ``owner`` until ``until`` (a try of its suspect chunk
    alone counts); False when it was taken, embedded, replaced or deleted meanwhile."""
    alone = (Document.vectors_suspect_end - Document.vectors_done) == 1
    result = session.execute(
        update(Document)
        .where(
            Document.id == candidate.document_id,
            Document.sha256 == candidate.sha256,
            _needs_vectors(fingerprint),
            _free(now, owner),
        )
        .values(
            vectors_lease_owner=owner,
            vectors_lease_until=until,
            vectors_attempts=case(
                (alone, Document.vectors_attempts + 1), else_=Document.vectors_attempts
            ),
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def renew(session: Session, document_ids: list[str], owner: str, until: datetime) -> None:
    """Extend ``owner``'s claims on ``document_ids`` (the task is alive)."""
    if document_ids:
        session.execute(
            update(Document)
            .where(Document.id.in_(document_ids), Document.vectors_lease_owner == owner)
            .values(vectors_lease_until=until)
            .execution_options(synchronize_session=False)
        )


def in_flight(session: Session, owner: str, ends: dict[str, int], over: list[str]) -> None:
    """Before a model call: where it ends in each document it holds (``ends``); the documents
    of the call before (``over``) are past it."""
    if ends:
        session.execute(
            update(Document)
            .where(Document.id.in_(list(ends)), Document.vectors_lease_owner == owner)
            .values(vectors_suspect_end=case(ends, value=Document.id))
            .execution_options(synchronize_session=False)
        )
    if over:
        session.execute(
            update(Document)
            .where(Document.id.in_(over), Document.vectors_lease_owner == owner)
            .values(vectors_suspect_end=None)
            .execution_options(synchronize_session=False)
        )


def release(
    session: Session,
    document_id: str,
    sha256: str,
    owner: str,
    done: int | None,
    interrupted: bool = False,
    unreadable: bool = False,
    suspect_end: int | None = None,
) -> None:
    """Let go of ``owner``'s claim on version ``sha256``: ``done`` chunks are embedded now
    (the tries of one chunk start over); ``interrupted``: its model call did not end (the end
    :func:`in_flight` wrote stays), else ``suspect_end`` is the end of the range still
    suspected (a suspect's first half passed) or None; ``unreadable``: its text could not be
    read (a try). Of a version replaced meanwhile only the claim goes."""
    values: dict[str, object] = {"vectors_lease_owner": None, "vectors_lease_until": None}
    if not interrupted:
        values["vectors_suspect_end"] = suspect_end
    if done is not None:
        values.update(vectors_done=done, vectors_attempts=0)
    if unreadable:
        values["vectors_attempts"] = Document.vectors_attempts + 1
    mine = (Document.id == document_id) & (Document.vectors_lease_owner == owner)
    for where, change in (
        (mine & (Document.sha256 == sha256), values),
        (mine, {"vectors_lease_owner": None, "vectors_lease_until": None}),
    ):
        session.execute(
            update(Document)
            .where(where)
            .values(**change)
            .execution_options(synchronize_session=False)
        )


def backlog(session: Session, fingerprint: str, tenant: str | None = None) -> tuple[int, int, int]:
    """(documents, chunks) still to embed with the model ``fingerprint`` — the chunks of a
    document embedded in slices so far not counted — and the documents whose vectors of
    this version failed (some chunks have none)."""
    remaining = func.coalesce(Document.chunk_count, 0) - Document.vectors_done
    query = select(
        func.count(),
        func.coalesce(func.sum(case((remaining > 0, remaining), else_=0)), 0),
    ).where(_needs_vectors(fingerprint))
    failed = select(func.count()).where(
        Document.status == DocumentStatus.COMPLETED.value,
        Document.vectors_sha256 == Document.sha256,
        Document.vectors_model == fingerprint,
        Document.vectors_error.is_not(None),
    )
    if tenant is not None:
        query = query.where(Document.tenant == tenant)
        failed = failed.where(Document.tenant == tenant)
    documents, chunks = session.execute(query).one()
    return int(documents), int(chunks), int(session.scalar(failed) or 0)


def claimable(session: Session, fingerprint: str, now: datetime) -> int:
    """Documents that need vectors and that no live task holds (the reconciler's check)."""
    query = select(func.count()).where(
        _needs_vectors(fingerprint),
        Document.vectors_lease_until.is_(None) | (Document.vectors_lease_until < now),
    )
    return int(session.scalar(query) or 0)


def forget(
    session: Session,
    fingerprint: str,
    every: bool = False,
    versions: list[tuple[str, str]] | None = None,
) -> int:
    """Mark vectors as needed again — of every completed document (``every``: after a reindex
    whose chunks changed), of ``versions`` ((id, sha256) pairs), else of the documents whose
    vectors of the model failed — and how many."""
    where = Document.status == DocumentStatus.COMPLETED.value
    if versions is not None:
        keys = [document_id for document_id, _ in versions]
        where = where & Document.id.in_(keys)
    elif not every:
        where = (
            where & (Document.vectors_model == fingerprint) & Document.vectors_error.is_not(None)
        )
    result = session.execute(
        update(Document)
        .where(where)
        .values(
            vectors_sha256=None,
            vectors_error=None,
            vectors_done=0,
            vectors_suspect_end=None,
            vectors_attempts=0,
        )
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)
