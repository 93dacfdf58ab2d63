"""A document row's life and states, the one writer of document rows (with
:mod:`ldims.lifecycle.vector_work` for the embed stage's claims on them): a row is created,
given a new version, put back in line, fetched, moved through its states and removed here
only (``tests/test_row_owner.py`` holds every other module to it). Callers pass the session.

Transitions of a running task are conditional updates (``WHERE id = … AND sha256 = …``) so
that a stale task, one keyed by a content hash since replaced, changes nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, update
from sqlalchemy.orm import Session

from ldims.catalog.models import Document, DocumentStatus, utcnow


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


def source_seen(session: Session, seen: list[tuple[str, int]]) -> None:
    """Folder files found with the same bytes under a new modification time: ``(document id,
    mtime_ns)`` recorded, so the next scan takes them for unchanged without reading them."""
    for document_id, mtime_ns in seen:
        session.execute(
            update(Document)
            .where(Document.id == document_id)
            .values(source_mtime_ns=mtime_ns)
            .execution_options(synchronize_session=False)
        )


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




# --- the vectors of its completed version ---------------------------------------------------
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
