"""Searching the chunk index: query parsing per mode, filters inside the query, results
collapsed to documents with their best chunk, a bounded highlighted snippet and a calibrated
score (the probability that the document is relevant: :mod:`indexer.calibration`).

``keyword``: stemmed BM25F over title and text; terms are OR-ed with a bonus for documents
that match more of them. ``exact``: every term and quoted phrase must match the unstemmed
text. A query the parser does not understand runs as plain terms (``fallback``); one with
nothing searchable left raises :class:`QueryUnprocessable`.

A query of plain words (most of them) is built straight from the analyser into the query
Whoosh's parser would build; the parser runs only for syntax. Scoring, filters and collapsing
run on posting arrays (:mod:`indexer.evaluate`); Whoosh reads the stored fields of the hits.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
from whoosh import qparser, query
from whoosh.fields import Schema
from whoosh.searching import Searcher

from indexer.budget import SearchLimits, check_query, check_quoted
from indexer.calibration import Calibrations
from indexer.deadline import check
from indexer.evaluate import Snapshot, best_per_document
from indexer.model import (
    NO_DAY,
    QueryOverBudget,
    QueryUnprocessable,
    SearchHit,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.relevance import Candidate, calibrated, coverage, explanation
from indexer.snippets import snippet

MAX_QUERY_CHARS = 2000
# Measured: a title boost above 1 lowers nDCG (xquad, cranfield); 0.5-0.7 is best.
_TITLE_BOOST = 0.7
# Weight of the "all terms" query added to the OR of the terms in keyword mode.
_AND_BONUS = 0.5
_AND_BONUS_MAX_TERMS = 6
_PHRASE_BONUS = 2.0
_QUOTED = re.compile(r'"([^"]+)"')
_FIELDS = (("title", _TITLE_BOOST), ("text", 1.0))
_WHITESPACE = re.compile(r"[ \t\r\n]+")
# What our parsers read as syntax (no field names, no wildcards: those plugins are removed),
# and spaces other than the parser's.
_NOT_PLAIN = re.compile(
    r"""[()"'~^\[\]{}\\]|\b(?:AND|OR|NOT|TO|ANDNOT|ANDMAYBE|REQUIRE)\b|[^\S \t\r\n]"""
)
_SYNTAX = re.compile(r'[()"*?~^:\[\]{}+\-!/\\]|\b(AND|OR|NOT|TO)\b')
_DEFAULT_LIMITS = SearchLimits()
# The bundled calibrations, for an index opened without a data folder's own.
BUNDLED_CALIBRATIONS = Calibrations()


@dataclass(frozen=True)
class KeywordRanking:
    """The best chunk (a searcher docnum) of the best documents, best first, with their raw
    scores, the documents matching in all, the query's indexed terms (for snippets)."""

    docnums: list[int]
    scores: list[float]
    total: int
    top: float  # the best chunk's raw score
    terms: frozenset[str]
    fallback: bool


def run_search(
    searcher: Searcher,
    request: SearchRequest,
    snapshot: Snapshot,
    limits: SearchLimits = _DEFAULT_LIMITS,
    calibrations: Calibrations | None = None,
) -> SearchResults:
    """Search with ``searcher`` (``snapshot`` is its view of the commit's shared caches); a
    query over ``limits`` is refused before its postings are read. The best ``candidates``
    documents by BM25F are ranked by their calibrated score (:mod:`indexer.relevance`)."""
    calibrations = calibrations or BUNDLED_CALIBRATIONS
    wanted = request.offset + request.limit
    ranking = rank_keyword(searcher, request, snapshot, max(request.candidates, wanted), limits)
    exact = request.mode == "exact"
    order = list(keyword_candidates(snapshot, request.tenant, ranking, exact).values())
    for candidate in order:  # the keyword search's order is BM25F's
        candidate.fused, candidate.fused_rank = (
            candidate.keyword_score or 0.0,
            candidate.keyword_rank or 0,
        )
    calibrated(order, "keyword", calibrations.keyword(), None, None, request.explain)
    # As shown (rounded): a hit that says 0.002 passes minScore 0.002.
    kept = [c for c in order if round(c.probability, 4) >= request.min_score]
    total = len(kept)
    if ranking.total > len(ranking.docnums) and any(
        c.keyword_rank == len(ranking.docnums) for c in kept
    ):
        total += ranking.total - len(ranking.docnums)  # see indexer.hybrid: an estimate
    hits = []
    for candidate in kept[request.offset : wanted]:
        check()  # reading stored fields and making a snippet is the slow part of a hit
        assert candidate.docnum is not None
        score = round(candidate.probability, 4)
        hit = hit_of(
            searcher,
            candidate.docnum,
            score,
            ranking.terms,
            exact,
            request.snippet_chars,
            None,
            candidate.keyword_score or 0.0,
        )
        if request.explain:
            hit = replace(hit, explanation=explanation(candidate, score))
        hits.append(hit)
    return SearchResults(
        hits=hits,
        total=total,
        mode=request.mode,
        fallback=ranking.fallback,
        ranked_by=("exact",) if exact else ("keyword",),
    )


