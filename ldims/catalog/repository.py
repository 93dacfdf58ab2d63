"""Queries and state transitions of the catalog; callers pass the session.

The one writer of document rows (with :mod:`ldims.catalog.vector_work` for their vector
progress): a row is created, given a new version, put back in line, fetched, moved through
its states and removed here only (``tests/test_row_owner.py`` holds every other module to it).
Transitions of a running task are conditional updates (``WHERE id = … AND sha256 = …``) so
that a stale task, one keyed by a content hash since replaced, changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import case, func, select, update
from sqlalchemy.orm import Session

from ldims.catalog.models import Document, DocumentStatus, utcnow


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


def record_vectors(
    session: Session, document_id: str, sha256: str, fingerprint: str, error: str | None = None
) -> bool:
    """Record that the vectors of version ``sha256`` (still the completed one) are stored;
    ``error``: why some of its chunks have none (they are not tried again for this version and
    model). Ends the embed stage's work on it (its claim, progress and tries)."""
    result = session.execute(
        update(Document)
        .where(
            Document.id == document_id,
            Document.sha256 == sha256,
            Document.status == DocumentStatus.COMPLETED.value,
        )
        .values(
            vectors_sha256=sha256,
            vectors_model=fingerprint,
            vectors_error=error[:2000] if error else None,
            vectors_done=0,
            vectors_suspect_end=None,
            vectors_attempts=0,
            vectors_lease_owner=None,
            vectors_lease_until=None,
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


# --- a row's life: created, new versions, back in line, removed -------------------------------


def add_document(
    session: Session,
    *,
    document_id: str,
    tenant: str,
    collection: str,
    name: str,
    submitter: str | None,
    document_type: str | None,
    created_at: datetime | None,
    **content: object,
) -> Document:
    """A new document's row (version 1, queued); ``content``: its original's facts (sha256,
    size, format) and where it came from (source_url, source_path, source_mtime_ns)."""
    now = utcnow()
    document = Document(
        id=document_id,
        tenant=tenant,
        collection=collection,
        name=name,
        submitter=submitter,
        document_type=document_type,
        created_at=created_at or now,
        updated_at=now,
        status_changed_at=now,
        version=1,
        status=DocumentStatus.QUEUED.value,
        attempts=0,
        **content,
    )
    session.add(document)
    return document


def new_version(
    document: Document,
    *,
    name: str,
    collection: str,
    submitter: str | None,
    document_type: str | None,
    created_at: datetime | None,
    **content: object,
) -> None:
    """The row of ``document`` (in a session) becomes its next version's, queued: the new
    original's facts, its metadata (the type, submitter and date kept when not given), no
    error, no extraction yet."""
    for key, value in content.items():
        setattr(document, key, value)
    document.name = name
    document.collection = collection
    document.document_type = document_type or document.document_type
    document.submitter = submitter or document.submitter
    document.created_at = created_at or document.created_at
    document.version += 1
    document.updated_at = utcnow()
    document.error_code = document.error_message = None
    document.extracted_at = None
    requeue(document)


def requeue(document: Document, keep_attempts: bool = False, vectors_too: bool = False) -> None:
    """Put ``document`` (in a session) back in line: queued, so that the next delivery does
    not take it for one a live worker holds; its attempts counted afresh (``keep_attempts``:
    the reconciler's re-drive, which counts them); ``vectors_too``: its vectors made again
    (they carry its metadata)."""
    document.status = DocumentStatus.QUEUED.value
    document.status_changed_at = utcnow()
    if not keep_attempts:
        document.attempts = 0
    if vectors_too:
        document.vectors_sha256 = None


def fetched(document: Document, sha256: str, size: int, format: str) -> None:
    """A webhook document's body is stored: its facts recorded, back in line for extraction
    (the fetch's attempt is done with)."""
    document.sha256 = sha256
    document.size = size
    document.format = format
    requeue(document)


def redriven(document: Document) -> None:
    """The reconciler re-drove ``document``: it has moved now (not stuck again at once)."""
    document.status_changed_at = utcnow()


def count_attempt(document: Document) -> None:
    """One more attempt of a stage that does not count its own (the index stage)."""
    document.attempts += 1


def remove(session: Session, document: Document) -> None:
    """The document's row deleted (its stores follow: see ``ldims.documents.intake``)."""
    session.delete(document)


def _same_version(sha256: str | None):  # type: ignore[no-untyped-def]
    # A document waiting for its URL to be fetched has no content hash yet.
    return Document.sha256.is_(None) if sha256 is None else Document.sha256 == sha256


def _transition(session: Session, document_id: str, sha256: str | None, **values: object) -> bool:
    result = session.execute(
        update(Document)
        .where(Document.id == document_id, _same_version(sha256))
        .values(status_changed_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def start_processing(session: Session, document_id: str, sha256: str | None) -> bool:
    """Mark the version ``sha256`` processing and count one more attempt."""
    return _transition(
        session,
        document_id,
        sha256,
        status=DocumentStatus.PROCESSING.value,
        attempts=Document.attempts + 1,
    )


def wait_for_ocr(session: Session, document_id: str, sha256: str) -> bool:
    """Put the version ``sha256`` in line for the OCR workers. The extract pass that found it
    needs OCR does not count as an attempt: the OCR pass counts its own."""
    return _transition(
        session,
        document_id,
        sha256,
        status=DocumentStatus.QUEUED.value,
        ocr_sha256=sha256,
        attempts=case((Document.attempts > 0, Document.attempts - 1), else_=0),
    )


def touch(session: Session, document_id: str, sha256: str) -> bool:
    """Record progress (a stage finished) so the reconciler leaves the document alone."""
    return _transition(session, document_id, sha256)


def complete(session: Session, document_id: str, sha256: str, **facts: object) -> bool:
    """Mark the version ``sha256`` completed, with facts learnt during extraction. The embed
    stage's progress on an earlier state of it starts over (its chunks may have changed)."""
    return _transition(
        session,
        document_id,
        sha256,
        status=DocumentStatus.COMPLETED.value,
        error_code=None,
        error_message=None,
        vectors_done=0,
        vectors_suspect_end=None,
        vectors_attempts=0,
        **facts,
    )


def fail(session: Session, document_id: str, sha256: str | None, code: str, message: str) -> bool:
    """Mark the document failed with a code and a reason (the version must still match)."""
    return _transition(
        session,
        document_id,
        sha256,
        status=DocumentStatus.FAILED.value,
        error_code=code,
        error_message=message[:2000],
    )


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
