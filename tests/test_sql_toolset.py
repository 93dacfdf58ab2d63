"""The sql toolset through the official MCP client, against PostgreSQL, MariaDB and SQLite.

The same behavioural tests run on the three databases: reads with the LIMIT and paging rules,
an attack table (each refused with its code, nothing changed in the database), writes and
their audit log, time limits and connect retries, the kwdb:// resources and the prompts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import psycopg
import pymysql
import pytest
import sqlalchemy
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from api.mcp import LdimsMCP, build_mcp_server
from ldims.settings import Settings
from ldims.sql import SqlRejected
from ldims.sql.executor import SqlExecutor
from runtime import build_services
from tests.conftest import ApiServer, RedisServer, free_port

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
ROWS = 50
SEED = [
    "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL, "
    "qty INTEGER NOT NULL DEFAULT 0)",
    "INSERT INTO items (id, name, qty) VALUES "
    + ", ".join(f"({n}, 'item-{n}', {n})" for n in range(1, ROWS + 1)),
]


@dataclass
class Target:
    dialect: str
    url: str
    database: str


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


@contextlib.contextmanager
def _postgres() -> Iterator[Target]:
    name = f"ldims_sql_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield Target("postgres", f"postgresql://postgres@127.0.0.1:5432/{name}", name)
    finally:
        with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def _mariadb() -> Iterator[Target]:
    name = f"ldims_sql_{uuid.uuid4().hex[:12]}"
    connection = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE `{name}`")
        yield Target("mysql", f"mysql://root@127.0.0.1:3306/{name}", name)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        connection.close()


@contextlib.contextmanager
def _sqlite(directory: Path) -> Iterator[Target]:
    path = directory / "target.sqlite3"
    yield Target("sqlite", f"sqlite:///{path}", "main")


@pytest.fixture(params=["postgres", "mysql", "sqlite"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """A fresh database of each kind, holding ``items`` (50 rows)."""
    makers: dict[str, Callable[[], contextlib.AbstractContextManager[Target]]] = {
        "postgres": _postgres,
        "mysql": _mariadb,
        "sqlite": lambda: _sqlite(tmp_path),
    }
    with makers[request.param]() as made:
        engine = SqlExecutor(Settings(data_dir=tmp_path, sql_url=made.url)).engine
        with engine.begin() as connection:
            for statement in SEED:
                connection.exec_driver_sql(statement)
        engine.dispose()
        yield made


def snapshot(target: Target, tmp_path: Path) -> tuple[Any, ...]:
    """Tables and every row of ``items``: what an attack must leave exactly as it was."""
    engine = SqlExecutor(Settings(data_dir=tmp_path, sql_url=target.url)).engine
    try:
        with engine.connect() as connection:
            tables = sorted(sqlalchemy.inspect(connection).get_table_names())
            rows = connection.exec_driver_sql("SELECT id, name, qty FROM items ORDER BY id").all()
        return tuple(tables), tuple(tuple(row) for row in rows)
    finally:
        engine.dispose()


_OPEN: list[tuple[LdimsMCP, Any]] = []


def make_server(
    tmp_path: Path, redis: RedisServer, target: Target | None, **overrides: Any
) -> LdimsMCP:
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=redis.url,
        sql_url=target.url if target else overrides.pop("sql_url"),
        **overrides,
    )
    services = build_services(settings)
    server = build_mcp_server(services)
    _OPEN.append((server, services))
    return server


@pytest.fixture(autouse=True)
def _close_servers() -> Iterator[None]:
    """Pools closed before the test's database is dropped."""
    yield
    while _OPEN:
        server, services = _OPEN.pop()
        server.close()
        services.dispatcher.close()
        services.catalog.dispose()


async def call(server: LdimsMCP, tool: str, **arguments: Any) -> Any:
    async with Client(server) as client:
        return await client.call_tool(tool, arguments)


def error_of(result: Any) -> tuple[str, str | None]:
    assert result.is_error, result.content
    body = result.structured_content
    return body["errorCode"], body.get("errorDetails", {}).get("rule")


