"""Scoring a parsed query over the chunks the filters allow, with NumPy, and collapsing the
matches to documents.

Whoosh scores a query by stepping a tree of matchers one chunk at a time in Python; for
common words that was several milliseconds a search. Here a query of terms, ORs and ANDs (every
keyword-mode query, and exact mode without phrases) is computed from whole posting arrays
(:mod:`indexer.postings`): each term's BM25F scores in one vector expression, an OR as one
``bincount`` over its (boosted) terms, an AND as the chunks every child matched. The
arithmetic is Whoosh's own — the same BM25F formula, a compound's score the sum of its
matching children times its boost — and a test holds the scores equal to Whoosh's. Any other
node (phrases, NOT) is scored by Whoosh's matchers and joins the arrays from there.

The statistics are the searching tenant's, never the index's: idf from the tenant's live
chunks holding a term among all its live chunks, average field lengths over those chunks (the
lengths Whoosh stores per chunk); Whoosh's matchers get them through
:class:`~indexer.scoring.TenantBM25F`. So a tenant's scores are what Whoosh computes over an
index of that tenant's documents alone, whatever other tenants hold.

Chunks are numbered as the searcher numbers them (segment offset + local number); an allowed
set is a boolean mask over those numbers, with deleted chunks never allowed.

What the searches of one commit share (per-chunk columns, filter masks, scored terms, term
frequencies) lives in its :class:`CommitCaches`, used by several threads at once, each through
a :class:`Snapshot` of its own searcher (a Whoosh searcher must not be used by two threads: its
readers share file positions). A value is computed outside any lock and put in under the
caches' lock unless another search put it in first; evicting and counting happen under it too.
Lookups take no lock (one dictionary ``get`` or attribute read is atomic) and find only
complete values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh.query import And, Or, Phrase, Query, Term
from whoosh.searching import Searcher

from indexer.deadline import check, checked
from indexer.postings import PostingStore, SegmentArrays
from indexer.scoring import K1, B, TenantBM25F, lucene_idf

# A sparse result: sorted unique chunk numbers and their scores.
Scored = tuple[np.ndarray, np.ndarray]
_EMPTY: Scored = (np.zeros(0, np.int64), np.zeros(0, np.float64))
# Filter masks a commit keeps: one byte a chunk each, 64 MiB in all.
_MASK_BYTES = 64 * 2**20
# Scored postings a commit keeps (16 bytes each) before its term cache starts again.
_MAX_SCORED_POSTINGS = 2_000_000
# A tenant's document frequencies a commit keeps (its statistics and its queries' cost
# estimates) before starting again.
_MAX_FREQUENCIES = 100_000
# Allowed chunks a phrase is stood on between two looks at the search's deadline (steps of
# the matcher itself look at it on their own: see deadline.CheckedSearcher).
_CHECK_STEPS = 512
# What sorting scored chunks costs a chunk (measured: 50-140 ns with np.unique): a sort that
# would end past the deadline is not started.
_SORT_SECONDS = 150e-9


@dataclass(frozen=True)
class _Leaf:
    searcher: Searcher
    offset: int
    arrays: SegmentArrays


class CommitCaches:
    """What the searches of one commit of the index share, whichever searcher runs them."""

    def __init__(self, searcher: Searcher, store: PostingStore) -> None:
        self.store = store
        readers = [(_segment_id(sub), sub.reader()) for sub, _ in searcher.leaf_searchers()]
        self.arrays = store.segments(readers)
        self.size = searcher.doc_count_all()
        self._lock = threading.Lock()  # guards changes to the tables below and the count
        self.terms: dict[tuple[str, str, bytes], Scored] = {}  # (tenant, field, term)
        self.scored_postings = 0
        self.tenant_frequencies: dict[tuple[str, str, bytes], int] = {}
        # (tenant, field) -> (live chunks, average length): the tenant's own statistics.
        self.tenant_fields: dict[tuple[str, str], tuple[int, float]] = {}
        self.alive: np.ndarray | None = None
        self.documents: np.ndarray | None = None
        self.days: np.ndarray | None = None
        self.first_chunks: np.ndarray | None = None
        self.field_lengths: dict[str, np.ndarray] = {}
        # Filter masks (a term's, or a whole filter's), as many as fit the byte bound.
        self.masks: dict[Any, np.ndarray] = {}
        self.max_masks = max(8, _MASK_BYTES // max(self.size, 1))

    def keep_mask(self, key: Any, mask: np.ndarray) -> np.ndarray:
        """``mask`` kept under ``key``, or the one another search kept first (a long-lived
        commit starts over past the byte bound rather than grow)."""
        with self._lock:
            if key not in self.masks and len(self.masks) >= self.max_masks:
                self.masks.clear()
            return self.masks.setdefault(key, mask)

    def keep_scores(self, key: tuple[str, str, bytes], found: Scored) -> Scored:
        with self._lock:
            held = self.terms.get(key)
            if held is not None:
                return held
            if self.scored_postings + len(found[0]) > _MAX_SCORED_POSTINGS:
                self.terms.clear()  # a long-lived commit must not grow without bound
                self.scored_postings = 0
            self.terms[key] = found
            self.scored_postings += len(found[0])
        return found

    def keep_tenant_frequency(self, key: tuple[str, str, bytes], frequency: int) -> None:
        with self._lock:
            if len(self.tenant_frequencies) >= _MAX_FREQUENCIES:
                self.tenant_frequencies.clear()
            self.tenant_frequencies[key] = frequency


class Snapshot:
    """One searcher's view of its commit: its segments' searchers over the shared caches."""

    def __init__(
        self, searcher: Searcher, store: PostingStore, caches: CommitCaches | None = None
    ) -> None:
        self.searcher = searcher
        self.store = store
        # Searchers of one commit list the same segments in the same order.
        self.caches = caches = caches if caches is not None else CommitCaches(searcher, store)
        self.leaves = [
            _Leaf(sub, offset, held)
            for (sub, offset), held in zip(searcher.leaf_searchers(), caches.arrays, strict=True)
        ]
        self.size = caches.size

    # --- per-chunk columns of the whole index -----------------------------------------------
    # Two searches may both compute a column: the values are equal, and either is kept whole.
    def alive(self) -> np.ndarray:
        """Mask of the chunks not deleted."""
        alive = self.caches.alive
        if alive is None:
            alive = np.ones(self.size, dtype=bool)
            for leaf in self.leaves:
                check()
                reader = leaf.searcher.reader()
                if reader.has_deletions():
                    deleted = np.fromiter(reader.segment().deleted_docs(), dtype=np.int64)
                    alive[deleted + leaf.offset] = False
            self.caches.alive = alive
        return alive

    def documents(self) -> np.ndarray:
        """Document ordinal of each chunk (``store.document_ids[ordinal]`` is its id)."""
        documents = self.caches.documents
        if documents is None:
            documents = self.caches.documents = self._concatenate(self.store.documents, np.int32)
        return documents

    def first_chunks(self) -> np.ndarray:
        """Per document ordinal, its first live chunk's number (-1: none): a document's chunks
        are added together, in order, so its chunk *n* is usually that number + *n*."""
        first = self.caches.first_chunks
        if first is None:
            live = np.flatnonzero(self.alive())
            ordinals, at = np.unique(self.documents()[live], return_index=True)
            first = np.full(len(self.store.document_ids), -1, dtype=np.int64)
            first[ordinals] = live[at]
            first = self.caches.first_chunks = first
        return first

    def chunk_number(self, document_id: str, chunk: int) -> int | None:
        """The live chunk ``chunk`` of ``document_id`` by the guess of :meth:`first_chunks`
        (None: the guess is not it; the caller then looks the chunk up by its id)."""
        first = self.first_chunks()  # first: it gives every document of the index its ordinal
        ordinal = self.store.ordinal(document_id)
        if ordinal is None or ordinal >= first.size or first[ordinal] < 0:
            return None
        docnum = int(first[ordinal]) + chunk
        if docnum >= self.size or not self.alive()[docnum]:
            return None
        return docnum if self.documents()[docnum] == ordinal else None

    def document_chunks(self, document_id: str) -> np.ndarray:
        """The live chunks of ``document_id``, ascending (one scan of the column)."""
        documents = self.documents()  # first: it gives every document of the index its ordinal
        ordinal = self.store.ordinal(document_id)
        if ordinal is None:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero((documents == ordinal) & self.alive()).astype(np.int64)

    def field_lengths(self, fieldname: str) -> np.ndarray:
        """Each chunk's length in ``fieldname`` (terms), over the whole index (kept per
        commit)."""
        lengths = self.caches.field_lengths.get(fieldname)
        if lengths is None:
            lengths = self._concatenate(
                lambda arrays, reader: self.store.lengths(arrays, reader, fieldname), np.float64
            )
            self.caches.field_lengths[fieldname] = lengths
        return lengths

    def term_postings(self, fieldname: str, text: bytes) -> tuple[np.ndarray, np.ndarray]:
        """(chunk numbers ascending, term frequencies) of a term over the whole index."""
        ids: list[np.ndarray] = []
        tfs: list[np.ndarray] = []
        for leaf in self.leaves:
            found, frequencies = self.store.term(
                leaf.arrays, leaf.searcher.reader(), fieldname, text
            )
            if len(found):
                ids.append(found.astype(np.int64) + leaf.offset)
                tfs.append(frequencies)
        if not ids:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return np.concatenate(ids), np.concatenate(tfs)

    def days(self) -> np.ndarray:
        days = self.caches.days
        if days is None:
            days = self.caches.days = self._concatenate(self.store.days, np.int64)
        return days

    def mask(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        """The mask cached under ``key``, made by ``make()`` the first time."""
        found = self.caches.masks.get(key)
        if found is None:
            found = self.caches.keep_mask(key, make())
        return found

    def term_mask(self, fieldname: str, value: str) -> np.ndarray:
        """Mask of the chunks holding an (unanalysed) term, e.g. a tenant (kept: filters
        combine the same few values in many ways)."""
        return self.mask(("term", fieldname, value), lambda: self._read_term_mask(fieldname, value))

    def population(self, tenant: str) -> np.ndarray:
        """Mask of the tenant's live chunks: what its statistics count."""
        return self.mask(
            ("population", tenant), lambda: self.alive() & self.term_mask("tenant", tenant)
        )

    def tenant_field(self, tenant: str, fieldname: str) -> tuple[int, float]:
        """The tenant's live chunks and their average length in ``fieldname`` (kept)."""
        key = (tenant, fieldname)
        found = self.caches.tenant_fields.get(key)
        if found is None:
            population = self.population(tenant)
            chunks = int(np.count_nonzero(population))
            total = float(self.field_lengths(fieldname)[population].sum()) if chunks else 0.0
            found = (chunks, total / chunks if chunks else 0.0)
            self.caches.tenant_fields[key] = found  # a few fields a tenant: no bound needed
        return found

    def tenant_idf(self, tenant: str, fieldname: str, text: bytes) -> float:
        """Lucene's idf of a term among the tenant's live chunks (its frequency kept)."""
        frequency = self.tenant_frequency(tenant, (fieldname, text))
        return lucene_idf(self.tenant_field(tenant, fieldname)[0], frequency)

    def tenant_frequency(self, tenant: str, key: tuple[str, bytes]) -> int:
        """The tenant's live chunks holding a term given as :meth:`term_key` makes it: what
        its statistics and its cost budget count, never another tenant's chunks. Kept per
        commit (a warm search pays a dictionary lookup); the first look reads the term's
        posting arrays, which scoring it reads anyway (and keeps across commits)."""
        held = (tenant, *key)
        frequency = self.caches.tenant_frequencies.get(held)
        if frequency is None:
            ids, _ = self.term_postings(*key)
            frequency = int(np.count_nonzero(self.population(tenant)[ids]))
            self.caches.keep_tenant_frequency(held, frequency)
        return frequency

    def _read_term_mask(self, fieldname: str, value: str) -> np.ndarray:
        mask = np.zeros(self.size, dtype=bool)
        text = value.encode("utf-8")
        for leaf in self.leaves:
            ids, _ = self.store.term(leaf.arrays, leaf.searcher.reader(), fieldname, text)
            mask[ids.astype(np.int64) + leaf.offset] = True
        return mask

    def term_key(self, fieldname: str, text: str | bytes) -> tuple[str, bytes] | None:
        """(field, term bytes) as the index holds it; None when the schema has no such term."""
        schema = self.searcher.schema
        if fieldname not in schema:
            return None
        if isinstance(text, bytes):
            return fieldname, text
        try:
            return fieldname, schema[fieldname].to_bytes(text)
        except ValueError:
            return None

    def _concatenate(self, column: Any, dtype: type) -> np.ndarray:
        if not self.leaves:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(
            [column(leaf.arrays, leaf.searcher.reader()) for leaf in self.leaves]
        ).astype(dtype, copy=False)

    # --- scoring ---------------------------------------------------------------------------
    def evaluate(self, parsed: Query, allowed: np.ndarray, tenant: str) -> Scored:
        """The allowed chunks matching ``parsed`` and their scores by ``tenant``'s statistics
        (``allowed`` holds no chunk of another tenant; the kinds scored from arrays are those
        :func:`scored_by_arrays` names)."""
        kind = type(parsed)
        if kind is Term:
            return self._term(parsed, allowed, tenant)
        if kind is Or and _plain_or(parsed):
            return self._union(parsed, allowed, tenant)
        if kind is And:
            return self._intersection(parsed, allowed, tenant)
        return self._by_whoosh(parsed, allowed, tenant)

    def _term(self, term: Term, allowed: np.ndarray, tenant: str, boost: float = 1.0) -> Scored:
        ids, scores = self._term_scores(term, tenant)
        keep = allowed[ids]
        return ids[keep], scores[keep] * (term.boost * boost)

    def term_scores(self, term: Term, tenant: str) -> Scored:
        """Every live chunk of ``tenant`` holding the term (sorted), with its BM25F score."""
        return self._term_scores(term, tenant)

    def _term_scores(self, term: Term, tenant: str) -> Scored:
        """Every live chunk of ``tenant`` holding the term, with its BM25F score (unboosted)."""
        key = self.term_key(term.fieldname, term.text)
        if key is None:
            return _EMPTY
        held = (tenant, *key)
        found = self.caches.terms.get(held)
        if found is None:
            found = self.caches.keep_scores(held, self._read_term(tenant, *key))
        return found

    def _read_term(self, tenant: str, fieldname: str, text: bytes) -> Scored:
        ids, tf = self.term_postings(fieldname, text)
        ids_of_tenant = self.population(tenant)[ids]
        ids, tf = ids[ids_of_tenant], tf[ids_of_tenant]
        self.caches.keep_tenant_frequency((tenant, fieldname, text), len(ids))
        if not len(ids):
            return _EMPTY
        lengths = self.field_lengths(fieldname)[ids]
        chunks, average = self.tenant_field(tenant, fieldname)
        idf = lucene_idf(chunks, len(ids))
        average = average or 1
        tf = tf.astype(np.float64, copy=False)
        # Whoosh's bm25(): idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        scores = idf * (tf * (K1 + 1)) / (tf + K1 * ((1 - B) + B * lengths / average))
        return ids, scores

    def _union(self, parsed: Or, allowed: np.ndarray, tenant: str) -> Scored:
        """An OR of terms (nested ORs flattened: a sum of boosted sums is one sum)."""
        parts: list[Scored] = []
        _flatten(self, parsed, 1.0, allowed, tenant, parts)
        if not parts:
            return _EMPTY
        ids = np.concatenate([ids for ids, _ in parts])
        if not len(ids):
            return _EMPTY
        scores = np.concatenate([scores for _, scores in parts])
        check(len(ids) * _SORT_SECONDS)
        return _sum_by_chunk(ids, scores)

    def _intersection(self, parsed: And, allowed: np.ndarray, tenant: str) -> Scored:
        children = [self.evaluate(sub, allowed, tenant) for sub in parsed.subqueries]
        if not children or any(not len(ids) for ids, _ in children):
            return _EMPTY
        ids = np.concatenate([ids for ids, _ in children])
        scores = np.concatenate([scores for _, scores in children])
        check(len(ids) * _SORT_SECONDS)
        unique, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=scores, minlength=len(unique))
        every = counts == len(children)
        return unique[every], sums[every] * parsed.boost

    def _by_whoosh(self, parsed: Query, allowed: np.ndarray, tenant: str) -> Scored:
        """Any other query (a phrase, NOT …), scored by Whoosh's matchers with the tenant's
        statistics."""
        allowed_ids = np.flatnonzero(allowed)
        context = self.searcher.context(
            needs_current=True, weighting=TenantBM25F(_TenantStatistics(self, tenant))
        )
        ids: list[int] = []
        scores: list[float] = []
        # Only a phrase's matcher can be moved to chosen chunks and scored there; others (an
        # ANDMAYBE scores its optional side where that side stands) are walked whole. A phrase
        # stands only on the allowed chunks holding all its words (from the posting arrays):
        # its cost then grows with the tenant's chunks, not with what other tenants hold.
        phrase = type(parsed) is Phrase
        if phrase:
            allowed_ids = self._holding_all(parsed, allowed)
            if not len(allowed_ids):
                return _EMPTY
        # The searcher's term matchers look at the deadline as Whoosh steps them.
        for leaf in self.leaves:
            matcher = parsed.matcher(leaf.searcher, context)
            size = leaf.arrays.size
            if phrase:
                local_ids: Any = _stand_on(matcher, allowed_ids, leaf.offset, size)
            else:
                local_ids = _walk(matcher)
            for local in local_ids:
                docnum = leaf.offset + local
                if allowed[docnum]:
                    ids.append(docnum)
                    scores.append(matcher.score())
        if not ids:
            return _EMPTY
        return np.array(ids, dtype=np.int64), np.array(scores, dtype=np.float64)

    def _holding_all(self, parsed: Phrase, allowed: np.ndarray) -> np.ndarray:
        """The allowed chunks holding every word of ``parsed`` (ascending), rarest word first."""
        postings = []
        for fieldname, text in parsed.iter_all_terms():
            key = self.term_key(fieldname, text)
            if key is None:
                return np.zeros(0, dtype=np.int64)
            postings.append(self.term_postings(*key)[0])
        postings.sort(key=len)
        found = postings[0][allowed[postings[0]]] if postings else np.zeros(0, dtype=np.int64)
        for ids in postings[1:]:
            check()
            found = np.intersect1d(found, ids, assume_unique=True)
        return found


