"""Searching the chunk index: query parsing per mode, filters inside the query, results
collapsed to documents with their best chunk, a bounded highlighted snippet and 0..1 scores.

``keyword``: stemmed BM25F over title and text; terms are OR-ed with a bonus for documents
that match more of them. ``exact``: every term and quoted phrase must match the unstemmed
text. A query the parser does not understand runs as plain terms (``fallback``); one with
nothing searchable left raises :class:`QueryUnprocessable`.
"""

from __future__ import annotations

import re
from datetime import datetime

from whoosh import highlight, qparser, query
from whoosh.searching import Hit, Searcher

from indexer.model import (
    NO_DAY,
    QueryUnprocessable,
    SearchHit,
    SearchRequest,
    SearchResults,
    day_number,
)

MAX_QUERY_CHARS = 2000
# Measured: a title boost above 1 lowers nDCG (xquad, cranfield); 0.5-0.7 is best.
_TITLE_BOOST = 0.7
# Weight of the "all terms" query added to the OR of the terms in keyword mode.
_AND_BONUS = 0.5
_CHUNKS_PER_DOCUMENT = 3
_AND_BONUS_MAX_TERMS = 6
_PHRASE_BONUS = 2.0
_QUOTED = re.compile(r'"([^"]+)"')
_SYNTAX = re.compile(r'[()"*?~^:\[\]{}+\-!/\\]|\b(AND|OR|NOT|TO)\b')


def run_search(
    searcher: Searcher, request: SearchRequest, cache: dict[object, set[int]] | None = None
) -> SearchResults:
    """Search with ``searcher``; ``cache`` keeps filter document sets for this searcher."""
    parsed, fallback = _parse(searcher, request)
    restriction = _allowed_documents(searcher, request, {} if cache is None else cache)
    if not restriction:
        # Nothing is allowed. (Whoosh reads an empty filter set as "no filter at all".)
        return SearchResults(hits=[], total=0, mode=request.mode, fallback=fallback)
    top, best, complete = _best_chunks(
        searcher, parsed, restriction, request.offset + request.limit
    )
    field = "exact" if request.mode == "exact" else "text"
    window = best[request.offset : request.offset + request.limit]
    hits = [_hit(hit, top, field, request.snippet_chars) for hit in window]
    # When every matching chunk was already scored, the documents seen are all there are.
    total = len(best) if complete else _count_documents(searcher, parsed, restriction)
    return SearchResults(hits=hits, total=total, mode=request.mode, fallback=fallback)


def _best_chunks(
    searcher: Searcher, parsed: query.Query, restriction: set[int], wanted: int
) -> tuple[float, list[Hit], bool]:
    """The best chunk of each of the ``wanted`` best documents, the top score, and whether
    every matching chunk was seen.

    A plain top-N chunk search (Whoosh skips blocks that cannot compete) is much cheaper than
    collapsing every match; asking for a few chunks per document wanted nearly always
    suffices, and the search widens when it does not.
    """
    fetch = max(wanted * _CHUNKS_PER_DOCUMENT, 10)
    while True:
        results = searcher.search(parsed, filter=restriction, limit=fetch)
        complete = results.scored_length() < fetch
        best: dict[str, Hit] = {}
        for hit in results:
            best.setdefault(hit["document_id"], hit)
            if len(best) >= wanted and not complete:
                break
        if len(best) >= wanted or complete:
            top = results.score(0) if results.scored_length() else 0.0
            return top, list(best.values()), complete
        fetch *= 4


def _count_documents(searcher: Searcher, parsed: query.Query, restriction: set[int]) -> int:
    """How many documents have a matching chunk (the filters included)."""
    # Unscored and unsorted: only which chunks match, within the allowed ones.
    matching = searcher.search(parsed, filter=restriction, limit=None, scored=False).docs()
    try:
        document_ids = searcher.reader().column_reader("document_id")
    except NotImplementedError:  # a reader without columns (an empty index)
        return len({searcher.stored_fields(docnum)["document_id"] for docnum in matching})
    return len({document_ids[docnum] for docnum in matching})


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
    return parsed, fallback


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
    schema = searcher.schema
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


def _allowed_documents(
    searcher: Searcher, request: SearchRequest, cache: dict[object, set[int]]
) -> set[int]:
    """The chunk numbers the filters allow: the tenant's, narrowed by every other filter.

    Term filters are document sets cached per searcher (a commit brings a new searcher and an
    empty cache); the date range reads the per-chunk day column of the remaining chunks
    instead of expanding a numeric range into many terms on every query.
    """
    allowed = _term_docs(searcher, cache, "tenant", request.tenant)
    for field, value in (
        ("collection", request.collection),
        ("document_type", request.document_type),
        ("submitter", request.submitter),
    ):
        if value:
            allowed = allowed & _term_docs(searcher, cache, field, value)
    if request.date_from or request.date_to:
        start = day_number(request.date_from) if request.date_from else NO_DAY + 1
        end = day_number(request.date_to) if request.date_to else 2**31 - 1
        days = searcher.reader().column_reader("created_day")
        allowed = {docnum for docnum in allowed if start <= days[docnum] <= end}
    return allowed


def _term_docs(
    searcher: Searcher, cache: dict[object, set[int]], field: str, value: str
) -> set[int]:
    key = (field, value)
    if key not in cache:
        cache[key] = set(searcher.docs_for_query(query.Term(field, value)))
    return cache[key]


class _Marks(highlight.Formatter):
    """Matched terms as **bold** (Markdown), the rest as it is."""

    between = " … "

    def format_token(self, text: str, token: object, replace: bool = False) -> str:
        return f"**{highlight.get_text(text, token, replace)}**"


def _hit(hit: Hit, top: float, field: str, snippet_chars: int) -> SearchHit:
    stored = hit.fields()
    hit.results.fragmenter = highlight.ContextFragmenter(maxchars=snippet_chars, surround=80)
    hit.results.formatter = _Marks()
    snippet = hit.highlights(field, text=stored["text"], top=1) or stored["text"][:snippet_chars]
    created = stored.get("created")
    return SearchHit(
        document_id=stored["document_id"],
        name=stored["name"],
        title=stored.get("title"),
        score=round(hit.score / top, 4) if top else 0.0,
        page=stored["page"],
        line_start=stored.get("line_start", 1),
        line_end=stored.get("line_end", 1),
        snippet=snippet[: snippet_chars * 2],
        collection=stored.get("collection", ""),
        document_type=stored.get("document_type") or None,
        submitter=stored.get("submitter") or None,
        created_at=datetime.fromisoformat(created) if created else None,
    )
