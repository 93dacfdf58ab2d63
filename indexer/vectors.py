"""The dense-vector store of semantic search: exact cosine search over float32 matrices, every
search filter applied inside the search, in a folder of immutable segments.

Each row is one chunk's vector (L2-normalised on write: a dot product is a cosine) and its
facts (:class:`VectorRow`). A search scores only the rows its :class:`VectorFilter` lets
through, never a global top-K filtered afterwards: another tenant's rows never get a score,
and a tenant with one document among millions of others still finds it.

The folder holds ``manifest.json`` (format, model fingerprint, dim, generation and the
segments with their current deletion masks), the segments' files (``indexer.vector_segments``),
``<segment>.del.<generation>.npy`` masks (True = deleted, a new file whenever a segment's
deletions change) and ``write.lock``.

One writer at a time (:meth:`VectorStore.writer`, an exclusive ``flock`` waited for at most
``lock_timeout`` s, else :class:`VectorStoreBusy`); any number of readers in any processes.
A commit writes its new files, fsyncs them, then replaces the manifest atomically and removes
the files it no longer names (readers that mapped them keep them until they let go; a reader
that finds a named file gone re-reads the manifest once). Each read call stats the manifest
and reloads it when it changed, so a reader sees a commit on its next call; segments are
mapped and cached by name (immutable), masks cached by file name. Searches of one store may
run in any number of threads at once; only the reopening is serialised.

Cost, measured on 100,000 rows x 384 dims in 10 segments (2 cores, loaded): a search of a
tenant holding every row 8 ms, of half of them interleaved with another's 15 ms, of a tenant
with one row among them 0.1 ms; a commit of one document 4-10 ms.

Merge policy, tiered: a segment's tier is ``floor(log_factor(max(live_rows, 1) / 256))`` (0
below ``256 * factor`` live rows). After a commit, the lowest tier holding ``factor`` segments
merges its ``factor`` smallest into one (deleted rows dropped); else a segment more than half
deleted is rewritten without them. At most one merge a commit: a commit's work is bounded by
the merged tier's size, and a row is rewritten about once per tier it climbs (O(log n) times),
so the cost per row written does not grow with the store, which keeps O(factor * log n)
segments. Segments with no live row are dropped without being read.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl

from indexer.vector_segments import (
    INT32,
    NO_DAY,
    Scored,
    Segment,
    SegmentSize,
    Selection,
    ann_file,
    build_segment,
    choose_merge,
    dot,
    files,
    merge,
    open_segment,
    rank,
    remove_unnamed,
    replace_manifest,
    save_npy,
    score,
    selection,
    unit_query,
    unit_rows,
    write_segment,
)

__all__ = [
    "NO_DAY",
    "DenseHit",
    "DenseScope",
    "VectorFilter",
    "VectorRow",
    "VectorStore",
    "VectorStoreBusy",
    "VectorWriter",
]

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = "write.lock"
# Loads of a manifest tried when the files it names vanish meanwhile: one retry is enough
# unless commits come faster than a load (1 reader call in 40,000 failed twice in a stress
# run of ~180 tiny commits a second).
RELOADS = 3


@dataclass(frozen=True)
class VectorRow:
    """One chunk's facts (its vector goes alongside)."""

    document_id: str
    chunk: int  # ordinal of the chunk in its document, from 0
    version: int  # the document's version
    tenant: str
    collection: str
    document_type: str | None = None
    submitter: str | None = None
    day: int = NO_DAY  # days since 1970-01-01


@dataclass(frozen=True)
class VectorFilter:
    """A search's filters (searchDocuments'); None: not filtered. Day bounds are inclusive and
    any of them excludes rows of NO_DAY."""

    tenant: str
    collection: str | None = None
    document_type: str | None = None
    submitter: str | None = None
    day_from: int | None = None
    day_to: int | None = None


# Not frozen: a search makes one a document it ranks, and a frozen dataclass's __init__
# (object.__setattr__ a field) costs nine times a slotted one's.
@dataclass(slots=True)
class DenseHit:
    """A document's best chunk."""

    document_id: str
    chunk: int
    version: int
    score: float  # cosine, -1..1
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)  # the chunk's


_BLAS_LIMITED = False


