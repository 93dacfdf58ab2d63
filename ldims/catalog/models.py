"""Catalog tables: documents, webhook events already seen, folder collections, API keys and
the proxy toolset's audit trail."""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import BigInteger, DateTime, Float, Index, Integer, String, Text, TypeDecorator
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class DocumentStatus(enum.StrEnum):
    """``queued → processing → completed | failed``."""

    QUEUED = "queued"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        return self in (DocumentStatus.COMPLETED, DocumentStatus.FAILED)


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC on every backend (SQLite keeps no zone of its own)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to the catalog")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


def document_key(tenant: str, document_id: str) -> str:
    """The key a document of ``tenant`` is stored, indexed and queued under.

    Document ids are the tenant's own: two tenants may both hold ``invoice-1``, and no id
    of one tenant can be taken, refused or found by another. Tenant names hold no ``/``
    (:data:`ldims.caller.TENANT_PATTERN`), so the key splits back unambiguously.
    """
    return f"{tenant}/{document_id}"


def public_document_id(key: str) -> str:
    """The id the tenant knows a document by, from its :func:`document_key`."""
    return key.partition("/")[2] or key


class Document(Base):
    """One document of one tenant; ``sha256`` names the current version's original.

    ``id`` is the :func:`document_key` (tenant and the tenant's id); callers only ever see
    :attr:`public_id`.
    """

    __tablename__ = "documents"

    id: Mapped[str] = mapped_column(String(160), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    collection: Mapped[str] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(512))
    format: Mapped[str | None] = mapped_column(String(128))
    size: Mapped[int | None] = mapped_column(BigInteger)
    sha256: Mapped[str | None] = mapped_column(String(64))
    submitter: Mapped[str | None] = mapped_column(String(256))
    document_type: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    version: Mapped[int] = mapped_column(Integer, default=1)
    status: Mapped[str] = mapped_column(String(16), default=DocumentStatus.QUEUED.value)
    status_changed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error_code: Mapped[str | None] = mapped_column(String(64))
    error_message: Mapped[str | None] = mapped_column(Text)
    extracted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    extractor: Mapped[str | None] = mapped_column(String(64))
    page_count: Mapped[int | None] = mapped_column(Integer)
    language: Mapped[str | None] = mapped_column(String(16))
    title: Mapped[str | None] = mapped_column(String(512))
    source_url: Mapped[str | None] = mapped_column(Text)
    # The embed stage's record: chunks of the indexed version, and the version (content hash)
    # and model fingerprint of the vectors stored; vectors of another version or model do not
    # count, so the document still needs embedding.
    chunk_count: Mapped[int | None] = mapped_column(Integer)
    vectors_sha256: Mapped[str | None] = mapped_column(String(64))
    vectors_model: Mapped[str | None] = mapped_column(String(128))
    # Recorded with them: why some chunks have no vector (None: every chunk has one).
    vectors_error: Mapped[str | None] = mapped_column(Text)
    # The embed stage's work on a version still needing vectors (workers/embed.py): chunks
    # embedded so far (kept in its scratch until the last); the end of the model call in
    # flight, left when its task was killed or ran out of time (the chunk at fault is before
    # it: the next tries halve the range); tries of that chunk alone (or reads of an
    # unreadable text); and the claim of the task embedding it (who, until when).
    vectors_done: Mapped[int] = mapped_column(Integer, default=0)
    vectors_suspect_end: Mapped[int | None] = mapped_column(Integer)
    vectors_attempts: Mapped[int] = mapped_column(Integer, default=0)
    vectors_lease_owner: Mapped[str | None] = mapped_column(String(64))
    vectors_lease_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # A file of a folder collection: its path under the folder (POSIX, as on disk) and the
    # modification time it had when read (a rescan skips a file of the same size and time).
    source_path: Mapped[str | None] = mapped_column(String(1024))
    source_mtime_ns: Mapped[int | None] = mapped_column(BigInteger)
    # Text recognition of this version: the pages read by OCR ("1,2,5"; None: none) and
    # Tesseract's mean word confidence over them (0..100).
    ocr_pages: Mapped[str | None] = mapped_column(Text)
    ocr_confidence: Mapped[float | None] = mapped_column(Float)
    # The version handed to the OCR workers by an extract worker: while that version is not
    # final, the document waits for (or is in) its OCR pass.
    ocr_sha256: Mapped[str | None] = mapped_column(String(64))

    @property
    def waiting_for_ocr(self) -> bool:
        return (
            self.ocr_sha256 is not None
            and self.ocr_sha256 == self.sha256
            and self.status in (DocumentStatus.QUEUED.value, DocumentStatus.PROCESSING.value)
        )

    @property
    def ocr_page_numbers(self) -> list[int] | None:
        return [int(n) for n in self.ocr_pages.split(",") if n] if self.ocr_pages else None

    @property
    def public_id(self) -> str:
        """The tenant's id of the document (what every answer shows)."""
        return public_document_id(self.id)

    __table_args__ = (
        Index("ix_documents_tenant_collection_path", "tenant", "collection", "source_path"),
        Index("ix_documents_tenant_status", "tenant", "status"),
        Index("ix_documents_tenant_created", "tenant", "created_at"),
        Index("ix_documents_tenant_sha", "tenant", "sha256"),
        Index("ix_documents_status_changed", "status", "status_changed_at"),
    )


