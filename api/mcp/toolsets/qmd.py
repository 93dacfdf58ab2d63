"""The ``qmd`` toolset: the QMD-compatible MCP surface of the seed
(``001_5eeeaedc5ef6dae9.txt``) — tools ``search``, ``vsearch``, ``query``, ``get``,
``multi_get`` and ``status``, the resource template ``qmd://{+path}`` and the prompt
``query`` — a thin adapter over :class:`ldims.qmd.Qmd`.

Names, parameters and defaults are the seed's; texts and shapes are qmd 2.8.3's where the
seed is silent (see docs/mcp.md's qmd section for what deliberately differs).

(No ``from __future__ import annotations`` here: the SDK reads the tools' annotations.)
"""

from typing import Annotated, Any

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.types import (
    CallToolResult,
    EmbeddedResource,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from ldims.caller import Caller
from ldims.documents import Explanation
from ldims.qmd import (
    DEFAULT_LIMIT,
    DEFAULT_MAX_BYTES,
    MAX_LIMIT,
    CollectionExists,
    FileNotFound,
    NoFilesMatched,
    NoVectors,
    Qmd,
    Resource,
    SearchResult,
    UnknownCollection,
)
from ldims.services import Services

Query = Annotated[str, Field(min_length=1, max_length=1000, description="The search query")]
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Number of results (default 10)")]
Collection = Annotated[
    str | None,
    Field(max_length=128, description="Only this collection (an unknown one is an error)"),
]

CalibratedMinScore = Annotated[
    float | None,
    Field(
        ge=0,
        le=1,
        description="Minimum score 0-1: the estimated probability that a result is relevant "
        "(default: the server's floor; 0 lists every candidate)",
    ),
]
ExplainFlag = Annotated[bool, Field(description="Say why each result ranks (structured)")]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


class Bm25Explanation(BaseModel):
    """Why a ``search`` result ranks: FTS5's BM25 as qmd maps it."""

    bm25: float = Field(description="FTS5's bm25() of the best row (lower is better)")
    rank: int = Field(description="1 = best")
    score: float = Field(description="|bm25| / (1 + |bm25|), as qmd shows it")


class QmdHit(BaseModel):
    docid: str = Field(description="#abc123: the first 6 hex digits of the content's SHA-256")
    file: str = Field(description="collection/path: give it to get")
    title: str
    score: float = Field(ge=0, le=1)
    context: str | None = Field(description="What the file's folder holds (its contexts)")
    snippet: str = Field(description="The best lines, each 'N: text' with its line number")
    line: int = Field(description="The best line's number in the file")
    explain: Explanation | Bm25Explanation | None = Field(
        None,
        exclude_if=lambda value: value is None,
        description="Only with explain: true. vsearch/query: each list's evidence, the "
        "calibrated model and its score (as searchDocuments'); search: FTS5's BM25.",
    )


class QmdSearchOutput(BaseModel):
    results: list[QmdHit]


class QmdCollection(BaseModel):
    name: str
    path: str | None = Field(description="The folder (null: uploaded documents only)")
    pattern: str | None
    documents: int
    lastUpdated: str  # noqa: N815


class QmdEmbeddingBacklog(BaseModel):
    documents: int = Field(description="Your completed documents still without (all) vectors")
    chunks: int = Field(description="Their chunks still to embed")
    failedDocuments: int = Field(  # noqa: N815
        description="Documents some of whose chunks could not be embedded (not retried)"
    )
    chunksPerSecond: float | None = Field(  # noqa: N815
        description="Your chunks embedded per second lately (null: none lately)"
    )
    etaSeconds: float | None = Field(  # noqa: N815
        description="Estimated seconds until your backlog is embedded (null: unknown)"
    )
    summary: str


class QmdStatusOutput(BaseModel):
    totalDocuments: int  # noqa: N815
    needsEmbedding: int  # noqa: N815
    hasVectorIndex: bool  # noqa: N815
    collections: list[QmdCollection]
    embeddingBacklog: QmdEmbeddingBacklog | None = Field(  # noqa: N815
        None, description="What is still to embed (null: semantic search is off)"
    )


SearchAnswer = Annotated[CallToolResult, QmdSearchOutput]
StatusAnswer = Annotated[CallToolResult, QmdStatusOutput]

PROMPT = """# How to search your knowledge base with QMD

Six tools, fastest first:

- **search** — BM25 keyword search (`query`, `limit`=10, `minScore`=0, `collection`). Use it
  for names, exact terms, error messages. Every word must match (prefixes count).
- **vsearch** — semantic search by meaning. Use it for questions in your own words, synonyms,
  or another language than the documents'. An error says when no vectors exist yet.
- **query** — both lists, each result scored by the calibrated probability that it is
  relevant, reranked when a reranker is set: the best quality, a little slower. Start here
  when unsure.
- **get** — one document by the `file` of a result (`collection/path`), its `#docid`, or
  `path:120` (from line 120) / `path:120:40` (40 lines); `fromLine`, `maxLines`,
  `lineNumbers`. A wrong path answers with similar paths. A long document comes in parts:
  a part ends with `[... truncated …  Continue with get …]`; make that call to read on.
- **multi_get** — several documents: a glob (`notes/**/*.md`), a comma list of paths or
  docids; files over `maxBytes` (10240) are skipped with a notice, `maxLines` truncates.
- **status** — collections, document counts, whether vectors exist, and what is still to
  embed (chunks, the recent rate, the time to done).

Strategy: search or query first; read the `snippet` (numbered `N: text` lines) and the
`context` (what the folder holds); then `get` the file from a little before the result's
`line`. Scope with `collection` once you know where things are. vsearch and query scores are
the probability that a result is relevant: weak ones are left out, so no results means the
documents do not answer; `minScore` 0.5 keeps confident hits only; `explain: true` says why
each result ranks. Resources: `qmd://collection/path` reads a
document with line numbers (a long one in parts, as `get`).
"""


def register(server: LdimsMCP) -> None:
    """Add the qmd toolset to ``server``."""
    qmd: Qmd = server.services.qmd

    async def run_search(
        ctx: Context,
        mode: str,
        query: str,
        limit: int,
        min_score: float | None,
        collection: str | None,
        explain: bool,
    ) -> CallToolResult:
        results = await server.blocking(
            qmd.search, server.caller(ctx), query, mode, limit, min_score, collection, explain
        )
        return _search_result(results, query)

    @server.tool(
        name="search",
        description="Fast keyword-based full-text search using BM25.",
        annotations=READ_ONLY,
    )
    async def search(
        query: Query,
        ctx: Context,
        limit: Limit = DEFAULT_LIMIT,
        minScore: Annotated[float, Field(ge=0, le=1, description="Minimum score 0-1")] = 0.0,  # noqa: N803
        collection: Collection = None,
        explain: ExplainFlag = False,
    ) -> SearchAnswer:
        return await run_search(ctx, "keyword", query, limit, minScore, collection, explain)

    @server.tool(
        name="vsearch",
        description="Semantic similarity search using vector embeddings.",
        annotations=READ_ONLY,
    )
    async def vsearch(
        query: Query,
        ctx: Context,
        limit: Limit = DEFAULT_LIMIT,
        minScore: CalibratedMinScore = None,  # noqa: N803
        collection: Collection = None,
        explain: ExplainFlag = False,
    ) -> SearchAnswer:
        return await run_search(ctx, "dense", query, limit, minScore, collection, explain)

    @server.tool(
        name="query",
        description="Highest quality search: BM25 and vectors, each result scored by the "
        "calibrated probability that it is relevant, reranked (position-aware blend) when a "
        "reranker is configured.",
        annotations=READ_ONLY,
    )
    async def query(
        query: Query,
        ctx: Context,
        limit: Limit = DEFAULT_LIMIT,
        minScore: CalibratedMinScore = None,  # noqa: N803
        collection: Collection = None,
        explain: ExplainFlag = False,
    ) -> SearchAnswer:
        return await run_search(ctx, "hybrid", query, limit, minScore, collection, explain)

    @server.tool(
        name="get",
        description="Retrieve the full content of a document by its file path or docid. Use "
        "paths or docids (#abc123) from search results; 'file.md:120' starts at line 120 and "
        "'file.md:120:40' reads 40 lines. Suggests similar files if not found. A longer "
        "document than one read holds ends with a truncation notice naming the get that "
        "continues it.",
        annotations=READ_ONLY,
    )
    async def get(
        file: Annotated[
            str, Field(min_length=1, max_length=2048, description="File path or docid")
        ],
        ctx: Context,
        fromLine: Annotated[  # noqa: N803
            int | None, Field(ge=1, description="Start from this line number (1-indexed)")
        ] = None,
        maxLines: Annotated[  # noqa: N803
            int | None, Field(ge=1, description="Maximum number of lines to return")
        ] = None,
        lineNumbers: Annotated[  # noqa: N803
            bool, Field(description="Add line numbers to output (format: 'N: content')")
        ] = False,
        fromChar: Annotated[  # noqa: N803
            int,
            Field(
                ge=0,
                description="Start at this character of the first line (0-based): a "
                "truncation notice gives it when one line is longer than a read",
            ),
        ] = 0,
    ) -> CallToolResult:
        resource = await server.blocking(
            qmd.get, server.caller(ctx), file, fromLine, maxLines, lineNumbers, fromChar
        )
        return CallToolResult(content=[_embedded(resource)])

    @server.tool(
        name="multi_get",
        description="Retrieve multiple documents by glob pattern (e.g. 'journals/2025-05*.md'), "
        "comma-separated list, or docids. Skips files larger than maxBytes, and files past "
        "the answer's size bound (each notice names the get that reads the file).",
        annotations=READ_ONLY,
    )
    async def multi_get(
        pattern: Annotated[
            str,
            Field(min_length=1, max_length=4096, description="Glob, comma list or docids"),
        ],
        ctx: Context,
        maxLines: Annotated[  # noqa: N803
            int | None, Field(ge=1, description="Maximum lines per file")
        ] = None,
        maxBytes: Annotated[  # noqa: N803
            int, Field(ge=1, description="Skip files larger than this (default 10240)")
        ] = DEFAULT_MAX_BYTES,
        lineNumbers: Annotated[  # noqa: N803
            bool, Field(description="Add line numbers to output (format: 'N: content')")
        ] = False,
    ) -> CallToolResult:
        found = await server.blocking(
            qmd.multi_get, server.caller(ctx), pattern, maxLines, maxBytes, lineNumbers
        )
        content: list[Any] = []
        if found.errors:
            content.append(TextContent(type="text", text="Errors:\n" + "\n".join(found.errors)))
        for entry in found.entries:
            if entry.resource is None:
                content.append(TextContent(type="text", text=entry.skipped or ""))
            else:
                content.append(_embedded(entry.resource))
        return CallToolResult(content=content)

    @server.tool(
        name="status",
        description="Show the status of the QMD index: collections, document counts, "
        "whether vectors exist, and the embedding backlog (your documents and chunks still to "
        "embed, the recent rate in chunks/s and the estimated time to done).",
        annotations=READ_ONLY,
    )
    async def status(ctx: Context) -> StatusAnswer:
        found = await server.blocking(qmd.status, server.caller(ctx))
        lines = [
            "QMD Index Status:",
            f"  Total documents: {found.totalDocuments}",
            f"  Needs embedding: {found.needsEmbedding}",
            f"  Vector index: {'yes' if found.hasVectorIndex else 'no'}",
        ]
        if found.embeddingBacklog is not None:
            lines.append(f"  Embedding backlog: {found.embeddingBacklog.summary}")
        lines += [
            f"  Collections: {len(found.collections)}",
        ]
        for collection in found.collections:
            where = collection.path or "(uploaded documents)"
            lines.append(f"    - {collection.name}: {where} ({collection.documents} docs)")
        return CallToolResult(
            content=[TextContent(type="text", text="\n".join(lines))],
            structured_content=found.as_dict(),
        )

    @server.resource(
        "qmd://{+path}",
        name="document",
        title="QMD Document",
        description="A document from your QMD knowledge base, line-numbered: "
        "qmd://collection/path. Use the search tools to discover documents.",
        mime_type="text/markdown",
    )
    def document(path: str) -> str:
        raise RuntimeError("served by LdimsMCP.read_resource")  # the reader below takes it

    def read_document(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
        resource = qmd.read_uri(caller, params["path"])
        return [ReadResourceContents(content=resource.text, mime_type=resource.mime_type)]

    server.add_resource_reader(r"qmd://(?P<path>.+)", read_document)

    @server.prompt(
        name="query",
        title="QMD query guide",
        description="How to effectively search your knowledge base with QMD",
    )
    def query_guide() -> str:
        return PROMPT


def _search_result(results: list[SearchResult], query: str) -> CallToolResult:
    if results:
        count = len(results)
        lines = [f'Found {count} result{"" if count == 1 else "s"} for "{query}":\n']
        lines += [f"{r.docid} {round(r.score * 100)}% {r.file} - {r.title}" for r in results]
        text = "\n".join(lines)
    else:
        text = f'No results found for "{query}"'
    structured = {
        "results": [
            {
                "docid": r.docid,
                "file": r.file,
                "title": r.title,
                "score": r.score,
                "context": r.context,
                "snippet": r.snippet,
                "line": r.line,
                **({"explain": r.explain} if r.explain is not None else {}),
            }
            for r in results
        ]
    }
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _embedded(resource: Resource) -> EmbeddedResource:
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(
            uri=resource.uri,
            mime_type=resource.mime_type,
            text=resource.text,
            _meta={"name": resource.name, "title": resource.title},
        ),
    )


def instructions(services: Services, caller: Caller) -> str:
    found = services.qmd.status(caller)
    names = ", ".join(c.name for c in found.collections) or "none yet"
    vectors = "" if found.hasVectorIndex else " No vectors yet: vsearch answers NO_VECTORS."
    return (
        f"QMD tools (search, vsearch, query, get, multi_get, status) over your "
        f"{found.totalDocuments} documents; collections: {names}.{vectors} Files are "
        "collection/path; get takes a result's file, #docid or file:line."
    )


TOOLSET = Toolset(
    name="qmd",
    register=register,
    uri_schemes=frozenset({"qmd"}),
    errors=(UnknownCollection, CollectionExists, NoVectors, FileNotFound, NoFilesMatched),
    rpc_codes={"UNKNOWN_COLLECTION": -32002, "COLLECTION_EXISTS": -32602, "NO_VECTORS": -32005},
    instructions=instructions,
)