def _one_blas_thread() -> None:
    """Hold NumPy's BLAS to one thread in this process (once). A search scores one query
    against a few thousand rows: threads gain nothing there, and OpenBLAS's spin after each
    product — a whole core, measured with 1,500 rows — was taken from the server's event loop
    and its clients (semantic searches: 224 → 328 calls/s with cached query vectors)."""
    global _BLAS_LIMITED
    if not _BLAS_LIMITED:
        threadpoolctl.threadpool_limits(limits=1, user_api="blas")
        _BLAS_LIMITED = True


class VectorStoreBusy(Exception):
    """Another writer held the store's lock for longer than ``lock_timeout``: retry later."""


@dataclass(frozen=True, eq=False)
class _Part:
    """A segment as a manifest names it, with its current deletions."""

    segment: Segment
    deleted: np.ndarray | None
    deleted_file: str | None

    @cached_property
    def live_documents(self) -> np.ndarray:
        """The codes of the documents with a live row here."""
        docs = self.segment.rows["doc"]
        return np.unique(docs if self.deleted is None else docs[~self.deleted])

    @cached_property
    def live_rows(self) -> int:
        return len(self.segment) - (0 if self.deleted is None else int(self.deleted.sum()))


@dataclass(frozen=True)
class _Snapshot:
    """One manifest's state; ``key`` is the manifest file's (mtime_ns, size, inode)."""

    key: tuple[int, int, int] | None
    fingerprint: str | None = None
    dim: int | None = None
    generation: int = 0
    parts: tuple[_Part, ...] = ()


@dataclass(frozen=True)
class DenseScope:
    """The rows one search's filters allow in one state of the store. Selecting them reads
    every row's facts; scoring reads their vectors: hybrid search's vector feedback scores
    the same rows with a second query and selects once."""

    dim: int
    selections: tuple[Selection, ...]
    exact_max_rows: int

    @property
    def in_scope(self) -> int:
        """Documents with a row in scope."""
        return sum(chosen.in_scope for chosen in self.selections)

    def search(self, query: np.ndarray, limit: int) -> list[DenseHit]:
        """Up to ``limit`` documents by their best chunk's cosine with ``query`` (equal scores
        by document id), each hit with its chunk's vector."""
        return self.search_scored(query, limit)[0]

    def search_scored(self, query: np.ndarray, limit: int) -> tuple[list[DenseHit], list[Scored]]:
        """:meth:`search`, and every selected row's score (for :meth:`best_scores`)."""
        if limit < 0:
            raise ValueError("limit must not be negative")
        query = unit_query(query, self.dim)
        scored = [score(chosen, query, limit, self.exact_max_rows) for chosen in self.selections]
        return [DenseHit(*hit) for hit in rank(scored, limit)], scored

    def best_scores(
        self, query: np.ndarray, document_ids: list[str], scored: list[Scored] | None = None
    ) -> dict[str, float]:
        """The best chunk's cosine with ``query`` of each of ``document_ids`` that has a row
        in scope (the others are left out); ``scored``: the rows :meth:`search_scored`
        scored with the same query, read instead of scoring again where it scored them all."""
        query = unit_query(query, self.dim)
        found: dict[str, float] = {}
        for number, chosen in enumerate(self.selections):
            segment = chosen.segment
            codes = {
                code: name
                for name in document_ids
                if (code := segment.code("documents", name)) is not None
            }
            if not codes:
                continue
            done = scored[number] if scored is not None else None
            if done is not None and done.rows.size == chosen.rows.size:  # every row scored
                for code, name in codes.items():
                    value = float(done.best[code])
                    if value > -np.inf:
                        found[name] = max(found.get(name, -np.inf), value)
                continue
            mask = np.isin(chosen.docs, np.fromiter(codes, dtype=chosen.docs.dtype))
            if not mask.any():
                continue
            docs = chosen.docs[mask]
            values = dot(segment.vectors, chosen.rows[mask], query)
            for code, value in zip(docs.tolist(), values.tolist(), strict=True):
                name = codes[code]
                if value > found.get(name, -np.inf):
                    found[name] = float(value)
        return found


