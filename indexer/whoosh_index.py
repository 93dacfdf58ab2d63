"""The Whoosh index: chunks of documents, written through one guarded path.

Every write goes through :meth:`DocumentIndex._writer`: it takes Whoosh's lock with a
timeout (the ``index`` queue runs one writer, but ``ldims reindex`` or a second worker
started by mistake must wait, not corrupt), commits only when the block succeeds and
cancels otherwise. Replacing a document deletes its chunks and adds the new ones in one
commit, so readers see the old version or the new one, never a mix.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from whoosh import index as whoosh_index
from whoosh.fields import ID, NUMERIC, TEXT, Schema
from whoosh.index import LockError
from whoosh.query import Term
from whoosh.writing import IndexWriter

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1


class IndexBusy(Exception):
    """The index lock could not be taken in time; the caller may retry later."""


@dataclass(frozen=True)
class Chunk:
    """A passage of a document: the text of a page or part of one."""

    text: str
    page: int = 1


@dataclass(frozen=True)
class IndexedDocument:
    """What the index needs to know of one document version."""

    document_id: str
    tenant: str
    collection: str
    name: str
    version: int
    chunks: list[Chunk] = field(default_factory=list)


def _schema() -> Schema:
    return Schema(
        chunk_id=ID(stored=True, unique=True),
        document_id=ID(stored=True),
        tenant=ID(stored=True),
        collection=ID(stored=True),
        version=NUMERIC(stored=True),
        page=NUMERIC(stored=True),
        name=TEXT(stored=True),
        text=TEXT(stored=True),
    )


class DocumentIndex:
    """One Whoosh index folder; safe to open from many processes."""

    def __init__(self, path: Path, lock_timeout: float = 30.0) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self._index = self._open_or_create()

    def _open_or_create(self) -> whoosh_index.Index:
        self.path.mkdir(parents=True, exist_ok=True)
        # Two processes starting at once must not both create the index.
        with open(self.path / ".create.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            if whoosh_index.exists_in(str(self.path)):
                return whoosh_index.open_dir(str(self.path))
            log.info("creating index (schema v%d) in %s", SCHEMA_VERSION, self.path)
            return whoosh_index.create_in(str(self.path), _schema())

    @contextlib.contextmanager
    def _writer(self) -> Iterator[IndexWriter]:
        try:
            writer = self._index.writer(timeout=self.lock_timeout, delay=0.25)
        except LockError as exc:
            raise IndexBusy(f"index lock not free after {self.lock_timeout}s") from exc
        try:
            yield writer
        except BaseException:
            writer.cancel()
            raise
        writer.commit()

    def replace_document(self, document: IndexedDocument) -> None:
        """Make ``document``'s chunks the only ones indexed under its id (one commit)."""
        with self._writer() as writer:
            writer.delete_by_term("document_id", document.document_id)
            for number, chunk in enumerate(document.chunks):
                writer.add_document(
                    chunk_id=f"{document.document_id}:{number}",
                    document_id=document.document_id,
                    tenant=document.tenant,
                    collection=document.collection,
                    version=document.version,
                    page=chunk.page,
                    name=document.name,
                    text=chunk.text,
                )

    def delete_documents(self, document_ids: list[str]) -> None:
        """Remove every chunk of these documents."""
        if not document_ids:
            return
        with self._writer() as writer:
            for document_id in document_ids:
                writer.delete_by_term("document_id", document_id)

    def chunk_count(self, document_id: str) -> int:
        with self._index.searcher() as searcher:
            return len(searcher.search(Term("document_id", document_id), limit=None))

    def indexed_versions(self, document_id: str) -> set[int]:
        """The versions of ``document_id`` that have chunks (one, or none, when healthy)."""
        with self._index.searcher() as searcher:
            hits = searcher.search(Term("document_id", document_id), limit=None)
            return {hit["version"] for hit in hits}

    def document_ids(self) -> set[str]:
        with self._index.searcher() as searcher:
            # The lexicon keeps terms of deleted chunks until a merge: check each one.
            terms = (term.decode() for term in searcher.lexicon("document_id"))
            return {
                term
                for term in terms
                if not searcher.search(Term("document_id", term), limit=1).is_empty()
            }

    def ping(self) -> int:
        """Open a searcher and return the number of chunks (raises if unreadable)."""
        with self._index.searcher() as searcher:
            return searcher.doc_count()  # type: ignore[no-any-return]
