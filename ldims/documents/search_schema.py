"""The shapes of a search's request and answer, the same on REST and MCP: the argument types
(with their bounds and descriptions, which become the tool's input schema), the seed's
``SearchOutput`` with LDIMS's documented extras (page, lines, ``uri``, ``explain``), and the
translation of the index's hits into it. :mod:`ldims.documents.search` runs the search.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

import indexer
from ldims.catalog import public_document_id
from ldims.compact_schema import compact_field
from ldims.documents.uris import pages_uri

MAX_RESULTS_BOUND = 500
MAX_OFFSET = 10_000

# Shared by the MCP tool's signature and REST's query parameters: one set of bounds.
QueryText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=indexer.MAX_QUERY_CHARS,
        description="The search query in natural language or keywords. Be specific and include "
        "key terms related to the information you're looking for.",
    ),
]
MaxResults = Annotated[
    int,
    Field(
        strict=True,
        ge=1,
        le=MAX_RESULTS_BOUND,
        description="Maximum number of documents to return in the results. Use a larger number "
        "if you need more comprehensive results. Lowered to the server's limit "
        "(searchMetadata.maxResults says what was used).",
    ),
]
Offset = Annotated[
    int,
    Field(strict=True, ge=0, le=MAX_OFFSET, description="Results to skip (for the next page)"),
]
MinScore = Annotated[
    float | None,
    Field(
        ge=0,
        le=1,
        description="Leave out results whose relevanceScore (the estimated probability that "
        "the document is relevant) is below this; default: the server's floor "
        "(searchMetadata.minScore). 0 lists every candidate.",
    ),
]
Explain = Annotated[
    bool,
    Field(
        strict=True,
        description="Add to each result why it ranks (each list's score and rank, the model "
        "that weighed them, the calibrated score).",
    ),
]
SearchModeName = Literal["exact", "semantic"]
# REST's searchMode also names the lists semantic search fuses, to compare or debug them.
AnySearchModeName = Literal["exact", "semantic", "keyword", "dense", "hybrid"]


class SearchFilters(BaseModel):
    """The seed's ``filters`` (plus ``collection``)."""

    model_config = ConfigDict(extra="forbid")

    dateFrom: str | None = Field(  # noqa: N815 (the seed's field names)
        None, max_length=64, description="Start date for filtering documents (ISO format)"
    )
    dateTo: str | None = Field(  # noqa: N815
        None, max_length=64, description="End date for filtering documents (ISO format)"
    )
    documentType: str | None = Field(  # noqa: N815
        None, max_length=128, description="Filter by document type/format"
    )
    submitter: str | None = Field(None, max_length=256, description="Filter by document submitter")
    collection: str | None = Field(
        None, max_length=128, description="Filter by collection (see the server instructions)"
    )
    searchMode: SearchModeName = Field(  # noqa: N815
        "semantic",
        description="The search mode to use: 'exact' for precise matches, 'semantic' for "
        "meaning-based matches",
    )


class RestSearchFilters(SearchFilters):
    """REST's filters: ``searchMode`` may also be ``keyword``, ``dense`` or ``hybrid``."""

    searchMode: AnySearchModeName = Field(  # type: ignore[assignment]  # noqa: N815
        "semantic",
        description="exact | semantic (= hybrid when vectors are on) | keyword | dense | hybrid",
    )


class ResultMetadata(BaseModel):
    createdAt: str | None  # noqa: N815
    submitter: str | None
    documentType: str | None  # noqa: N815
    collection: str
    title: str | None


