"""Scoring only the chunks the filters allow, when they are few.

Whoosh applies a filter by walking every posting of the query's terms and dropping the chunks
outside the allowed set: the cost follows how common the terms are, not how narrow the
filters are. :class:`AllowedChunksCollector` turns that around: it moves the query's matcher
straight to each allowed chunk (``skip_to`` jumps over whole posting blocks) and scores the
ones that match. For a tenant + type + date filter leaving a few hundred chunks this reads a
handful of blocks instead of every posting of every term.

It collects every allowed match, so the caller also gets the exact number of matching
documents without a second pass.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from whoosh.collectors import ScoredCollector, UnlimitedCollector
from whoosh.matching import UnionMatcher
from whoosh.query import And, Or, Query, Term
from whoosh.reading import TermNotFound
from whoosh.searching import Results, Searcher

_MAX_CACHED_FREQUENCIES = 100_000
_TREE_STEP_COST = 3


class UnionOr(Or):  # type: ignore[misc]
    """An OR that always builds a plain tree of union matchers.

    Whoosh's own OR picks, per segment, between a tree ordered by estimated sizes (a lookup
    of every term in every segment first) and, on segments under 5,000 chunks or when the
    collector does not need the current match, a "preloaded" union that fills and clears a
    2,048-slot array in Python loops for every OR node. On small segments that preloading was
    half of all search time (measured on the dev corpus: 10 segments of ~460 chunks).
    """

    def _matcher(self, subs: list[Query], searcher: Searcher, context: Any) -> Any:
        return self._tree_matcher(subs, UnionMatcher, searcher, context, None)


def plain_unions(parsed: Query) -> Query:
    """``parsed`` with every OR made a :class:`UnionOr` (same meaning, same scores)."""
    if isinstance(parsed, (Or, And)):
        subqueries = [plain_unions(sub) for sub in parsed.subqueries]
        kind = UnionOr if isinstance(parsed, Or) else type(parsed)
        return kind(subqueries, boost=parsed.boost)
    return parsed


class AllowedChunksCollector(UnlimitedCollector):  # type: ignore[misc]
    """Collects (score, chunk number) of every allowed chunk that matches, best first.

    :param allowed: the allowed chunk numbers of the whole (top-level) searcher, sorted.
    """

    def __init__(self, allowed: Sequence[int]) -> None:
        super().__init__()
        self._allowed = allowed

    def matches(self) -> Iterator[int]:
        # ScoredCollector.collect scores the matcher where it stands: on each chunk yielded.
        yield from _stand_on_allowed(
            self.matcher, self._allowed, self.offset, self.subsearcher.doc_count_all()
        )


def _stand_on_allowed(
    matcher: Any, allowed: Sequence[int], offset: int, size: int
) -> Iterator[int]:
    """Move ``matcher`` (of a segment starting at chunk ``offset``, ``size`` chunks long) to
    each allowed chunk it matches, yielding the segment-local number while it stands there."""
    lo, hi = bisect_left(allowed, offset), bisect_left(allowed, offset + size)
    for docnum in allowed[lo:hi]:
        if not matcher.is_active():
            return
        local = docnum - offset
        if matcher.id() < local:
            matcher.skip_to(local)
            if not matcher.is_active():
                return
        if matcher.id() == local:
            yield local


class BestChunkPerDocument(ScoredCollector):  # type: ignore[misc]
    """The best-scoring allowed chunk of each of the ``limit`` best documents, in one pass.

    Whoosh's top-N counts chunks, so a document with many matching chunks (a novel) fills
    the top and the search had to be repeated, wider, until enough distinct documents came
    up. Here the threshold that lets Whoosh skip whole posting blocks is the score of the
    ``limit``-th best *document*. ``complete`` tells whether every match was scored (the
    threshold never rose), so the documents seen are all the matching ones.
    """

    def __init__(self, limit: int, allowed: set[int], document_of: Callable[[int], str]) -> None:
        super().__init__()
        self.limit = limit
        self.allowed = allowed
        self.document_of = document_of
        self.best: dict[str, tuple[float, int]] = {}
        self._since_threshold = 0

    def _use_block_quality(self) -> bool:
        return bool(
            not self.top_searcher.weighting.use_final and self.matcher.supports_block_quality()
        )

    def matches(self) -> Iterator[int]:
        allowed = self.allowed
        offset = self.offset
        for sub_docnum in super().matches():
            if offset + sub_docnum in allowed:
                yield sub_docnum

    def _collect(self, global_docnum: int, score: float) -> float:
        document = self.document_of(global_docnum)
        current = self.best.get(document)
        if current is None or score > current[0]:
            self.best[document] = (score, global_docnum)
            self._since_threshold += 1
            # Raising the threshold costs a partial sort: do it now and then.
            if len(self.best) >= self.limit and self._since_threshold >= 32:
                self._raise_threshold()
        return 0 - score

    def _raise_threshold(self) -> None:
        self._since_threshold = 0
        scores = heapq.nlargest(self.limit, (score for score, _ in self.best.values()))
        self.minscore = max(self.minscore, scores[-1])

    @property
    def complete(self) -> bool:
        """Whether every allowed matching chunk was scored: with no threshold, nothing could
        be skipped."""
        return not self.minscore

    def results(self) -> Results:
        """Each document's best chunk, best first (ties: the earlier chunk)."""
        items = sorted(self.best.values(), key=lambda item: (-item[0], item[1]))
        return self._results(items)


