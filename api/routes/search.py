"""``GET /api/search``: documents of the caller's tenant matching a query (the seed's shape).

A thin adapter over :meth:`indexer.DocumentIndex.search`: every filter goes into the index
query; no results is a successful empty answer.
"""

from __future__ import annotations

import time
from datetime import date
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

import indexer
from api.deps import ServicesDep, Tenant
from ldims.errors import InvalidInput, QueryUnprocessable

router = APIRouter(prefix="/api", tags=["search"])


@router.get("/search")
async def search(
    services: ServicesDep,
    tenant: Tenant,
    query: Annotated[str, Query(min_length=1, max_length=2000, description="What to look for.")],
    maxResults: Annotated[int, Query(ge=1, description="Documents per page.")] = 5,  # noqa: N803
    offset: Annotated[int, Query(ge=0, le=10_000, description="Documents to skip.")] = 0,
    searchMode: Annotated[  # noqa: N803
        Literal["keyword", "exact", "semantic"],
        Query(description="keyword (stemmed BM25F), exact (all terms, phrases), semantic."),
    ] = "keyword",
    collection: str | None = None,
    documentType: str | None = None,  # noqa: N803
    submitter: str | None = None,
    dateFrom: date | None = None,  # noqa: N803
    dateTo: date | None = None,  # noqa: N803
) -> dict[str, object]:
    limit = services.settings.search_max_results_hard_limit
    if maxResults > limit:
        raise InvalidInput(field="maxResults", issue=f"at most {limit}")
    if dateFrom and dateTo and dateFrom > dateTo:
        raise InvalidInput(field="dateFrom", issue="dateFrom is after dateTo")
    # Until dense vectors exist, semantic runs the stemmed keyword search (and says so).
    mode = "exact" if searchMode == "exact" else "keyword"
    request = indexer.SearchRequest(
        tenant=tenant,
        query=query,
        mode=mode,
        limit=maxResults,
        offset=offset,
        collection=collection,
        document_type=documentType,
        submitter=submitter,
        date_from=dateFrom,
        date_to=dateTo,
    )
    started = time.perf_counter()
    try:
        found = await run_in_threadpool(services.index.search, request)
    except indexer.QueryUnprocessable as exc:
        raise QueryUnprocessable(str(exc), field="query") from exc
    elapsed = time.perf_counter() - started
    return {
        "results": [
            {
                "documentId": hit.document_id,
                "documentName": hit.name,
                "relevanceScore": hit.score,
                "matchedContext": hit.snippet,
                "page": hit.page,
                "lineStart": hit.line_start,
                "lineEnd": hit.line_end,
                "metadata": {
                    "createdAt": hit.created_at.isoformat() if hit.created_at else None,
                    "submitter": hit.submitter,
                    "documentType": hit.document_type,
                    "collection": hit.collection,
                    "title": hit.title,
                },
            }
            for hit in found.hits
        ],
        "totalMatches": found.total,
        "searchMetadata": {
            "executionTime": f"{elapsed:.3f}s",
            "searchMode": searchMode,
            "ranBy": mode,
            "syntaxFallback": found.fallback,
        },
    }
