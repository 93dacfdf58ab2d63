"""The index's value types: what goes in (documents as chunks), what a search asks and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Literal

from indexer.calibration import DEFAULT_FLOOR

# exact and keyword: Whoosh; dense: the vector store; hybrid: both, fused (indexer.hybrid).
SearchMode = Literal["exact", "keyword", "dense", "hybrid"]
Fusion = Literal["scores", "rrf"]

_EPOCH = date(1970, 1, 1)
NO_DAY = -(2**31) + 1  # the day of chunks whose document has no creation date


def day_number(value: date | datetime) -> int:
    """Days since 1970-01-01 (UTC for datetimes): the unit of the date filters."""
    if isinstance(value, datetime):
        value = value.astimezone(UTC).date() if value.tzinfo else value.date()
    return (value - _EPOCH).days


class IndexBusy(Exception):
    """The index lock could not be taken in time; the caller may retry later."""


class SearcherBusy(Exception):
    """A search asked not to wait found the searcher in use, or in need of reopening."""


class QueryUnprocessable(Exception):
    """The query has nothing searchable in it (empty, only punctuation or stop words, too long),
    or would cost more than the index's :class:`~indexer.budget.SearchLimits` allow."""


class QueryOverBudget(QueryUnprocessable):
    """The query is too long or would cost more than :class:`~indexer.budget.SearchLimits`
    allow: refused in every mode (a hybrid search does not go on with its dense list)."""


@dataclass(frozen=True)
class Chunk:
    """A passage of a document: a page or a bounded part of one, with its line numbers.

    Line numbers count lines of the document's whole extracted text, from 1.
    """

    text: str
    page: int = 1
    line_start: int = 1
    line_end: int = 1


@dataclass(frozen=True)
class IndexedDocument:
    """What the index needs to know of one document version."""

    document_id: str
    tenant: str
    collection: str
    name: str
    version: int
    chunks: list[Chunk] = field(default_factory=list)
    title: str | None = None
    document_type: str | None = None
    submitter: str | None = None
    format: str | None = None
    language: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class SearchRequest:
    """A search inside one tenant; every filter is applied inside the query."""

    tenant: str
    query: str
    mode: SearchMode = "keyword"
    limit: int = 10
    offset: int = 0
    collection: str | None = None
    document_type: str | None = None
    submitter: str | None = None
    date_from: date | None = None
    date_to: date | None = None
    snippet_chars: int = 300
    # keyword: a chunk must hold every word (qmd's search), not only rank first when it does.
    match_all: bool = False
    # dense and hybrid: the query's vector and the fingerprint of the model that made it.
    vector: Any = field(default=None, compare=False, repr=False)
    fingerprint: str | None = None
    # hybrid: documents taken from each list, how they are fused (indexer.hybrid) and the
    # weight of each list.
    candidates: int = 100
    fusion: Fusion = "scores"
    keyword_weight: float = 1.0
    dense_weight: float = 1.0
    rrf_k: int = 60
    # hybrid: vector feedback (Rocchio) — the query's vector moved towards the vectors of the
    # best ``feedback_documents`` of the fused list (weight ``feedback_weight``), the dense
    # list searched again with it and fused anew as a third list, which takes
    # ``feedback_share`` of the dense weight (1: it replaces the first dense list); 0: off.
    feedback_documents: int = 0
    feedback_weight: float = 1.0
    feedback_share: float = 1.0
    # dense and hybrid: the best documents the reranker (if any) reorders; 0: none.
    rerank_top: int = 0
    # How a reranked document's score is made: the cross-encoder's relevance alone, or qmd's
    # position-aware blend of it with 1 / its rank in the fused list ("position").
    rerank_blend: Literal["relevance", "position"] = "relevance"
    # Hits whose calibrated score (indexer.calibration) is below this are not results.
    min_score: float = DEFAULT_FLOOR
    # Each hit says why it ranks (SearchHit.explanation).
    explain: bool = False


@dataclass(frozen=True)
class Explanation:
    """Why a hit ranks: each list's evidence, the model that weighed it and the result."""

    keyword_score: float | None  # BM25F of the best chunk; None: not in the keyword list
    keyword_rank: int | None  # 1-based, in the keyword list (by BM25F)
    coverage: float  # idf-weighted share of the query's words the chunk holds
    dense_cosine: float | None  # the best chunk's cosine; None: no vector (yet)
    dense_margin: float | None  # the cosine above the query's cosines with ordinary text
    dense_rank: int | None  # 1-based, in the dense list (by cosine)
    fused: float  # the fused score that ordered the hits (keyword search: BM25F)
    fused_rank: int  # 1-based, in that order
    features: dict[str, float]  # what the calibrated model weighed (indexer.calibration)
    model: str  # the calibrated model that scored it: keyword, hybrid or dense
    query_probability: float  # that the documents answer the query at all
    hit_probability: float  # that this place of the list holds a relevant one, if they do
    rerank_score: float | None  # the cross-encoder's relevance, when it reordered the hit
    score: float  # query_probability × hit_probability (relevanceScore)


@dataclass(frozen=True)
class SearchHit:
    """One document, represented by its best-matching chunk."""

    document_id: str
    name: str
    title: str | None
    score: float  # 0..1: the estimated probability that the document is relevant
    page: int
    line_start: int
    line_end: int
    snippet: str
    collection: str
    document_type: str | None
    submitter: str | None
    created_at: datetime | None
    # The list's own score before it was made relative: BM25F (keyword, exact), cosine
    # (dense) or the fused score (hybrid); and the chunk's whole text (lines line_start to
    # line_end), for callers that cut snippets of their own (the qmd toolset).
    raw_score: float = 0.0
    text: str = ""
    explanation: Explanation | None = None


@dataclass(frozen=True)
class SearchResults:
    hits: list[SearchHit]
    total: int  # matching documents, not chunks
    mode: SearchMode
    fallback: bool = False  # the query's syntax was not understood: it ran as plain terms
    ranked_by: tuple[str, ...] = ()  # the lists that ranked the hits: keyword, exact, dense
    # dense and hybrid: documents in the search's scope that have no vectors (yet).
    without_vectors: int = 0
    # False: the embedding model has no calibration (ldims calibrate): scores approximate.
    calibrated: bool = True
