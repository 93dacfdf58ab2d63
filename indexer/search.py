"""Searching the chunk index: query parsing per mode, filters inside the query, results
collapsed to documents with their best chunk, a bounded highlighted snippet and 0..1 scores.

``keyword``: stemmed BM25F over title and text; terms are OR-ed with a bonus for documents
that match more of them. ``exact``: every term and quoted phrase must match the unstemmed
text. A query the parser does not understand runs as plain terms (``fallback``); one with
nothing searchable left raises :class:`QueryUnprocessable`.
"""

from __future__ import annotations

import dataclasses
import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from whoosh import qparser, query
from whoosh.fields import Schema
from whoosh.searching import Hit, Searcher

from indexer.collect import (
    BestChunkPerDocument,
    matching_chunks,
    plain_unions,
    prefer_allowed,
    search_allowed,
)
from indexer.model import (
    NO_DAY,
    QueryUnprocessable,
    SearchHit,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.snippets import snippet

MAX_QUERY_CHARS = 2000
_MAX_FILTER_COMBINATIONS = 256
# Measured: a title boost above 1 lowers nDCG (xquad, cranfield); 0.5-0.7 is best.
_TITLE_BOOST = 0.7
# Weight of the "all terms" query added to the OR of the terms in keyword mode.
_AND_BONUS = 0.5
_AND_BONUS_MAX_TERMS = 6
_PHRASE_BONUS = 2.0
_QUOTED = re.compile(r'"([^"]+)"')
_SYNTAX = re.compile(r'[()"*?~^:\[\]{}+\-!/\\]|\b(AND|OR|NOT|TO)\b')


@dataclass
class SearcherCache:
    """What the searches of one searcher share (a commit brings a new searcher and cache)."""

    # (field, value) of a term filter -> the chunk numbers it allows.
    filters: dict[tuple[str, str], set[int]] = dataclasses.field(default_factory=dict)
    # (field, term) -> number of chunks holding it; each is a lookup in every segment.
    frequencies: dict[tuple[str, bytes], int] = dataclasses.field(default_factory=dict)
    # chunk number -> document id, filled as searches need them (a column read is ~4 µs).
    documents: dict[int, str] = dataclasses.field(default_factory=dict)
    document_column: Any = None
    # chunk number -> day of its document, filled as date filters need them.
    days: dict[int, int] = dataclasses.field(default_factory=dict)
    # term filters -> the chunks they allow together, and those chunks' (days, chunk numbers)
    # sorted by day.
    combined: dict[tuple[tuple[str, str], ...], set[int]] = dataclasses.field(default_factory=dict)
    by_day: dict[tuple[tuple[str, str], ...], tuple[list[int], list[int]]] = dataclasses.field(
        default_factory=dict
    )

    def remember(self, store: dict[Any, Any], key: Any, value: Any) -> None:
        """Keep ``value``; a long-lived searcher drops them all past a bound, not grows."""
        if len(store) >= _MAX_FILTER_COMBINATIONS:
            store.clear()
        store[key] = value


def run_search(
    searcher: Searcher, request: SearchRequest, cache: SearcherCache | None = None
) -> SearchResults:
    """Search with ``searcher``, reusing what ``cache`` holds for it."""
    parsed, fallback = _parse(searcher, request)
    cache = cache or SearcherCache()
    restriction = _allowed_documents(searcher, request, cache)
    if not restriction:
        # Nothing is allowed. (Whoosh reads an empty filter set as "no filter at all".)
        return SearchResults(hits=[], total=0, mode=request.mode, fallback=fallback)
    if prefer_allowed(searcher, parsed, len(restriction), cache.frequencies):
        top, best, complete = _best_allowed_chunks(searcher, parsed, restriction, cache)
    else:
        top, best, complete = _best_chunks(
            searcher, parsed, restriction, request.offset + request.limit, cache
        )
    exact = request.mode == "exact"
    fields = ("exact",) if exact else ("text", "title")
    terms = {
        text.decode() if isinstance(text, bytes) else text
        for field, text in parsed.iter_all_terms()
        if field in fields
    }
    window = best[request.offset : request.offset + request.limit]
    hits = [_hit(hit, top, terms, exact, request.snippet_chars) for hit in window]
    # When every matching chunk was already scored, the documents seen are all there are.
    total = len(best) if complete else _count_documents(searcher, parsed, restriction, cache)
    return SearchResults(hits=hits, total=total, mode=request.mode, fallback=fallback)


def _best_chunks(
    searcher: Searcher,
    parsed: query.Query,
    restriction: set[int],
    wanted: int,
    cache: SearcherCache,
) -> tuple[float, list[Hit], bool]:
    """The best chunk of each of the ``wanted`` best documents, the top score, and whether
    every matching chunk was seen (see :class:`BestChunkPerDocument`)."""
    collector = BestChunkPerDocument(wanted, restriction, _document_of(searcher, cache))
    # A matcher that stands on each match: needed to score it (and no preloading union).
    searcher.search_with_collector(parsed, collector, searcher.context(needs_current=True))
    results = collector.results()
    hits = list(results)
    top = hits[0].score if hits else 0.0
    return top, hits, collector.complete


def _best_allowed_chunks(
    searcher: Searcher, parsed: query.Query, restriction: set[int], cache: SearcherCache
) -> tuple[float, list[Hit], bool]:
    """Like :func:`_best_chunks`, by scoring each allowed chunk (few of them): all are seen."""
    results = search_allowed(searcher, parsed, sorted(restriction))
    document_of = _document_of(searcher, cache)
    best: dict[str, Hit] = {}
    for hit in results:
        best.setdefault(document_of(hit.docnum), hit)
    top = results.score(0) if results.scored_length() else 0.0
    return top, list(best.values()), True


def _count_documents(
    searcher: Searcher, parsed: query.Query, restriction: set[int], cache: SearcherCache
) -> int:
    """How many documents have a matching chunk (the filters included)."""
    document_of = _document_of(searcher, cache)
    return len({document_of(docnum) for docnum in matching_chunks(searcher, parsed) & restriction})


def _document_of(searcher: Searcher, cache: SearcherCache) -> Callable[[int], str]:
    """Chunk number -> document id, read from the column once per chunk and searcher."""
    if cache.document_column is None:
        try:
            cache.document_column = searcher.reader().column_reader("document_id")
        except NotImplementedError:  # a reader without columns (an empty index)
            cache.document_column = _StoredDocumentIds(searcher)
    return _memoized(cache.documents, cache.document_column)


def _memoized(known: dict[int, Any], column: Any) -> Callable[[int], Any]:
    """``column[docnum]``, remembered in ``known`` (a column read is ~4 µs, a dict hit 50 ns)."""

    def value_of(docnum: int) -> Any:
        value = known.get(docnum)
        if value is None:
            value = known[docnum] = column[docnum]
        return value

    return value_of


class _StoredDocumentIds:
    def __init__(self, searcher: Searcher) -> None:
        self.searcher = searcher

    def __getitem__(self, docnum: int) -> str:
        return self.searcher.stored_fields(docnum)["document_id"]  # type: ignore[no-any-return]


def _parse(searcher: Searcher, request: SearchRequest) -> tuple[query.Query, bool]:
    text = request.query.strip()
    if not text:
        raise QueryUnprocessable("The query is empty.")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryUnprocessable(f"The query is longer than {MAX_QUERY_CHARS} characters.")
    if request.mode == "exact":
        parsed, fallback = _parse_with(searcher, "exact", text)
    else:
        parsed, fallback = _parse_keyword(searcher, text)
    if parsed is query.NullQuery or not any(True for _ in parsed.iter_all_terms()):
        raise QueryUnprocessable(
            "The query has nothing to search for (only punctuation or very common words)."
        )
    return plain_unions(parsed), fallback


def _parse_keyword(searcher: Searcher, text: str) -> tuple[query.Query, bool]:
    """Stemmed terms OR-ed, with a bonus for chunks holding all of them and for quoted phrases.

    The keyword field keeps no positions (they would make the index writer do a third more
    work); a quoted phrase is matched on the unstemmed ``exact`` field, which has them, and
    ranks its chunks first without excluding the others (``exact`` mode requires it).
    """
    phrases = [
        parsed
        for phrase in _QUOTED.findall(text)
        if (parsed := _parse_with(searcher, "exact", f'"{phrase}"')[0]) is not query.NullQuery
    ]
    words = text.replace('"', " ")
    terms, fallback = _parse_with(searcher, "keyword", words)
    distinct_terms = {term for _field, term in terms.iter_all_terms()}
    bonuses: list[query.Query] = [phrase.with_boost(_PHRASE_BONUS) for phrase in phrases]
    # Long questions match nearly everything anyway; the bonus doubles their matchers.
    if 1 < len(distinct_terms) <= _AND_BONUS_MAX_TERMS:
        # Whoosh's own OrGroup.factory scaling lowers, rather than raises, multi-term matches.
        every, _ = _parse_with(searcher, "keyword", words, qparser.AndGroup)
        bonuses.append(every.with_boost(_AND_BONUS))
    if terms is query.NullQuery or not bonuses:
        return terms, fallback
    return query.Or([terms, *bonuses]), fallback


def _parse_with(
    searcher: Searcher, mode: str, text: str, group: type[qparser.GroupNode] = qparser.OrGroup
) -> tuple[query.Query, bool]:
    """Parse ``text``; on a syntax the parser cannot take, parse it again as plain terms."""
    try:
        return _parser(searcher, mode, group).parse(text).normalize(), False
    except Exception:  # whoosh's parser raises assorted errors on odd syntax
        plain = _SYNTAX.sub(" ", text)
        return _parser(searcher, mode, group).parse(plain).normalize(), True


def _parser(
    searcher: Searcher, mode: str, group: type[qparser.GroupNode] = qparser.OrGroup
) -> qparser.QueryParser:
    """A parser per schema and mode, built once (building one costs more than parsing)."""
    schema = searcher.schema
    key = (id(schema), mode, group)
    entry = _PARSERS.get(key)
    if entry is None or entry[0] is not schema:
        if len(_PARSERS) > 64:
            _PARSERS.clear()
        entry = _PARSERS[key] = (schema, _new_parser(schema, mode, group))
    return entry[1]


def _new_parser(schema: Schema, mode: str, group: type[qparser.GroupNode]) -> qparser.QueryParser:
    if mode == "exact":
        parser = qparser.QueryParser("exact", schema, group=qparser.AndGroup)
    else:
        parser = qparser.MultifieldParser(
            ["title", "text"], schema, fieldboosts={"title": _TITLE_BOOST}, group=group
        )
    # Users type words, not field names or wildcards over the whole lexicon.
    parser.remove_plugin_class(qparser.FieldsPlugin)
    parser.remove_plugin_class(qparser.WildcardPlugin)
    return parser


# (id(schema), mode, group) -> (the schema, its parser); the schema is kept so its id is not
# reused by another while the entry lives.
_PARSERS: dict[tuple[int, str, type], tuple[Schema, qparser.QueryParser]] = {}


def _allowed_documents(
    searcher: Searcher, request: SearchRequest, cache: SearcherCache
) -> set[int]:
    """The chunk numbers the filters allow: the tenant's, narrowed by every other filter.

    Term filters are document sets cached per searcher (a commit brings a new searcher and an
    empty cache). A date range is cut from the same chunks sorted by day (also cached, per
    combination of term filters), with two binary searches, instead of expanding a numeric
    range into many terms on every query.
    """
    terms = [("tenant", request.tenant)]
    terms += [
        (field, value)
        for field, value in (
            ("collection", request.collection),
            ("document_type", request.document_type),
            ("submitter", request.submitter),
        )
        if value
    ]
    key = tuple(terms)
    allowed = cache.combined.get(key)
    if allowed is None:
        allowed = _term_docs(searcher, cache.filters, *terms[0])
        for field, value in terms[1:]:
            allowed = allowed & _term_docs(searcher, cache.filters, field, value)
        cache.remember(cache.combined, key, allowed)
    if not (request.date_from or request.date_to):
        return allowed
    by_day = cache.by_day.get(key)
    if by_day is None:
        day_of = _memoized(cache.days, searcher.reader().column_reader("created_day"))
        ordered = sorted((day_of(docnum), docnum) for docnum in allowed)
        by_day = ([day for day, _ in ordered], [docnum for _, docnum in ordered])
        cache.remember(cache.by_day, key, by_day)
    days, docnums = by_day
    start = day_number(request.date_from) if request.date_from else NO_DAY + 1
    end = day_number(request.date_to) if request.date_to else 2**31 - 1
    return set(docnums[bisect_left(days, start) : bisect_right(days, end)])


def _term_docs(
    searcher: Searcher, cache: dict[tuple[str, str], set[int]], field: str, value: str
) -> set[int]:
    key = (field, value)
    if key not in cache:
        cache[key] = set(searcher.docs_for_query(query.Term(field, value)))
    return cache[key]


def _hit(hit: Hit, top: float, terms: set[str], exact: bool, snippet_chars: int) -> SearchHit:
    stored = hit.fields()
    excerpt = snippet(stored["text"], terms, exact, snippet_chars)
    created = stored.get("created")
    return SearchHit(
        document_id=stored["document_id"],
        name=stored["name"],
        title=stored.get("title"),
        score=round(hit.score / top, 4) if top else 0.0,
        page=stored["page"],
        line_start=stored.get("line_start", 1),
        line_end=stored.get("line_end", 1),
        snippet=excerpt[: snippet_chars * 2],
        collection=stored.get("collection", ""),
        document_type=stored.get("document_type") or None,
        submitter=stored.get("submitter") or None,
        created_at=datetime.fromisoformat(created) if created else None,
    )