class VectorStore:
    """The vector store in folder ``path``: searched from any number of processes and threads,
    written by one :meth:`writer` at a time."""

    def __init__(
        self,
        path: Path,
        lock_timeout: float = 30.0,
        merge_factor: int = 4,
        ann_min_rows: int = 0,
        exact_max_rows: int = 0,
    ) -> None:
        """``ann_min_rows``: a segment written with at least that many rows gets an HNSW index
        (0: none); ``exact_max_rows``: a search whose scope in a segment is larger uses it
        (0: always exact). See :mod:`indexer.vector_segments`."""
        if merge_factor < 2:
            raise ValueError("merge_factor must be at least 2")
        _one_blas_thread()
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self.merge_factor = merge_factor
        self.ann_min_rows = ann_min_rows
        self.exact_max_rows = exact_max_rows
        self._lock = threading.Lock()  # guards the reopening below
        self._snapshot = _Snapshot(key=None)
        self._segments: dict[str, Segment] = {}
        self._masks: dict[str, np.ndarray] = {}
        # The writer's: each segment's document -> row indexes, built when first needed.
        self._document_rows: dict[str, dict[str, np.ndarray]] = {}

    # --- reading ---------------------------------------------------------------------------
    def fingerprint(self) -> str | None:
        """The fingerprint of the model whose vectors the store holds; None before any commit."""
        return self._current().fingerprint

    def dim(self) -> int | None:
        return self._current().dim

    def search(
        self, query: np.ndarray, where: VectorFilter, limit: int, fingerprint: str
    ) -> tuple[list[DenseHit], int]:
        """Up to ``limit`` documents by their best chunk's cosine with ``query`` (equal scores
        by document id), and the number of documents in scope (with a row ``where`` allows).
        ``([], 0)`` when the store holds another model's vectors (or none)."""
        scope = self.scope(where, fingerprint)
        if scope is None:
            if limit < 0:
                raise ValueError("limit must not be negative")
            return [], 0
        return scope.search(query, limit), scope.in_scope

    def scope(self, where: VectorFilter, fingerprint: str) -> DenseScope | None:
        """The rows ``where`` allows in the store's current state, for one query vector or
        more; None when the store holds another model's vectors (or none)."""
        snapshot = self._current()
        if snapshot.fingerprint != fingerprint or snapshot.dim is None:
            return None
        chosen = tuple(
            found
            for part in snapshot.parts
            if (found := selection(part.segment, part.deleted, where)) is not None
        )
        return DenseScope(snapshot.dim, chosen, self.exact_max_rows)

    def document_scores(
        self, document_id: str, version: int, query: np.ndarray, fingerprint: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunk numbers, cosines with ``query``) of the live rows of one version of a
        document: what a search inside that document ranks. Empty when the store holds
        another model's vectors."""
        snapshot = self._current()
        empty = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32))
        if snapshot.fingerprint != fingerprint or snapshot.dim is None:
            return empty
        query = unit_query(query, snapshot.dim)
        chunks: list[np.ndarray] = []
        scores: list[np.ndarray] = []
        for part in snapshot.parts:
            where = _version_rows(part, document_id, version)
            if where.size:
                chunks.append(np.asarray(part.segment.rows["chunk"][where], dtype=np.int64))
                vectors = np.asarray(part.segment.vectors[where], dtype=np.float32)
                scores.append(vectors @ query)
        if not chunks:
            return empty
        return np.concatenate(chunks), np.concatenate(scores)

    def document_count(self, fingerprint: str | None = None) -> int:
        """Live documents (0 when ``fingerprint`` is given and not the store's)."""
        snapshot = self._current()
        if fingerprint is not None and fingerprint != snapshot.fingerprint:
            return 0
        # A document's live rows are all in one segment (a replace deletes the others).
        return sum(part.live_documents.size for part in snapshot.parts)

    def document_ids(self) -> set[str]:
        """The live documents' ids (for a sweep of orphans)."""
        ids: set[str] = set()
        for part in self._current().parts:
            names = part.segment.strings["documents"]
            ids.update(names[code] for code in part.live_documents.tolist())
        return ids

    def rows(self) -> int:
        """Live rows."""
        return sum(part.live_rows for part in self._current().parts)

    def _current(self) -> _Snapshot:
        """The newest manifest's state: one stat when it has not changed."""
        with self._lock:
            if _key(self.path / MANIFEST) != self._snapshot.key:
                for attempt in range(RELOADS):
                    try:
                        self._snapshot = self._load()
                        break
                    except FileNotFoundError:
                        # A file the manifest named is gone: a commit replaced it since.
                        if attempt == RELOADS - 1:
                            raise
            return self._snapshot

    def _load(self) -> _Snapshot:
        try:
            with open(self.path / MANIFEST, "rb") as file:
                stat = os.fstat(file.fileno())
                manifest = json.loads(file.read())
        except FileNotFoundError:
            return _Snapshot(key=None)
        if manifest.get("format") != FORMAT:
            raise ValueError(f"{self.path}: vector store format {manifest.get('format')!r}")
        segments: dict[str, Segment] = {}
        masks: dict[str, np.ndarray] = {}
        parts = []
        for entry in manifest["segments"]:
            segment = self._segments.get(entry["name"])
            if segment is None:
                segment = open_segment(self.path, entry["name"])
            segments[segment.name] = segment
            mask_file = entry["deleted"]
            deleted = None
            if mask_file is not None:
                deleted = self._masks.get(mask_file)
                if deleted is None:
                    deleted = np.load(self.path / mask_file, allow_pickle=False)
                masks[mask_file] = deleted
            parts.append(_Part(segment, deleted, mask_file))
        self._segments, self._masks = segments, masks  # those of older manifests let go
        return _Snapshot(
            key=(stat.st_mtime_ns, stat.st_size, stat.st_ino),
            fingerprint=manifest["fingerprint"],
            dim=manifest["dim"],
            generation=manifest["generation"],
            parts=tuple(parts),
        )

    # --- writing ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def writer(self, fingerprint: str, dim: int) -> Iterator[VectorWriter]:
        """A block of changes, committed when it ends normally, dropped on an exception.

        When the store holds another fingerprint or dim, the block starts an empty store:
        vectors of two models are never mixed.
        """
        if dim < 1:
            raise ValueError("dim must be positive")
        self.path.mkdir(parents=True, exist_ok=True)
        with self._write_lock():
            writer = VectorWriter(self, self._current(), fingerprint, dim)
            try:
                yield writer
            finally:
                writer._closed = True
            self._commit(writer)

    @contextlib.contextmanager
    def _write_lock(self) -> Iterator[None]:
        with open(self.path / LOCK, "ab") as lock_file:
            deadline = time.monotonic() + self.lock_timeout
            while True:
                try:
                    fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise VectorStoreBusy(
                            f"vector store lock not free after {self.lock_timeout}s"
                        ) from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(lock_file, fcntl.LOCK_UN)

    def _rows_of(self, segment: Segment) -> dict[str, np.ndarray]:
        rows = self._document_rows.get(segment.name)
        if rows is None:
            rows = self._document_rows[segment.name] = segment.document_rows()
        return rows

    def _commit(self, writer: VectorWriter) -> None:
        if not (writer.fresh or writer.added or writer.deleted):
            return
        generation = writer.base.generation + 1
        entries = [
            self._write(segment, deleted, mask_file, generation)
            for segment, deleted, mask_file in self._plan(writer, generation)
        ]
        manifest = {
            "format": FORMAT,
            "fingerprint": writer.fingerprint,
            "dim": writer.dim,
            "generation": generation,
            "segments": entries,
        }
        data = json.dumps(manifest).encode("utf-8")
        replace_manifest(self.path / MANIFEST, data, writer.base.key)
        named = {MANIFEST, LOCK}
        for entry in entries:
            named.update(files(entry["name"]))
            named.add(ann_file(entry["name"]))
            named.update([entry["deleted"]] if entry["deleted"] else [])
        remove_unnamed(self.path, named)
        kept = {entry["name"] for entry in entries}
        self._document_rows = {n: r for n, r in self._document_rows.items() if n in kept}

    def _plan(
        self, writer: VectorWriter, generation: int
    ) -> list[tuple[Segment, np.ndarray | None, str | None]]:
        """The segments of the new manifest: (segment, deletions, their file when unchanged)."""
        kept: list[tuple[Segment, np.ndarray | None, str | None]] = []
        for part in writer.parts:
            deleted = writer.deleted.get(part.segment.name, part.deleted)
            if deleted is None or not deleted.all():  # else dropped unread
                kept.append(
                    (part.segment, deleted, part.deleted_file if deleted is part.deleted else None)
                )
        added = writer.added_segment(_segment_name(generation))
        if added is not None:
            kept.append((added, None, None))
        sizes = [
            SegmentSize(i, len(segment), len(segment) - (0 if d is None else int(d.sum())))
            for i, (segment, d, _) in enumerate(kept)
        ]
        chosen = choose_merge(sizes, self.merge_factor)
        if not chosen:
            return kept
        merged = merge(_segment_name(generation), [kept[i][:2] for i in chosen])
        return [part for i, part in enumerate(kept) if i not in chosen] + [(merged, None, None)]

    def _write(
        self, segment: Segment, deleted: np.ndarray | None, mask_file: str | None, generation: int
    ) -> dict[str, Any]:
        """Write what is new of a segment of the new manifest; its manifest entry."""
        if segment.name.startswith(_segment_name(generation, "")):  # made by this commit
            write_segment(self.path, segment, self.ann_min_rows)
        if deleted is not None and mask_file is None:
            mask_file = f"{segment.name}.del.{generation}.npy"
            save_npy(self.path / mask_file, deleted)
        return {"name": segment.name, "rows": len(segment), "deleted": mask_file}


