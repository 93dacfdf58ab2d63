"""The one search entry point of LDIMS: REST ``GET /api/search``, MCP ``searchDocuments`` and
the guide's document links all come through :class:`DocumentSearch`.

It owns what both adapters once did twice: validation (strict integers, a blank query, ISO
dates in order), the result cap, the mode mapping, the filters, the deadline and the
translation of the index's errors. Results use the LDIMS seed's field names plus documented
extras (``pageNumber``, ``lineStart``/``lineEnd``, ``uri``, ``searchMetadata.rankedBy`` …),
the same on REST and MCP.

Caps: ``maxResults`` is an integer from 1 to :data:`MAX_RESULTS_BOUND` (the longest page any
LDIMS listing returns); above ``SEARCH_MAX_RESULTS_HARD_LIMIT`` it is lowered to the limit and
``searchMetadata`` says so. Beyond the bound it is an error, never silently cut.

Who runs when: every search, whichever method it comes through (:meth:`~DocumentSearch.search`,
:meth:`~DocumentSearch.search_now`, :meth:`~DocumentSearch.ranked`, :meth:`~DocumentSearch.bm25`),
first takes a slot of :class:`~ldims.admission.SearchAdmission`: a tenant and a key run at most
their share of the process's searches, wait their turn fairly, or are refused with
``TOO_MANY_REQUESTS`` (429) — never another caller.

Where it runs: most searches take about a millisecond, less than handing them to a thread
and back (measured: a third more searches a second at the MCP benchmark). So
:meth:`DocumentSearch.search` first tries the search on the calling event loop for at most
``MCP_INLINE_SEARCH_SECONDS``, and only when a searcher is free and current; otherwise it goes
on in a thread of the searches' own pool (not anyio's, which every sync route and ``/health``
share) under the search's own deadline, so a timed-out search stops instead of running on
abandoned. The other methods run in their caller's thread, holding their slot.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import date, datetime
from typing import Literal, TypeVar

import anyio
import numpy as np
from pydantic import TypeAdapter, ValidationError

import indexer
from indexer.embedding import Embedder, EmbedderUnavailable, QueryCache
from ldims.admission import AdmissionLimits, SearchAdmission
from ldims.caller import Caller
from ldims.documents.search_schema import (
    MAX_OFFSET,
    MAX_RESULTS_BOUND,
    RestSearchFilters,
    SearchFilters,
    SearchMetadata,
    SearchOutput,
    result_of,
)
from ldims.errors import InvalidInput, QueryUnprocessable, SearchTimeout, ServiceUnavailable
from ldims.settings import Settings

T = TypeVar("T")
_DATE = TypeAdapter(date)
_DATETIME = TypeAdapter(datetime)


class _Prepared:
    """A validated search: the index request and what the answer must report."""

    __slots__ = ("filters", "max_results", "notes", "request", "started")

    def __init__(self, request: indexer.SearchRequest, filters: SearchFilters, asked: int) -> None:
        self.request = request
        self.filters = filters
        self.max_results = asked
        self.started = time.perf_counter()
        self.notes: list[str] = []

    @property
    def needs_vector(self) -> bool:
        return self.request.mode in ("dense", "hybrid")


class DocumentSearch:
    """Searches of the caller's own documents (the tenant filter is inside every query)."""

    def __init__(
        self,
        settings: Settings,
        index: Callable[[], indexer.DocumentIndex],
        embedder: Callable[[], Embedder | None] = lambda: None,
    ) -> None:
        self.settings = settings
        self._index = index  # opened on first use: a process that never searches never opens it
        self._embedder = embedder  # loaded on first use too
        self._queries = QueryCache(settings.embedding_query_cache_size)
        self.admission = SearchAdmission(AdmissionLimits.of(settings))

    async def search(
        self,
        caller: Caller,
        query: str,
        max_results: int = 5,
        filters: SearchFilters | None = None,
        offset: int = 0,
        min_score: float | None = None,
        explain: bool = False,
    ) -> SearchOutput:
        """Validate, wait for the caller's turn, search (quickly on this loop, else on the
        searches' own pool) and answer."""
        prepared = self.prepare(caller, query, max_results, filters, offset, min_score, explain)
        now = time.monotonic()
        left = anyio.current_effective_deadline() - anyio.current_time()  # inf: no limit set
        end = now + min(left, self.settings.search_timeout_seconds)
        async with self.admission.admitted(caller) as on_pool:
            if prepared.needs_vector and not self._cached_vector(prepared):
                # embedding a query takes milliseconds of CPU: not on the loop
                await on_pool(lambda: self._add_vector(prepared))
            quick = self.settings.mcp_inline_search_seconds
            found = None
            if quick > 0:
                with contextlib.suppress(indexer.SearcherBusy, indexer.SearchOverdue):
                    found = self._run(prepared, min(quick, end - time.monotonic()), wait=False)
            if found is None:
                found = await on_pool(lambda: self._run(prepared, end - time.monotonic()))
        return self.present(prepared, found)

    def _finish(self, prepared: _Prepared, end: float) -> indexer.SearchResults:
        """The search in the calling thread: the query's vector first if it needs one, then
        the search, by ``end`` (a monotonic time)."""
        if prepared.needs_vector:
            self._add_vector(prepared)
        return self._run(prepared, end - time.monotonic())

    def search_now(
        self,
        caller: Caller,
        query: str,
        max_results: int = 5,
        filters: SearchFilters | None = None,
        offset: int = 0,
        min_score: float | None = None,
        explain: bool = False,
    ) -> SearchOutput:
        """The same search, blocking the calling thread (CLI, guide links, benchmarks)."""
        prepared = self.prepare(caller, query, max_results, filters, offset, min_score, explain)
        with self.admission.slot(caller):
            end = time.monotonic() + self.settings.search_timeout_seconds
            return self.present(prepared, self._finish(prepared, end))

    def ranked(
        self,
        caller: Caller,
        query: str,
        mode: Literal["keyword", "dense", "hybrid"],
        limit: int,
        collection: str | None = None,
        match_all: bool = False,
        rerank_blend: Literal["relevance", "position"] = "relevance",
        min_score: float | None = None,
        explain: bool = False,
    ) -> tuple[indexer.SearchResults, list[str]]:
        """The index's own hits of one mode (calibrated scores, the chunks' texts) and the
        notes a search makes, for a toolset that shapes results its own way (qmd): the same
        checks, tenant filter, floor, bounds and time limit as :meth:`search`, blocking."""
        filters = RestSearchFilters(searchMode=mode, collection=collection)
        prepared = self.prepare(caller, query, limit, filters, 0, min_score, explain)
        prepared.request = replace(prepared.request, match_all=match_all, rerank_blend=rerank_blend)
        with self.admission.slot(caller):
            end = time.monotonic() + self.settings.search_timeout_seconds
            return self._finish(prepared, end), prepared.notes

    def bm25(
        self, caller: Caller, query: str, limit: int, collection: str | None = None
    ) -> list[indexer.LexicalHit]:
        """qmd's BM25 search of the caller's documents (SQLite FTS5: qmd's query syntax,
        weights and scores), within the search time limit."""
        _check_int(limit, "limit", 1, MAX_RESULTS_BOUND)
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput(field="query", issue="Query cannot be empty")
        if len(query) > indexer.MAX_QUERY_CHARS:
            raise InvalidInput(field="query", issue=f"at most {indexer.MAX_QUERY_CHARS} characters")
        within = self.settings.search_timeout_seconds
        with self.admission.slot(caller):
            return self._checked(
                lambda: self._index().lexical_search(
                    caller.tenant, query, limit, collection, within
                )
            )

    # --- the steps -----------------------------------------------------------------------------
    def prepare(
        self,
        caller: Caller,
        query: str,
        max_results: int,
        filters: SearchFilters | None,
        offset: int,
        min_score: float | None = None,
        explain: bool = False,
    ) -> _Prepared:
        """Check the request (the same rules whichever adapter received it)."""
        _check_int(max_results, "maxResults", 1, MAX_RESULTS_BOUND)
        _check_int(offset, "offset", 0, MAX_OFFSET)
        if min_score is not None and (
            type(min_score) not in (int, float) or not 0 <= min_score <= 1
        ):
            raise InvalidInput(field="minScore", issue="a number from 0 to 1")
        if type(explain) is not bool:
            raise InvalidInput(field="explain", issue="true or false")
        if not isinstance(query, str) or not query.strip():
            raise InvalidInput(field="query", issue="Query cannot be empty")
        if len(query) > indexer.MAX_QUERY_CHARS:
            raise InvalidInput(field="query", issue=f"at most {indexer.MAX_QUERY_CHARS} characters")
        filters = filters or SearchFilters()
        date_from = parse_day(filters.dateFrom, "filters.dateFrom")
        date_to = parse_day(filters.dateTo, "filters.dateTo")
        if date_from and date_to and date_from > date_to:
            raise InvalidInput(field="filters.dateFrom", issue="dateFrom is after dateTo")
        limit = min(max_results, self.settings.search_max_results_hard_limit)
        settings = self.settings
        request = indexer.SearchRequest(
            tenant=caller.tenant,
            query=query,
            mode=_index_mode(filters.searchMode, settings.semantic_enabled),
            limit=limit,
            candidates=settings.hybrid_candidates,
            rerank_top=settings.rerank_top if settings.reranker_model else 0,
            min_score=settings.search_min_score if min_score is None else float(min_score),
            explain=explain,
            offset=offset,
            collection=filters.collection,
            document_type=filters.documentType,
            submitter=filters.submitter,
            date_from=date_from,
            date_to=date_to,
        )
        prepared = _Prepared(request, filters, max_results)
        if filters.searchMode in ("semantic", "hybrid") and not settings.semantic_enabled:
            prepared.notes.append(
                "semantic search is off (LDIMS_EMBEDDING_MODEL=none): the keyword search ran"
            )
        if filters.searchMode == "dense" and not settings.semantic_enabled:
            raise InvalidInput(
                field="filters.searchMode",
                issue="dense needs vectors, and semantic search is off (LDIMS_EMBEDDING_MODEL)",
            )
        return prepared

    def query_vector(self, text: str) -> tuple[np.ndarray, str] | None:
        """``text``'s embedding (cached) and the model's fingerprint; None when semantic
        search is off or the model does not answer (the caller searches by words alone)."""
        embedder = self._embedder()
        if embedder is None:
            return None
        try:
            vector = self._queries.vector(embedder, text[: self.settings.embedding_query_max_chars])
        except EmbedderUnavailable:
            return None
        return vector, embedder.fingerprint

    def _cached_vector(self, prepared: _Prepared) -> bool:
        """Put the query's vector on ``prepared`` when the cache holds it."""
        embedder = self._embedder()
        if embedder is None:
            return False
        text = prepared.request.query[: self.settings.embedding_query_max_chars]
        vector = self._queries.get(embedder, text)
        if vector is None:
            return False
        prepared.request = replace(
            prepared.request, vector=vector, fingerprint=embedder.fingerprint
        )
        return True

    def _add_vector(self, prepared: _Prepared) -> None:
        """Put the query's vector on ``prepared``; when the model cannot answer, a hybrid
        search goes on as a keyword search (and says so), a dense one fails."""
        # A query over the keyword budget is refused before its embedding is paid for. Out of
        # time already (the check reads postings): the search that follows stops on its own
        # deadline at once and answers for it.
        try:
            self._checked(lambda: self._index().check_cost(prepared.request, self._left(prepared)))
        except SearchTimeout:
            return
        found = self.query_vector(prepared.request.query)
        if found is None:
            if prepared.request.mode == "dense":
                raise ServiceUnavailable(
                    "The embedding model is unavailable; dense search cannot run. Try the "
                    "keyword mode, or again later.",
                    component="embedding",
                )
            prepared.request = replace(prepared.request, mode="keyword")
            prepared.notes.append("the embedding model did not answer: keyword results only")
            return
        vector, fingerprint = found
        prepared.request = replace(prepared.request, vector=vector, fingerprint=fingerprint)

    def _run(self, prepared: _Prepared, within: float, wait: bool = True) -> indexer.SearchResults:
        """The index's search, its errors in LDIMS's terms; ``wait=False``: the quick try on
        the event loop, whose ``SearcherBusy`` / ``SearchOverdue`` the caller handles."""
        request = prepared.request
        if wait:
            return self._checked(
                lambda: self._index().search(request, within=max(within, 0.0), wait=True)
            )
        try:
            return self._index().search(request, within=max(within, 0.0), wait=False)
        except indexer.QueryUnprocessable as exc:
            raise QueryUnprocessable(str(exc), field="query") from exc

    def _checked(self, call: Callable[[], T]) -> T:
        """``call()``, the index's errors in LDIMS's terms."""
        try:
            return call()
        except indexer.SearchOverdue:
            raise SearchTimeout(timeoutSeconds=self.settings.search_timeout_seconds) from None
        except indexer.QueryUnprocessable as exc:
            raise QueryUnprocessable(str(exc), field="query") from exc

    def _left(self, prepared: _Prepared) -> float:
        """Seconds left of the search's time limit."""
        spent = time.perf_counter() - prepared.started
        return max(self.settings.search_timeout_seconds - spent, 0.0)

    def present(self, prepared: _Prepared, found: indexer.SearchResults) -> SearchOutput:
        """The answer in the seed's shape (plus the documented extras)."""
        mode = prepared.filters.searchMode
        notes = list(prepared.notes)
        limit = prepared.request.limit
        if limit < prepared.max_results:
            notes.append(f"maxResults capped at {limit}")
        if found.fallback:
            notes.append("the query's syntax was not understood; it ran as plain words")
        if found.without_vectors:
            notes.append(
                f"{found.without_vectors} document(s) in scope have no vectors yet: they are "
                "scored by their keywords alone, as a keyword search would score them"
            )
        if not found.calibrated:
            notes.append(
                "the embedding model has no calibration: scores are approximate until "
                "`ldims calibrate` has fitted one"
            )
        if not found.hits and prepared.request.offset == 0:
            notes.append(
                f"no document scored at least minScore {prepared.request.min_score:g}"
                " (a lower minScore lists weaker matches)"
            )
        return SearchOutput(
            results=[result_of(hit) for hit in found.hits],
            totalMatches=found.total,
            searchMetadata=SearchMetadata(
                executionTime=f"{time.perf_counter() - prepared.started:.3f}s",
                searchMode=mode,
                rankedBy=_ranked_by(found.ranked_by, prepared.request.fusion),
                maxResults=limit,
                offset=prepared.request.offset,
                minScore=prepared.request.min_score,
                note="; ".join(notes) or None,
            ),
        )


