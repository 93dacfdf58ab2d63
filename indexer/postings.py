"""What search reads from each index segment, as NumPy arrays, read once and kept.

A Whoosh segment never changes after it is written (a delete only marks chunks in the
segment's deleted set), so its term postings (chunk numbers and term frequencies), field
lengths, document ids and days stay valid as long as the segment exists. :class:`PostingStore`
keeps them per segment id across commits: a commit that adds a small segment costs the next
search only that segment's reads, and a term read once is a dictionary lookup afterwards.

Reading a term walks the postings block by block (one unpickle and one ``cumsum`` per block
of 128 chunks) instead of one Python call per posting through the matcher API, which was
most of the time of a search over common words. That uses attributes of whoosh3's
block matcher that are not public (:func:`indexer.whoosh_internals.read_blocks`); any other
matcher (inlined single postings, another codec) is read through the public API, and a test
checks both ways agree.

Searches of several threads share one store. A value is read outside any lock (by the calling
search, with its own searcher's reader) and put in under the store's lock, unless another
search put it in first: the lock guards the dictionaries' changes, the walks over them and the
count of postings held, never a file read. Lookups take no lock: one dictionary ``get`` is
atomic, and what it finds is complete.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
from whoosh.reading import IndexReader, TermNotFound

from indexer.deadline import check, checked
from indexer.whoosh_internals import read_blocks

# Postings kept over all segments before the term cache starts again (12 bytes each).
MAX_CACHED_POSTINGS = 8_000_000

# Postings read one by one between two looks at the search's deadline (a block of 128
# costs several microseconds: the deadline is checked before each).
_CHECK_POSTINGS = 1024
_NO_POSTINGS = (np.zeros(0, np.int32), np.zeros(0, np.float32))


@dataclass
class SegmentArrays:
    """The arrays read from one segment (chunk numbers local to it)."""

    size: int
    # (field, term bytes) -> (chunk numbers, term frequencies), sorted by chunk number
    terms: dict[tuple[str, bytes], tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    # field -> length of that field in each chunk (Whoosh's one-byte approximation, decoded)
    lengths: dict[str, np.ndarray] = field(default_factory=dict)
    # document ordinal (see PostingStore.document_ids) of each chunk
    documents: np.ndarray | None = None
    # the created_day column of each chunk
    days: np.ndarray | None = None
    # No longer in the index's latest commit (a merge replaced it): searches of an older
    # commit still read it, but what they read is not kept (it would be held uncounted).
    retired: bool = False


class PostingStore:
    """Per-segment arrays of one index, shared by the searchers of successive commits."""

    def __init__(self, max_postings: int = MAX_CACHED_POSTINGS) -> None:
        self.max_postings = max_postings
        self._lock = threading.Lock()
        self._segments: dict[str, SegmentArrays] = {}
        self._cached_postings = 0
        # Document ids get small integer ordinals so a chunk's document is an array lookup.
        self.document_ids: list[str] = []
        self._ordinals: dict[str, int] = {}

    def segments(self, readers: Iterable[tuple[str, IndexReader]]) -> list[SegmentArrays]:
        """The arrays of these (segment id, reader) pairs, the segments of a new commit; segments
        no longer listed are forgotten (a merge replaced them)."""
        with self._lock:
            current = {}
            for segment_id, reader in readers:
                arrays = self._segments.get(segment_id)
                if arrays is None:
                    arrays = SegmentArrays(size=reader.doc_count_all())
                current[segment_id] = arrays
            for key, arrays in self._segments.items():
                if key not in current:
                    arrays.retired = True
                    self._cached_postings -= _postings_held(arrays)
            self._segments = current
            return list(current.values())

    def term(
        self, arrays: SegmentArrays, reader: IndexReader, fieldname: str, text: bytes
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunk numbers, term frequencies) of a term in one segment."""
        key = (fieldname, text)
        found = arrays.terms.get(key)
        if found is not None:
            return found
        found = read_postings(reader, fieldname, text)
        with self._lock:
            if arrays.retired:
                return found
            held = arrays.terms.get(key)
            if held is not None:  # another search read it meanwhile: one copy is kept
                return held
            if self._cached_postings + len(found[0]) > self.max_postings:
                # Past the bound every segment starts over: simpler than an LRU, and rare.
                for segment in self._segments.values():
                    segment.terms.clear()
                self._cached_postings = 0
            arrays.terms[key] = found
            self._cached_postings += len(found[0])
        return found

    @property
    def cached_postings(self) -> int:
        return self._cached_postings

    def lengths(self, arrays: SegmentArrays, reader: IndexReader, fieldname: str) -> np.ndarray:
        found = arrays.lengths.get(fieldname)
        if found is None:
            length_of = reader.doc_field_length
            found = np.fromiter(
                (length_of(docnum, fieldname) or 0 for docnum in checked(range(arrays.size))),
                dtype=np.float64,
                count=arrays.size,
            )
            arrays.lengths[fieldname] = found
        return found

    def documents(self, arrays: SegmentArrays, reader: IndexReader) -> np.ndarray:
        if arrays.documents is None:
            values = list(checked(_column(reader, "document_id", arrays.size)))
            with self._lock:  # one ordinal per document id, whichever search asks first
                if arrays.documents is None:
                    arrays.documents = np.fromiter(
                        (self._ordinal(value) for value in values),
                        dtype=np.int32,
                        count=arrays.size,
                    )
        return arrays.documents

    def days(self, arrays: SegmentArrays, reader: IndexReader) -> np.ndarray:
        if arrays.days is None:
            arrays.days = np.fromiter(
                checked(_column(reader, "created_day", arrays.size)),
                dtype=np.int64,
                count=arrays.size,
            )
        return arrays.days

    def ordinal(self, document_id: str) -> int | None:
        """The ordinal of a document id seen before (None: never seen)."""
        return self._ordinals.get(document_id)

    def _ordinal(self, document_id: str) -> int:
        """Under the lock: the ordinal of a document id, a new one the first time."""
        ordinal = self._ordinals.get(document_id)
        if ordinal is None:
            ordinal = self._ordinals[document_id] = len(self.document_ids)
            self.document_ids.append(document_id)
        return ordinal


def read_postings(
    reader: IndexReader, fieldname: str, text: bytes
) -> tuple[np.ndarray, np.ndarray]:
    """(chunk numbers, term frequencies) of a term in a segment reader; empty if absent."""
    try:
        matcher = reader.postings(fieldname, text)  # one lookup: no "in" check first
    except TermNotFound:
        return _NO_POSTINGS
    if (blocks := read_blocks(matcher)) is not None:
        return blocks
    return read_postings_one_by_one(matcher)


def read_postings_one_by_one(matcher: object) -> tuple[np.ndarray, np.ndarray]:
    """Through the public matcher API: one call per posting."""
    ids: list[int] = []
    weights: list[float] = []
    while matcher.is_active():  # type: ignore[attr-defined]
        if not len(ids) % _CHECK_POSTINGS:
            check()
        ids.append(matcher.id())  # type: ignore[attr-defined]
        weights.append(matcher.weight())  # type: ignore[attr-defined]
        matcher.next()  # type: ignore[attr-defined]
    return np.array(ids, dtype=np.int32), np.array(weights, dtype=np.float32)


def _column(reader: IndexReader, fieldname: str, size: int) -> Iterable[object]:
    try:
        return iter(reader.column_reader(fieldname))
    except NotImplementedError:  # a reader without columns (an empty segment)
        return (None for _ in range(size))


def _postings_held(arrays: SegmentArrays) -> int:
    return sum(len(ids) for ids, _ in arrays.terms.values())
