"""A tenant's folder collections and contexts, and ``update``: qmd's library, in the catalog.

A folder collection is a folder and a mask; ``update`` scans it and sends only new, changed
and removed files through the normal pipeline (a file of the same size and modification time
is not even read; one whose bytes hash the same is unchanged). Its files are documents of the
collection like uploaded ones, with their path under the folder; an uploaded document's path
is its name. Contexts describe the whole library (global), a collection or a folder in it.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from sqlalchemy import func, select

from ldims.caller import Caller
from ldims.catalog import Catalog, Document, document_key, public_document_id, utcnow
from ldims.catalog.models import FolderCollection, PathContext
from ldims.documents import DocumentMeta, Documents
from ldims.documents.intake import FolderUpload
from ldims.errors import InvalidInput, PayloadTooLarge
from ldims.lifecycle import states
from ldims.lifecycle.contents import receive_original
from ldims.qmd.errors import CollectionExists, UnknownCollection
from ldims.qmd.folders import DEFAULT_MASK, FolderFile, check_mask, open_file, scan
from ldims.qmd.text import decode_path
from ldims.settings import Settings

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_TEXT_SUFFIXES = (".md", ".markdown", ".txt", ".org", ".rst")
UPDATE_BATCH = 200  # files stored and recorded per catalog transaction


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    path: str | None  # None: a collection of uploaded documents only
    pattern: str | None
    documents: int
    last_updated: datetime | None


@dataclass
class UpdateReport:
    collection: str
    path: str
    pattern: str
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    @property
    def line(self) -> str:
        """qmd's summary line."""
        return (
            f"Indexed: {self.new} new, {self.updated} updated, {self.unchanged} unchanged, "
            f"{self.removed} removed"
        )


@dataclass(frozen=True)
class ContextInfo:
    collection: str  # '' for the global context
    prefix: str  # '' for the whole collection
    text: str

    @property
    def target(self) -> str:
        if not self.collection:
            return "/"
        return f"qmd://{self.collection}/{self.prefix}"


def check_collection_name(name: str) -> str:
    if not name or len(name) > 128 or not set(name) <= _NAME_CHARS or name.startswith("."):
        raise InvalidInput(
            "A collection name is 1-128 letters, digits, '_', '-' and '.' (not first).",
            field="name",
        )
    return name


def folder_document_id(tenant: str, collection: str, path: str) -> str:
    """A folder file's document id: stable for its place, unrelated to its content."""
    digest = hashlib.sha256(f"{tenant}\0{collection}\0{path}".encode()).digest()
    return "qmd_" + base64.b32encode(digest).decode().lower()[:24]