class Explanation(BaseModel):
    """Why a result ranks (``explain``): what each list said of it and how it was weighed."""

    keywordScore: float | None = Field(  # noqa: N815
        description="BM25F of the best chunk (the searching tenant's statistics); null: no "
        "query word matched"
    )
    keywordRank: int | None = Field(description="Rank in the keyword list (1 = best)")  # noqa: N815
    coverage: float = Field(
        description="Share of the query's words (idf-weighted) that the best chunk holds"
    )
    denseCosine: float | None = Field(  # noqa: N815
        description="Cosine of the best chunk's vector with the query's; null: no vector yet"
    )
    denseMargin: float | None = Field(  # noqa: N815
        description="That cosine minus the 90th percentile of the query's cosines with "
        "ordinary text (the model's background passages)"
    )
    denseRank: int | None = Field(description="Rank in the dense list (1 = best)")  # noqa: N815
    fused: float = Field(description="The score that ordered the results (keyword: BM25F)")
    fusedRank: int = Field(description="Place in that order (1 = best)")  # noqa: N815
    features: dict[str, float] = Field(description="What the calibrated models weighed")
    model: Literal["keyword", "hybrid", "dense"] = Field(
        description="The calibrated models that weighed the evidence: keyword (also for a "
        "semantic search with no vectors in scope yet), hybrid or dense"
    )
    queryProbability: float = Field(  # noqa: N815
        description="Estimated probability that the documents answer the query at all"
    )
    hitProbability: float = Field(  # noqa: N815
        description="Estimated probability that this place of the list holds a relevant "
        "document, when they do"
    )
    rerankScore: float | None = Field(  # noqa: N815
        description="The cross-encoder's relevance when it reordered the result"
    )
    relevanceScore: float = Field(description="queryProbability × hitProbability")  # noqa: N815


class SearchResult(BaseModel):
    documentId: str  # noqa: N815
    documentName: str  # noqa: N815
    relevanceScore: float = Field(  # noqa: N815
        description="Estimated probability (0..1) that the document is relevant to the query, "
        "calibrated on judged sets: comparable across queries and modes (0.9: almost surely "
        "relevant; near the floor: a weak match)"
    )
    matchedContext: str = Field(description="Excerpt of the best match, terms in **bold**")  # noqa: N815
    pageNumber: int = Field(description="Page of the best match (1-based)")  # noqa: N815
    lineStart: int  # noqa: N815
    lineEnd: int  # noqa: N815
    uri: str = Field(description="Resource to read the page of the match")
    metadata: Annotated[ResultMetadata, compact_field(ResultMetadata)]
    explain: Annotated[Explanation | None, compact_field(Explanation, nullable=True)] = Field(
        None, exclude_if=lambda value: value is None, description="Only with explain: true"
    )


class SearchMetadata(BaseModel):
    executionTime: str  # noqa: N815
    searchMode: AnySearchModeName  # noqa: N815
    rankedBy: str = Field(description="What actually ranked the results")  # noqa: N815
    maxResults: int = Field(description="Results asked for after the server's cap")  # noqa: N815
    offset: int
    minScore: float = Field(description="Results scoring below this were left out")  # noqa: N815
    note: str | None = None


class SearchOutput(BaseModel):
    isError: Literal[False] = False  # noqa: N815
    results: Annotated[list[SearchResult], compact_field(SearchResult, array=True)]
    totalMatches: int = Field(  # noqa: N815
        description="Documents scoring at least minScore, across all pages of results"
    )
    searchMetadata: Annotated[SearchMetadata, compact_field(SearchMetadata)]  # noqa: N815


def explanation_of(why: indexer.Explanation | None) -> Explanation | None:
    """The index's explanation of a hit in the answers' names."""
    if why is None:
        return None
    return Explanation(
        keywordScore=why.keyword_score,
        keywordRank=why.keyword_rank,
        coverage=why.coverage,
        denseCosine=why.dense_cosine,
        denseMargin=why.dense_margin,
        denseRank=why.dense_rank,
        fused=why.fused,
        fusedRank=why.fused_rank,
        features=why.features,
        model=why.model,  # type: ignore[arg-type]
        queryProbability=why.query_probability,
        hitProbability=why.hit_probability,
        rerankScore=why.rerank_score,
        relevanceScore=why.score,
    )


def explained(why: indexer.Explanation | None) -> dict[str, object] | None:
    """:func:`explanation_of` as plain JSON values (for toolsets that shape their own)."""
    found = explanation_of(why)
    return None if found is None else found.model_dump(mode="json")


def result_of(hit: indexer.SearchHit) -> SearchResult:
    return SearchResult(
        explain=explanation_of(hit.explanation),
        documentId=public_document_id(hit.document_id),
        documentName=hit.name,
        relevanceScore=hit.score,
        matchedContext=hit.snippet,
        pageNumber=hit.page,
        lineStart=hit.line_start,
        lineEnd=hit.line_end,
        uri=pages_uri(public_document_id(hit.document_id), str(hit.page)),
        metadata=ResultMetadata(
            createdAt=hit.created_at.isoformat() if hit.created_at else None,
            submitter=hit.submitter,
            documentType=hit.document_type,
            collection=hit.collection,
            title=hit.title,
        ),
    )
