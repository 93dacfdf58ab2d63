"""The ``documents`` toolset: the LDIMS seed's ``searchDocuments`` tool and
``extracted_content`` resource, plus document status, page ranges and (behind a setting)
ingest and delete.

Field names, defaults and error codes are the seed's (``000_0eac41fccf59e578.txt`` §4). Where
the seed is silent: a hit also gives the page and lines of its match and the URI to read; a
long document is read in bounded parts (``MCP_MAX_CONTENT_CHARS``), each ending with the URI
of the next part; ``maxResults`` above ``SEARCH_MAX_RESULTS_HARD_LIMIT`` is capped (and the
cap reported) rather than refused.

(No ``from __future__ import annotations`` here: the SDK reads the tools' annotations, some of
which use values known only inside :func:`register`.)
"""

import base64
import binascii
import re
import time
from datetime import date, datetime
from typing import Annotated, Any, Literal

import anyio
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

import indexer
from api.ingestion import DocumentMeta, validate_document_id
from api.mcp.output_schema import compact_field
from api.mcp.server import LdimsMCP
from api.routes.documents import parse_datetime
from ldims.catalog import Document
from ldims.errors import InvalidInput, NotFound, QueryUnprocessable, SearchTimeout
from workers import ExtractionResult

EXTRACTED_URI = "ldims://docs/{document_id}/extracted_content"
PAGES_URI = "ldims://docs/{document_id}/pages/{range}"
_DOCUMENT = r"(?P<document_id>[A-Za-z0-9][A-Za-z0-9_.:-]{0,63})"
_PAGE_RANGE = re.compile(r"^(?P<first>\d{1,6})(?:-(?P<last>\d{1,6}))?$")
_DATE = TypeAdapter(date)
_DATETIME = TypeAdapter(datetime)

# The seed's descriptions for the model, word for word, plus what LDIMS adds.
SEARCH_DESCRIPTION = (
    "This tool helps you find relevant documents in the LDIMS system based on natural language "
    "queries.\n"
    "Use this tool when you need to:\n"
    "- Find documents matching specific topics or content\n"
    "- Locate documents containing particular information\n"
    "- Search across all documents using keywords or natural language\n"
    "- Get a list of relevant documents before accessing their content\n\n"
    "The tool performs semantic search across document contents and metadata, returning the "
    "most relevant matches.\n"
    "Each result includes the document name and ID, which you can use with the "
    "extracted_content resource\nto access the full content. "
    "Each result also gives the page and lines of the best match and the URI to read that page. "
    "Chinese, Russian and English queries are understood (words are stemmed or segmented)."
)

EXTRACTED_DESCRIPTION = (
    "This resource provides access to the full extracted text content of a document stored in "
    "the LDIMS system.\n"
    "Use this when you need to:\n"
    "- Read the actual content of a specific document\n"
    "- Answer questions about the content of a known document\n"
    "- Analyze or understand the details within a document\n"
    "The content is pre-processed and extracted from various file formats (PDF, DOCX, etc.) "
    "into plain text.\n"
    "A long document is returned in parts; a part ends with the URI of the next one."
)

PAGES_DESCRIPTION = (
    "Pages of a document's extracted text: {range} is one page (3) or a range (3-7), counted "
    "from 1. Use it to continue a long document or to read around a search hit's page."
)