class Library:
    """Collections, contexts and updates of one process (every call takes the caller)."""

    def __init__(self, settings: Settings, catalog: Catalog, documents: Documents) -> None:
        self.settings = settings
        self.catalog = catalog
        self.documents = documents

    # --- collections -----------------------------------------------------------------------
    def add(self, caller: Caller, path: str, name: str, mask: str = DEFAULT_MASK) -> UpdateReport:
        """Register ``path`` (a folder) as collection ``name`` and run its first update."""
        check_collection_name(name)
        try:
            check_mask(mask)
        except ValueError as exc:
            raise InvalidInput(str(exc), field="mask") from None
        folder = Path(path).expanduser().resolve()
        if not folder.is_dir():
            raise InvalidInput(f"Not a folder: {path}", field="path")
        with self.catalog.session() as session:
            if session.get(FolderCollection, (caller.tenant, name)) is not None:
                raise CollectionExists(f"Collection '{name}' exists already.", collection=name)
            now = utcnow()
            session.add(
                FolderCollection(
                    tenant=caller.tenant,
                    name=name,
                    path=str(folder),
                    pattern=mask,
                    created_at=now,
                    updated_at=now,
                )
            )
        return self.update(caller, [name])[0]

    def remove(self, caller: Caller, name: str) -> int:
        """Forget folder collection ``name`` and delete its files' documents (uploaded
        documents of that collection stay); how many were deleted."""
        with self.catalog.session() as session:
            folder = session.get(FolderCollection, (caller.tenant, name))
            if folder is None:
                raise self._unknown(session, caller, name)
            ids = _public(
                session.scalars(
                    select(Document.id).where(
                        Document.tenant == caller.tenant,
                        Document.collection == name,
                        Document.source_path.is_not(None),
                    )
                )
            )
            session.delete(folder)
            session.query(PathContext).filter_by(tenant=caller.tenant, collection=name).delete()
        return self.documents.intake.delete_many(caller, ids)

    def rename(self, caller: Caller, old: str, new: str) -> None:
        """Rename a collection: its folder, its documents and its contexts."""
        check_collection_name(new)
        with self.catalog.session() as session:
            if old not in self._names(session, caller):
                raise self._unknown(session, caller, old)
            if new in self._names(session, caller):
                raise CollectionExists(f"Collection '{new}' exists already.", collection=new)
            # Key columns updated in place: the rows keep everything else as they are.
            session.query(FolderCollection).filter_by(tenant=caller.tenant, name=old).update(
                {FolderCollection.name: new}, synchronize_session=False
            )
            for model in (PathContext, Document):
                session.query(model).filter_by(tenant=caller.tenant, collection=old).update(
                    {model.collection: new}, synchronize_session=False
                )
            renamed = _public(
                session.scalars(select(Document.id).filter_by(tenant=caller.tenant, collection=new))
            )
        # The index and the vectors still hold the old name: the documents go through again.
        self.documents.intake.reprocess_many(caller, renamed)

    def collections(self, caller: Caller) -> list[CollectionInfo]:
        """Every collection of the tenant: its folders (even empty) and the collections of
        uploaded documents, by name."""
        with self.catalog.session() as session:
            folders = {
                f.name: f
                for f in session.scalars(select(FolderCollection).filter_by(tenant=caller.tenant))
            }
            counts = {
                name: (count, newest)
                for name, count, newest in session.execute(
                    select(Document.collection, func.count(), func.max(Document.updated_at))
                    .where(Document.tenant == caller.tenant)
                    .group_by(Document.collection)
                )
            }
        names = sorted(set(folders) | set(counts))
        infos = []
        for name in names:
            folder = folders.get(name)
            count, newest = counts.get(name, (0, None))
            infos.append(
                CollectionInfo(
                    name=name,
                    path=folder.path if folder else None,
                    pattern=folder.pattern if folder else None,
                    documents=count,
                    last_updated=newest or (folder.updated_at if folder else None),
                )
            )
        return infos

    def collection(self, caller: Caller, name: str) -> CollectionInfo:
        for info in self.collections(caller):
            if info.name == name:
                return info
        with self.catalog.session() as session:
            raise self._unknown(session, caller, name)

    def check_collection(self, caller: Caller, name: str | None) -> None:
        """UnknownCollection unless ``name`` is None or one of the tenant's collections."""
        if name is None:
            return
        with self.catalog.session() as session:
            if name not in self._names(session, caller):
                raise self._unknown(session, caller, name)

    # --- contexts --------------------------------------------------------------------------
    def add_context(self, caller: Caller, target: str | None, text: str) -> ContextInfo:
        """Describe ``target`` (``qmd://collection/path``, a folder inside a collection's,
        or ``/`` / nothing for everything); a second description of it replaces the first."""
        if not text.strip():
            raise InvalidInput("The context text is empty.", field="text")
        with self.catalog.session() as session:
            collection, prefix = self._context_target(session, caller, target)
            existing = session.get(PathContext, (caller.tenant, collection, prefix))
            if existing is not None:
                existing.text = text
            else:
                session.add(
                    PathContext(
                        tenant=caller.tenant,
                        collection=collection,
                        prefix=prefix,
                        text=text,
                        created_at=utcnow(),
                    )
                )
        return ContextInfo(collection, prefix, text)

    def contexts(self, caller: Caller) -> list[ContextInfo]:
        with self.catalog.session() as session:
            rows = session.scalars(
                select(PathContext)
                .filter_by(tenant=caller.tenant)
                .order_by(PathContext.collection, PathContext.prefix)
            )
            return [ContextInfo(row.collection, row.prefix, row.text) for row in rows]

    def remove_context(self, caller: Caller, target: str | None) -> ContextInfo:
        with self.catalog.session() as session:
            collection, prefix = self._context_target(session, caller, target)
            row = session.get(PathContext, (caller.tenant, collection, prefix))
            if row is None:
                raise InvalidInput(f"No context for {target or '/'}.", field="path")
            info = ContextInfo(row.collection, row.prefix, row.text)
            session.delete(row)
        return info

    def context_of(self, contexts: list[ContextInfo], collection: str, path: str) -> str | None:
        """qmd's context of a file: the global one, then each one of its collection whose
        path is a folder above it (or it), most general first, joined by a blank line."""
        found = [c for c in contexts if not c.collection]
        above = [
            c
            for c in contexts
            if c.collection == collection
            and (not c.prefix or path == c.prefix or path.startswith(c.prefix.rstrip("/") + "/"))
        ]
        found += sorted(above, key=lambda c: len(c.prefix))
        return "\n\n".join(c.text for c in found) or None

    # --- update ----------------------------------------------------------------------------
    def update(self, caller: Caller, names: Iterable[str] | None = None) -> list[UpdateReport]:
        """Re-scan the folder collections (``names``: only these) and send the new, changed
        and removed files through the pipeline."""
        with self.catalog.session() as session:
            folders = list(
                session.scalars(select(FolderCollection).filter_by(tenant=caller.tenant))
            )
            if names is not None:
                wanted = list(names)
                known = {f.name for f in folders}
                for name in wanted:
                    if name not in known:
                        raise self._unknown(session, caller, name)
                folders = [f for f in folders if f.name in wanted]
            plans = [(f.name, Path(f.path), f.pattern) for f in folders]
        return [self._update_one(caller, *plan) for plan in plans]

    def _update_one(self, caller: Caller, name: str, folder: Path, mask: str) -> UpdateReport:
        report = UpdateReport(name, str(folder), mask)
        with self.catalog.session() as session:
            rows = session.execute(
                select(
                    Document.id,
                    Document.source_path,
                    Document.size,
                    Document.source_mtime_ns,
                    Document.sha256,
                ).where(
                    Document.tenant == caller.tenant,
                    Document.collection == name,
                    Document.source_path.is_not(None),
                )
            ).all()
            taken = set(
                _public(
                    session.scalars(
                        select(Document.id).where(
                            Document.tenant == caller.tenant,
                            Document.id.like(document_key(caller.tenant, "qmd_%")),
                        )
                    )
                )
            )
        known = {row.source_path: row for row in rows}
        seen: set[str] = set()
        pending: list[FolderUpload] = []
        touched: list[tuple[str, int]] = []  # (document id, mtime): same bytes, new time
        if folder.is_dir():
            for file in scan(folder, mask):
                seen.add(file.path)
                row = known.get(file.path)
                if (
                    row is not None
                    and row.size == file.size
                    and row.source_mtime_ns == file.mtime_ns
                ):
                    report.unchanged += 1
                    continue
                upload = self._store(caller, name, file, row, taken, report)
                if upload is None:
                    continue
                if row is not None and row.sha256 == upload.blob.sha256:
                    report.unchanged += 1
                    touched.append((row.id, file.mtime_ns))
                    continue
                if row is None:
                    report.new += 1
                else:
                    report.updated += 1
                pending.append(upload)
                if len(pending) >= UPDATE_BATCH:
                    self.documents.intake.ingest_folder_files(caller, pending)
                    pending = []
        self.documents.intake.ingest_folder_files(caller, pending)
        gone = [public_document_id(row.id) for path, row in known.items() if path not in seen]
        report.removed = self.documents.intake.delete_many(caller, gone)
        with self.catalog.session() as session:
            states.source_seen(session, touched)
            folder_row = session.get(FolderCollection, (caller.tenant, name))
            if folder_row is not None:
                folder_row.updated_at = utcnow()
        return report

    def _store(
        self,
        caller: Caller,
        collection: str,
        file: FolderFile,
        row: object | None,
        taken: set[str],
        report: UpdateReport,
    ) -> FolderUpload | None:
        """The file stored as an original (None: skipped, and why is in ``report``)."""
        limit = self.settings.max_upload_bytes
        if file.size > limit:
            report.skipped.append((file.path, f"larger than {limit} bytes"))
            return None
        writer = receive_original(self.documents.intake.blobs, limit)
        try:
            with open_file(file) as handle:
                while chunk := handle.read(1 << 20):
                    writer.write(chunk)
        except PayloadTooLarge:
            writer.abort()
            report.skipped.append((file.path, f"larger than {limit} bytes"))
            return None
        except OSError as exc:
            writer.abort()
            report.skipped.append((file.path, exc.strerror or "unreadable"))
            return None
        except BaseException:
            writer.abort()
            raise
        if file.path.lower().endswith(_TEXT_SUFFIXES) and not writer.head.strip():
            # qmd skips a text file holding only blanks (it is not a document there either).
            writer.abort()
            report.skipped.append((file.path, "empty"))
            return None
        blob = writer.commit(durable=False)  # made durable with its batch (ingest_folder_files)
        if row is not None:
            document_id = public_document_id(row.id)  # type: ignore[attr-defined]
        else:
            document_id = folder_document_id(caller.tenant, collection, file.path)
            if document_id in taken:  # a path of a renamed or removed collection had it
                document_id = "qmd_" + secrets.token_hex(12)
            taken.add(document_id)
        meta = DocumentMeta(name=file.path[:512], collection=collection)
        return FolderUpload(blob, writer.head, meta, document_id, file.path, file.mtime_ns)

    # --- internals -------------------------------------------------------------------------
    def _names(self, session: object, caller: Caller) -> set[str]:
        folders = session.scalars(  # type: ignore[attr-defined]
            select(FolderCollection.name).filter_by(tenant=caller.tenant)
        )
        uploaded = session.scalars(  # type: ignore[attr-defined]
            select(Document.collection).where(Document.tenant == caller.tenant).distinct()
        )
        return set(folders) | set(uploaded)

    def _unknown(self, session: object, caller: Caller, name: str) -> UnknownCollection:
        names = sorted(self._names(session, caller))
        listed = ", ".join(names) if names else "none"
        return UnknownCollection(
            f"Collection not found: {name}. Collections: {listed}.",
            collection=name,
            collections=names,
        )

    def _context_target(
        self, session: object, caller: Caller, target: str | None
    ) -> tuple[str, str]:
        """(collection, prefix) of a context's target; ('', '') is the global one."""
        if target is None or target.strip() in ("", "/"):
            return "", ""
        target = target.strip()
        if target.startswith("qmd://"):
            collection, _, prefix = decode_path(target[len("qmd://") :]).partition("/")
            if collection not in self._names(session, caller):
                raise self._unknown(session, caller, collection)
            return collection, prefix.strip("/")
        # A folder path inside a collection's folder.
        path = Path(target).expanduser().resolve()
        folders = session.scalars(  # type: ignore[attr-defined]
            select(FolderCollection).filter_by(tenant=caller.tenant)
        )
        for folder in folders:
            root = Path(folder.path)
            if path == root or root in path.parents:
                return folder.name, path.relative_to(root).as_posix().strip(".").strip("/")
        raise InvalidInput(
            f"{target} is neither qmd://collection/path nor inside a collection's folder.",
            field="path",
        )


def _public(keys: Iterable[str]) -> list[str]:
    """The tenant's ids of documents given by their catalog keys."""
    return [public_document_id(key) for key in keys]