@dataclass(frozen=True)
class _TenantStatistics:
    snapshot: Snapshot
    tenant: str

    def idf(self, fieldname: str, text: bytes) -> float:
        return self.snapshot.tenant_idf(self.tenant, fieldname, text)

    def average_length(self, fieldname: str) -> float:
        return self.snapshot.tenant_field(self.tenant, fieldname)[1]


def _flatten(
    snapshot: Snapshot,
    parsed: Query,
    boost: float,
    allowed: np.ndarray,
    tenant: str,
    parts: list[Scored],
) -> None:
    if type(parsed) is Term:
        parts.append(snapshot._term(parsed, allowed, tenant, boost))
    elif type(parsed) is Or and _plain_or(parsed):
        for sub in parsed.subqueries:
            _flatten(snapshot, sub, boost * parsed.boost, allowed, tenant, parts)
    else:
        ids, scores = snapshot.evaluate(parsed, allowed, tenant)
        parts.append((ids, scores * boost))


def scored_by_arrays(parsed: Query) -> bool:
    """Whether :meth:`Snapshot.evaluate` scores this node from posting arrays (a term, a plain
    OR, an AND) rather than by stepping Whoosh's matchers through its postings."""
    kind = type(parsed)
    return kind is Term or kind is And or (kind is Or and _plain_or(parsed))