# --- searchDocuments ---------------------------------------------------------------------------
class SearchFilters(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dateFrom: str | None = Field(  # noqa: N815 (the seed's field names)
        None, description="Start date for filtering documents (ISO format)"
    )
    dateTo: str | None = Field(None, description="End date for filtering documents (ISO format)")  # noqa: N815
    documentType: str | None = Field(  # noqa: N815
        None, max_length=128, description="Filter by document type/format"
    )
    submitter: str | None = Field(None, max_length=256, description="Filter by document submitter")
    collection: str | None = Field(
        None, max_length=128, description="Filter by collection (see the server instructions)"
    )
    searchMode: Literal["exact", "semantic"] = Field(  # noqa: N815
        "semantic",
        description="The search mode to use: 'exact' for precise matches, 'semantic' for "
        "meaning-based matches",
    )


class ResultMetadata(BaseModel):
    createdAt: str | None  # noqa: N815
    submitter: str | None
    documentType: str | None  # noqa: N815
    collection: str
    title: str | None


class SearchResult(BaseModel):
    documentId: str  # noqa: N815
    documentName: str  # noqa: N815
    relevanceScore: float = Field(description="0..1, the best result scores 1")  # noqa: N815
    matchedContext: str = Field(description="Excerpt of the best match, terms in **bold**")  # noqa: N815
    pageNumber: int = Field(description="Page of the best match (1-based)")  # noqa: N815
    lineStart: int  # noqa: N815
    lineEnd: int  # noqa: N815
    uri: str = Field(description="Resource to read the page of the match")
    metadata: Annotated[ResultMetadata, compact_field(ResultMetadata)]


class SearchMetadata(BaseModel):
    executionTime: str  # noqa: N815
    searchMode: Literal["exact", "semantic"]  # noqa: N815
    rankedBy: str = Field(description="What actually ranked the results")  # noqa: N815
    maxResults: int = Field(description="Results asked for after the server's cap")  # noqa: N815
    offset: int
    note: str | None = None


class SearchOutput(BaseModel):
    isError: Literal[False] = False  # noqa: N815
    results: Annotated[list[SearchResult], compact_field(SearchResult, array=True)]
    totalMatches: int = Field(description="Documents matching, across all pages of results")  # noqa: N815
    searchMetadata: Annotated[SearchMetadata, compact_field(SearchMetadata)]  # noqa: N815


# --- getDocumentStatus / ingestDocument / deleteDocument ---------------------------------------
class DocumentErrorOut(BaseModel):
    code: str
    message: str | None


class DocumentStatusOut(BaseModel):
    documentId: str  # noqa: N815
    documentName: str  # noqa: N815
    status: Literal["queued", "processing", "completed", "failed"]
    ready: bool = Field(description="The content can be read and searched")
    stage: str = Field(description="What is happening to the document, in words")
    version: int
    error: Annotated[DocumentErrorOut | None, compact_field(DocumentErrorOut, nullable=True)]
    attempts: int
    retryAfterSeconds: int | None = Field(  # noqa: N815
        description="When still processing: seconds to wait before asking again"
    )
    collection: str
    documentType: str | None  # noqa: N815
    submitter: str | None
    format: str | None
    pageCount: int | None  # noqa: N815
    createdAt: str  # noqa: N815
    updatedAt: str  # noqa: N815
    statusChangedAt: str  # noqa: N815
    extractedAt: str | None  # noqa: N815
    uri: str


class IngestOutput(BaseModel):
    documentId: str  # noqa: N815
    status: str
    statusCode: Literal[200, 202] = Field(  # noqa: N815
        description="202: queued for processing; 200: identical content, nothing to do"
    )
    version: int
    created: bool
    duplicate: bool


class DeleteOutput(BaseModel):
    documentId: str  # noqa: N815
    deleted: bool


_STAGES = {
    "queued": "waiting for an extraction worker",
    "processing": "text extraction and indexing in progress",
    "completed": "ready: searchable and readable",
    "failed": "processing failed; the content is unavailable",
}


def register(server: LdimsMCP) -> None:
    """Add the documents toolset to ``server``."""
    settings = server.services.settings
    # Searches run on the event loop: load the Chinese dictionary now (~0.15 s, once a
    # process), not inside the first Chinese query, where it would stall every caller.
    indexer.warm_up()

    @server.tool(
        name="searchDocuments",
        description=SEARCH_DESCRIPTION,
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def search_documents(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=indexer.MAX_QUERY_CHARS,
                description="The search query in natural language or keywords. Be specific and "
                "include key terms related to the information you're looking for.",
            ),
        ],
        ctx: Context,
        maxResults: Annotated[  # noqa: N803
            int,
            Field(
                ge=1,
                description="Maximum number of documents to return in the results. Use a "
                "larger number if you need more comprehensive results. Capped at "
                f"{settings.search_max_results_hard_limit}.",
            ),
        ] = 5,
        filters: Annotated[
            SearchFilters | None, compact_field(SearchFilters, nullable=True)
        ] = None,
        offset: Annotated[
            int, Field(ge=0, le=10_000, description="Results to skip (for the next page)")
        ] = 0,
    ) -> SearchOutput:
        tenant = server.tenant(ctx)
        filters = filters or SearchFilters()
        if not query.strip():
            raise InvalidInput(field="query", issue="Query cannot be empty")
        date_from = _parse_date(filters.dateFrom, "filters.dateFrom")
        date_to = _parse_date(filters.dateTo, "filters.dateTo")
        if date_from and date_to and date_from > date_to:
            raise InvalidInput(field="filters.dateFrom", issue="dateFrom is after dateTo")
        limit = min(maxResults, settings.search_max_results_hard_limit)
        request = indexer.SearchRequest(
            tenant=tenant,
            query=query,
            mode="exact" if filters.searchMode == "exact" else "keyword",
            limit=limit,
            offset=offset,
            collection=filters.collection,
            document_type=filters.documentType,
            submitter=filters.submitter,
            date_from=date_from,
            date_to=date_to,
        )
        started = time.perf_counter()
        try:
            found = await _search(server, request)
        except indexer.QueryUnprocessable as exc:
            raise QueryUnprocessable(str(exc), field="query") from exc
        notes = []
        if filters.searchMode == "semantic":
            notes.append("semantic runs the stemmed keyword search (BM25F) until vectors exist")
        if limit < maxResults:
            notes.append(f"maxResults capped at {limit}")
        if found.fallback:
            notes.append("the query's syntax was not understood; it ran as plain words")
        return SearchOutput(
            results=[_result(hit) for hit in found.hits],
            totalMatches=found.total,
            searchMetadata=SearchMetadata(
                executionTime=f"{time.perf_counter() - started:.3f}s",
                searchMode=filters.searchMode,
                rankedBy="exact terms and phrases"
                if filters.searchMode == "exact"
                else "keyword BM25F",
                maxResults=limit,
                offset=offset,
                note="; ".join(notes) or None,
            ),
        )

    @server.tool(
        name="getDocumentStatus",
        description="The processing state of one document: queued, processing, completed "
        "(readable and searchable) or failed (with an error code and reason). Use it when a "
        "read answered PROCESSING, or after ingesting a document.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def get_document_status(
        documentId: Annotated[str, Field(min_length=1, max_length=64, description="Document id")],  # noqa: N803
        ctx: Context,
    ) -> DocumentStatusOut:
        tenant = server.tenant(ctx)
        document = await server.blocking(_load, server, tenant, documentId)
        return _status(document)

    if settings.mcp_write_tools:
        _register_writes(server)

    @server.resource(
        EXTRACTED_URI,
        name="extracted_content",
        description=EXTRACTED_DESCRIPTION,
        mime_type="text/plain",
    )
    def extracted_content(document_id: str) -> str:
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every ldims:// URI

    @server.resource(PAGES_URI, name="pages", description=PAGES_DESCRIPTION, mime_type="text/plain")
    def pages(document_id: str, range: str) -> str:  # noqa: A002 (the template's name)
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every ldims:// URI

    server.add_resource_reader(rf"ldims://docs/{_DOCUMENT}/extracted_content", _read_extracted)
    server.add_resource_reader(rf"ldims://docs/{_DOCUMENT}/pages/(?P<range>[^/]+)", _read_pages)