def keyword_candidates(
    snapshot: Snapshot, tenant: str, ranking: KeywordRanking, exact: bool = False
) -> dict[str, Candidate]:
    """The documents of a keyword ranking by id, with their BM25F score, rank and coverage."""
    names = snapshot.store.document_ids
    ordinals = snapshot.documents()
    fields = ("exact",) if exact else ("text", "title")
    covered = coverage(snapshot, tenant, ranking.terms, fields, ranking.docnums)
    chosen: dict[str, Candidate] = {}
    for rank, (docnum, score, share) in enumerate(
        zip(ranking.docnums, ranking.scores, covered.tolist(), strict=True), 1
    ):
        document_id = names[ordinals[docnum]]
        chosen[document_id] = Candidate(
            document_id, docnum, keyword_score=score, keyword_rank=rank, coverage=share
        )
    return chosen


def check_keyword_cost(
    searcher: Searcher,
    request: SearchRequest,
    snapshot: Snapshot,
    limits: SearchLimits = _DEFAULT_LIMITS,
) -> None:
    """Raise :class:`QueryOverBudget` when the keyword (or exact) query of ``request`` is over
    ``limits``; a query with nothing to search for passes (a dense search may still run)."""
    try:
        parsed, _ = _parse(searcher, request, limits)
    except QueryOverBudget:
        raise
    except QueryUnprocessable:
        return
    check_query(parsed, snapshot, limits, request.tenant)


def rank_keyword(
    searcher: Searcher,
    request: SearchRequest,
    snapshot: Snapshot,
    wanted: int,
    limits: SearchLimits = _DEFAULT_LIMITS,
) -> KeywordRanking:
    """The ``wanted`` best documents of the keyword (or exact) query, without their hits."""
    parsed, fallback = _parse(searcher, request, limits)
    check_query(parsed, snapshot, limits, request.tenant)
    check()
    allowed = allowed_chunks(snapshot, request)
    ids, scores = snapshot.evaluate(parsed, allowed, request.tenant)
    best, best_scores, total = best_per_document(ids, scores, snapshot.documents(), wanted)
    top = float(scores.max()) if len(scores) else 0.0
    fields = ("exact",) if request.mode == "exact" else ("text", "title")
    terms = frozenset(
        text.decode() if isinstance(text, bytes) else text
        for field, text in parsed.iter_all_terms()
        if field in fields
    )
    return KeywordRanking(
        [int(docnum) for docnum in best.tolist()],
        [float(score) for score in best_scores.tolist()],
        total,
        top,
        terms,
        fallback,
    )


def _parse(
    searcher: Searcher, request: SearchRequest, limits: SearchLimits = _DEFAULT_LIMITS
) -> tuple[query.Query, bool]:
    text = request.query.strip()
    if not text:
        raise QueryUnprocessable("The query is empty.")
    if len(text) > MAX_QUERY_CHARS:
        raise QueryOverBudget(f"The query is longer than {MAX_QUERY_CHARS} characters.")
    # Before parsing: the parser's work grows with the phrases (once per phrase in keyword mode).
    check_quoted(len(_QUOTED.findall(text)), limits)
    if request.mode == "exact":
        parsed, fallback = _parse_with(searcher, "exact", text)
    else:
        parsed, fallback = _parse_keyword(searcher, text, request.match_all)
    if parsed is query.NullQuery or not any(True for _ in parsed.iter_all_terms()):
        raise QueryUnprocessable(
            "The query has nothing to search for (only punctuation or very common words)."
        )
    return parsed, fallback


