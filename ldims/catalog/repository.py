"""Queries of the catalog's documents; callers pass the session. Rows are written by
:mod:`ldims.lifecycle.states` alone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ldims.catalog.models import Document, DocumentStatus


@dataclass(frozen=True)
class DocumentFilter:
    """Filters of ``GET /api/documents``; ``None`` means "any"."""

    status: str | None = None
    collection: str | None = None
    document_type: str | None = None
    submitter: str | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None


def get_document(session: Session, document_id: str) -> Document | None:
    return session.get(Document, document_id)


def get_documents(session: Session, document_ids: set[str]) -> dict[str, Document]:
    """The documents of these ids that exist, by id (one query)."""
    if not document_ids:
        return {}
    query = select(Document).where(Document.id.in_(sorted(document_ids)))
    return {document.id: document for document in session.scalars(query)}


def find_by_content(session: Session, tenant: str, sha256: str) -> Document | None:
    """A document of ``tenant`` whose current version has this content, if any."""
    query = select(Document).where(Document.tenant == tenant, Document.sha256 == sha256)
    return session.scalars(query.order_by(Document.created_at).limit(1)).first()


def find_many_by_content(session: Session, tenant: str, sha256s: set[str]) -> dict[str, Document]:
    """``find_by_content`` for many contents in one query: content hash -> document."""
    if not sha256s:
        return {}
    query = (
        select(Document)
        .where(Document.tenant == tenant, Document.sha256.in_(sorted(sha256s)))
        .order_by(Document.created_at)
    )
    found: dict[str, Document] = {}
    for document in session.scalars(query):
        found.setdefault(str(document.sha256), document)
    return found


def existing_ids(session: Session, document_ids: set[str]) -> set[str]:
    """The ids of ``document_ids`` that are taken (one query)."""
    if not document_ids:
        return set()
    return set(session.scalars(select(Document.id).where(Document.id.in_(sorted(document_ids)))))


def list_documents(
    session: Session, tenant: str, filters: DocumentFilter, limit: int, offset: int
) -> tuple[list[Document], int]:
    """One page of ``tenant``'s documents, newest first, and the total that match."""
    conditions = [Document.tenant == tenant]
    if filters.status:
        conditions.append(Document.status == filters.status)
    if filters.collection:
        conditions.append(Document.collection == filters.collection)
    if filters.document_type:
        conditions.append(Document.document_type == filters.document_type)
    if filters.submitter:
        conditions.append(Document.submitter == filters.submitter)
    if filters.created_from:
        conditions.append(Document.created_at >= filters.created_from)
    if filters.created_to:
        conditions.append(Document.created_at <= filters.created_to)
    total = session.scalar(select(func.count()).select_from(Document).where(*conditions)) or 0
    query = (
        select(Document)
        .where(*conditions)
        .order_by(Document.created_at.desc(), Document.id)
        .limit(limit)
        .offset(offset)
    )
    return list(session.scalars(query)), total


def count_by_status(session: Session, tenant: str | None = None) -> dict[str, int]:
    """Documents per state (every state present, zero when none)."""
    query = select(Document.status, func.count()).group_by(Document.status)
    if tenant is not None:
        query = query.where(Document.tenant == tenant)
    counts = {status.value: 0 for status in DocumentStatus}
    counts.update({status: count for status, count in session.execute(query)})
    return counts


def count_by_collection(
    session: Session, tenant: str, limit: int = 20
) -> dict[str, dict[str, int]]:
    """The tenant's largest collections: collection -> documents per state."""
    largest = (
        select(Document.collection)
        .where(Document.tenant == tenant)
        .group_by(Document.collection)
        .order_by(func.count().desc(), Document.collection)
        .limit(limit)
    )
    names = list(session.scalars(largest))
    counts: dict[str, dict[str, int]] = {name: {} for name in names}
    query = (
        select(Document.collection, Document.status, func.count())
        .where(Document.tenant == tenant, Document.collection.in_(names))
        .group_by(Document.collection, Document.status)
    )
    for collection, status, count in session.execute(query):
        counts[collection][status] = count
    return counts


def _needs_vectors(fingerprint: str):  # type: ignore[no-untyped-def]
    """Completed documents whose stored vectors are missing, of an older version or of
    another model."""
    return (Document.status == DocumentStatus.COMPLETED.value) & (
        Document.vectors_sha256.is_(None)
        | (Document.vectors_sha256 != Document.sha256)
        | Document.vectors_model.is_(None)
        | (Document.vectors_model != fingerprint)
    )


def pending_vectors(
    session: Session, fingerprint: str, tenant: str | None = None
) -> tuple[int, int]:
    """(documents, chunks) that still need vectors of the model ``fingerprint``."""
    query = select(func.count(), func.coalesce(func.sum(Document.chunk_count), 0)).where(
        _needs_vectors(fingerprint)
    )
    if tenant is not None:
        query = query.where(Document.tenant == tenant)
    documents, chunks = session.execute(query).one()
    return int(documents), int(chunks)


def stuck_documents(session: Session, older_than: datetime, limit: int = 500) -> list[Document]:
    """Documents queued or processing that have not moved since ``older_than``."""
    query = (
        select(Document)
        .where(
            Document.status.in_([DocumentStatus.QUEUED.value, DocumentStatus.PROCESSING.value]),
            Document.status_changed_at < older_than,
        )
        .order_by(Document.status_changed_at)
        .limit(limit)
    )
    return list(session.scalars(query))


def all_document_ids(session: Session) -> set[str]:
    return set(session.scalars(select(Document.id)))


def completed_documents(session: Session, after_id: str = "", limit: int = 500) -> list[Document]:
    """Completed documents in id order, ``limit`` at a time after ``after_id`` (for rebuilds)."""
    query = (
        select(Document)
        .where(Document.status == DocumentStatus.COMPLETED.value, Document.id > after_id)
        .order_by(Document.id)
        .limit(limit)
    )
    return list(session.scalars(query))


def changed_since(session: Session, since: datetime) -> list[Document]:
    """Documents whose state changed at or after ``since``."""
    return list(session.scalars(select(Document).where(Document.status_changed_at >= since)))
