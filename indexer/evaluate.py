"""Scoring a parsed query over the chunks the filters allow, with NumPy, and collapsing the
matches to documents.

Whoosh scores a query by stepping a tree of matchers one chunk at a time in Python; for
common words that was several milliseconds a search. Here a query of terms, ORs and ANDs (every
keyword-mode query, and exact mode without phrases) is computed from whole posting arrays
(:mod:`indexer.postings`): each term's BM25F scores in one vector expression, an OR as one
``bincount`` over its (boosted) terms, an AND as the chunks every child matched. The
arithmetic is Whoosh's own — the same BM25F formula, the searcher's idf and average field
lengths, a compound's score the sum of its matching children times its boost — and a test
holds the scores equal to Whoosh's. Any other node (phrases, NOT) is scored by Whoosh's
matchers and joins the arrays from there.

Chunks are numbered as the searcher numbers them (segment offset + local number); an allowed
set is a boolean mask over those numbers, with deleted chunks never allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh.query import And, Or, Phrase, Query, Term
from whoosh.searching import Searcher

from indexer.deadline import check, checked
from indexer.postings import PostingStore, SegmentArrays
from indexer.scoring import K1, B

# A sparse result: sorted unique chunk numbers and their scores.
Scored = tuple[np.ndarray, np.ndarray]
_EMPTY: Scored = (np.zeros(0, np.int64), np.zeros(0, np.float64))
# Filter masks a searcher keeps: one byte a chunk each, 64 MiB in all.
_MASK_BYTES = 64 * 2**20
# Scored postings a searcher keeps (16 bytes each) before its term cache starts again.
_MAX_SCORED_POSTINGS = 2_000_000
# Below this many allowed chunks per posting, a phrase is checked at each allowed chunk
# rather than walked over all its matches (one skip costs about three steps of a walk).
_STEP_COST = 3
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


class Snapshot:
    """What the searches of one searcher (one commit of the index) share."""

    def __init__(self, searcher: Searcher, store: PostingStore) -> None:
        self.searcher = searcher
        self.store = store
        leaves = searcher.leaf_searchers()
        readers = [(_segment_id(sub), sub.reader()) for sub, _ in leaves]
        arrays = store.segments(readers)
        self.leaves = [
            _Leaf(sub, offset, held) for (sub, offset), held in zip(leaves, arrays, strict=True)
        ]
        self.size = searcher.doc_count_all()
        self._terms: dict[tuple[str, bytes], Scored] = {}
        self._scored_postings = 0
        self._alive: np.ndarray | None = None
        self._documents: np.ndarray | None = None
        self._days: np.ndarray | None = None
        # Filter masks (a term's, or a whole filter's), as many as fit the byte bound.
        self._masks: dict[Any, np.ndarray] = {}
        self._max_masks = max(8, _MASK_BYTES // max(self.size, 1))

    # --- per-chunk columns of the whole index -----------------------------------------------
    def alive(self) -> np.ndarray:
        """Mask of the chunks not deleted."""
        if self._alive is None:
            alive = np.ones(self.size, dtype=bool)
            for leaf in self.leaves:
                check()
                reader = leaf.searcher.reader()
                if reader.has_deletions():
                    deleted = np.fromiter(reader.segment().deleted_docs(), dtype=np.int64)
                    alive[deleted + leaf.offset] = False
            self._alive = alive
        return self._alive

    def documents(self) -> np.ndarray:
        """Document ordinal of each chunk (``store.document_ids[ordinal]`` is its id)."""
        if self._documents is None:
            self._documents = self._concatenate(self.store.documents, np.int32)
        return self._documents

    def days(self) -> np.ndarray:
        if self._days is None:
            self._days = self._concatenate(self.store.days, np.int64)
        return self._days

    def mask(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        """The mask cached under ``key``, made by ``make()`` the first time (a long-lived
        searcher starts over past the byte bound rather than grow)."""
        found = self._masks.get(key)
        if found is None:
            if len(self._masks) >= self._max_masks:
                self._masks.clear()
            found = self._masks[key] = make()
        return found

    def term_mask(self, fieldname: str, value: str) -> np.ndarray:
        """Mask of the chunks holding an (unanalysed) term, e.g. a tenant (kept: filters
        combine the same few values in many ways)."""
        return self.mask(("term", fieldname, value), lambda: self._read_term_mask(fieldname, value))

    def _read_term_mask(self, fieldname: str, value: str) -> np.ndarray:
        mask = np.zeros(self.size, dtype=bool)
        text = value.encode("utf-8")
        for leaf in self.leaves:
            ids, _ = self.store.term(leaf.arrays, leaf.searcher.reader(), fieldname, text)
            mask[ids.astype(np.int64) + leaf.offset] = True
        return mask

    def _concatenate(self, column: Any, dtype: type) -> np.ndarray:
        if not self.leaves:
            return np.zeros(0, dtype=dtype)
        return np.concatenate(
            [column(leaf.arrays, leaf.searcher.reader()) for leaf in self.leaves]
        ).astype(dtype, copy=False)

    # --- scoring ---------------------------------------------------------------------------
    def evaluate(self, parsed: Query, allowed: np.ndarray) -> Scored:
        """The allowed chunks matching ``parsed`` and their scores."""
        kind = type(parsed)
        if kind is Term:
            return self._term(parsed, allowed)
        if kind is Or and _plain_or(parsed):
            return self._union(parsed, allowed)
        if kind is And:
            return self._intersection(parsed, allowed)
        return self._by_whoosh(parsed, allowed)

    def _term(self, term: Term, allowed: np.ndarray, boost: float = 1.0) -> Scored:
        ids, scores = self._term_scores(term)
        keep = allowed[ids]
        return ids[keep], scores[keep] * (term.boost * boost)

    def _term_scores(self, term: Term) -> Scored:
        """Every chunk holding the term, with its BM25F score (unboosted)."""
        schema = self.searcher.schema
        if term.fieldname not in schema:
            return _EMPTY
        try:
            text = schema[term.fieldname].to_bytes(term.text)
        except ValueError:
            return _EMPTY
        key = (term.fieldname, text)
        found = self._terms.get(key)
        if found is None:
            found = self._read_term(term.fieldname, text)
            if self._scored_postings + len(found[0]) > _MAX_SCORED_POSTINGS:
                self._terms.clear()  # a long-lived searcher must not grow without bound
                self._scored_postings = 0
            self._terms[key] = found
            self._scored_postings += len(found[0])
        return found

    def _read_term(self, fieldname: str, text: bytes) -> Scored:
        id_parts: list[np.ndarray] = []
        tf_parts: list[np.ndarray] = []
        length_parts: list[np.ndarray] = []
        for leaf in self.leaves:
            reader = leaf.searcher.reader()
            ids, tfs = self.store.term(leaf.arrays, reader, fieldname, text)
            if len(ids):
                lengths = self.store.lengths(leaf.arrays, reader, fieldname)
                id_parts.append(ids.astype(np.int64) + leaf.offset)
                tf_parts.append(tfs)
                length_parts.append(lengths[ids])
        if not id_parts:
            return _EMPTY
        tf = np.concatenate(tf_parts).astype(np.float64)
        lengths = np.concatenate(length_parts)
        searcher = self.searcher
        idf = searcher.idf(fieldname, text)
        average = searcher.avg_field_length(fieldname) or 1
        # Whoosh's bm25(): idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        scores = idf * (tf * (K1 + 1)) / (tf + K1 * ((1 - B) + B * lengths / average))
        return np.concatenate(id_parts), scores

    def _union(self, parsed: Or, allowed: np.ndarray) -> Scored:
        """An OR of terms (nested ORs flattened: a sum of boosted sums is one sum)."""
        parts: list[Scored] = []
        _flatten(self, parsed, 1.0, allowed, parts)
        if not parts:
            return _EMPTY
        ids = np.concatenate([ids for ids, _ in parts])
        if not len(ids):
            return _EMPTY
        scores = np.concatenate([scores for _, scores in parts])
        check(len(ids) * _SORT_SECONDS)
        return _sum_by_chunk(ids, scores)

    def _intersection(self, parsed: And, allowed: np.ndarray) -> Scored:
        children = [self.evaluate(sub, allowed) for sub in parsed.subqueries]
        if not children or any(not len(ids) for ids, _ in children):
            return _EMPTY
        ids = np.concatenate([ids for ids, _ in children])
        scores = np.concatenate([scores for _, scores in children])
        check(len(ids) * _SORT_SECONDS)
        unique, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=scores, minlength=len(unique))
        every = counts == len(children)
        return unique[every], sums[every] * parsed.boost

    def _by_whoosh(self, parsed: Query, allowed: np.ndarray) -> Scored:
        """Any other query (a phrase, NOT …), scored by Whoosh's matchers."""
        allowed_ids = np.flatnonzero(allowed)
        context = self.searcher.context(needs_current=True)
        ids: list[int] = []
        scores: list[float] = []
        # Only a phrase's matcher can be moved to chosen chunks and scored there; others (an
        # ANDMAYBE scores its optional side where that side stands) are walked whole.
        stand_on_allowed = type(parsed) is Phrase and len(allowed_ids) < _STEP_COST * sum(
            self.searcher.doc_frequency(fieldname, text)
            for fieldname, text in parsed.iter_all_terms()
        )
        # The searcher's term matchers look at the deadline as Whoosh steps them.
        for leaf in self.leaves:
            matcher = parsed.matcher(leaf.searcher, context)
            size = leaf.arrays.size
            if stand_on_allowed:
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


def _flatten(
    snapshot: Snapshot, parsed: Query, boost: float, allowed: np.ndarray, parts: list[Scored]
) -> None:
    if type(parsed) is Term:
        parts.append(snapshot._term(parsed, allowed, boost))
    elif type(parsed) is Or and _plain_or(parsed):
        for sub in parsed.subqueries:
            _flatten(snapshot, sub, boost * parsed.boost, allowed, parts)
    else:
        ids, scores = snapshot.evaluate(parsed, allowed)
        parts.append((ids, scores * boost))


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