def _index_mode(mode: str, semantic: bool) -> indexer.SearchMode:
    """The index's mode for a ``searchMode``: semantic is hybrid when vectors are on."""
    if mode == "exact":
        return "exact"
    if mode == "dense":
        return "dense"
    if mode in ("semantic", "hybrid") and semantic:
        return "hybrid"
    return "keyword"


_LISTS = {
    "exact": "exact terms and phrases",
    "keyword": "keyword BM25F",
    "dense": "dense vectors (cosine)",
    "rerank": "reranked by the cross-encoder",
}


_FUSIONS = {"scores": "relative score fusion", "rrf": "reciprocal rank fusion"}


def _ranked_by(lists: tuple[str, ...], fusion: str) -> str:
    """What ranked the hits, for ``searchMetadata.rankedBy`` (the scores are calibrated
    whatever ranked them)."""
    reranked = "rerank" in lists
    lists = tuple(name for name in lists if name != "rerank")
    if reranked:
        return _ranked_by(lists, fusion) + "; " + _LISTS["rerank"]
    if len(lists) > 1:
        return " + ".join(_LISTS[name] for name in lists) + f", fused ({_FUSIONS[fusion]})"
    if lists:
        return _LISTS[lists[0]]
    return "nothing matched"


def search_filters(values: dict[str, object]) -> SearchFilters:
    """Filters from plain values (REST query parameters), refused as INVALID_INPUT."""
    try:
        return RestSearchFilters.model_validate(values)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        field = "filters." + ".".join(str(part) for part in first["loc"])
        raise InvalidInput(field=field, issue=first["msg"]) from None


def parse_day(value: str | None, field: str) -> date | None:
    """An ISO date, or the date of an ISO date-time."""
    if not value:
        return None
    try:
        return _DATE.validate_python(value)
    except ValidationError:
        pass
    try:
        return _DATETIME.validate_python(value).date()
    except ValidationError as exc:
        raise InvalidInput(field=field, issue="not an ISO 8601 date") from exc


def _check_int(value: object, field: str, low: int, high: int) -> None:
    # bool is an int in Python; "5" and 5.0 are not integers here either (strict, as MCP's).
    if type(value) is not int or not low <= value <= high:
        raise InvalidInput(field=field, issue=f"an integer from {low} to {high}")
