"""The ``sql`` toolset: the KWDB seed's ``read-query`` / ``write-query`` tools, its three
``kwdb://`` resources and its eight Markdown prompts, for PostgreSQL-wire (KaiwuDB,
PostgreSQL), MySQL / MariaDB and SQLite targets (``LDIMS_SQL_URL``).

Statements pass the guard (:mod:`ldims.sql.guard`) and run through the executor
(:mod:`ldims.sql.executor`); errors carry the seed's codes KWDB-4001…4004 in the same
``isError`` body as every LDIMS tool. Where the seed is silent: results come as
``structuredContent`` {``columns``, ``rows``, ``rowCount``, ``truncated``} (plus
``nextOffset`` and ``notes``) and as a Markdown table; ``offset`` pages a SELECT whose LIMIT
the server added; ``LDIMS_SQL_ALLOWED_TENANTS`` limits who may use the toolset.

(No ``from __future__ import annotations``: the SDK reads the tools' annotations.)
"""

import json
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.prompts.base import Prompt, PromptArgument
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from ldims.caller import Caller
from ldims.errors import Forbidden
from ldims.services import Services
from ldims.settings import Settings
from ldims.sql import SqlObjectNotFound, SqlRejected, SqlSyntaxError, SqlTimeout, schema
from ldims.sql.executor import QueryResult, SqlExecutor
from ldims.sql.prompt_files import PromptFile, load_prompts

PRODUCT_URI = "kwdb://product_info"
DB_URI = "kwdb://db_info/{database_name}"
TABLE_URI = "kwdb://table/{table_name}"
_NAME = r"[A-Za-z0-9_$][A-Za-z0-9_$.\-]{0,127}"
_TABLE_CELL_CHARS = 60  # a cell in the text table; the structured rows are not cut

READ_DESCRIPTION = (
    "Run one read-only SQL statement (SELECT, WITH … SELECT, SHOW or EXPLAIN) on the "
    "configured database and get its rows. A LIMIT {limit} is added when the SELECT has "
    "none; when the result says truncated, call again with nextOffset for the next page. At "
    "most {max_rows} rows per call. Only one statement per call; writes, DDL, file access "
    "and sleeps are refused with KWDB-4002. Read kwdb://product_info first to learn which "
    "database (and SQL dialect) this is, and kwdb://table/{{table_name}} for a table's columns."
)
WRITE_DESCRIPTION = (
    "Run one INSERT, UPDATE or DELETE on the configured database, in a transaction of its "
    "own; returns the number of rows affected (and the rows of a RETURNING clause). UPDATE "
    "and DELETE need a WHERE clause{unfiltered}. DDL (CREATE, DROP, ALTER, TRUNCATE …) and "
    "several statements in one call are refused with KWDB-4002. Every write is logged."
)


class QueryOutput(BaseModel):
    """The rows of a read-query."""

    columns: list[str] = Field(description="Column names, in order")
    rows: list[list[Any]] = Field(description="Rows as lists of values, in column order")
    rowCount: int = Field(description="Rows in this result")
    truncated: bool = Field(description="More rows exist than were returned")
    nextOffset: int | None = Field(default=None, description="Pass as offset to get the next page")
    notes: list[str] = Field(default_factory=list, description="What the server changed")
    executionTime: float = Field(description="Milliseconds spent in the database")


class WriteOutput(BaseModel):
    """What a write-query changed."""

    statement: str = Field(description="INSERT, UPDATE or DELETE")
    rowsAffected: int = Field(description="Rows the statement changed (matched for UPDATE)")
    returning: QueryOutput | None = Field(default=None, description="Rows of a RETURNING clause")
    executionTime: float = Field(description="Milliseconds spent in the database")


