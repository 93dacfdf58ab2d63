"""The Whoosh index: chunks of documents, written through one guarded path, read by a pool of
searchers of the latest commit (:mod:`indexer.searchers`), one per concurrent search.

Every write goes through :meth:`DocumentIndex._writer`: it takes Whoosh's lock with a timeout
and backoff (the ``index`` queue runs one writer, but ``ldims reindex`` or a second worker
started by mistake must wait, not corrupt), commits only when the block succeeds and cancels
otherwise. Replacing a document deletes its chunks and adds the new ones in one commit, so
readers see the old version or the new one, never a mix. The index worker commits many
documents at once (:meth:`DocumentIndex.batch`).

Each commit merges by :class:`TieredMerge`, a log-structured policy: segments of like size
are merged in groups, so a chunk is rewritten a bounded number of times however large the
index grows, the segments stay O(log n), and no commit merges more than a bounded number of
chunks. :meth:`DocumentIndex.optimize` merges everything, on a schedule.

The index of schema version N lives in ``<root>/v<N>``; a ``READY`` file there says it holds
every completed document (``ldims reindex`` writes it after a rebuild).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from whoosh import index as whoosh_index
from whoosh.index import TOC, LockError
from whoosh.query import Term
from whoosh.reading import SegmentReader
from whoosh.searching import Searcher

from indexer.budget import SearchLimits
from indexer.calibration import Calibrations
from indexer.deadline import check, deadline_in
from indexer.hybrid import run_hybrid
from indexer.lexicon import LexicalHit, Lexicon, qmd_title
from indexer.mapped import MappedStorage
from indexer.merging import MergePolicy, TieredMerge
from indexer.model import (
    NO_DAY,
    IndexBusy,
    IndexedDocument,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.passages import DenseChunks, PassageHit, search_document
from indexer.rerank import Reranker
from indexer.schema import SCHEMA_VERSION, build_schema
from indexer.search import check_keyword_cost, run_search
from indexer.searchers import MAX_IDLE_SEARCHERS, MAX_OPEN_SEARCHERS, SearcherPool
from indexer.vectors import VectorStore
from indexer.whoosh_internals import ChunkSegmentWriter, check_whoosh_version

log = logging.getLogger(__name__)


_READY = "READY"
# Whoosh's posting pool spills to disk (pickled, reloaded, merged) above this; at its default of
# 128 a 500-document batch spilled and building ran at 200 chunks/s, at 256 at 337 (measured).
_WRITER_POOL_MIB = 256


class Batch:
    """Writes collected in one commit (see :meth:`DocumentIndex.batch`).

    Each document id at most once: Whoosh's delete does not see chunks added earlier in the
    same commit, so a second write of an id would keep both (a ``ValueError`` instead).
    """

    def __init__(self, writer: ChunkSegmentWriter) -> None:
        self._writer = writer
        self._written: set[str] = set()
        # qmd's FTS5 rows of the batch, written once Whoosh has committed: (id, document or
        # None for a delete).
        self.lexical: list[tuple[str, IndexedDocument | None]] = []
        # One reader of the segments for every delete of the batch: Whoosh's delete_by_term
        # opens (and closes) a reader of every segment per call otherwise.
        self._searcher: Searcher | None = None

    def _once(self, document_id: str) -> None:
        if document_id in self._written:
            raise ValueError(f"document {document_id} is already written in this batch")
        self._written.add(document_id)

    def replace(self, document: IndexedDocument) -> None:
        self._once(document.document_id)
        self._delete(document.document_id)
        for fields in _chunk_fields(document):
            self._writer.add_chunk(fields)
        self.lexical.append((document.document_id, document))

    def delete(self, document_id: str) -> None:
        self._once(document_id)
        self._delete(document_id)
        self.lexical.append((document_id, None))

    def _delete(self, document_id: str) -> None:
        if self._searcher is None:
            self._searcher = self._writer.searcher()
        self._writer.delete_by_term("document_id", document_id, searcher=self._searcher)

    def close(self) -> None:
        """Close the batch's reader (before the commit, which may merge its segments)."""
        if self._searcher is not None:
            self._searcher.close()
            self._searcher = None


