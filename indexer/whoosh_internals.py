"""Every use of Whoosh's internals, in one place, for the one version they were written for.

Whoosh's public API costs too much in three places, so LDIMS reaches past it here, and only
here (a test checks no other module does):

* :class:`ChunkSegmentWriter` (writing): a chunk's text analysed once for both of its
  fields, field lengths read once per commit instead of a seek per posting, and merged
  segments' postings streamed into the new segment instead of copied into the pool
  (``SegmentWriter._flush_segment``, ``_close_segment``, ``pool``, ``perdocwriter``).
* :func:`read_blocks` (searching): a term's postings read a block of 128 at a time
  (``W3LeafMatcher._read_data``, ``_data``, ``_blocklength``, ``_next_block``) instead of one
  Python call per posting.

These internals are not a contract: ``whoosh3`` is pinned to :data:`WHOOSH_VERSION` in
``pyproject.toml``, and :func:`check_whoosh_version` (called when an index is opened, in every
process that opens one) refuses another version with one line that says what to install,
rather than writing an index wrongly. Moving to a new version means re-running the tests that
hold these paths to Whoosh's own (``tests/test_index.py``, ``tests/test_index_evaluate.py``).
(:mod:`indexer.mapped` subclasses Whoosh's storage through its public methods: not here.)
"""

from __future__ import annotations

import functools
import heapq
from array import array
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import numpy as np
from whoosh.codec.whoosh3 import W3LeafMatcher
from whoosh.formats import Positions
from whoosh.reading import SegmentReader
from whoosh.system import pack_uint
from whoosh.writing import SegmentWriter

from indexer.analysis import index_terms
from indexer.deadline import check

__all__ = [
    "WHOOSH_VERSION",
    "ChunkSegmentWriter",
    "WhooshVersionError",
    "check_whoosh_version",
    "read_blocks",
]

WHOOSH_VERSION = "3.54.0"  # pyproject.toml pins whoosh3 to this


class WhooshVersionError(RuntimeError):
    """The installed whoosh3 is not the version whose internals this module uses."""


@functools.cache
def check_whoosh_version(installed: str | None = None) -> None:
    """Refuse a whoosh3 other than :data:`WHOOSH_VERSION` (``installed``: the installed one's)."""
    installed = installed or metadata.version("whoosh3")
    if installed != WHOOSH_VERSION:
        raise WhooshVersionError(
            f"whoosh3 {installed} is installed, but LDIMS's index uses internals of whoosh3 "
            f"{WHOOSH_VERSION} (indexer/whoosh_internals.py): run "
            f"`pip install whoosh3=={WHOOSH_VERSION}` in LDIMS's environment"
        )