# --- reads ------------------------------------------------------------------------------------
def test_read_query_adds_the_limit_and_pages(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target)
    first = run(call(server, "read-query", sql="SELECT id, name FROM items ORDER BY id"))
    assert not first.is_error
    body = first.structured_content
    assert body["columns"] == ["id", "name"]
    assert body["rows"][0] == [1, "item-1"] and body["rowCount"] == 20
    assert body["truncated"] is True and body["nextOffset"] == 20
    assert any("LIMIT 20 added" in note for note in body["notes"])
    text = first.content[0].text
    assert text.startswith("| id | name |") and "| 20 | item-20 |" in text
    assert "offset=20" in text

    last = run(call(server, "read-query", sql="SELECT id FROM items ORDER BY id", offset=40))
    assert [row[0] for row in last.structured_content["rows"]] == list(range(41, 51))
    assert last.structured_content["truncated"] is False
    assert last.structured_content["nextOffset"] is None

    own = run(call(server, "read-query", sql="SELECT id FROM items ORDER BY id LIMIT 5"))
    assert own.structured_content["rowCount"] == 5 and not own.structured_content["truncated"]


def test_a_large_limit_is_lowered_to_the_maximum(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target, sql_max_rows=30)
    result = run(call(server, "read-query", sql="SELECT * FROM items ORDER BY id LIMIT 5000"))
    body = result.structured_content
    assert body["rowCount"] == 30 and body["truncated"] is True and body["nextOffset"] == 30


def test_values_come_back_as_json(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target)
    sql = "SELECT 1.5 AS f, NULL AS n, 'Привет, 世界' AS t, COUNT(*) AS c FROM items"
    body = run(call(server, "read-query", sql=sql)).structured_content
    assert body["columns"] == ["f", "n", "t", "c"]
    f, n, t, c = body["rows"][0]
    assert float(f) == 1.5 and n is None and t == "Привет, 世界" and c == ROWS


SHOW_AND_EXPLAIN = {
    "postgres": ["EXPLAIN SELECT * FROM items WHERE id = 1", "SHOW statement_timeout"],
    "mysql": ["EXPLAIN SELECT * FROM items WHERE id = 1", "SHOW TABLES"],
    "sqlite": ["EXPLAIN QUERY PLAN SELECT * FROM items WHERE id = 1"],
}


def test_show_and_explain_answer_rows(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target, sql_timeout_seconds=7)

    async def calls() -> list[Any]:
        async with Client(server) as client:
            return [
                await client.call_tool("read-query", {"sql": sql})
                for sql in SHOW_AND_EXPLAIN[target.dialect]
            ]

    results = run(calls())
    for result in results:
        assert not result.is_error, result.structured_content
        assert result.structured_content["rowCount"] >= 1
    text = " ".join(str(r.structured_content["rows"]) for r in results)
    if target.dialect == "postgres":
        assert "7s" in text  # the session's time limit, as set by the executor
    if target.dialect == "mysql":
        assert "items" in text


# --- the attack table -------------------------------------------------------------------------
REFUSED, SYNTAX = "KWDB-4002", "KWDB-4001"
# (tool, sql, expected code, expected rule); ATTACH is not SQL outside SQLite: a syntax error.
ATTACKS = [
    ("read-query", "/* x */ DELETE FROM items WHERE id = 1", REFUSED, "not_read_only"),
    ("read-query", "-- x\nDROP TABLE items", REFUSED, "not_read_only"),
    ("read-query", "SELECT 1; DROP TABLE items", REFUSED, "multiple_statements"),
    ("read-query", "SELECT 1; DELETE FROM items", REFUSED, "multiple_statements"),
    (
        "read-query",
        "WITH x AS (DELETE FROM items RETURNING id) SELECT * FROM x",
        REFUSED,
        "not_read_only",
    ),
    ("read-query", "COMMIT; DROP TABLE items", REFUSED, "multiple_statements"),
    ("read-query", "SELECT * INTO stolen FROM items", REFUSED, "select_into"),
    ("read-query", "COPY items TO '/tmp/items.csv'", REFUSED, "not_read_only"),
    ("read-query", "SELECT pg_read_file('/etc/passwd')", REFUSED, "denied_function"),
    ("read-query", "SELECT LOAD_FILE('/etc/passwd')", REFUSED, "denied_function"),
    ("read-query", "PRAGMA writable_schema = 1", REFUSED, "not_read_only"),
    ("read-query", "SELECT pg_sleep(600)", REFUSED, "denied_function"),
    ("read-query", "SELECT * FROM items FOR UPDATE", REFUSED, "locking_clause"),
    ("read-query", "EXPLAIN ANALYZE DELETE FROM items", REFUSED, "not_read_only"),
    ("read-query", "SELECT " + "1 + " * 6000 + "1", REFUSED, "too_long"),
    ("read-query", "SELECT " + "(" * 100 + "1" + ")" * 100, REFUSED, "too_deep"),
    ("write-query", "DROP TABLE items", REFUSED, "ddl"),
    ("write-query", "CREATE TABLE x (a INTEGER)", REFUSED, "ddl"),
    ("write-query", "ALTER TABLE items ADD COLUMN z INTEGER", REFUSED, "ddl"),
    ("write-query", "TRUNCATE TABLE items", REFUSED, "ddl"),
    ("write-query", "UPDATE items SET qty = 0", REFUSED, "no_where"),
    ("write-query", "DELETE FROM items WHERE 1 = 1", REFUSED, "no_where"),
    ("write-query", "INSERT INTO items VALUES (999, 'x', 1); DROP TABLE items", REFUSED, None),
    ("write-query", "/* ok */ DELETE FROM items WHERE id = 1; COMMIT", REFUSED, None),
    ("read-query", "SELECT ('/etc/passwd'::text).pg_read_file", REFUSED, None),
    ("write-query", "UPDATE sqlite_master SET name = 'x' WHERE name = 'items'", REFUSED, None),
]