def _register_writes(server: LdimsMCP) -> None:
    settings = server.services.settings

    @server.tool(
        name="ingestDocument",
        description="Add a document (or a new version of one): text or Markdown in `content`, "
        "or any supported file as base64 in `contentBase64`. It is processed in the "
        "background: poll getDocumentStatus until it is completed.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True),
    )
    async def ingest_document(
        name: Annotated[str, Field(min_length=1, max_length=512, description="File name")],
        ctx: Context,
        content: Annotated[str | None, Field(description="Text or Markdown content")] = None,
        contentBase64: Annotated[  # noqa: N803
            str | None, Field(description="File content, base64-encoded")
        ] = None,
        documentId: Annotated[  # noqa: N803
            str | None, Field(max_length=64, description="Replace this document's content")
        ] = None,
        collection: Annotated[str | None, Field(max_length=128)] = None,
        documentType: Annotated[str | None, Field(max_length=128)] = None,  # noqa: N803
        submitter: Annotated[str | None, Field(max_length=256)] = None,
        createdAt: Annotated[str | None, Field(description="ISO 8601 date-time")] = None,  # noqa: N803
    ) -> IngestOutput:
        tenant = server.tenant(ctx)
        if (content is None) == (contentBase64 is None):
            raise InvalidInput(field="content", issue="give exactly one of content, contentBase64")
        data = content.encode() if content is not None else _decode_base64(contentBase64 or "")
        if documentId:
            validate_document_id(documentId)
        meta = DocumentMeta(
            name=name,
            collection=collection or settings.default_collection,
            document_type=documentType,
            submitter=submitter,
            created_at=parse_datetime(createdAt, "createdAt"),
        )
        outcome = await server.blocking(_ingest, server, tenant, data, meta, documentId)
        return IngestOutput(
            documentId=outcome.document.id,
            status=outcome.document.status,
            statusCode=202 if outcome.queued else 200,
            version=outcome.document.version,
            created=outcome.created,
            duplicate=not outcome.queued,
        )

    @server.tool(
        name="deleteDocument",
        description="Delete a document: its record, its stored file and its index entries.",
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
    )
    async def delete_document(
        documentId: Annotated[str, Field(min_length=1, max_length=64)],  # noqa: N803
        ctx: Context,
    ) -> DeleteOutput:
        tenant = server.tenant(ctx)
        await server.blocking(server.services.ingestion.delete, tenant, documentId)
        return DeleteOutput(documentId=documentId, deleted=True)