def _parse_keyword(
    searcher: Searcher, text: str, match_all: bool = False
) -> tuple[query.Query, bool]:
    """Stemmed terms OR-ed, with a bonus for chunks holding all of them and for quoted phrases
    (``match_all``: AND-ed, each quoted phrase required).

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
    analysed = analyse_plain_words(searcher.schema, "keyword", words)
    if match_all:
        if analysed is not None:
            every, fallback = _combine(analysed, query.And), False
        else:
            every, fallback = _parse_with(searcher, "keyword", words, qparser.AndGroup)
        if every is query.NullQuery or not phrases:
            return every, fallback
        return query.And([every, *phrases]), fallback
    if analysed is not None:
        terms, fallback = _combine(analysed, query.Or), False
    else:
        terms, fallback = _parse_with(searcher, "keyword", words)
    distinct_terms = {term for _field, term in terms.iter_all_terms()}
    bonuses: list[query.Query] = [_boosted(phrase, _PHRASE_BONUS) for phrase in phrases]
    # Long questions match nearly everything anyway; the bonus doubles their matchers.
    if 1 < len(distinct_terms) <= _AND_BONUS_MAX_TERMS:
        # Whoosh's own OrGroup.factory scaling lowers, rather than raises, multi-term matches.
        if analysed is not None:
            every = _combine(analysed, query.And)
        else:
            every, _ = _parse_with(searcher, "keyword", words, qparser.AndGroup)
        bonuses.append(_boosted(every, _AND_BONUS))
    if terms is query.NullQuery or not bonuses:
        return terms, fallback
    return query.Or([terms, *bonuses]), fallback


def _parse_with(
    searcher: Searcher, mode: str, text: str, group: type[qparser.GroupNode] = qparser.OrGroup
) -> tuple[query.Query, bool]:
    """Parse ``text``; on a syntax the parser cannot take, parse it again as plain terms."""
    analysed = analyse_plain_words(searcher.schema, mode, text)
    if analysed is not None:
        # exact mode's parser always joins words with AND (see _new_parser)
        return _combine(analysed, query.And if mode == "exact" else group.qclass), False
    try:
        return _parser(searcher, mode, group).parse(text).normalize(), False
    except Exception:  # whoosh's parser raises assorted errors on odd syntax
        plain = _SYNTAX.sub(" ", text)
        return _parser(searcher, mode, group).parse(plain).normalize(), True


# The tokens of each field a word is searched in: (field, boost, tokens, multitoken rule).
_WordForms = list[tuple[str, float, list[str], str]]


def analyse_plain_words(schema: Schema, mode: str, text: str) -> list[_WordForms] | None:
    """Each word of ``text`` analysed per field as Whoosh's parser would; None when ``text``
    has any syntax for the parser (quotes, brackets, operators …).

    With :func:`_combine` this builds the very query the parser builds (normalized), ten times
    faster than its plugins; a test holds the two equal.
    """
    if _NOT_PLAIN.search(text):
        return None
    fields = (("exact", 1.0),) if mode == "exact" else _FIELDS
    analysed = []
    for word in _WHITESPACE.split(text.strip()):
        forms: _WordForms = []
        tokens_by_analyzer: dict[int, list[str]] = {}
        for name, boost in fields:
            field = schema[name]
            # title and text share one analyzer: analyse the word once
            tokens = tokens_by_analyzer.get(id(field.analyzer))
            if tokens is None:
                tokens = list(field.process_text(word, mode="query", removestops=True))
                tokens_by_analyzer[id(field.analyzer)] = tokens
            forms.append((name, boost, tokens, field.multitoken_query))
        analysed.append(forms)
    return analysed


def _combine(analysed: list[_WordForms], group: type[query.Query]) -> query.Query:
    """The parser's normalized query of analysed words joined by ``group`` (Or or And): a word
    is one term, several tokens of one field (a phrase, or joined by ``group``), and in keyword
    mode an OR of its fields' forms."""
    per_word = []
    for forms in analysed:
        alternatives = []
        for name, boost, tokens, multitoken in forms:
            if len(tokens) == 1:
                alternatives.append(query.Term(name, tokens[0], boost=boost))
            elif len(tokens) > 1 and multitoken == "phrase":
                alternatives.append(query.Phrase(name, tokens, boost=boost))
            elif tokens:
                terms = [query.Term(name, token, boost=boost) for token in tokens]
                alternatives.append(_normalized(group, terms))
        per_word.append(
            _normalized(query.Or, alternatives)
            if len(forms) > 1
            else (alternatives[0] if alternatives else query.NullQuery)
        )
    return _normalized(group, per_word)