def register(server: LdimsMCP) -> None:
    """Add the sql toolset to ``server``."""
    settings = server.services.settings
    executor = SqlExecutor(settings)
    server.on_close(executor.dispose)

    def caller(ctx: Context | None) -> Caller:
        return allowed(settings.sql_allowed_tenants, server.caller(ctx))

    @server.tool(
        name="read-query",
        description=READ_DESCRIPTION.format(
            limit=settings.sql_default_limit, max_rows=settings.sql_max_rows
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def read_query(
        sql: Annotated[
            str,
            Field(
                min_length=1,  # no max_length: the guard refuses long text as too_long
                description="One SELECT / WITH … SELECT / SHOW / EXPLAIN statement",
            ),
        ],
        ctx: Context,
        offset: Annotated[
            int | None,
            Field(ge=0, le=10_000_000, description="Rows to skip (nextOffset of the last page)"),
        ] = None,
    ) -> Annotated[CallToolResult, QueryOutput]:
        caller(ctx)
        result = await server.blocking(executor.read, sql, offset)
        output = _query_output(result)
        return _tool_result(output, markdown_table(result))

    unfiltered = " (this server allows it)" if settings.sql_allow_unfiltered_writes else ""
    # Listed even when writes are off (KWDB clients expect both tools); it then refuses.
    state = "" if settings.sql_write else " Writes are switched off on this server."

    @server.tool(
        name="write-query",
        description=WRITE_DESCRIPTION.format(unfiltered=unfiltered) + state,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, open_world_hint=False
        ),
    )
    async def write_query(
        sql: Annotated[
            str,
            Field(
                min_length=1,  # no max_length: the guard refuses long text as too_long
                description="One INSERT / UPDATE / DELETE statement",
            ),
        ],
        ctx: Context,
    ) -> Annotated[CallToolResult, WriteOutput]:
        result = await server.blocking(executor.write, sql, caller(ctx).tenant)
        output = WriteOutput(
            statement=result.kind.upper(),
            rowsAffected=result.rows_affected,
            returning=_query_output(result.returned) if result.returned else None,
            executionTime=round(result.execution_ms, 2),
        )
        text = f"{output.statement}: {output.rowsAffected} row(s) affected."
        if result.returned is not None:
            text += "\n\n" + markdown_table(result.returned)
        return _tool_result(output, text)

    _register_resources(server, executor)
    _register_prompts(server, load_prompts(settings.sql_prompts_dir))


def allowed(tenants: list[str], caller: Caller) -> Caller:
    """``caller``, when ``LDIMS_SQL_ALLOWED_TENANTS`` lists its tenant, or (no list) when its
    key has the ``sql`` scope (a caller without keys configured has every scope); else
    FORBIDDEN. The database is not the tenant's own: no key reaches it by default."""
    if tenants:
        if caller.tenant not in tenants:
            raise Forbidden("This tenant may not use the sql toolset.", tenant=caller.tenant)
        return caller
    if "sql" not in caller.scopes:
        raise Forbidden("The API key lacks the 'sql' scope.", scope="sql")
    return caller


def _register_resources(server: LdimsMCP, executor: SqlExecutor) -> None:
    tenants = server.services.settings.sql_allowed_tenants

    @server.resource(
        PRODUCT_URI,
        name="product_info",
        description="Which database this is: product, version, SQL dialect, current database.",
        mime_type="application/json",
    )
    def product_info() -> str:
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every kwdb:// URI

    @server.resource(
        DB_URI,
        name="db_info",
        description="A database (or schema): its tables and views with row estimates.",
        mime_type="application/json",
    )
    def db_info(database_name: str) -> str:
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every kwdb:// URI

    @server.resource(
        TABLE_URI,
        name="table",
        description="A table ([schema.]name): columns, types, keys, indexes, row estimate.",
        mime_type="application/json",
    )
    def table(table_name: str) -> str:
        raise RuntimeError("served by LdimsMCP.read_resource")  # readers take every kwdb:// URI

    def reader(
        read: Callable[..., dict[str, Any]], parameter: str | None
    ) -> Callable[[Caller, dict[str, str]], list[ReadResourceContents]]:
        def serve(caller: Caller, params: dict[str, str]) -> list[ReadResourceContents]:
            allowed(tenants, caller)
            args = (params[parameter],) if parameter else ()
            body = executor.inspect(lambda conn, dialect: read(conn, dialect, *args))
            text = json.dumps(body, ensure_ascii=False, indent=1, default=str)
            return [ReadResourceContents(content=text, mime_type="application/json", meta=None)]

        return serve

    server.add_resource_reader(r"kwdb://product_info/?", reader(schema.product_info, None))
    server.add_resource_reader(
        rf"kwdb://db_info/(?P<database_name>{_NAME})", reader(schema.db_info, "database_name")
    )
    server.add_resource_reader(
        rf"kwdb://table/(?P<table_name>{_NAME})", reader(schema.table_info, "table_name")
    )


def _register_prompts(server: LdimsMCP, prompts: dict[str, PromptFile]) -> None:
    for prompt in prompts.values():

        def render(prompt: PromptFile = prompt, **arguments: str) -> str:
            return prompt.render(arguments)

        server.add_prompt(
            Prompt(
                name=prompt.name,
                title=prompt.title,
                description=prompt.description,
                arguments=[
                    PromptArgument(name=a.name, description=a.description, required=a.required)
                    for a in prompt.arguments
                ],
                fn=render,
            )
        )


def _query_output(result: QueryResult) -> QueryOutput:
    return QueryOutput(
        columns=result.columns,
        rows=result.rows,
        rowCount=result.row_count,
        truncated=result.truncated,
        nextOffset=result.next_offset,
        notes=result.notes,
        executionTime=round(result.execution_ms, 2),
    )


def _tool_result(output: BaseModel, text: str) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=output.model_dump(mode="json"),
    )