# --- helpers (run in threads) ---------------------------------------------------------------
def _load(server: LdimsMCP, tenant: str, document_id: str) -> Document:
    ingestion = server.services.ingestion
    with ingestion.catalog.session() as session:
        return ingestion.get(session, tenant, document_id)


def _ingest(
    server: LdimsMCP, tenant: str, data: bytes, meta: DocumentMeta, document_id: str | None
) -> Any:
    ingestion = server.services.ingestion
    writer = ingestion.blobs.writer(server.services.settings.max_upload_bytes)
    writer.write(data)
    return ingestion.ingest_blob(tenant, writer.commit(), writer.head, meta, document_id)


def _read_extracted(
    server: LdimsMCP, tenant: str, params: dict[str, str]
) -> list[ReadResourceContents]:
    document, result = server.services.ingestion.read_content(tenant, params["document_id"])
    pages = _pages_of(result)
    uri = EXTRACTED_URI.format(document_id=document.id)
    return [_part(server, document, pages, 1, len(pages), uri)]


def _read_pages(
    server: LdimsMCP, tenant: str, params: dict[str, str]
) -> list[ReadResourceContents]:
    match = _PAGE_RANGE.match(params["range"])
    if match is None:
        raise InvalidInput(field="range", issue="a page (3) or a range of pages (3-7)")
    document, result = server.services.ingestion.read_content(tenant, params["document_id"])
    pages = _pages_of(result)
    first = int(match["first"])
    last = int(match["last"] or first)
    if not 1 <= first <= last:
        raise InvalidInput(field="range", issue="pages count from 1, first <= last")
    if first > len(pages):
        raise NotFound(
            f"The document has {len(pages)} page(s).", documentId=document.id, pageCount=len(pages)
        )
    uri = PAGES_URI.format(document_id=document.id, range=params["range"])
    return [_part(server, document, pages, first, min(last, len(pages)), uri)]


def _pages_of(result: ExtractionResult) -> list[str]:
    if result.pages:
        return [page.text for page in sorted(result.pages, key=lambda page: page.number)]
    return [result.text]