def prefer_allowed(
    searcher: Searcher, parsed: Query, allowed_count: int, frequencies: dict[tuple[str, bytes], int]
) -> bool:
    """Whether visiting the allowed chunks is cheaper than walking the terms' postings.

    Moving to an allowed chunk costs about one step in one term's postings (they are walked
    term by term); walking the postings costs a step through the whole matcher tree for each
    (measured: ~3 times more), so allowed chunks x terms is compared with 3 x postings.
    ``frequencies`` caches document frequencies for this searcher (each is a lookup in every
    segment).
    """
    terms = list(parsed.iter_all_terms())
    if len(frequencies) > _MAX_CACHED_FREQUENCIES:
        frequencies.clear()  # a long-lived searcher must not grow without bound
    postings = 0
    for term in terms:
        if term not in frequencies:
            frequencies[term] = searcher.doc_frequency(*term)
        postings += frequencies[term]
    return allowed_count * len(terms) < _TREE_STEP_COST * postings


def search_allowed(searcher: Searcher, parsed: Query, allowed: Sequence[int]) -> Results:
    """Every allowed chunk matching ``parsed``, scored, best first.

    Queries of terms, ORs and ANDs (keyword mode, and exact mode without phrases) are scored
    term by term (:func:`_term_scores`); others go through Whoosh's matcher tree.
    """
    if _terms_only(parsed):
        scores = _tree_scores(searcher, parsed, allowed, {})
        items = sorted(((score, docnum) for docnum, score in scores.items()), key=_best_first)
        return Results(searcher, parsed, items, docset=set(scores))
    collector = AllowedChunksCollector(allowed)
    # The matcher must stand on a chunk to be moved and scored: no preloading union.
    searcher.search_with_collector(parsed, collector, searcher.context(needs_current=True))
    return collector.results()


def _best_first(item: tuple[float, int]) -> tuple[float, int]:
    return (-item[0], item[1])


def _tree_scores(
    searcher: Searcher,
    parsed: Query,
    allowed: Sequence[int],
    leaves: dict[tuple[str, bytes, float], dict[int, float]],
) -> dict[int, float]:
    """Chunk -> score of a tree of terms, ORs and ANDs over the allowed chunks.

    The same arithmetic as Whoosh's matchers (a union or an intersection scores the sum of
    its matching children, times its boost), but each term's postings are walked alone and
    only to the allowed chunks: the matcher tree's per-chunk bookkeeping (every node asked
    where it stands at every step, an AND hunting its next common chunk past the target) was
    most of a filtered search. ``leaves`` caches each term's scores (the AND bonus repeats
    the terms of the OR).
    """
    if type(parsed) is Term:
        key = (parsed.fieldname, parsed.text, parsed.boost)
        if key not in leaves:
            leaves[key] = _term_scores(searcher, parsed, allowed)
        return leaves[key]
    children = [_tree_scores(searcher, sub, allowed, leaves) for sub in parsed.subqueries]
    if isinstance(parsed, Or):
        combined: dict[int, float] = {}
        for child in children:
            for docnum, score in child.items():
                combined[docnum] = combined.get(docnum, 0.0) + score
    else:
        common = set(children[0]).intersection(*children[1:]) if children else set()
        combined = {docnum: sum(child[docnum] for child in children) for docnum in common}
    if parsed.boost != 1.0:
        combined = {docnum: score * parsed.boost for docnum, score in combined.items()}
    return combined


def _term_scores(searcher: Searcher, term: Term, allowed: Sequence[int]) -> dict[int, float]:
    """Chunk -> the term's (boosted) score, for the allowed chunks holding it."""
    scores: dict[int, float] = {}
    context = searcher.context(needs_current=True)
    for subsearcher, offset in searcher.leaf_searchers():
        size = subsearcher.doc_count_all()
        if bisect_left(allowed, offset) == bisect_left(allowed, offset + size):
            continue  # no allowed chunk here: do not even build the matcher
        matcher = term.matcher(subsearcher, context)
        for local in _stand_on_allowed(matcher, allowed, offset, size):
            scores[offset + local] = matcher.score()
    return scores


def matching_chunks(searcher: Searcher, parsed: Query) -> set[int]:
    """The chunk numbers matching ``parsed``, unscored (deleted chunks may be included).

    A query of terms, ORs and ANDs is computed as sets from each term's postings, read in
    bulk: Whoosh's own unscored pass steps a tree of union matchers one chunk at a time,
    several times slower for common terms. Any other query (phrases, NOT) is left to Whoosh.
    """
    if not _terms_only(parsed):
        return set(searcher.docs_for_query(parsed))
    return _term_sets(searcher, parsed)


def _terms_only(parsed: Query) -> bool:
    if type(parsed) is Term:
        return True
    return isinstance(parsed, (Or, And)) and all(_terms_only(sub) for sub in parsed.subqueries)


def _term_sets(searcher: Searcher, parsed: Query) -> set[int]:
    if type(parsed) is Term:
        try:
            return set(searcher.postings(parsed.fieldname, parsed.text).all_ids())
        except TermNotFound:
            return set()
    sets = [_term_sets(searcher, sub) for sub in parsed.subqueries]
    if not sets:
        return set()
    return set.union(*sets) if isinstance(parsed, Or) else set.intersection(*sets)