class WebhookEvent(Base):
    """A webhook event id already applied: a replay of it changes nothing."""

    __tablename__ = "webhook_events"

    event_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(64))
    event_type: Mapped[str] = mapped_column(String(32))
    document_id: Mapped[str | None] = mapped_column(String(64))
    received_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class FolderCollection(Base):
    """A folder whose files (those its mask selects) are documents of one collection."""

    __tablename__ = "folder_collections"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    path: Mapped[str] = mapped_column(Text)  # absolute, resolved when added
    pattern: Mapped[str] = mapped_column(String(1024))  # the mask, as given
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)  # last scan


class PathContext(Base):
    """A description of a collection, a folder in it or everything (collection ''), which
    qmd's tools show beside each result under it (the longest matching prefix wins)."""

    __tablename__ = "path_contexts"

    tenant: Mapped[str] = mapped_column(String(64), primary_key=True)
    collection: Mapped[str] = mapped_column(String(128), primary_key=True)  # '': global
    prefix: Mapped[str] = mapped_column(String(1024), primary_key=True)  # '': the whole one
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ApiKey(Base):
    """An API key: its tenant, user and scopes, kept as the sha256 of the key (the key
    itself is shown once, when created). Revoked or expired keys stay for the audit trail."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)  # public: shown in lists
    digest: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 hex of the key
    tenant: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(String(128))
    scopes: Mapped[str] = mapped_column(String(256))  # comma-separated
    name: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index("ix_api_keys_tenant", "tenant"),)


class AuditRecord(Base):
    """One call of the proxy toolset: who, what, how much came back — never the text."""

    __tablename__ = "audit_records"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    tenant: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str | None] = mapped_column(String(128))
    key_id: Mapped[str | None] = mapped_column(String(32))
    transport: Mapped[str] = mapped_column(String(16))
    tool: Mapped[str] = mapped_column(String(64))
    doc_id: Mapped[str | None] = mapped_column(String(64))
    trace_id: Mapped[str | None] = mapped_column(String(128))
    outcome: Mapped[str] = mapped_column(String(64))  # ok, or the error code
    tokens: Mapped[int] = mapped_column(Integer, default=0)
    bytes: Mapped[int] = mapped_column(Integer, default=0)
    masked: Mapped[str | None] = mapped_column(Text)  # JSON: kind -> count
    rate_state: Mapped[str | None] = mapped_column(Text)  # JSON
    latency_ms: Mapped[float] = mapped_column(Float, default=0.0)

    __table_args__ = (
        Index("ix_audit_tenant_at", "tenant", "at"),
        Index("ix_audit_doc", "tenant", "doc_id"),
    )