class VectorWriter:
    """The changes of one :meth:`VectorStore.writer` block."""

    def __init__(self, store: VectorStore, base: _Snapshot, fingerprint: str, dim: int) -> None:
        self.base = base
        self.fingerprint = fingerprint
        self.dim = dim
        self.fresh = base.fingerprint != fingerprint or base.dim != dim
        self.parts = () if self.fresh else base.parts
        self.added: dict[str, tuple[list[VectorRow], np.ndarray]] = {}
        self.deleted: dict[str, np.ndarray] = {}  # new masks, by segment name
        self._store = store
        self._closed = False

    def replace(self, document_id: str, rows: Sequence[VectorRow], vectors: np.ndarray) -> None:
        """The document's rows become exactly ``rows`` (``rows[i]`` with ``vectors[i]``): its
        older ones, in the store or added earlier in this block, are deleted."""
        matrix = unit_rows(vectors, len(rows), self.dim)
        for row in rows:
            if row.document_id != document_id:
                raise ValueError(f"a row of {row.document_id!r} given for {document_id!r}")
            for value in (row.chunk, row.version, row.day):
                if not INT32[0] <= value <= INT32[1]:
                    raise ValueError(f"{value} does not fit a 32-bit integer")
        self.delete(document_id)
        if rows:
            self.added[document_id] = (list(rows), matrix)

    def delete(self, document_id: str) -> None:
        """Delete the document's rows (nothing when it has none)."""
        if self._closed:
            raise RuntimeError("the writer's block has ended")
        self.added.pop(document_id, None)
        for part in self.parts:
            found = self._store._rows_of(part.segment).get(document_id)
            if found is None:
                continue
            name = part.segment.name
            deleted = self.deleted.get(name, part.deleted)
            if deleted is not None and deleted[found].all():
                continue  # deleted already: no new mask
            if name not in self.deleted:
                deleted = np.zeros(len(part.segment), bool) if deleted is None else deleted.copy()
                self.deleted[name] = deleted
            deleted[found] = True

    def added_segment(self, name: str) -> Segment | None:
        """The rows added in this block as a segment (None when there are none)."""
        if not self.added:
            return None
        facts = [
            (r.document_id, r.chunk, r.version, r.tenant, r.collection)
            + (r.document_type, r.submitter, r.day)
            for rows, _ in self.added.values()
            for r in rows
        ]
        vectors = np.concatenate([matrix for _, matrix in self.added.values()])
        return build_segment(name, facts, vectors)


def _key(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def _segment_name(generation: int, token: str | None = None) -> str:
    # A random part: a name is never reused, even by a commit that failed before its manifest.
    return f"g{generation:08d}-{secrets.token_hex(4) if token is None else token}"


def _version_rows(part: _Part, document_id: str, version: int) -> np.ndarray:
    """Indexes of the live rows of one version of a document in a segment of a snapshot."""
    code = part.segment.code("documents", document_id)
    if code is None:
        return np.zeros(0, dtype=np.int64)
    rows = part.segment.rows
    match = (rows["doc"] == code) & (rows["version"] == version)
    if part.deleted is not None:
        match &= ~part.deleted
    return np.flatnonzero(match)