class DocumentIndex:
    """One Whoosh index folder; safe to open from many processes and to search from many
    threads at once."""

    def __init__(
        self,
        root: Path,
        lock_timeout: float = 30.0,
        folder: str | None = None,
        limits: SearchLimits | None = None,
        max_idle_searchers: int = MAX_IDLE_SEARCHERS,
        max_searchers: int = MAX_OPEN_SEARCHERS,
        merge_policy: MergePolicy | None = None,
        vectors: VectorStore | None = None,
        reranker: Reranker | None = None,
        calibrations: Calibrations | None = None,
        lexical: bool = True,
    ) -> None:
        check_whoosh_version()  # the writer and the postings reader use its internals
        self.root = root
        # The dense vectors of the chunks (dense and hybrid searches), kept by the embed stage.
        self.vectors = vectors
        self.reranker = reranker  # reorders the best of a dense or hybrid search, when set
        # The calibrated scores' models (the bundled ones, and those `ldims calibrate` fitted).
        self.calibrations = calibrations or Calibrations()
        # ``folder`` names another folder under ``root`` (a rebuild in progress).
        self.path = root / (folder or f"v{SCHEMA_VERSION}")
        self.lock_timeout = lock_timeout
        self.limits = limits if limits is not None else SearchLimits()
        self._merge_policy = merge_policy if merge_policy is not None else TieredMerge()
        self._index = self._open_or_create()
        # ``max_searchers`` open at once (a search waits for one past that), ``max_idle_searchers``
        # of them kept idle: see indexer.searchers.
        self._searchers = SearcherPool(
            self.path, max_idle=max_idle_searchers, max_open=max_searchers
        )
        # qmd's BM25 (SQLite FTS5), written in the same batches (see indexer.lexicon) when
        # ``lexical`` (the qmd toolset is served); see ldims.lifecycle.index.follow_toolset.
        self.lexicon = Lexicon(self.path)
        self.lexical = lexical

    # --- opening ---------------------------------------------------------------------------
    def _open_or_create(self) -> whoosh_index.Index:
        self.path.mkdir(parents=True, exist_ok=True)
        # Two processes starting at once must not both create the index.
        with open(self.root / ".create.lock", "w") as lock_file:
            fcntl.flock(lock_file, fcntl.LOCK_EX)
            # Mapped: the writer opens a reader of every segment for its deletes and merges,
            # and Whoosh's own storage copied each whole segment into the heap for it.
            storage = MappedStorage(self.path, readonly=False)
            if whoosh_index.exists_in(str(self.path)):
                return storage.open_index()
            log.info("creating index (schema v%d) in %s", SCHEMA_VERSION, self.path)
            return storage.create_index(build_schema())

    @property
    def ready(self) -> bool:
        """Whether this version's index was built from the whole catalog (or started empty)."""
        return (self.path / _READY).exists()

    def mark_ready(self) -> None:
        (self.path / _READY).write_text(f"schema v{SCHEMA_VERSION}\n")

    # --- writing ---------------------------------------------------------------------------
    def _open_writer(self) -> ChunkSegmentWriter:
        try:
            return ChunkSegmentWriter(
                self._index, timeout=self.lock_timeout, delay=0.1, limitmb=_WRITER_POOL_MIB
            )
        except LockError as exc:
            raise IndexBusy(f"index lock not free after {self.lock_timeout}s") from exc

    @contextlib.contextmanager
    def _writer(self) -> Iterator[ChunkSegmentWriter]:
        writer = self._open_writer()
        try:
            yield writer
        except BaseException:
            writer.cancel()
            raise
        writer.commit(mergetype=self._merge_policy)

    @contextlib.contextmanager
    def batch(self) -> Iterator[Batch]:
        """Replace and delete many documents in one commit (then their qmd FTS5 rows: a
        failure there leaves Whoosh written and raises, and the batch's retry rewrites both)."""
        with self._writer() as writer:
            batch = Batch(writer)
            try:
                yield batch
            finally:
                batch.close()
        if self.lexical:
            self.write_lexicon(batch.lexical)

    def write_lexicon(self, changes: Sequence[tuple[str, IndexedDocument | None]]) -> None:
        """qmd's FTS5 rows of these documents (``None``: deleted), in one transaction."""
        if not changes:
            return
        with self.lexicon.writer() as lexical:
            for document_id, document in changes:
                if document is None:
                    lexical.delete(document_id)
                else:
                    lexical.replace(
                        document_id,
                        document.tenant,
                        document.collection,
                        document.name,
                        qmd_title(document.title, document.name),
                        full_text(document),
                    )

    def replace_document(self, document: IndexedDocument) -> None:
        """Make ``document``'s chunks the only ones indexed under its id (one commit)."""
        with self.batch() as batch:
            batch.replace(document)

    def delete_documents(self, document_ids: Iterable[str]) -> None:
        """Remove every chunk of these documents (one commit)."""
        document_ids = list(dict.fromkeys(document_ids))
        if not document_ids:
            return
        with self.batch() as batch:
            for document_id in document_ids:
                batch.delete(document_id)

    def optimize(self) -> None:
        """Merge all segments into one (scheduled, never on the write path)."""
        self._open_writer().commit(optimize=True)

    # --- reading ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def searcher(self, wait: bool = True) -> Iterator[Searcher]:
        """A searcher that sees every commit made before this call, for this thread alone
        during the block (other threads' searches use searchers of their own).

        ``wait=False``: raise :class:`SearcherBusy` rather than open a searcher (file reads)
        when no idle one of the latest commit is at hand.
        """
        with self._searchers.snapshot(wait) as snapshot:
            check()
            yield snapshot.searcher

    def search(
        self, request: SearchRequest, within: float | None = None, wait: bool = True
    ) -> SearchResults:
        """Documents of ``request.tenant`` matching the query, best first.

        ``within``: seconds after which the search stops with :class:`SearchOverdue`
        (returning its searcher); ``wait=False``: :class:`SearcherBusy` rather than opening a
        searcher (see :meth:`searcher`). A query over :attr:`limits` raises
        :class:`QueryUnprocessable` before its postings are read.
        """
        with deadline_in(within), self._searchers.snapshot(wait) as snapshot:
            check()
            if request.mode in ("dense", "hybrid"):
                return run_hybrid(
                    snapshot.searcher,
                    request,
                    snapshot,
                    self.limits,
                    self.vectors,
                    self.reranker,
                    self.calibrations,
                )
            return run_search(snapshot.searcher, request, snapshot, self.limits, self.calibrations)

    def sample_chunks(self, tenant: str, count: int, seed: int = 0) -> list[tuple[str, str]]:
        """Up to ``count`` live chunks of ``tenant`` chosen at random (``seed``): (document id,
        text) — what ``ldims calibrate`` makes its pseudo-queries of."""
        with self._searchers.snapshot(True) as snapshot:
            alive = np.flatnonzero(snapshot.population(tenant))
            if not len(alive):
                return []
            chosen = np.random.default_rng(seed).choice(alive, min(count, len(alive)), False)
            found = []
            for docnum in sorted(int(n) for n in chosen):
                stored = snapshot.searcher.stored_fields(docnum)
                found.append((stored["document_id"], stored["text"]))
            return found

    def search_document(
        self,
        document_id: str,
        version: int,
        query: str,
        limit: int,
        snippet_chars: int = 240,
        within: float | None = None,
        dense: DenseChunks | None = None,
    ) -> tuple[list[PassageHit], int]:
        """The best chunks of one document for ``query``, by the document's own statistics
        (:mod:`indexer.passages`; fused with ``dense``, its chunks ranked by the query's
        vector), and how many of its chunks match the query's words."""
        with deadline_in(within), self._searchers.snapshot(True) as snapshot:
            return search_document(
                snapshot.searcher,
                snapshot,
                document_id,
                version,
                query,
                limit,
                snippet_chars,
                dense,
            )

    def lexical_search(
        self,
        tenant: str,
        query: str,
        limit: int,
        collection: str | None = None,
        within: float | None = None,
    ) -> list[LexicalHit]:
        """qmd's BM25 search (SQLite FTS5, qmd's query syntax and weights) of ``tenant``'s
        documents: the ``limit`` best, each with its text."""
        return self.lexicon.search(tenant, query, limit, collection, within)

    def check_cost(self, request: SearchRequest, within: float | None = None) -> None:
        """Raise :class:`QueryOverBudget` when ``request``'s keyword query is over
        :attr:`limits` — before a caller pays for anything else (embedding the query)."""
        with deadline_in(within), self._searchers.snapshot(True) as snapshot:
            check_keyword_cost(snapshot.searcher, request, snapshot, self.limits)

    @property
    def open_searchers(self) -> int:
        """Searchers open now, idle or in use (bounded when searches end)."""
        return self._searchers.open_searchers

    def chunk_count(self, document_id: str) -> int:
        with self.searcher() as searcher:
            return len(searcher.search(Term("document_id", document_id), limit=None))

    def indexed_versions(self, document_id: str) -> set[int]:
        """The versions of ``document_id`` that have chunks (one, or none, when healthy)."""
        with self.searcher() as searcher:
            hits = searcher.search(Term("document_id", document_id), limit=None)
            return {hit["version"] for hit in hits}

    def versions(self) -> dict[str, set[int]]:
        """Every live document's indexed versions (one each when healthy), read chunk by chunk
        (``ldims check``'s full comparison; the reconciler's sweep reads ids only)."""
        found: dict[str, set[int]] = {}
        with self.searcher() as searcher:
            for fields in searcher.reader().all_stored_fields():
                found.setdefault(fields["document_id"], set()).add(fields["version"])
        return found

    def document_ids(self) -> set[str]:
        """The ids of the documents with at least one live chunk (the reconciler's sweep).

        Read from each segment's ``document_id`` lexicon rather than by a search per term (20,000
        searches at 20,000 documents): a term with no deleted chunk is live, so only the ids of
        the deleted chunks need a look at their postings (which skip deleted chunks).
        """
        found: set[str] = set()
        with self.searcher() as searcher:
            for reader, _ in searcher.reader().leaf_readers():
                found.update(_live_document_ids(reader))
        return found

    def ping(self) -> int:
        """The number of chunks, from the latest table of contents (raises if unreadable).

        Takes no searcher, so a health check never waits for searches.
        """
        toc = TOC.read(self._index.storage, self._index.indexname)
        return sum(segment.doc_count() for segment in toc.segments)

    def close(self) -> None:
        """Close the idle searchers (those in use close when their searches end)."""
        self._searchers.close()


