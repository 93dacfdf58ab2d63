"""The segments of the vector store (``indexer.vectors``): their files, a search's work in
one segment, the merging of several into one and the choice of what a commit merges, and
the store's manifest replacement and clean-up.

A segment is three files under the store's folder: ``<name>.vec.npy`` (float32, rows x dim,
L2-normalised), ``<name>.rows.npy`` (:data:`ROW_DTYPE`, one record a row, string fields as
indexes into the segment's tables, -1 for None) and ``<name>.strings.json`` (those tables);
a large one also ``<name>.usearch``, an HNSW index of its vectors (``usearch``, f16, keyed by
row), built from the matrix when the segment is written. Written once, never changed: its
deletions live in separate mask files.

A search in a segment selects the rows its filters allow first (tenant, collection, type,
submitter, days, not deleted). It scores them all (exact) unless they are more than the
store's ``exact_max_rows`` and the segment has an HNSW index: then the index proposes
candidates, only the selected ones are kept, and more are asked for (x4) until the kept rows
name ``limit`` documents, or the search goes exact after all. The kept rows are scored
exactly from the matrix. So a filter never returns too few documents, a small scope (a
tenant with a few documents among millions) is always exact, and the index only decides
which rows of a large scope get scored.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # indexer.vectors imports this module
    from indexer.vectors import VectorFilter

NO_DAY = -(2**31) + 1  # "no date" (as indexer.model's): outside every day range
INT32 = (-(2**31), 2**31 - 1)

# A row's facts, the string ones as indexes into the segment's tables (TABLES), -1 for None.
ROW_DTYPE = np.dtype(
    [
        ("doc", "<i4"),
        ("chunk", "<i4"),
        ("version", "<i4"),
        ("tenant", "<i4"),
        ("collection", "<i4"),
        ("document_type", "<i4"),
        ("submitter", "<i4"),
        ("day", "<i4"),
    ]
)
# (rows field, strings table) of the string facts.
TABLES = (
    ("doc", "documents"),
    ("tenant", "tenants"),
    ("collection", "collections"),
    ("document_type", "document_types"),
    ("submitter", "submitters"),
)
# A row's facts in ROW_DTYPE's order, strings as strings:
# (document_id, chunk, version, tenant, collection, document_type, submitter, day).
Facts = tuple[str, int, int, str, str, str | None, str | None, int]

# A segment's selected rows are scored slice by slice when they form at most MAX_SLICES runs
# of consecutive rows (a tenant's documents mostly arrive together), else gathered first,
# GATHER_ROWS at a time into a buffer that stays in cache. Measured on 100,000 x 384 rows
# (2 loaded cores): the product of all of them 7 ms; of every other row gathered at once
# (``vectors[rows] @ query``, a 77 MB copy) 23 ms, gathered by blocks of 1,024 14 ms (256:
# 14, 4,096: 16).
MAX_SLICES = 16
GATHER_ROWS = 1024
# Candidates first asked of the HNSW index, per document wanted (a document has several
# chunks, and the filters drop the rows out of scope).
ANN_PER_DOCUMENT = 8
_NONE = np.zeros(0, dtype=np.intp)

# Tier 0 holds segments under TIER_BASE_ROWS * factor live rows (a few commits of a few
# documents each); see choose_merge.
TIER_BASE_ROWS = 256


class Segment:
    """One segment's vectors, rows and string tables: mapped from its files, or in memory
    (being written)."""

    def __init__(
        self,
        name: str,
        vectors: np.ndarray,
        rows: np.ndarray,
        strings: dict[str, list[str]],
        ann: Any = None,
    ) -> None:
        self.name = name
        self.vectors = vectors
        self.rows = rows
        self.strings = strings
        self.ann = ann  # a usearch Index (mapped, read-only) or None
        self._codes: dict[str, dict[str, int]] = {}

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def code(self, table: str, value: str) -> int | None:
        """The index of ``value`` in the table, None when no row of the segment has it."""
        codes = self._codes.get(table)
        if codes is None:  # a benign race between threads: both build the same dict
            codes = {text: i for i, text in enumerate(self.strings[table])}
            self._codes[table] = codes
        return codes.get(value)

    def document_rows(self) -> dict[str, np.ndarray]:
        """Each document's row indexes (deleted rows included)."""
        column = np.asarray(self.rows["doc"])
        order = np.argsort(column, kind="stable")
        ordered = column[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        ends = np.r_[starts[1:], len(ordered)]
        names = self.strings["documents"]
        return {
            names[code]: order[start:end]
            for code, start, end in zip(
                ordered[starts].tolist(), starts.tolist(), ends.tolist(), strict=True
            )
        }


@dataclass(frozen=True, eq=False)
class Selection:
    """A segment's live rows that a search's filters allow (sorted indexes), their documents,
    and how many documents they name: what every query vector of that search scores."""

    segment: Segment
    rows: np.ndarray
    docs: np.ndarray
    in_scope: int


@dataclass(frozen=True, eq=False)
class Scored:
    """A segment's rows in a search's scope: their indexes, documents and scores, and each
    document's best score (-inf: not in scope)."""

    segment: Segment
    rows: np.ndarray
    docs: np.ndarray
    scores: np.ndarray
    best: np.ndarray
    present: np.ndarray  # codes of the documents scored
    in_scope: int  # documents with a row in scope (all scored, unless the HNSW index chose)


def selection(
    segment: Segment, deleted: np.ndarray | None, where: VectorFilter
) -> Selection | None:
    """The segment's live rows that ``where`` allows (None when there are none)."""
    rows = select(segment, deleted, where)
    if not rows.size:
        return None
    docs = segment.rows["doc"][rows]
    in_scope = int(np.count_nonzero(np.bincount(docs)))  # no sort, unlike unique
    return Selection(segment, rows, docs, in_scope)


def score(chosen: Selection, query: np.ndarray, limit: int = 0, exact_max_rows: int = 0) -> Scored:
    """The selected rows scored by ``query`` (a unit vector); over ``exact_max_rows`` of them,
    only the candidates of the segment's HNSW index (see the module)."""
    segment, rows, docs = chosen.segment, chosen.rows, chosen.docs
    if segment.ann is not None and 0 < exact_max_rows < rows.size and limit:
        rows = ann_candidates(segment, rows, query, limit)
        docs = segment.rows["doc"][rows]
    scores = dot(segment.vectors, rows, query)
    best = np.full(len(segment.strings["documents"]), -np.inf, dtype=np.float32)
    np.maximum.at(best, docs, scores)
    return Scored(
        segment, rows, docs, scores, best, np.flatnonzero(best > -np.inf), chosen.in_scope
    )


def ann_candidates(segment: Segment, rows: np.ndarray, query: np.ndarray, limit: int) -> np.ndarray:
    """The selected ``rows`` the HNSW index finds nearest, naming at least ``limit`` documents
    (all of ``rows`` when it cannot)."""
    allowed = np.zeros(len(segment), dtype=bool)
    allowed[rows] = True
    count = limit * ANN_PER_DOCUMENT
    while count < len(segment):
        found = segment.ann.search(query, count, threads=1)
        keys = np.asarray(found.keys, dtype=np.intp)
        kept = keys[allowed[keys]]
        if np.unique(segment.rows["doc"][kept]).size >= limit:
            return np.sort(kept)
        count *= 4
    return rows


def select(segment: Segment, deleted: np.ndarray | None, where: VectorFilter) -> np.ndarray:
    """The indexes of the segment's live rows that ``where`` allows."""
    rows = segment.rows
    tenant = segment.code("tenants", where.tenant)
    if tenant is None:
        return _NONE
    mask = rows["tenant"] == tenant
    for field, table, value in (
        ("collection", "collections", where.collection),
        ("document_type", "document_types", where.document_type),
        ("submitter", "submitters", where.submitter),
    ):
        if value is not None:
            code = segment.code(table, value)
            if code is None:
                return _NONE
            mask &= rows[field] == code
    if where.day_from is not None or where.day_to is not None:
        day = rows["day"]
        mask &= day != NO_DAY
        if where.day_from is not None:
            mask &= day >= min(max(where.day_from, INT32[0]), INT32[1])
        if where.day_to is not None:
            mask &= day <= min(max(where.day_to, INT32[0]), INT32[1])
    if deleted is not None:
        mask &= ~deleted
    return np.flatnonzero(mask)


def dot(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """The scores of ``rows`` (sorted indexes), and of no other row."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    if breaks.size >= MAX_SLICES:
        return _gathered_dot(vectors, rows, query)
    starts, ends = [0, *breaks.tolist()], [*breaks.tolist(), rows.size]
    runs = [vectors[rows[a] : rows[b - 1] + 1] @ query for a, b in zip(starts, ends, strict=True)]
    return runs[0] if len(runs) == 1 else np.concatenate(runs)


def _gathered_dot(vectors: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    scores = np.empty(rows.size, dtype=np.float32)
    buffer = np.empty((min(GATHER_ROWS, rows.size), vectors.shape[1]), dtype=np.float32)
    for start in range(0, rows.size, GATHER_ROWS):
        part = rows[start : start + GATHER_ROWS]
        block = buffer[: part.size]
        np.take(vectors, part, axis=0, out=block)
        np.matmul(block, query, out=scores[start : start + part.size])
    return scores


def best_rows(found: Scored, codes: np.ndarray) -> np.ndarray:
    """The best row of each document of ``codes``, in that order (equal scores: the lowest
    chunk)."""
    wanted = np.zeros(found.best.size, dtype=bool)
    wanted[codes] = True
    top = np.flatnonzero(wanted[found.docs] & (found.scores == found.best[found.docs]))
    rows = found.rows[top]
    docs = found.docs[top]
    # By document, then chunk: each document's first is its best row.
    order = np.lexsort((found.segment.rows["chunk"][rows], docs))
    rows, docs = rows[order], docs[order]
    first = np.r_[True, docs[1:] != docs[:-1]]
    row_of = np.empty(found.best.size, dtype=np.intp)
    row_of[docs[first]] = rows[first]
    return row_of[codes]


def rank(scored: list[Scored], limit: int) -> list[tuple[str, int, int, float, np.ndarray]]:
    """The ``limit`` best documents, equal scores by document id: (document id, chunk,
    version, score, the best chunk's vector)."""
    if not scored or not limit:
        return []
    values = np.concatenate([found.best[found.present] for found in scored])
    cut = -np.inf  # the limit-th best score: every document at it stays a candidate
    if values.size > limit:
        cut = np.partition(values, values.size - limit)[values.size - limit]
    candidates = []
    for part, found in enumerate(scored):
        names = found.segment.strings["documents"]
        codes = found.present[found.best[found.present] >= cut]
        for code, best in zip(codes.tolist(), found.best[codes].tolist(), strict=True):
            candidates.append((-best, names[code], part, code))
    candidates.sort()
    chosen = candidates[:limit]
    facts: dict[int, tuple[list[int], list[int], np.ndarray]] = {}
    for part in {part for _, _, part, _ in chosen}:
        found = scored[part]
        codes = np.array([code for _, _, p, code in chosen if p == part], dtype=np.intp)
        rows = best_rows(found, codes)
        facts[part] = (
            found.segment.rows["chunk"][rows].tolist(),
            found.segment.rows["version"][rows].tolist(),
            found.segment.vectors[rows],
        )
    ranked = []
    taken = dict.fromkeys(facts, 0)
    for negated, name, part, _ in chosen:
        chunks, versions, vectors = facts[part]
        at = taken[part]
        taken[part] = at + 1
        ranked.append((name, chunks[at], versions[at], min(1.0, max(-1.0, -negated)), vectors[at]))
    return ranked


def unit_query(query: np.ndarray, dim: int) -> np.ndarray:
    """The query as a unit vector (ValueError: not of ``dim`` dimensions, or zero)."""
    vector = np.asarray(query, dtype=np.float32)
    if vector.size != dim:
        raise ValueError(f"a query of {vector.size} dimensions for vectors of {dim}")
    vector = vector.reshape(dim)
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0:
        raise ValueError("the query vector is zero or not finite")
    return vector / np.float32(norm)


def unit_rows(vectors: np.ndarray, count: int, dim: int) -> np.ndarray:
    """The rows as unit vectors (ValueError: not ``count`` x ``dim``, or a zero row)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.shape != (count, dim):
        raise ValueError(f"vectors of shape {matrix.shape} for {count} rows of {dim} dimensions")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if not np.isfinite(norms).all() or (norms == 0).any():
        raise ValueError("a vector is zero or not finite")
    return matrix / norms


def files(name: str) -> tuple[str, str, str]:
    """The file names of a segment."""
    return f"{name}.vec.npy", f"{name}.rows.npy", f"{name}.strings.json"


def open_segment(folder: Path, name: str) -> Segment:
    """A segment of the folder, its vectors and rows mapped (FileNotFoundError when gone)."""
    vec_file, rows_file, strings_file = files(name)
    strings = json.loads((folder / strings_file).read_text(encoding="utf-8"))
    # np.asarray: plain arrays over the maps (np.memmap's subclass would wrap every result).
    vectors = np.asarray(np.load(folder / vec_file, mmap_mode="r", allow_pickle=False))
    rows = np.asarray(np.load(folder / rows_file, mmap_mode="r", allow_pickle=False))
    ann = None
    if (folder / ann_file(name)).exists():
        from usearch.index import Index

        # A view maps the file (never added to: a mapped index crashes on writes).
        ann = Index.restore(str(folder / ann_file(name)), view=True)
    return Segment(name, vectors, rows, strings, ann)


def ann_file(name: str) -> str:
    return f"{name}.usearch"


def build_ann(folder: Path, segment: Segment) -> None:
    """Write the segment's HNSW index (cosine over unit vectors: inner product, f16)."""
    from usearch.index import Index

    index = Index(ndim=segment.vectors.shape[1], metric="ip", dtype="f16")
    vectors = np.ascontiguousarray(segment.vectors, dtype=np.float32)
    index.add(np.arange(len(segment), dtype=np.uint64), vectors, threads=1)
    temp = folder / f"{ann_file(segment.name)}.{os.urandom(4).hex()}.tmp"
    index.save(str(temp))
    with open(temp, "rb") as file:
        os.fsync(file.fileno())
    os.replace(temp, folder / ann_file(segment.name))
    segment.ann = Index.restore(str(folder / ann_file(segment.name)), view=True)


def build_segment(name: str, facts: Sequence[Facts], vectors: np.ndarray) -> Segment:
    """An in-memory segment of rows given as facts (``vectors`` already normalised)."""
    tables: list[dict[str, int]] = [{} for _ in TABLES]

    def code(table: int, value: str | None) -> int:
        return -1 if value is None else tables[table].setdefault(value, len(tables[table]))

    def encode(row: Facts) -> tuple[int, ...]:
        document_id, chunk, version, tenant, collection, document_type, submitter, day = row
        return (
            code(0, document_id),
            chunk,
            version,
            code(1, tenant),
            code(2, collection),
            code(3, document_type),
            code(4, submitter),
            day,
        )

    rows = np.array([encode(row) for row in facts], dtype=ROW_DTYPE)
    strings = {key: list(table) for (_, key), table in zip(TABLES, tables, strict=True)}
    return Segment(name, vectors, rows, strings)


def merge(name: str, parts: Iterable[tuple[Segment, np.ndarray | None]]) -> Segment:
    """One in-memory segment of the live rows of ``parts`` (segment, deletion mask)."""
    tables: list[dict[str, int]] = [{} for _ in TABLES]
    vectors, rows = [], []
    for segment, deleted in parts:
        live = np.flatnonzero(~deleted) if deleted is not None else np.arange(len(segment))
        part = np.array(segment.rows[live])
        for (field, key), table in zip(TABLES, tables, strict=True):
            # Only the strings of live rows go into the new tables; -1 (None) maps to the
            # appended -1, as numpy reads index -1 as the last element.
            codes = part[field]
            used = np.unique(codes[codes >= 0])
            names = segment.strings[key]
            new = np.full(len(names) + 1, -1, dtype=np.int32)
            for code in used.tolist():
                new[code] = table.setdefault(names[code], len(table))
            part[field] = new[codes]
        vectors.append(np.asarray(segment.vectors[live]))
        rows.append(part)
    strings = {key: list(table) for (_, key), table in zip(TABLES, tables, strict=True)}
    return Segment(name, np.concatenate(vectors), np.concatenate(rows), strings)


def write_segment(folder: Path, segment: Segment, ann_min_rows: int = 0) -> None:
    """The segment's files, flushed to disk (before a manifest names them); its HNSW index
    too when it holds ``ann_min_rows`` rows or more (0: never)."""
    vec_file, rows_file, strings_file = files(segment.name)
    save_npy(folder / vec_file, np.ascontiguousarray(segment.vectors, dtype=np.float32))
    save_npy(folder / rows_file, np.ascontiguousarray(segment.rows))
    save_bytes(folder / strings_file, json.dumps(segment.strings).encode("utf-8"))
    if ann_min_rows and len(segment) >= ann_min_rows:
        build_ann(folder, segment)


def save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as file:
        np.save(file, array, allow_pickle=False)
        file.flush()
        os.fsync(file.fileno())


def save_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())


def sync_folder(folder: Path) -> None:
    """Make the folder's new names durable (a replaced manifest, new segment files)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_manifest(path: Path, data: bytes, previous: tuple[int, int, int] | None) -> None:
    """Replace the manifest ``path`` atomically (``previous``: the replaced one's key)."""
    temp = path.with_name(f"{path.name}.{os.urandom(4).hex()}.tmp")
    save_bytes(temp, data)
    # Readers see a commit by the manifest's (mtime_ns, size, inode). Inodes are reused and
    # the kernel stamps files from a clock of 1-4 ms ticks, so two quick commits could look
    # the same: the mtime is kept strictly increasing across generations.
    if previous is not None:
        stat = os.stat(temp)
        if stat.st_mtime_ns <= previous[0]:
            os.utime(temp, ns=(stat.st_atime_ns, previous[0] + 1))
    os.replace(temp, path)
    sync_folder(path.parent)


def remove_unnamed(folder: Path, named: set[str]) -> None:
    """Remove the files of the kinds the store writes that are not in ``named``."""
    for found in os.scandir(folder):
        if found.name not in named and _ours(found.name):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(found.path)


def _ours(name: str) -> bool:
    suffixes = (".vec.npy", ".rows.npy", ".strings.json", ".usearch", ".tmp")
    return name.endswith(suffixes) or ".del." in name


@dataclass(frozen=True)
class SegmentSize:
    """What the merge policy reads of a segment."""

    key: Any
    rows: int  # stored, deleted ones included
    live: int


def tier(live: int, factor: int) -> int:
    """``floor(log_factor(max(live, 1) / TIER_BASE_ROWS))``, 0 below ``TIER_BASE_ROWS * factor``."""
    level, bound = 0, TIER_BASE_ROWS * factor
    while live >= bound:
        level, bound = level + 1, bound * factor
    return level


def choose_merge(sizes: Sequence[SegmentSize], factor: int) -> list[Any]:
    """The keys of the segments a commit merges into one: none most of the time.

    The lowest tier holding ``factor`` segments (or more) merges its ``factor`` smallest;
    else the segment with the largest deleted share above a half is rewritten alone.
    Segments without a live row are not here: a commit drops them unread.
    """
    tiers: dict[int, list[SegmentSize]] = {}
    for size in sizes:
        tiers.setdefault(tier(size.live, factor), []).append(size)
    for level in sorted(tiers):
        if len(tiers[level]) >= factor:
            return [size.key for size in sorted(tiers[level], key=lambda s: s.live)[:factor]]
    holed = [size for size in sizes if 2 * (size.rows - size.live) > size.rows]
    if holed:
        return [max(holed, key=lambda s: (s.rows - s.live) / s.rows).key]
    return []
