"""Document intake and deletes: bytes, stored blobs and URLs become catalog rows and queued
work. REST uploads, webhook events, MCP ``ingestDocument`` and the CLI call it.

An accepted document is committed to the catalog (status ``queued``) before anyone is
told it was accepted; the task is published after the commit. A failure to publish after
the commit is not an error for the caller: the reconciler re-drives the document.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ldims.blobs import BlobStore, StoredBlob
from ldims.caller import Caller
from ldims.catalog import Catalog, Document, document_key, repository
from ldims.errors import InvalidInput, NotFound, PermanentError, ServiceUnavailable
from ldims.extracts import ExtractStore
from ldims.lifecycle import states
from ldims.lifecycle.contents import discard_unreferenced, receive_original
from ldims.settings import Settings
from workers import Dispatcher, check_url, detect_format

log = logging.getLogger(__name__)
_DATETIME = TypeAdapter(datetime)
DOCUMENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")


@dataclass(frozen=True)
class DocumentMeta:
    """Metadata a submitter gives with a document (all optional but the name)."""

    name: str
    collection: str
    document_type: str | None = None
    submitter: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class FolderUpload:
    """A file of a folder collection, stored as an original: the document it is (an id of
    its path, chosen by the caller) and where it came from."""

    blob: StoredBlob
    head: bytes
    meta: DocumentMeta
    document_id: str
    source_path: str
    mtime_ns: int


@dataclass(frozen=True)
class IngestOutcome:
    document: Document
    created: bool  # a new document
    queued: bool  # a new version was queued (False: identical content, nothing to do)


def parse_datetime(value: str | None, field: str) -> datetime | None:
    """An ISO date or date-time; naive values are taken as UTC."""
    if not value:
        return None
    try:
        parsed = _DATETIME.validate_python(value)
    except ValidationError as exc:
        raise InvalidInput(f"{field} must be an ISO 8601 date-time.", field=field) from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def document_meta(
    settings: Settings,
    name: str | None,
    collection: str | None = None,
    document_type: str | None = None,
    submitter: str | None = None,
    created_at: str | None = None,
    created_at_field: str = "createdAt",
) -> DocumentMeta:
    """The metadata of a submission, from the fields every intake path takes alike."""
    name = (name or "").strip()
    if not name:
        raise InvalidInput("The document needs a name.", field="name")
    return DocumentMeta(
        name=name[:512],
        collection=(collection or settings.default_collection)[:128],
        document_type=document_type or None,
        submitter=submitter or None,
        created_at=parse_datetime(created_at, created_at_field),
    )


def validate_document_id(document_id: str) -> str:
    if not DOCUMENT_ID.match(document_id):
        raise InvalidInput(
            "documentId must be 1-64 characters of letters, digits and _ . : -",
            field="documentId",
        )
    return document_id


def content_document_id(tenant: str, sha256: str) -> str:
    """The id a document without an explicit id gets: the same content, the same id."""
    digest = hashlib.sha256(f"{tenant}\0{sha256}".encode()).digest()
    return "doc_" + base64.b32encode(digest).decode().lower()[:24]


def owned_document(session: Session, caller: Caller, document_id: str) -> Document:
    """The caller's document of this (the tenant's own) id, or ``NotFound``. Ids are scoped
    per tenant (:func:`~ldims.catalog.document_key`): another tenant's document of the same id
    is another document, never found, refused or revealed.
    """
    document = repository.get_document(session, document_key(caller.tenant, document_id))
    if document is None or document.tenant != caller.tenant:  # a second guard, never hit
        raise NotFound(documentId=document_id)
    return document


def _keys(caller: Caller, document_ids: Sequence[str]) -> set[str]:
    return {document_key(caller.tenant, document_id) for document_id in document_ids}


class Intake:
    def __init__(self, settings: Settings, catalog: Catalog, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.blobs = BlobStore(settings.blobs_dir)
        self.extracts = ExtractStore(settings.extracts_dir)

    # --- writes ----------------------------------------------------------------------------
    def ingest_bytes(
        self, caller: Caller, data: bytes, meta: DocumentMeta, document_id: str | None = None
    ) -> IngestOutcome:
        """Store ``data`` as an original and record it (MCP ingest, inline webhook content)."""
        if document_id is not None:
            validate_document_id(document_id)
        writer = receive_original(self.blobs, self.settings.max_upload_bytes)
        try:
            writer.write(data)
        except BaseException:
            writer.abort()
            raise
        return self.ingest_blob(caller, writer.commit(), writer.head, meta, document_id)

    def ingest_blob(
        self,
        caller: Caller,
        blob: StoredBlob,
        head: bytes,
        meta: DocumentMeta,
        document_id: str | None = None,
    ) -> IngestOutcome:
        """Record a stored original as a new document or a new version, and queue it."""
        if document_id is not None:
            try:
                validate_document_id(document_id)
            except InvalidInput:
                self.discard_blob(blob.sha256)
                raise
        try:
            self.dispatcher.ping()
        except ServiceUnavailable:
            self.discard_blob(blob.sha256)
            raise
        outcome = self._record(caller, meta, self._blob_fields(blob, head, meta), document_id)
        if outcome.queued:
            self._publish(lambda: self.dispatcher.extract(outcome.document.id, blob.sha256))
        return outcome

    def ingest_blobs(
        self, caller: Caller, uploads: Sequence[tuple[StoredBlob, bytes, DocumentMeta]]
    ) -> list[IngestOutcome]:
        """Record many stored originals (a bulk upload: ``(blob, head, meta)`` each, content ids
        only) in one transaction, and queue the new ones in a few extract messages.

        Each upload's outcome is its own, as if it came alone: a content the tenant already
        holds (or one seen earlier in the same bulk) is a duplicate and queues nothing.
        """
        try:
            self.dispatcher.ping()
        except ServiceUnavailable:
            self.discard_blobs(blob.sha256 for blob, _head, _meta in uploads)
            raise
        outcomes = self._record_many(caller, uploads)
        queued = [(o.document.id, str(o.document.sha256)) for o in outcomes if o.queued]
        # A message per extract batch: the extract workers share a large bulk between them.
        step = self.settings.extract_batch_max_documents
        for start in range(0, len(queued), step):
            part = queued[start : start + step]
            self._publish(lambda part=part: self.dispatcher.extract_many(part))  # type: ignore[misc]
        return outcomes

    def ingest_folder_files(
        self, caller: Caller, uploads: Sequence[FolderUpload]
    ) -> list[IngestOutcome]:
        """Record files of a folder collection in one transaction — each a new document or
        a new version of the one its id names (a file's content may be another file's:
        folder documents are never duplicates) — and queue them in a few extract messages.
        Their originals may have been committed without their own fsync: one sync of the
        store makes them all durable before a row names them."""
        if not uploads:
            return []
        try:
            self.dispatcher.ping()
        except ServiceUnavailable:
            self.discard_blobs(upload.blob.sha256 for upload in uploads)
            raise
        self.blobs.sync()
        replaced: list[str] = []
        outcomes = []
        with self.catalog.session() as session:
            existing = repository.get_documents(
                session, {document_key(caller.tenant, u.document_id) for u in uploads}
            )
            for upload in uploads:
                fields = self._blob_fields(upload.blob, upload.head, upload.meta)
                fields["source_path"] = upload.source_path
                fields["source_mtime_ns"] = upload.mtime_ns
                document = existing.get(document_key(caller.tenant, upload.document_id))
                if document is None:
                    document = self._new_document(
                        session, caller.tenant, upload.document_id, upload.meta, fields
                    )
                    outcomes.append(IngestOutcome(document, created=True, queued=True))
                    continue
                if document.sha256 and document.sha256 != upload.blob.sha256:
                    replaced.append(document.sha256)
                self._new_version(document, upload.meta, fields)
                outcomes.append(IngestOutcome(document, created=False, queued=True))
        self.discard_blobs(replaced)
        queued = [(o.document.id, str(o.document.sha256)) for o in outcomes]
        step = self.settings.extract_batch_max_documents
        for start in range(0, len(queued), step):
            part = queued[start : start + step]
            self._publish(lambda part=part: self.dispatcher.extract_many(part))  # type: ignore[misc]
        return outcomes

    def reprocess_many(self, caller: Caller, document_ids: Sequence[str]) -> int:
        """Send the caller's documents through the pipeline again, as they are (their
        metadata changed: the index and the vectors must hear of it; the extraction is
        kept); how many were queued."""
        if not document_ids:
            return 0
        self.dispatcher.ping()
        with self.catalog.session() as session:
            found = repository.get_documents(session, _keys(caller, document_ids))
            owned = [d for d in found.values() if d.sha256]
            for document in owned:
                states.requeue(document, vectors_too=True)  # they carry the metadata too
            queued = [(d.id, str(d.sha256)) for d in owned]
        step = self.settings.extract_batch_max_documents
        for start in range(0, len(queued), step):
            part = queued[start : start + step]
            self._publish(lambda part=part: self.dispatcher.extract_many(part))  # type: ignore[misc]
        return len(queued)

    def delete_many(self, caller: Caller, document_ids: Sequence[str]) -> int:
        """:meth:`delete` for many documents of the caller (others' and unknown ids are left
        alone), in one transaction and one index message; how many were deleted."""
        if not document_ids:
            return 0
        self.dispatcher.ping()
        with self.catalog.session() as session:
            found = repository.get_documents(session, _keys(caller, document_ids))
            owned = list(found.values())
            sha256s = [str(d.sha256) for d in owned if d.sha256]
            deleted = [d.id for d in owned]
            for document in owned:
                states.remove(session, document)
        self.discard_blobs(sha256s)
        if deleted:
            self._publish(lambda: self.dispatcher.delete_from_index(deleted))
        return len(deleted)

    def ingest_url(
        self, caller: Caller, url: str, meta: DocumentMeta, document_id: str | None = None
    ) -> IngestOutcome:
        """Record a document whose body a worker will fetch from ``url`` (checked first)."""
        if document_id is not None:
            validate_document_id(document_id)
        try:
            check_url(url, self.settings)
        except PermanentError as exc:
            raise InvalidInput(exc.message, field="document.url", reason=exc.code) from exc
        self.dispatcher.ping()
        fields = {"sha256": None, "size": None, "format": None, "source_url": url}
        new_id = document_id or "doc_" + secrets.token_hex(10)
        outcome = self._record(caller, meta, fields, new_id)
        if outcome.queued:
            self._publish(lambda: self.dispatcher.fetch(outcome.document.id, url))
        return outcome

    def delete(self, caller: Caller, document_id: str) -> None:
        """Remove a document from the catalog, the disk and (through the index queue) the index."""
        self.dispatcher.ping()
        with self.catalog.session() as session:
            document = owned_document(session, caller, document_id)
            sha256, key = document.sha256, document.id
            states.remove(session, document)
        if sha256:
            self.discard_blob(sha256)
        self._publish(lambda: self.dispatcher.delete_from_index([key]))

    # --- internals -------------------------------------------------------------------------
    def _record(
        self, caller: Caller, meta: DocumentMeta, fields: dict[str, object], document_id: str | None
    ) -> IngestOutcome:
        sha256 = fields["sha256"]
        tenant = caller.tenant
        try:
            with self.catalog.session() as session:
                if document_id is None:
                    duplicate = repository.find_by_content(session, tenant, str(sha256))
                    if duplicate is not None:
                        return IngestOutcome(duplicate, created=False, queued=False)
                    document_id = content_document_id(tenant, str(sha256))
                    key = document_key(tenant, document_id)
                    if repository.get_document(session, key) is not None:
                        # That id now holds other content (updated since): take a fresh one.
                        document_id = "doc_" + secrets.token_hex(10)
                    existing = None  # looked up above (a fresh id's clash fails the insert)
                else:
                    existing = repository.get_document(session, document_key(tenant, document_id))
                if existing is None:
                    document = self._new_document(session, tenant, document_id, meta, fields)
                    return IngestOutcome(document, created=True, queued=True)
                if sha256 is not None and existing.sha256 == sha256:
                    return IngestOutcome(existing, created=False, queued=False)
                old_sha256 = existing.sha256
                self._new_version(existing, meta, fields)
        except IntegrityError:
            # A concurrent upload of the same content won the insert: ours is its duplicate.
            with self.catalog.session() as session:
                document = owned_document(session, caller, str(document_id))
                return IngestOutcome(document, created=False, queued=False)
        if old_sha256 and old_sha256 != sha256:
            self.discard_blob(old_sha256)
        return IngestOutcome(existing, created=False, queued=True)

    def _record_many(
        self, caller: Caller, uploads: Sequence[tuple[StoredBlob, bytes, DocumentMeta]]
    ) -> list[IngestOutcome]:
        tenant = caller.tenant
        sha256s = {blob.sha256 for blob, _head, _meta in uploads}
        try:
            with self.catalog.session() as session:
                known = repository.find_many_by_content(session, tenant, sha256s)
                taken = repository.existing_ids(
                    session,
                    {document_key(tenant, content_document_id(tenant, sha)) for sha in sha256s},
                )
                outcomes = []
                for blob, head, meta in uploads:
                    duplicate = known.get(blob.sha256)
                    if duplicate is not None:
                        outcomes.append(IngestOutcome(duplicate, created=False, queued=False))
                        continue
                    document_id = content_document_id(tenant, blob.sha256)
                    if document_key(tenant, document_id) in taken:
                        # That id now holds other content (updated since): take a fresh one.
                        document_id = "doc_" + secrets.token_hex(10)
                    document = self._new_document(
                        session, tenant, document_id, meta, self._blob_fields(blob, head, meta)
                    )
                    known[blob.sha256] = document  # a second copy in this bulk is a duplicate
                    outcomes.append(IngestOutcome(document, created=True, queued=True))
                return outcomes
        except IntegrityError:
            # A concurrent upload won an insert: each alone, as the single path settles races.
            return [
                self._record(caller, meta, self._blob_fields(blob, head, meta), None)
                for blob, head, meta in uploads
            ]

    @staticmethod
    def _blob_fields(blob: StoredBlob, head: bytes, meta: DocumentMeta) -> dict[str, object]:
        return {
            "sha256": blob.sha256,
            "size": blob.size,
            "format": detect_format(head, meta.name),
        }

    @staticmethod
    def _new_document(
        session: Session,
        tenant: str,
        document_id: str,
        meta: DocumentMeta,
        fields: dict[str, object],
    ) -> Document:
        return states.add_document(
            session,
            document_id=document_key(tenant, document_id),
            tenant=tenant,
            collection=meta.collection,
            name=meta.name,
            submitter=meta.submitter,
            document_type=meta.document_type,
            created_at=meta.created_at,
            **fields,
        )

    @staticmethod
    def _new_version(document: Document, meta: DocumentMeta, fields: dict[str, object]) -> None:
        states.new_version(
            document,
            name=meta.name,
            collection=meta.collection,
            submitter=meta.submitter,
            document_type=meta.document_type,
            created_at=meta.created_at,
            **fields,
        )

    def _publish(self, send: Callable[[], None]) -> None:
        try:
            send()
        except ServiceUnavailable:
            log.warning("task not published after commit; the reconciler will re-drive it")

    def discard_blob(self, sha256: str) -> None:
        """Delete an original (and its extractions) that no document refers to any more."""
        self.discard_blobs([sha256])

    def discard_blobs(self, sha256s: Iterable[str]) -> None:
        """:meth:`discard_blob` for many originals, with one catalog query."""
        discard_unreferenced(self.catalog, self.blobs, self.extracts, sha256s)