def markdown_table(result: QueryResult) -> str:
    """The rows as a Markdown table a model (or a person) can read, then the notes."""
    lines = []
    if result.columns:
        lines.append("| " + " | ".join(_cell(c) for c in result.columns) + " |")
        lines.append("|" + "---|" * len(result.columns))
        lines.extend("| " + " | ".join(_cell(v) for v in row) + " |" for row in result.rows)
    summary = f"{result.row_count} row(s)"
    if result.truncated:
        summary += ", truncated"
        if result.next_offset is not None:
            summary += f"; next page: offset={result.next_offset}"
    lines.append("")
    lines.append(summary + ".")
    lines.extend(result.notes)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    text = "NULL" if value is None else value if isinstance(value, str) else json.dumps(value)
    text = str(text).replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= _TABLE_CELL_CHARS else text[: _TABLE_CELL_CHARS - 1] + "…"


def _requires(settings: Settings) -> str | None:
    return None if settings.sql_url is not None else "LDIMS_SQL_URL"


def _instructions(services: Services, caller: Caller) -> str | None:
    if services.settings.sql_allowed_tenants and caller.tenant not in (
        services.settings.sql_allowed_tenants
    ):
        return None
    return (
        "The sql toolset queries the configured database: read kwdb://product_info to learn "
        "which database and SQL dialect it is and kwdb://table/{table_name} for a table's "
        "columns, then run one statement per read-query call (a LIMIT is added; page with "
        "nextOffset). write-query runs one INSERT / UPDATE / DELETE when writes are enabled."
    )


TOOLSET = Toolset(
    name="sql",
    register=register,
    requires=_requires,
    uri_schemes=frozenset({"kwdb"}),
    errors=(SqlSyntaxError, SqlRejected, SqlTimeout, SqlObjectNotFound),
    rpc_codes={
        "KWDB-4001": -32602,
        "KWDB-4002": -32003,
        "KWDB-4003": -32603,
        "KWDB-4004": -32002,
    },
    instructions=_instructions,
    # The 'sql' scope (or the tenant allow-list) is checked by allowed(), for every tool,
    # resource and prompt of the toolset.
)