class ChunkSegmentWriter(SegmentWriter):
    """Whoosh's segment writer, with three shortcuts for the bulk of the work.

    * :meth:`add_chunk` analyses a chunk's text once for both ``text`` and ``exact``
      (:func:`~indexer.analysis.index_terms`) and hands Whoosh the postings its fields would
      have made: running the two analyzers through Whoosh's token stream cost twice as much.
    * At commit (and in a merge) Whoosh writes every posting with its chunk's field length,
      read back from the length column it has just written: a seek and a one-byte read per
      posting, a fifth of a commit's time. Each column is read once into a list instead.

    * A merged segment's postings are streamed into the new segment, beside the pool's
      (:meth:`add_postings_to_pool`), instead of copied into the pool: a merge of thousands
      of chunks filled the pool to its limit, and the heap it left behind, fragmented, kept
      the index worker growing merge after merge (+44 % over 20,000 documents).

    Segments hold the same postings, lengths and stored fields as Whoosh's own path makes (a
    test compares them). The postings file comes out ~1% smaller: equal encoded values are
    shared objects here, which the pickle of a posting block writes once.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._merged: list[SegmentReader] = []  # readers the streams below read from
        self._streams: list[Iterator[tuple[str, bytes, int, float, bytes]]] = []

    def add_postings_to_pool(self, reader: Any, startdoc: int, docmap: Any) -> None:
        """Keep a sorted stream of ``reader``'s live postings, renumbered, for the flush.

        The merge policy closes ``reader`` once it is added: the stream reads its own reader
        of the same segment, which sees the same deletions (this commit's included).
        """
        own = SegmentReader(self.storage, self.schema, reader.segment())
        self._merged.append(own)
        self._streams.append(self._process_posts(_sorted_postings(own), startdoc, docmap))

    def _flush_segment(self) -> None:
        # Whoosh's, with the merged segments' streams merged into the pool's sorted postings.
        self.perdocwriter.close()
        lengths = self.per_document_reader() if self.codec.length_stats else None
        postings = heapq.merge(self.pool.iter_postings(), *self._streams)
        try:
            self.fieldwriter.add_postings(self.schema, lengths, postings)
            self.fieldwriter.close()
        finally:
            if lengths:
                lengths.close()

    def _close_segment(self) -> None:
        try:
            super()._close_segment()
        finally:
            self._close_merged()

    def _cleanup_on_error(self) -> None:
        self._close_merged()
        super()._cleanup_on_error()

    def _close_merged(self) -> None:
        self._streams = []
        for reader in self._merged:
            reader.close()
        self._merged = []

    def add_chunk(self, fields: dict[str, Any]) -> None:
        """``add_document(**fields)`` for a chunk, with ``text`` and ``exact`` pre-analysed.

        Follows ``SegmentWriter.add_document`` for this schema, which has no boosts, spelling
        or vectors: every field's postings go to the pool, its length and stored value to the
        per-document writer, its column value if it has a column.
        """
        keyword, exact = index_terms(fields["text"])
        premade = {"text": _frequency_postings(keyword), "exact": _position_postings(exact)}
        schema, docnum, add_posting = self.schema, self.docnum, self.pool.add
        writer = self.perdocwriter
        writer.start_doc(docnum)
        try:
            for name in sorted(fields):
                value, field = fields[name], schema[name]
                length = 0
                if field.indexed:
                    postings = premade[name] if name in premade else field.index(value)
                    for term, frequency, weight, encoded in postings:
                        if field.scorable:
                            length += frequency
                        add_posting((name, term, docnum, weight, encoded))
                writer.add_field(name, field, value if field.stored else None, length)
                if field.column_type:
                    writer.add_column_value(name, field.column_type, field.to_column_value(value))
        except ValueError:
            writer.cancel_doc()
            raise
        writer.finish_doc()
        self._added = True  # what add_document sets: commit writes the new segment
        self.docnum += 1

    def per_document_reader(self) -> Any:
        return _LoadedLengths(super().per_document_reader(), self.schema)


def _sorted_postings(reader: SegmentReader) -> Iterator[tuple[str, bytes, int, float, bytes]]:
    """Every live posting of ``reader`` as the pool holds them, in the pool's order: by field
    name, term, then chunk (Whoosh's own ``iter_postings`` goes by field number)."""
    for fieldname in sorted(name for name in reader.indexed_field_names() if name in reader.schema):
        for term in reader.lexicon(fieldname):
            matcher = reader.postings(fieldname, term)
            while matcher.is_active():
                yield (fieldname, term, matcher.id(), matcher.weight(), matcher.value())
                matcher.next()


# Encoded frequencies as Whoosh's Frequency format writes them (most terms occur 1-3 times).
_FREQUENCIES = [pack_uint(frequency) for frequency in range(64)]
# Encoded position lists of one position, as the Positions format writes them (at most a
# chunk's length of entries: a chunk has no more positions than characters).
_ONE_POSITION: dict[int, bytes] = {}
_POSITIONS = Positions()  # the format of ``exact``


def _frequency_postings(counts: dict[str, int]) -> list[tuple[bytes, int, float, bytes]]:
    """What the ``text`` field's ``index()`` yields for these term frequencies."""
    encoded = _FREQUENCIES
    return [
        (term.encode(), n, float(n), encoded[n] if n < 64 else pack_uint(n))
        for term, n in counts.items()
    ]


def _position_postings(positions: dict[str, list[int]]) -> list[tuple[bytes, int, float, bytes]]:
    """What the ``exact`` field's ``index()`` yields for these term positions."""
    postings = []
    for term, at in positions.items():
        if len(at) == 1:
            # Most terms of a chunk occur once: their encoding is cached by position.
            encoded = _ONE_POSITION.get(at[0])
            if encoded is None:
                encoded = _ONE_POSITION[at[0]] = _POSITIONS.encode(at)
        else:
            encoded = _POSITIONS.encode(at)
        postings.append((term.encode(), len(at), float(len(at)), encoded))
    return postings


class _LoadedLengths:
    """A per-document reader whose length accessor reads a scored field's column once."""

    def __init__(self, reader: Any, schema: Any) -> None:
        self._reader = reader
        self._schema = schema

    def doc_field_length_reader(self, fieldname: str, default: int = 0) -> Any:
        if not self._schema[fieldname].scorable:
            # No length column: Whoosh's accessor returns the default without reading.
            return self._reader.doc_field_length_reader(fieldname, default)
        length = self._reader.doc_field_length
        count = self._reader.doc_count_all()
        # The same values (None included) as Whoosh's own accessor would return.
        return [length(docnum, fieldname, default) for docnum in range(count)].__getitem__

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reader, name)


def read_blocks(matcher: object) -> tuple[np.ndarray, np.ndarray] | None:
    """(chunk numbers, term frequencies) of a term's postings read block by block (each block
    holds up to 128 delta-encoded chunk numbers and weights), or None when ``matcher`` is not
    whoosh3's block matcher (inlined single postings, another codec): read it through the
    public matcher API then."""
    if type(matcher) is not W3LeafMatcher or matcher._byteids:
        return None
    id_blocks: list[np.ndarray] = []
    weight_blocks: list[np.ndarray] = []
    while matcher.is_active():
        check()
        matcher._read_data()
        deltas, weights, _values = matcher._data
        count = matcher._blocklength
        id_blocks.append(np.cumsum(np.array(deltas, dtype=np.int64)))
        if weights is None:
            weight_blocks.append(np.ones(count, dtype=np.float32))
        elif isinstance(weights, float):
            weight_blocks.append(np.full(count, weights, dtype=np.float32))
        elif isinstance(weights, array):
            weight_blocks.append(np.frombuffer(weights, dtype=np.float32).copy())
        else:
            weight_blocks.append(np.array(weights, dtype=np.float32))
        matcher._next_block()
    if not id_blocks:
        return np.zeros(0, np.int32), np.zeros(0, np.float32)
    return np.concatenate(id_blocks).astype(np.int32), np.concatenate(weight_blocks)