def _live_document_ids(reader: SegmentReader) -> set[str]:
    """The ids in one segment's ``document_id`` lexicon that still have a live chunk there."""
    ids = {term.decode() for term in reader.lexicon("document_id")}
    segment = reader.segment()
    if segment is None or not segment.has_deletions():
        return ids
    column = reader.column_reader("document_id")
    for suspect in {column[docnum] for docnum in segment.deleted_docs()}:
        if not reader.postings("document_id", suspect).is_active():
            ids.discard(suspect)
    return ids


def replace_folder(root: Path, built: Path) -> None:
    """Swap a freshly built index folder in for this version's (readers reopen it)."""
    current = root / f"v{SCHEMA_VERSION}"
    old = root / f"v{SCHEMA_VERSION}.old"
    shutil.rmtree(old, ignore_errors=True)
    if current.exists():
        current.rename(old)
    built.rename(current)
    shutil.rmtree(old, ignore_errors=True)


def _chunk_fields(document: IndexedDocument) -> Iterator[dict[str, object]]:
    created = document.created_at
    shared: dict[str, object] = {
        "document_id": document.document_id,
        "tenant": document.tenant,
        "collection": document.collection,
        "version": document.version,
        "name": document.name,
        "title": document.title or document.name,
    }
    # Facts a document does not have are left out (Whoosh indexes no empty terms).
    for field, value in (
        ("document_type", document.document_type),
        ("submitter", document.submitter),
        ("format", document.format),
        ("language", document.language),
    ):
        if value:
            shared[field] = value
    # Every chunk has a day, so the column never falls back to a default that a date filter
    # could mistake for a real day; NO_DAY is outside every range.
    shared["created_day"] = day_number(created) if created is not None else NO_DAY
    if created is not None:
        shared["created"] = created.isoformat()
    for number, chunk in enumerate(document.chunks):
        yield {
            **shared,
            "chunk_id": f"{document.document_id}:{number}",
            "page": chunk.page,
            "line_start": chunk.line_start,
            "line_end": chunk.line_end,
            # Analysed once for both (see ChunkSegmentWriter.add_chunk).
            "text": chunk.text,
            "exact": chunk.text,
        }


def full_text(document: IndexedDocument) -> str:
    """The document's text rebuilt from its chunks at their line numbers (the blank lines
    between pages, which no chunk holds, come back empty)."""
    if not document.chunks:
        return ""
    lines = [""] * max(chunk.line_end for chunk in document.chunks)
    last = 0
    for chunk in document.chunks:
        if chunk.line_start == chunk.line_end == last:  # the next piece of one long line
            lines[last - 1] += chunk.text
            continue
        lines[chunk.line_start - 1 : chunk.line_end] = chunk.text.split("\n")
        last = chunk.line_end
    return "\n".join(lines)