def test_every_attack_is_refused_and_changes_nothing(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    before = snapshot(target, tmp_path)
    server = make_server(tmp_path, shared_redis, target, sql_write=True)
    attach = "ATTACH DATABASE '/tmp/ldims-attack.db' AS x"
    attacks = [
        *ATTACKS,
        ("read-query", attach, REFUSED if target.dialect == "sqlite" else SYNTAX, None),
    ]

    async def all_attacks() -> list[tuple[str, str | None]]:
        async with Client(server) as client:
            return [
                error_of(await client.call_tool(tool, {"sql": sql})) for tool, sql, _, _ in attacks
            ]

    outcomes = run(all_attacks())
    for (tool, sql, code, rule), (got_code, got_rule) in zip(attacks, outcomes, strict=True):
        assert got_code == code, (tool, sql[:60], got_code, got_rule)
        if rule is not None:
            assert got_rule == rule, (tool, sql[:60], got_rule)
    assert snapshot(target, tmp_path) == before


def test_a_huge_value_is_cut_not_loaded_or_crashing(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target, sql_max_result_chars=5000)
    repeat = {"postgres": "repeat('x', 3000)", "mysql": "REPEAT('x', 3000)"}.get(
        target.dialect, "printf('%.*c', 3000, 'x')"
    )
    sql = f"SELECT id, {repeat} AS big FROM items ORDER BY id LIMIT 10"
    body = state_of(run(call(server, "read-query", sql=sql)))
    assert body["truncated"] is True and 1 <= body["rowCount"] < 10
    assert any("cut at 5000 characters" in note for note in body["notes"])


def state_of(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.structured_content
    return result.structured_content  # type: ignore[no-any-return]


def test_writes_are_refused_while_switched_off(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    before = snapshot(target, tmp_path)
    server = make_server(tmp_path, shared_redis, target)
    result = run(call(server, "write-query", sql="DELETE FROM items WHERE id = 1"))
    assert error_of(result) == (REFUSED, "writes_disabled")
    assert snapshot(target, tmp_path) == before


def test_the_read_transaction_is_read_only_below_the_guard(target: Target, tmp_path: Path) -> None:
    # Second layer: were a write to slip past the guard, the database itself refuses it.
    executor = SqlExecutor(Settings(data_dir=tmp_path, sql_url=target.url))
    before = snapshot(target, tmp_path)
    with pytest.raises(SqlRejected) as raised, executor.read_only() as connection:
        connection.exec_driver_sql("DELETE FROM items WHERE id = 1")
    assert (raised.value.code, raised.value.rule) == (REFUSED, "permission_denied")
    executor.dispose()
    assert snapshot(target, tmp_path) == before


# --- errors from the database -----------------------------------------------------------------
def test_syntax_and_missing_objects_have_their_codes(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target)

    async def calls() -> list[Any]:
        async with Client(server) as client:
            return [
                await client.call_tool("read-query", {"sql": sql})
                for sql in (
                    "SELEC id FROM items",
                    "SELECT id FROM nowhere",
                    "SELECT nosuchcolumn FROM items",
                )
            ]

    syntax, table, column = run(calls())
    assert syntax.structured_content["errorCode"] == SYNTAX
    assert "position" in syntax.structured_content["errorDetails"]
    assert table.structured_content["errorCode"] == "KWDB-4004"
    assert "nowhere" in table.structured_content["errorMessage"]
    assert column.structured_content["errorCode"] == "KWDB-4004"


def test_a_statement_over_the_time_limit_is_stopped(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target, sql_timeout_seconds=1)
    # 50^5 = 312 million rows to count: minutes of work for each of the three databases.
    endless = "SELECT COUNT(*) FROM items a, items b, items c, items d, items e"
    started = time.monotonic()
    result = run(call(server, "read-query", sql=endless))
    assert error_of(result)[0] == "KWDB-4003"
    assert result.structured_content["errorDetails"]["phase"] == "query"
    assert time.monotonic() - started < 15
    # The pooled connection is healthy afterwards.
    again = run(call(server, "read-query", sql="SELECT COUNT(*) AS c FROM items"))
    assert again.structured_content["rows"] == [[ROWS]]


def test_an_unreachable_database_is_kwdb_4003_after_the_retries(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"
    server = make_server(tmp_path, shared_redis, None, sql_url=url, sql_connect_retries=3)
    started = time.monotonic()
    result = run(call(server, "read-query", sql="SELECT 1"))
    assert error_of(result)[0] == "KWDB-4003"
    details = result.structured_content["errorDetails"]
    assert details["phase"] == "connect" and details["attempts"] == 3
    assert time.monotonic() - started >= 0.25 + 0.5  # the backoff ran between attempts
    assert "postgres@" not in str(result.structured_content)  # the URL never leaks


# --- writes -----------------------------------------------------------------------------------
def test_writes_run_in_a_transaction_and_are_audited(
    target: Target, tmp_path: Path, shared_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server(tmp_path, shared_redis, target, sql_write=True)

    async def writes() -> list[Any]:
        async with Client(server) as client:
            return [
                await client.call_tool("write-query", {"sql": sql})
                for sql in (
                    "INSERT INTO items (id, name, qty) VALUES (100, 'new', 7)",
                    "UPDATE items SET qty = qty + 1 WHERE id IN (1, 2)",
                    "DELETE FROM items WHERE id = 3",
                    "INSERT INTO items (id, name, qty) VALUES (100, 'again', 1)",  # duplicate
                )
            ]

    with caplog.at_level(logging.INFO, logger="ldims.sql.audit"):
        insert, update, delete, duplicate = run(writes())
    assert insert.structured_content == {
        "statement": "INSERT",
        "rowsAffected": 1,
        "returning": None,
        "executionTime": insert.structured_content["executionTime"],
    }
    assert update.structured_content["rowsAffected"] == 2
    assert delete.structured_content["rowsAffected"] == 1
    assert duplicate.is_error and duplicate.structured_content["errorCode"].startswith("KWDB-")
    audited = [r.getMessage() for r in caplog.records if r.name == "ldims.sql.audit"]
    assert len(audited) == 3 and all("write-query by default" in line for line in audited)
    assert "UPDATE items SET qty = qty + 1" in audited[1] and "2 row(s)" in audited[1]

    _, rows = snapshot(target, tmp_path)
    by_id = {row[0]: row for row in rows}
    assert by_id[100][1:] == ("new", 7) and by_id[1][2] == 2 and by_id[2][2] == 3
    assert 3 not in by_id and len(rows) == ROWS


# --- resources and prompts --------------------------------------------------------------------
def test_schema_resources_for_any_database(
    target: Target, tmp_path: Path, shared_redis: RedisServer
) -> None:
    server = make_server(tmp_path, shared_redis, target)

    async def reads() -> tuple[Any, ...]:
        async with Client(server) as client:
            templates = (await client.list_resource_templates()).resource_templates
            resources = (await client.list_resources()).resources
            product = await client.read_resource("kwdb://product_info")
            database = await client.read_resource(f"kwdb://db_info/{target.database}")
            table = await client.read_resource("kwdb://table/items")
            with pytest.raises(MCPError) as missing:
                await client.read_resource("kwdb://table/nowhere")
            with pytest.raises(MCPError) as no_db:
                await client.read_resource("kwdb://db_info/nodb_here")
            return templates, resources, product, database, table, missing.value, no_db.value

    templates, resources, product, database, table, missing, no_db = run(reads())
    assert {t.uri_template for t in templates} >= {
        "kwdb://db_info/{database_name}",
        "kwdb://table/{table_name}",
    }
    assert "kwdb://product_info" in {str(r.uri) for r in resources}
    import json

    info = json.loads(product.contents[0].text)
    expected = {"postgres": "PostgreSQL", "mysql": "MariaDB", "sqlite": "SQLite"}
    assert info["product"] == expected[target.dialect]
    assert info["dialect"] == target.dialect
    tables = json.loads(database.contents[0].text)["tables"]
    assert "items" in {t["name"] for t in tables}
    described = json.loads(table.contents[0].text)
    assert [c["name"] for c in described["columns"]] == ["id", "name", "qty"]
    assert described["primaryKey"] == ["id"]
    for error in (missing, no_db):
        assert error.error.code == -32002
        assert error.error.data["errorCode"] == "KWDB-4004"
        assert error.error.data["status"] == 404


def test_the_seed_prompts_are_listed_and_render(tmp_path: Path, shared_redis: RedisServer) -> None:
    target = Target("sqlite", f"sqlite:///{tmp_path / 'p.sqlite3'}", "main")
    override = tmp_path / "prompts"
    override.mkdir()
    (override / "house_rules.md").write_text(
        "---\ntitle: House rules\ndescription: Our conventions\n---\nAlways ORDER BY id.\n"
    )
    server = make_server(tmp_path, shared_redis, target, sql_prompts_dir=override)

    async def prompts() -> tuple[set[str], Any]:
        async with Client(server) as client:
            listed = {p.name for p in (await client.list_prompts()).prompts}
            rendered = await client.get_prompt("house_rules", {})
            return listed, rendered

    listed, rendered = run(prompts())
    seed = {
        "db_description",
        "syntax_guide",
        "cluster_management",
        "data_migration",
        "performance_tuning",
        "troubleshooting",
        "installation",
        "dba_template",
    }
    assert listed == seed | {"house_rules", "query"}  # "query": the qmd toolset's guide
    assert "Always ORDER BY id." in rendered.messages[0].content.text


def test_tenants_outside_the_allow_list_are_forbidden(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    target = Target("sqlite", f"sqlite:///{tmp_path / 't.sqlite3'}", "main")
    server = make_server(tmp_path, shared_redis, target, sql_allowed_tenants=["acme"])
    assert error_of(run(call(server, "read-query", sql="SELECT 1")))[0] == "FORBIDDEN"


def test_read_query_over_real_http(tmp_path: Path, shared_redis: RedisServer) -> None:
    with _postgres() as target:
        engine = SqlExecutor(Settings(data_dir=tmp_path, sql_url=target.url)).engine
        with engine.begin() as connection:
            for statement in SEED:
                connection.exec_driver_sql(statement)
        engine.dispose()
        settings = Settings(
            data_dir=tmp_path / "data", redis_url=shared_redis.url, sql_url=target.url
        )
        api = ApiServer(settings).start()
        try:

            async def over_http() -> Any:
                async with (
                    httpx2.AsyncClient(timeout=30) as http,
                    Client(streamable_http_client(f"{api.url}/mcp", http_client=http)) as client,  # type: ignore[arg-type]
                ):
                    names = {tool.name for tool in (await client.list_tools()).tools}
                    assert {"read-query", "write-query", "searchDocuments"} <= names
                    return await client.call_tool(
                        "read-query", {"sql": "SELECT name FROM items WHERE id = 7"}
                    )

            result = run(over_http())
        finally:
            api.stop()
    assert result.structured_content["rows"] == [["item-7"]]


def test_a_backslash_cannot_end_a_string_early(tmp_path: Path, shared_redis: RedisServer) -> None:
    # A database (or role) with standard_conforming_strings off reads 'a\'' as a whole string;
    # the guard reads it as the start of a longer one. The executor turns the setting on.
    with _postgres() as target:
        with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
            connection.execute(
                f'ALTER DATABASE "{target.database}" SET standard_conforming_strings = off'
            )
        engine = SqlExecutor(Settings(data_dir=tmp_path, sql_url=target.url)).engine
        with engine.begin() as connection:
            for statement in SEED:
                connection.exec_driver_sql(statement)
        engine.dispose()
        server = make_server(tmp_path, shared_redis, target, sql_write=True)
        trick = "DELETE FROM items WHERE name = 'a\\'' OR id > 0 --' AND id = 1"
        result = run(call(server, "write-query", sql=trick))
        assert not result.is_error and result.structured_content["rowsAffected"] == 0
        read = "SELECT 'a\\'' , pg_read_file($$/etc/hostname$$) --'"
        shown = run(call(server, "read-query", sql=read))
        assert not shown.is_error and shown.structured_content["columns"] == ["?column?"]
        server.close()
        assert len(snapshot(target, tmp_path)[1]) == ROWS