def _part(
    server: LdimsMCP,
    document: Document,
    pages: list[str],
    first: int,
    last: int,
    uri: str,
) -> ReadResourceContents:
    """Pages ``first..last`` (1-based), as many whole pages as fit the size limit; a part
    that stops early ends with the URI of the rest."""
    limit = server.services.settings.mcp_max_content_chars
    marked = len(pages) > 1 or first > 1
    parts: list[str] = []
    size = 0
    shown = first - 1
    for number in range(first, last + 1):
        text = f"--- page {number} ---\n{pages[number - 1]}" if marked else pages[number - 1]
        if size + len(text) > limit and parts:
            break
        if len(text) > limit:  # one page alone is over the limit: its beginning only
            text = text[:limit]
        parts.append(text)
        size += len(text) + 2
        shown = number
    body = "\n\n".join(parts)
    truncated = shown < last or size > limit
    meta: dict[str, Any] = {
        "documentName": document.name,
        "extractedAt": document.extracted_at.isoformat() if document.extracted_at else None,
        "format": document.format,
        "pageCount": len(pages),
        "pages": f"{first}-{shown}",
        "truncated": truncated,
    }
    if truncated:
        rest = shown + 1 if shown < last else shown
        next_uri = PAGES_URI.format(
            document_id=document.id, range=f"{rest}-{last}" if rest < last else str(rest)
        )
        if shown < last:
            meta["nextUri"] = next_uri
            body += f"\n\n[Part of the document: pages {first}-{shown} of {len(pages)}. "
            body += f"Continue with {next_uri}]"
        else:
            body += f"\n\n[Page {shown} is longer than {limit} characters; it was cut here.]"
    return ReadResourceContents(content=body, mime_type="text/plain", meta=meta)


async def _search(server: LdimsMCP, request: indexer.SearchRequest) -> indexer.SearchResults:
    """Search on the event loop if it is quick, else in a worker thread.

    Most searches take about a millisecond, less than handing them to a thread and back
    (measured: a third more searches a second at the MCP benchmark). A search runs on the
    loop only if no other search holds the searcher and it need not be reopened, and it
    stops at ``MCP_INLINE_SEARCH_SECONDS`` (keeping what it read) to go on in a thread. The
    thread's search keeps to the call's own time limit (``LdimsMCP.call_tool`` sets it), so
    a timed-out search stops too instead of running on, abandoned, holding the searcher.
    """
    settings = server.services.settings
    index = server.services.index
    left = anyio.current_effective_deadline() - anyio.current_time()  # inf: no limit set
    now = time.monotonic()
    end = now + min(left, settings.mcp_request_timeout_seconds)
    if settings.mcp_inline_search_seconds > 0:
        try:
            return index.search(
                request, within=min(settings.mcp_inline_search_seconds, end - now), wait=False
            )
        except (indexer.SearcherBusy, indexer.SearchOverdue):
            pass

    def in_thread() -> indexer.SearchResults:
        return index.search(request, within=end - time.monotonic())

    try:
        return await server.blocking(in_thread)
    except indexer.SearchOverdue:
        raise SearchTimeout(timeoutSeconds=settings.mcp_request_timeout_seconds) from None


def _result(hit: indexer.SearchHit) -> SearchResult:
    return SearchResult(
        documentId=hit.document_id,
        documentName=hit.name,
        relevanceScore=hit.score,
        matchedContext=hit.snippet,
        pageNumber=hit.page,
        lineStart=hit.line_start,
        lineEnd=hit.line_end,
        uri=PAGES_URI.format(document_id=hit.document_id, range=hit.page),
        metadata=ResultMetadata(
            createdAt=hit.created_at.isoformat() if hit.created_at else None,
            submitter=hit.submitter,
            documentType=hit.document_type,
            collection=hit.collection,
            title=hit.title,
        ),
    )


def _status(document: Document) -> DocumentStatusOut:
    waiting = document.status in ("queued", "processing")
    return DocumentStatusOut(
        documentId=document.id,
        documentName=document.name,
        status=document.status,  # type: ignore[arg-type]
        ready=document.status == "completed",
        stage=_STAGES.get(document.status, document.status),
        version=document.version,
        error=DocumentErrorOut(code=document.error_code, message=document.error_message)
        if document.error_code
        else None,
        attempts=document.attempts,
        retryAfterSeconds=5 if waiting else None,
        collection=document.collection,
        documentType=document.document_type,
        submitter=document.submitter,
        format=document.format,
        pageCount=document.page_count,
        createdAt=document.created_at.isoformat(),
        updatedAt=document.updated_at.isoformat(),
        statusChangedAt=document.status_changed_at.isoformat(),
        extractedAt=document.extracted_at.isoformat() if document.extracted_at else None,
        uri=EXTRACTED_URI.format(document_id=document.id),
    )


def _parse_date(value: str | None, field: str) -> date | None:
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


def _decode_base64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise InvalidInput(field="contentBase64", issue="not valid base64") from exc
