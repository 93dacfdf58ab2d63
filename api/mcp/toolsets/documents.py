"""The ``documents`` toolset: the LDIMS seed's ``searchDocuments`` tool and
``extracted_content`` resource, plus document status, page ranges and (behind a setting)
ingest and delete — a thin adapter over :class:`ldims.documents.Documents`.

Field names, defaults and error codes are the seed's (``000_0eac41fccf59e578.txt`` §4). Where
the seed is silent: a hit also gives the page and lines of its match and the URI to read; a
long document is read in bounded parts (``MCP_MAX_CONTENT_CHARS``), each ending with the URI
of the next part; a range of lines reads around a hit (``…/lines/120-160``).

(No ``from __future__ import annotations`` here: the SDK reads the tools' annotations, some of
which use values known only inside :func:`register`.)
"""

import base64
import binascii
from typing import Annotated

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

import indexer
from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from ldims.caller import Caller
from ldims.catalog import Catalog, repository
from ldims.compact_schema import compact_field
from ldims.documents import (
    EXTRACTED_URI,
    LINES_URI,
    PAGES_URI,
    DocumentPart,
    DocumentStatusOut,
    Explain,
    MaxResults,
    MinScore,
    Offset,
    QueryText,
    SearchFilters,
    SearchOutput,
    document_meta,
)
from ldims.errors import InvalidInput, SearchTimeout
from ldims.services import Services

_DOCUMENT = r"(?P<document_id>[A-Za-z0-9][A-Za-z0-9_.:-]{0,63})"

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
    "relevanceScore is the estimated probability that a result is relevant (comparable across "
    "queries): results below the floor (searchMetadata.minScore) are left out, so an empty "
    "list means nothing in the documents answers the query. Set explain: true to see why each "
    "result ranks.\n"
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


LINES_DESCRIPTION = (
    "Lines of a document's extracted text, each prefixed with its number: {range} is one line "
    "(120) or a range (120-160). The numbers are those of a search hit's lineStart/lineEnd, so "
    "use it to read around a hit."
)


class IngestOutput(BaseModel):
    documentId: str  # noqa: N815
    status: str
    statusCode: int = Field(  # noqa: N815
        description="202: queued for processing; 200: identical content, nothing to do"
    )
    version: int
    created: bool
    duplicate: bool


class DeleteOutput(BaseModel):
    documentId: str  # noqa: N815
    deleted: bool


def register(server: LdimsMCP) -> None:
    """Add the documents toolset to ``server``."""
    settings = server.services.settings
    documents = server.services.documents
    # Searches run on the event loop: load the Chinese dictionary now (~0.15 s, once a
    # process), not inside the first Chinese query, where it would stall every caller.
    indexer.warm_up()

    @server.tool(
        name="searchDocuments",
        description=SEARCH_DESCRIPTION
        + f" At most {settings.search_max_results_hard_limit} results per call.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def search_documents(
        query: QueryText,
        ctx: Context,
        maxResults: MaxResults = 5,  # noqa: N803
        filters: Annotated[
            SearchFilters | None, compact_field(SearchFilters, nullable=True)
        ] = None,
        offset: Offset = 0,
        minScore: MinScore = None,  # noqa: N803
        explain: Explain = False,
    ) -> SearchOutput:
        return await documents.search.search(
            server.caller(ctx), query, maxResults, filters, offset, minScore, explain
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
        return await server.blocking(documents.reader.status, server.caller(ctx), documentId)

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

    @server.resource(LINES_URI, name="lines", description=LINES_DESCRIPTION, mime_type="text/plain")
    def lines(document_id: str, range: str) -> str:  # noqa: A002 (the template's name)
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every ldims:// URI

    reader = documents.reader

    def read_whole(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
        return [_contents(reader.whole(caller, params["document_id"]))]

    def read_pages(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
        return [_contents(reader.pages(caller, params["document_id"], params["range"]))]

    def read_lines(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
        return [_contents(reader.lines(caller, params["document_id"], params["range"]))]

    server.add_resource_reader(rf"ldims://docs/{_DOCUMENT}/extracted_content", read_whole)
    server.add_resource_reader(rf"ldims://docs/{_DOCUMENT}/pages/(?P<range>[^/]+)", read_pages)
    server.add_resource_reader(rf"ldims://docs/{_DOCUMENT}/lines/(?P<range>[^/]+)", read_lines)


def _register_writes(server: LdimsMCP) -> None:
    settings = server.services.settings
    intake = server.services.documents.intake

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
        if (content is None) == (contentBase64 is None):
            raise InvalidInput(field="content", issue="give exactly one of content, contentBase64")
        data = content.encode() if content is not None else _decode_base64(contentBase64 or "")
        meta = document_meta(settings, name, collection, documentType, submitter, createdAt)
        outcome = await server.blocking(
            intake.ingest_bytes, server.caller(ctx), data, meta, documentId
        )
        return IngestOutput(
            documentId=outcome.document.public_id,
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
        await server.blocking(intake.delete, server.caller(ctx), documentId)
        return DeleteOutput(documentId=documentId, deleted=True)


def _contents(part: DocumentPart) -> ReadResourceContents:
    return ReadResourceContents(content=part.text, mime_type="text/plain", meta=part.meta)


def _decode_base64(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as exc:
        raise InvalidInput(field="contentBase64", issue="not valid base64") from exc


# --- the server instructions' paragraph ----------------------------------------------------
USAGE = (
    "Use searchDocuments to find documents (each hit names the document, its id, the page and "
    "lines of the match and an excerpt), then read one with the resource "
    "ldims://docs/{documentId}/extracted_content, or a range of its pages with "
    "ldims://docs/{documentId}/pages/{range} (e.g. 3 or 3-7), or the lines around a hit with "
    "ldims://docs/{documentId}/lines/{range} (e.g. 120-160). getDocumentStatus tells whether "
    "a document is ready; a read of a document still processing fails with errorCode "
    "PROCESSING (retry later), one that failed with CONTENT_UNAVAILABLE_OR_FAILED (give up)."
)


def describe_holdings(catalog: Catalog, tenant: str) -> str:
    """One paragraph on the tenant's documents, from the catalog as it is now."""
    with catalog.session() as session:
        states = repository.count_by_status(session, tenant)
        collections = repository.count_by_collection(session, tenant)
    total = sum(states.values())
    if not total:
        return "LDIMS holds no documents for you yet."
    parts = [
        f"{name} ({sum(counts.values())})"
        for name, counts in sorted(collections.items(), key=lambda item: -sum(item[1].values()))
    ]
    lines = [
        f"LDIMS holds {total} documents for you in {len(collections)} collection(s): "
        + ", ".join(parts)
        + "."
    ]
    waiting = states.get("queued", 0) + states.get("processing", 0)
    if waiting:
        lines.append(f"{waiting} are still being processed and cannot be searched or read yet.")
    if states.get("failed"):
        lines.append(f"{states['failed']} failed to process (their content is unavailable).")
    return " ".join(lines)


def instructions(services: Services, caller: Caller) -> str:
    return f"{describe_holdings(services.catalog, caller.tenant)}\n\n{USAGE}"


TOOLSET = Toolset(
    name="documents",
    register=register,
    uri_schemes=frozenset({"ldims"}),
    errors=(SearchTimeout,),
    timeout_errors={"searchDocuments": SearchTimeout},
    tool_scopes={"ingestDocument": "ingest", "deleteDocument": "ingest"},
    instructions=instructions,
)