def _plain_or(parsed: Or) -> bool:
    """An OR without Whoosh's coordination scaling (not reproduced here: Whoosh scores those)."""
    return parsed.scale is None


def _sum_by_chunk(ids: np.ndarray, scores: np.ndarray) -> Scored:
    unique, inverse = np.unique(ids, return_inverse=True)
    return unique, np.bincount(inverse, weights=scores, minlength=len(unique))


def _walk(matcher: Any) -> Any:
    while matcher.is_active():
        yield matcher.id()
        matcher.next()


def _stand_on(matcher: Any, allowed: np.ndarray, offset: int, size: int) -> Any:
    """Move ``matcher`` (of a segment starting at chunk ``offset``) to each allowed chunk it
    matches, yielding the segment-local number while it stands there."""
    lo, hi = np.searchsorted(allowed, [offset, offset + size])
    for docnum in checked(allowed[lo:hi].tolist(), _CHECK_STEPS):
        if not matcher.is_active():
            return
        local = docnum - offset
        if matcher.id() < local:
            matcher.skip_to(local)
            if not matcher.is_active():
                return
        if matcher.id() == local:
            yield local


def best_per_document(
    ids: np.ndarray, scores: np.ndarray, documents: np.ndarray, wanted: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """The best chunk of each of the ``wanted`` best documents (best first; equal scores: the
    earlier chunk), their scores, and how many documents matched in all.

    Only the top chunks are sorted: a document whose best chunk is among the top ``k`` chunks
    ranks exactly; one whose best chunk is not ranks below all of them. ``k`` grows until
    ``wanted`` documents are among them.
    """
    chunk_documents = documents[ids]
    total = int(np.count_nonzero(np.bincount(chunk_documents))) if len(ids) else 0
    if not total or not wanted:
        return ids[:0], scores[:0], total
    k = max(64, wanted * 8)
    while True:
        if k >= len(ids):
            top = np.arange(len(ids))
        else:
            # Every chunk scoring at least the k-th best, ties included.
            threshold = np.partition(scores, len(ids) - k)[len(ids) - k]
            top = np.flatnonzero(scores >= threshold)
        ordered = top[np.lexsort((ids[top], -scores[top]))]
        _, first = np.unique(chunk_documents[ordered], return_index=True)
        if len(first) >= wanted or len(top) >= len(ids):
            best = ordered[np.sort(first)[:wanted]]
            return ids[best], scores[best], total
        k *= 4


def _segment_id(searcher: Searcher) -> str:
    segment = searcher.reader().segment()
    return segment.segment_id() if segment is not None else f"empty-{id(searcher)}"