def _normalized(kind: type[query.Query], children: list[query.Query]) -> query.Query:
    """What Whoosh's ``normalize()`` makes of ``kind(children)`` for children that are terms,
    phrases and normalized ORs/ANDs of unit boost: nested ones of the same kind flattened,
    nulls and duplicates dropped, a single child standing alone."""
    flat: list[query.Query] = []
    seen: set[query.Query] = set()
    for child in children:
        for sub in child.subqueries if type(child) is kind else (child,):
            if sub is query.NullQuery or sub in seen:
                continue
            seen.add(sub)
            flat.append(sub)
    if not flat:
        return query.NullQuery
    return flat[0] if len(flat) == 1 else kind(flat)


def _boosted(parsed: query.Query, boost: float) -> query.Query:
    """``parsed`` with another boost: a shallow copy (Whoosh's ``with_boost`` deep-copies the
    tree, which cost more than the search; nothing here changes a query once built)."""
    boosted = copy.copy(parsed)
    boosted.boost = boost
    return boosted


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
    # Users type words, not field names, wildcards or ranges: the last two expand over the
    # whole index's lexicon, and what they would count is other tenants' words too.
    parser.remove_plugin_class(qparser.FieldsPlugin)
    parser.remove_plugin_class(qparser.WildcardPlugin)
    parser.remove_plugin_class(qparser.RangePlugin)
    return parser


# (id(schema), mode, group) -> (the schema, its parser); the schema is kept so its id is not
# reused by another while the entry lives.
_PARSERS: dict[tuple[int, str, type], tuple[Schema, qparser.QueryParser]] = {}


def allowed_chunks(snapshot: Snapshot, request: SearchRequest) -> np.ndarray:
    """Mask of the chunks the filters allow: the tenant's, narrowed by every other filter,
    never a deleted one. Masks are cached per searcher (a commit brings a new one); a date
    range is cut from the day column in one comparison."""
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
    key = (tuple(terms), request.date_from, request.date_to)
    return snapshot.mask(key, lambda: _filter_mask(snapshot, terms, request))


def _filter_mask(
    snapshot: Snapshot, terms: list[tuple[str, str]], request: SearchRequest
) -> np.ndarray:
    allowed = snapshot.alive().copy()
    for field, value in terms:
        allowed &= snapshot.term_mask(field, value)
    if request.date_from or request.date_to:
        days = snapshot.days()
        start = day_number(request.date_from) if request.date_from else NO_DAY + 1
        end = day_number(request.date_to) if request.date_to else 2**31 - 1
        allowed &= (days >= start) & (days <= end)
    return allowed


def hit_of(
    searcher: Searcher,
    docnum: int,
    score: float,
    terms: frozenset[str],
    exact: bool,
    snippet_chars: int,
    stored: dict[str, Any] | None = None,
    raw_score: float = 0.0,
) -> SearchHit:
    """The hit of chunk ``docnum``, its ``score`` already relative (0..1) and ``raw_score``
    not; ``stored``: its stored fields when the caller has read them already."""
    if stored is None:
        stored = searcher.stored_fields(docnum)
    excerpt = snippet(stored["text"], terms, exact, snippet_chars)
    created = stored.get("created")
    return SearchHit(
        document_id=stored["document_id"],
        name=stored["name"],
        title=stored.get("title"),
        score=score,
        page=stored["page"],
        line_start=stored.get("line_start", 1),
        line_end=stored.get("line_end", 1),
        snippet=excerpt[: snippet_chars * 2],
        collection=stored.get("collection", ""),
        document_type=stored.get("document_type") or None,
        submitter=stored.get("submitter") or None,
        created_at=datetime.fromisoformat(created) if created else None,
        raw_score=raw_score,
        text=stored["text"],
    )
