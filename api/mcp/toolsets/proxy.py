"""The ``proxy`` toolset: the proxy seed's tools (``002_8c9e3925c2dc2367.txt`` §6) over MCP —
``read_doc_section``, ``read_doc_pages``, ``read_doc_metadata``, ``doc_local_search`` and
``list_available_tools`` — a thin adapter over :class:`ldims.proxy.Proxy`, which the
``/internal/mcp/execute`` envelope calls too.

A call's *generation* (what its limits count in) is the request's ``_meta`` ``traceId`` (or
``trace_id``), else the ``X-Trace-Id`` header, else the MCP session (``Mcp-Session-Id``),
else the caller's default generation.

(No ``from __future__ import annotations`` here: the SDK reads the tools' annotations.)
"""

import json
from collections.abc import Mapping
from typing import Annotated, Any

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from ldims.caller import Caller
from ldims.proxy import (
    AccessDenied,
    Proxy,
    RateLimitExceeded,
    StoreUnavailable,
    ToolError,
    UnknownTool,
)
from ldims.proxy.core import MAX_LOCAL_RESULTS, MAX_TRACE_CHARS
from ldims.services import Services

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
DocId = Annotated[str, Field(min_length=1, max_length=64, description="The document's id")]
TRACE_HEADER = "x-trace-id"


def register(server: LdimsMCP) -> None:
    """Add the proxy toolset to ``server``."""
    proxy: Proxy = server.services.proxy

    async def run(ctx: Context, tool: str, arguments: dict[str, Any]) -> CallToolResult:
        result = await server.blocking(
            proxy.call, server.caller(ctx), tool, arguments, _generation(ctx)
        )
        return CallToolResult(
            content=[TextContent(type="text", text=json.dumps(result, ensure_ascii=False))],
            structured_content=result,
        )

    @server.tool(
        name="read_doc_section",
        description="Read one section of a document by its id (read_doc_metadata lists the "
        "sections). Returns {text, page_start, page_end, tokens}; long sections are cut at a "
        "sentence end (meta.truncated). Personal data and secrets are masked.",
        annotations=READ_ONLY,
    )
    async def read_doc_section(
        doc_id: DocId,
        section_id: Annotated[str, Field(min_length=1, max_length=128, description="sec_…")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(ctx, "read_doc_section", {"doc_id": doc_id, "section_id": section_id})

    @server.tool(
        name="read_doc_pages",
        description="Read pages page_start..page_end of a document (at most 5 pages a call), "
        "running headers and footers removed. Returns {text, page_start, page_end, "
        "page_count, tokens}.",
        annotations=READ_ONLY,
    )
    async def read_doc_pages(
        doc_id: DocId,
        page_start: Annotated[int, Field(ge=1, description="First page, from 1")],
        page_end: Annotated[int, Field(ge=1, description="Last page (≤ page_start + 4)")],
        ctx: Context,
    ) -> CallToolResult:
        return await run(
            ctx,
            "read_doc_pages",
            {"doc_id": doc_id, "page_start": page_start, "page_end": page_end},
        )

    @server.tool(
        name="read_doc_metadata",
        description="A document's title, format, language, page count, tags, product and "
        "document version, and its sections (section_id, heading, level, page span): read "
        "this first to find your way in a document.",
        annotations=READ_ONLY,
    )
    async def read_doc_metadata(doc_id: DocId, ctx: Context) -> CallToolResult:
        return await run(ctx, "read_doc_metadata", {"doc_id": doc_id})

    @server.tool(
        name="doc_local_search",
        description="Search inside one document: up to 5 short snippets with their page and "
        "line numbers and a score (0-1), best first.",
        annotations=READ_ONLY,
    )
    async def doc_local_search(
        doc_id: DocId,
        query: Annotated[str, Field(min_length=1, max_length=1000, description="Words to find")],
        ctx: Context,
        max_results: Annotated[int, Field(ge=1, le=MAX_LOCAL_RESULTS)] = MAX_LOCAL_RESULTS,
    ) -> CallToolResult:
        return await run(
            ctx,
            "doc_local_search",
            {"doc_id": doc_id, "query": query, "max_results": max_results},
        )

    @server.tool(
        name="list_available_tools",
        description="The document tools this server offers you.",
        annotations=READ_ONLY,
    )
    async def list_available_tools(ctx: Context) -> CallToolResult:
        return await run(ctx, "list_available_tools", {})


def _generation(ctx: Context) -> str | None:
    """The generation of this request (see the module's docstring)."""
    try:
        meta = ctx.request_context.meta
    except (ValueError, AttributeError):
        meta = None
    for key in ("traceId", "trace_id"):
        value = _get(meta, key)
        if isinstance(value, str) and value.strip():
            return value[:MAX_TRACE_CHARS]
    headers: Mapping[str, str] | None
    try:
        headers = ctx.headers
    except (ValueError, AttributeError):
        headers = None
    if headers:
        for name in (TRACE_HEADER, "mcp-session-id"):
            value = headers.get(name)
            if value:
                return value[:MAX_TRACE_CHARS]
    return None


def _get(meta: object, key: str) -> object:
    if isinstance(meta, Mapping):
        return meta.get(key)
    extra = getattr(meta, "model_extra", None) or {}
    return getattr(meta, key, None) or extra.get(key)


def instructions(services: Services, caller: Caller) -> str | None:
    return (
        "Proxy tools (read_doc_metadata, read_doc_section, read_doc_pages, doc_local_search): "
        "a bounded reader of one document at a time. Start with read_doc_metadata; each "
        "generation may read a limited amount of a document (RATE_LIMIT_EXCEEDED says when "
        "to retry); personal data and secrets come back masked."
    )


TOOLSET = Toolset(
    name="proxy",
    register=register,
    errors=(AccessDenied, RateLimitExceeded, StoreUnavailable, ToolError, UnknownTool),
    rpc_codes={
        "ACCESS_DENIED": -32003,
        "RATE_LIMIT_EXCEEDED": -32006,
        "UNKNOWN_TOOL": -32601,
        "TOOL_ERROR": -32603,
        "STORE_UNAVAILABLE": -32603,
    },
    instructions=instructions,
    # A key with the 'proxy' scope reaches these tools and nothing else that reads documents
    # ('read' implies 'proxy': ldims.caller.IMPLIED).
    scope="proxy",
)
