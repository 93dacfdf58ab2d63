"""``GET /api/search``: the caller's documents matching a query, in the same shape as MCP's
``searchDocuments`` (the core's :class:`~ldims.documents.SearchOutput`).

Query parameters are the tool's arguments with the filters flattened (``dateFrom``,
``dateTo``, ``documentType``, ``submitter``, ``collection``, ``searchMode``); the core checks
them all, so REST and MCP refuse the same requests with the same codes.
"""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import DocumentsDep, ReaderDep
from api.schemas import ERRORS, error_responses
from ldims.documents import SearchOutput, search_filters

router = APIRouter(prefix="/api", tags=["search"])
_ERRORS = {
    **ERRORS,
    429: "TOO_MANY_REQUESTS: the caller's searches already fill its share (Retry-After says "
    "when to try again).",
}


@router.get(
    "/search",
    response_model=SearchOutput,
    responses=error_responses(422, 429, 504, descriptions=_ERRORS),
)
async def search(
    documents: DocumentsDep,
    caller: ReaderDep,
    query: str,
    maxResults: int = 5,  # noqa: N803 (the seed's names)
    offset: int = 0,
    searchMode: str = "semantic",  # noqa: N803
    dateFrom: str | None = None,  # noqa: N803
    dateTo: str | None = None,  # noqa: N803
    documentType: str | None = None,  # noqa: N803
    submitter: str | None = None,
    collection: str | None = None,
    minScore: float | None = None,  # noqa: N803
    explain: bool = False,
) -> SearchOutput:
    """Search the caller's documents: ``maxResults`` 1-500 (lowered to the server's limit),
    ``offset`` 0-10000, ``searchMode`` exact | semantic, ``minScore`` 0-1 (default: the
    server's floor), ``explain`` (see the MCP tool ``searchDocuments``)."""
    filters = search_filters(
        {
            "searchMode": searchMode,
            "dateFrom": dateFrom,
            "dateTo": dateTo,
            "documentType": documentType,
            "submitter": submitter,
            "collection": collection,
        }
    )
    # The core waits for the caller's turn and runs the search on its own pool.
    return await documents.search.search(
        caller, query, maxResults, filters, offset, minScore, explain
    )
