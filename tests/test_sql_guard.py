"""The SQL statement guard: an attack table across dialects, then what it lets through.

Pure parsing, no database: each attack must be refused with the exact code and rule, and each
accepted statement must come back as the exact SQL that will run.
"""

from __future__ import annotations

import time

import pytest

import ldims.sql
from ldims.errors import InvalidInput
from ldims.sql import (
    RULES,
    ReadPlan,
    SqlRejected,
    SqlSyntaxError,
    WritePlan,
    check_read,
    check_write,
    dialect_of,
)

PG, MY, LITE = "postgres", "mysql", "sqlite"
SYNTAX, REFUSED = "KWDB-4001", "KWDB-4002"


def nested(opener: str, closer: str, depth: int, inner: str = "1") -> str:
    return opener * depth + inner + closer * depth


# Each attack, grouped by the rule that must refuse it (None: a syntax error, KWDB-4001).
# A row is (id, dialect, tool, sql); tool "read" is check_read, "write" check_write with
# writes on.
R, W = "read", "write"
ATTACKS: dict[str | None, list[tuple[str, str, str, str]]] = {
    "not_read_only": [
        ("block-comment-drop", PG, R, "/* just a select */ DROP TABLE t"),
        ("line-comment-delete", MY, R, "-- just a select\nDELETE FROM t"),
        ("both-comments-delete", LITE, R, "/* a */ -- b\nDELETE FROM t"),
        ("commit", PG, R, "COMMIT"),
        ("rollback", MY, R, "ROLLBACK"),
        ("begin", LITE, R, "BEGIN"),
        ("cte-delete", PG, R, "WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x"),
        ("cte-insert", PG, R, "WITH x AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM x"),
        ("copy-to-file", PG, R, "COPY t TO '/tmp/x'"),
        ("copy-to-program", PG, R, "COPY (SELECT 1) TO PROGRAM 'id'"),
        ("attach", LITE, R, "ATTACH DATABASE '/tmp/x' AS y"),
        ("pragma", LITE, R, "PRAGMA writable_schema=1"),
        ("vacuum-into", LITE, R, "VACUUM INTO '/tmp/copy.db'"),
        ("set-role", PG, R, "SET ROLE postgres"),
        ("set-var", MY, R, "SET autocommit = 1"),
        ("call", PG, R, "CALL proc()"),
        ("do-block", PG, R, "DO $$ BEGIN PERFORM pg_sleep(10); END $$"),
        ("listen", PG, R, "LISTEN x"),
        ("grant-read", PG, R, "GRANT ALL ON t TO PUBLIC"),
        ("sqlite-show", LITE, R, "SHOW TABLES"),
        ("explain-analyze-delete", PG, R, "EXPLAIN ANALYZE DELETE FROM t"),
        (
            "explain-analyze-cte",
            PG,
            R,
            "EXPLAIN ANALYZE WITH x AS (DELETE FROM t RETURNING *) SELECT * FROM x",
        ),
        ("explain-analyze-mysql", MY, R, "EXPLAIN ANALYZE DELETE FROM t"),
        ("truncate-read", PG, R, "TRUNCATE t"),
    ],
    "ddl": [
        ("comment-drop-write", PG, W, "/* cleanup */ DROP TABLE t"),
        ("create", PG, W, "CREATE TABLE x (a int)"),
        ("create-extension", PG, W, "CREATE EXTENSION dblink"),
        ("drop", MY, W, "DROP TABLE t"),
        ("alter", LITE, W, "ALTER TABLE t ADD COLUMN x int"),
        ("truncate", PG, W, "TRUNCATE t"),
        ("truncate-table", MY, W, "TRUNCATE TABLE t"),
        ("grant", PG, W, "GRANT ALL ON t TO PUBLIC"),
    ],
    "multiple_statements": [
        ("stacked-drop", PG, R, "SELECT 1; DROP TABLE t"),
        ("stacked-empty", MY, R, "SELECT 1;; DELETE FROM t"),
        ("stacked-sqlite", LITE, R, "SELECT 1; DELETE FROM t;"),
        ("stacked-after-comment", PG, R, "SELECT 1; -- done\nDROP TABLE t"),
        ("commit-drop", PG, R, "COMMIT; DROP TABLE t"),
        ("begin-stacked", PG, R, "BEGIN; DELETE FROM t; COMMIT"),
        ("stacked-write", PG, W, "INSERT INTO t VALUES (1); DROP TABLE t"),
        ("show-stacked", PG, R, "SHOW search_path; DROP TABLE t"),
    ],
    "data_modifying_cte": [
        (
            "cte-delete-write",
            PG,
            W,
            "WITH x AS (DELETE FROM t RETURNING *) INSERT INTO u SELECT * FROM x",
        ),
        (
            "subquery-cte-delete",
            PG,
            W,
            "DELETE FROM t WHERE id IN (WITH d AS (DELETE FROM u RETURNING id) SELECT id FROM d)",
        ),
    ],
    "select_into": [
        ("select-into-table", PG, R, "SELECT * INTO newt FROM t"),
        ("select-into-var", MY, R, "SELECT a INTO @x FROM t"),
        ("into-outfile", MY, R, "SELECT * FROM t INTO OUTFILE '/tmp/x'"),
        ("into-dumpfile", MY, R, "SELECT * FROM t INTO DUMPFILE '/tmp/x'"),
    ],
    "locking_clause": [
        ("for-update", PG, R, "SELECT * FROM t FOR UPDATE"),
        ("lock-in-share-mode", MY, R, "SELECT * FROM t LOCK IN SHARE MODE"),
        ("insert-for-update", PG, W, "INSERT INTO t SELECT * FROM u FOR UPDATE"),
    ],
    "statement_not_allowed": [
        ("copy-from-write", PG, W, "COPY t FROM '/etc/passwd'"),
        ("pragma-write", LITE, W, "PRAGMA writable_schema=1"),
        ("select-in-write", PG, W, "SELECT 1"),
        ("merge", PG, W, "MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE"),
        ("replace-into", LITE, W, "REPLACE INTO t VALUES (1)"),
    ],
    "unsupported": [
        ("pg-show-odd", PG, R, "SHOW foo bar"),
        ("mysql-show-unparsed", MY, R, "SHOW CREATE USER x"),
    ],
    "explain_option": [
        ("explain-option", PG, R, "EXPLAIN (ANALYZE, FOO) SELECT 1"),
    ],
    "denied_function": [
        ("explain-sleep", MY, R, "EXPLAIN ANALYZE SELECT SLEEP(100)"),
        ("pg-read-file", PG, R, "SELECT pg_read_file('/etc/passwd')"),
        ("pg-read-file-upper", PG, R, "SELECT PG_READ_FILE('/etc/passwd')"),
        ("pg-ls-dir-mixed", PG, R, "SELECT Pg_Ls_Dir('/')"),
        ("pg-read-file-quoted", PG, R, "SELECT \"pg_read_file\"('/etc/passwd')"),
        ("pg-read-file-schema", PG, R, "SELECT pg_catalog.pg_read_file('/etc/passwd')"),
        ("pg-ls-dir-from", PG, R, "SELECT * FROM pg_ls_dir('/')"),
        ("pg-ls-dir-rows-from", PG, R, "SELECT * FROM ROWS FROM (pg_ls_dir('/')) AS x"),
        ("pg-sleep", PG, R, "SELECT pg_sleep(100)"),
        ("pg-sleep-where", PG, R, "SELECT * FROM t WHERE id IN (SELECT pg_sleep(1))"),
        ("pg-sleep-union", PG, R, "SELECT 1 UNION SELECT pg_sleep(1)"),
        ("lo-import", PG, R, "SELECT lo_import('/etc/passwd')"),
        ("dblink-exec", PG, R, "SELECT dblink_exec('host=evil', 'DROP TABLE t')"),
        ("dblink-from", PG, R, "SELECT * FROM dblink('host=evil', 'SELECT 1') AS t(a int)"),
        ("set-config", PG, R, "SELECT set_config('role', 'postgres', false)"),
        ("query-to-xml", PG, R, "SELECT query_to_xml('DELETE FROM t', true, true, '')"),
        ("advisory-lock", PG, R, "SELECT pg_advisory_lock(1)"),
        ("terminate-backend", PG, R, "SELECT pg_terminate_backend(123)"),
        ("nextval-read", PG, R, "SELECT nextval('s')"),
        ("load-file", MY, R, "SELECT LOAD_FILE('/etc/passwd')"),
        ("sleep", MY, R, "SELECT SLEEP(100)"),
        ("benchmark", MY, R, "SELECT BENCHMARK(100000000, MD5('a'))"),
        ("get-lock", MY, R, "SELECT get_lock('x', 100)"),
        ("show-where-sleep", MY, R, "SHOW TABLES WHERE SLEEP(5)"),
        ("load-extension", LITE, R, "SELECT load_extension('/tmp/evil.so')"),
        ("readfile", LITE, R, "SELECT readfile('/etc/passwd')"),
        ("writefile", LITE, R, "SELECT writefile('/tmp/x', 'y')"),
        ("fts3-tokenizer", LITE, R, "SELECT fts3_tokenizer('simple')"),
        ("insert-select-denied", PG, W, "INSERT INTO t SELECT pg_read_file('/etc/passwd')"),
        ("update-sleep", MY, W, "UPDATE t SET a = SLEEP(10) WHERE id = 1"),
        # Found by red-teaming: PostgreSQL's attribute notation calls functions too.
        ("attribute-read-file", PG, R, "SELECT ('/etc/passwd'::text).pg_read_file"),
        ("attribute-kill", PG, R, "SELECT (pid).pg_terminate_backend FROM pg_stat_activity"),
        ("attribute-lock", PG, R, "SELECT (4242::bigint).pg_advisory_lock"),
        ("attribute-lo-import", PG, W, "INSERT INTO t VALUES (('/etc/hostname'::text).lo_import)"),
        ("row-attribute", PG, R, "SELECT t.pg_read_file FROM t"),
        ("ts-rewrite-sql", PG, R, "SELECT ts_rewrite('a'::tsquery, 'SELECT pg_reload_conf()')"),
    ],
    "no_where": [
        ("update-no-where", PG, W, "UPDATE t SET a = 1"),
        ("delete-no-where", MY, W, "DELETE FROM t"),
        ("delete-where-true", LITE, W, "DELETE FROM t WHERE 1 = 1"),
        ("update-where-true", PG, W, "UPDATE t SET a = 1 WHERE TRUE"),
        (
            "upsert-select-pg",
            PG,
            W,
            "INSERT INTO t SELECT * FROM t ON CONFLICT (id) DO UPDATE SET a = 0",
        ),
        ("upsert-select-my", MY, W, "INSERT INTO t SELECT * FROM t ON DUPLICATE KEY UPDATE a = 0"),
        ("replace-select-lite", LITE, W, "INSERT OR REPLACE INTO t SELECT * FROM t"),
        ("multi-table-update", MY, W, "UPDATE t a, t b SET a.x = 5 WHERE b.id = 1"),
        ("update-from", PG, W, "UPDATE t SET x = 1 FROM u WHERE u.id = 1"),
        ("delete-using", PG, W, "DELETE FROM t USING u WHERE u.id = 1"),
    ],
    "system_table": [
        ("rename-via-catalog", PG, W, "UPDATE pg_catalog.pg_class SET relname = 'x' WHERE oid = 1"),
        ("mysql-user", MY, W, "INSERT INTO mysql.user (User) VALUES ('x')"),
        ("sqlite-master", LITE, W, "DELETE FROM sqlite_master WHERE name = 't'"),
    ],
    "session_variable": [
        ("assign-user-variable", MY, R, "SELECT @x := a FROM t"),
        ("read-user-variable", MY, R, "SELECT @x"),
        ("set-in-write", MY, W, "UPDATE t SET a = (@x := 1) WHERE id = 1"),
    ],
    "too_long": [
        ("100k-chars", PG, R, "SELECT " + "1, " * 33_333 + "1"),
        ("100k-chars-write", MY, W, "INSERT INTO t VALUES " + "(1), " * 20_000 + "(1)"),
    ],
    "too_deep": [
        ("parens-500", PG, R, "SELECT " + nested("(", ")", 500)),
        ("subqueries-500", MY, R, "SELECT * FROM " + nested("(SELECT * FROM ", ") AS s", 500, "t")),
        ("parens-40", LITE, R, "SELECT " + nested("(", ")", 40)),
        ("not-chain-300", PG, R, "SELECT " + "NOT " * 300 + "TRUE"),
        ("case-chain-60", LITE, R, "SELECT " + nested("CASE WHEN a THEN ", " END", 60)),
    ],
    "too_complex": [
        ("struct-20", PG, R, "SELECT " + nested("STRUCT(", ")", 20)),
        ("array-20", MY, R, "SELECT " + nested("ARRAY[", "]", 20)),
        ("int-cast-24", LITE, R, "SELECT " + nested("INT(", ")", 24)),
    ],
    None: [
        ("load-data", MY, R, "LOAD DATA INFILE '/etc/passwd' INTO TABLE t"),
        ("typo", PG, R, "SELEC 1"),
        ("comment-only", PG, R, "-- DROP TABLE t"),
        ("empty", MY, W, "  "),
    ],
}


@pytest.mark.parametrize(
    ("dialect", "tool", "sql", "rule"),
    [
        pytest.param(d, tool, sql, rule, id=i)
        for rule, rows in ATTACKS.items()
        for i, d, tool, sql in rows
    ],
)
def test_attack_is_refused(dialect: str, tool: str, sql: str, rule: str | None) -> None:
    started = time.perf_counter()
    with pytest.raises((SqlRejected, SqlSyntaxError)) as caught:
        if tool == "read":
            check_read(sql, dialect)  # type: ignore[arg-type]
        else:
            check_write(sql, dialect, writes_enabled=True)  # type: ignore[arg-type]
    error = caught.value
    code = SYNTAX if rule is None else REFUSED
    assert (error.code, error.details.get("rule")) == (code, rule), error.message
    assert time.perf_counter() - started < 2.0  # refusing must stay cheap, whatever the input


def test_every_rule_has_an_attack() -> None:
    # nested_write is defensive: sqlglot's grammar only nests writes inside CTEs;
    # permission_denied comes from the database (tests/test_sql_toolset.py).
    assert set(ATTACKS) - {None} == RULES - {"nested_write", "writes_disabled", "permission_denied"}


@pytest.mark.parametrize("dialect", [PG, MY, LITE])
def test_writes_disabled_refuses_before_parsing(dialect: str) -> None:
    for sql in ("INSERT INTO t VALUES (1)", "not even SQL ((("):
        with pytest.raises(SqlRejected) as caught:
            check_write(sql, dialect, writes_enabled=False)  # type: ignore[arg-type]
        assert caught.value.rule == "writes_disabled"
        assert caught.value.code == "KWDB-4002" and caught.value.http_status == 403


def test_refusal_body_carries_code_rule_and_reason() -> None:
    with pytest.raises(SqlRejected) as caught:
        check_read("SELECT pg_read_file('/etc/passwd')", PG)
    body = caught.value.body()
    assert body["errorCode"] == "KWDB-4002"
    assert body["errorDetails"]["rule"] == "denied_function"
    assert body["errorDetails"]["function"] == "pg_read_file"
    assert "pg_read_file()" in body["errorDetails"]["reason"]


def test_unknown_rule_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown guard rule"):
        SqlRejected("no_such_rule", "x")


# --- syntax errors carry a position -------------------------------------------------------


def test_syntax_error_points_at_line_and_column() -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        check_read("SELECT *\nFROM t\nWHERE a = = 1", PG)
    error = caught.value
    assert (error.code, error.http_status) == ("KWDB-4001", 400)
    assert error.details["position"] == {"line": 3, "column": 11}
    assert error.details["near"] == "="
    assert "expression" in error.details["description"]


def test_syntax_error_column_is_where_the_token_starts() -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        check_read("SELECT * FROM t WHERE", MY)
    assert caught.value.details["position"] == {"line": 1, "column": 17}
    assert caught.value.details["near"] == "WHERE"


def test_unterminated_string_points_at_its_quote() -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        check_read("SELECT 1,\n  'abc", PG)
    assert caught.value.details["position"] == {"line": 2, "column": 3}
    assert caught.value.details["description"] == "Missing '"


def test_comment_only_text_is_a_syntax_error_without_position() -> None:
    with pytest.raises(SqlSyntaxError) as caught:
        check_read("/* SELECT 1 */ -- nothing", LITE)
    assert "empty or only comments" in caught.value.details["description"]
    assert "position" not in caught.value.details


# --- what read-query lets through ---------------------------------------------------------


@pytest.mark.parametrize("dialect", [PG, MY, LITE])
def test_plain_select_gets_limit_20(dialect: str) -> None:
    plan = check_read("select a, b from t where a > 1", dialect)  # type: ignore[arg-type]
    assert plan == ReadPlan(
        sql="SELECT a, b FROM t WHERE a > 1 LIMIT 20",
        kind="select",
        limit=20,
        limit_added=True,
        notes=("LIMIT 20 added; ask again with offset for more rows.",),
    )


def test_default_limit_is_configurable_and_bounded_by_max_rows() -> None:
    assert check_read("SELECT a FROM t", PG, default_limit=50).sql == "SELECT a FROM t LIMIT 50"
    plan = check_read("SELECT a FROM t", PG, default_limit=50, max_rows=30)
    assert (plan.sql, plan.limit) == ("SELECT a FROM t LIMIT 30", 30)


def test_smaller_limit_is_kept() -> None:
    plan = check_read("SELECT a FROM t ORDER BY a LIMIT 5", PG)
    assert plan.sql == "SELECT a FROM t ORDER BY a LIMIT 5"
    assert (plan.limit, plan.limit_added, plan.limit_capped, plan.notes) == (5, False, False, ())


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        (PG, "SELECT a FROM t LIMIT 5000", "SELECT a FROM t LIMIT 1000"),
        (PG, "SELECT a FROM t LIMIT ALL", "SELECT a FROM t LIMIT 1000"),
        (
            PG,
            "SELECT a FROM t FETCH FIRST 5000 ROWS ONLY",
            "SELECT a FROM t FETCH FIRST 1000 ROWS ONLY",
        ),
        (MY, "SELECT a FROM t LIMIT 10, 5000", "SELECT a FROM t LIMIT 1000 OFFSET 10"),
        (LITE, "SELECT a FROM t LIMIT 99999 OFFSET 3", "SELECT a FROM t LIMIT 1000 OFFSET 3"),
    ],
)
def test_limit_above_max_rows_is_capped(dialect: str, sql: str, expected: str) -> None:
    plan = check_read(sql, dialect)  # type: ignore[arg-type]
    assert (plan.sql, plan.limit, plan.limit_capped, plan.limit_added) == (
        expected,
        1000,
        True,
        False,
    )
    assert plan.notes == ("LIMIT lowered to the maximum of 1000 rows.",)


def test_with_select_is_allowed() -> None:
    plan = check_read("WITH a AS (SELECT id FROM t WHERE x = 1) SELECT * FROM a", PG)
    assert plan.sql == "WITH a AS (SELECT id FROM t WHERE x = 1) SELECT * FROM a LIMIT 20"


@pytest.mark.parametrize("dialect", [PG, MY, LITE])
def test_union_is_allowed_and_limited_as_a_whole(dialect: str) -> None:
    plan = check_read("SELECT a FROM t UNION ALL SELECT b FROM u", dialect)  # type: ignore[arg-type]
    assert plan.sql == "SELECT a FROM t UNION ALL SELECT b FROM u LIMIT 20"


def test_comments_never_reach_the_database() -> None:
    plan = check_read("/* note */ SELECT 1 -- ; DROP TABLE t\n", PG)
    assert plan.sql == "SELECT 1 LIMIT 20"
    # MySQL executes /*! … */ "comments"; rendering from the tree drops them.
    assert check_read("SELECT 1 /*!50000 , SLEEP(10) */", MY).sql == "SELECT 1 LIMIT 20"


def test_optimizer_hints_are_dropped() -> None:
    # MAX_EXECUTION_TIME would lift the server's timeout; SET_VAR changes session variables.
    plan = check_read("SELECT /*+ MAX_EXECUTION_TIME(1000000) */ a FROM t", MY)
    assert plan.sql == "SELECT a FROM t LIMIT 20"
    write = check_write(
        "UPDATE /*+ SET_VAR(x = 1) */ t SET a = 1 WHERE id = 1", MY, writes_enabled=True
    )
    assert write.sql == "UPDATE t SET a = 1 WHERE id = 1"


def test_trailing_semicolon_is_fine() -> None:
    assert check_read("SELECT 1;", LITE).sql == "SELECT 1 LIMIT 20"
    # sqlglot returns a comment after the ';' as an extra, comment-only statement
    assert check_read("SELECT 1; -- done", PG).sql == "SELECT 1 LIMIT 20"


def test_current_setting_is_allowed() -> None:
    plan = check_read("SELECT current_setting('search_path')", PG)
    assert plan.sql == "SELECT current_setting('search_path') LIMIT 20"


def test_paging_sets_the_offset() -> None:
    plan = check_read("SELECT a FROM t ORDER BY a", PG, offset=40)
    assert plan.sql == "SELECT a FROM t ORDER BY a LIMIT 20 OFFSET 40"
    assert plan.offset == 40
    overridden = check_read("SELECT a FROM t ORDER BY a LIMIT 10 OFFSET 5", MY, offset=10)
    assert overridden.sql == "SELECT a FROM t ORDER BY a LIMIT 10 OFFSET 10"


def test_paging_without_order_by_says_so() -> None:
    plan = check_read("SELECT a FROM t", LITE, offset=20)
    assert plan.sql == "SELECT a FROM t LIMIT 20 OFFSET 20"
    assert "No ORDER BY: pages may overlap or skip rows." in plan.notes


def test_bad_offsets_are_invalid_input() -> None:
    with pytest.raises(InvalidInput) as caught:
        check_read("SELECT 1", PG, offset=-1)
    assert caught.value.details == {"field": "offset"}
    with pytest.raises(InvalidInput):
        check_read("SHOW TABLES", MY, offset=20)


@pytest.mark.parametrize(
    ("dialect", "sql", "expected"),
    [
        (MY, "SHOW TABLES", "SHOW TABLES"),
        (MY, "show full tables", "SHOW FULL TABLES"),
        (MY, "SHOW COLUMNS FROM t", "SHOW COLUMNS FROM t"),
        (MY, "SHOW GRANTS", "SHOW GRANTS"),  # sqlglot writes "SHOW GRANTS FOR"
        (PG, "SHOW search_path", "SHOW search_path"),
        (PG, "SHOW ALL", "SHOW ALL"),
        (PG, "show transaction  isolation level; -- why", "SHOW transaction isolation level"),
    ],
)
def test_show_variants_that_are_fine(dialect: str, sql: str, expected: str) -> None:
    plan = check_read(sql, dialect)  # type: ignore[arg-type]
    assert (plan.sql, plan.kind, plan.limit) == (expected, "show", None)


@pytest.mark.parametrize(
    ("dialect", "sql", "expected", "analyze"),
    [
        (PG, "EXPLAIN SELECT a FROM t", "EXPLAIN SELECT a FROM t", False),
        (
            PG,
            "explain (analyze, format json) select a from t",
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT a FROM t",
            True,
        ),
        (PG, "EXPLAIN (ANALYZE false) SELECT 1", "EXPLAIN (ANALYZE FALSE) SELECT 1", False),
        (
            PG,
            "EXPLAIN ANALYZE VERBOSE WITH a AS (SELECT 1) SELECT * FROM a",
            "EXPLAIN ANALYZE VERBOSE WITH a AS (SELECT 1) SELECT * FROM a",
            True,
        ),
        (MY, "EXPLAIN FORMAT = JSON SELECT a FROM t", "EXPLAIN FORMAT=JSON SELECT a FROM t", False),
        (MY, "EXPLAIN ANALYZE SELECT a FROM t", "EXPLAIN ANALYZE SELECT a FROM t", True),
        (LITE, "EXPLAIN QUERY PLAN SELECT a FROM t", "EXPLAIN QUERY PLAN SELECT a FROM t", False),
    ],
)
def test_explain_of_a_select(dialect: str, sql: str, expected: str, analyze: bool) -> None:
    plan = check_read(sql, dialect)  # type: ignore[arg-type]
    assert (plan.sql, plan.kind, plan.analyze, plan.limit) == (expected, "explain", analyze, None)


# --- what write-query lets through --------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "sql", "expected", "kind"),
    [
        (
            PG,
            "insert into t (a, b) values (1, 'x')",
            "INSERT INTO t (a, b) VALUES (1, 'x')",
            "insert",
        ),
        (
            MY,
            "UPDATE t SET a = a + 1 WHERE id = 3",
            "UPDATE t SET a = a + 1 WHERE id = 3",
            "update",
        ),
        (LITE, "DELETE FROM t WHERE id IN (1, 2)", "DELETE FROM t WHERE id IN (1, 2)", "delete"),
        (
            PG,
            "INSERT INTO t SELECT a FROM u WHERE b > 1",
            "INSERT INTO t SELECT a FROM u WHERE b > 1",
            "insert",
        ),
        (
            MY,
            "INSERT INTO t (a) VALUES (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
            "INSERT INTO t (a) VALUES (1) ON DUPLICATE KEY UPDATE a = VALUES(a)",
            "insert",
        ),
        (
            LITE,
            "/* fix */ UPDATE t SET a = 1 WHERE id = 1 -- done",
            "UPDATE t SET a = 1 WHERE id = 1",
            "update",
        ),
    ],
)
def test_writes_with_writes_on(dialect: str, sql: str, expected: str, kind: str) -> None:
    plan = check_write(sql, dialect, writes_enabled=True)  # type: ignore[arg-type]
    assert plan == WritePlan(sql=expected, kind=kind)  # type: ignore[arg-type]


def test_returning_and_nextval_in_a_write() -> None:
    plan = check_write(
        "INSERT INTO t VALUES (nextval('s'), 'x') RETURNING id", PG, writes_enabled=True
    )
    assert plan == WritePlan(
        sql="INSERT INTO t VALUES (nextval('s'), 'x') RETURNING id", kind="insert", returning=True
    )


def test_unfiltered_write_when_allowed() -> None:
    plan = check_write("DELETE FROM t", MY, writes_enabled=True, allow_unfiltered=True)
    assert plan == WritePlan(sql="DELETE FROM t", kind="delete", unfiltered=True)


# --- dialects and the public surface ------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "dialect"),
    [
        ("postgresql+psycopg://u:p@db:5432/x", "postgres"),
        ("postgresql://db/x", "postgres"),
        ("postgres://db/x", "postgres"),
        ("mysql+pymysql://u:p@db/x", "mysql"),
        ("mariadb+pymysql://db/x", "mysql"),
        ("sqlite:///tmp/x.db", "sqlite"),
        ("SQLite://", "sqlite"),
    ],
)
def test_dialect_of_url(url: str, dialect: str) -> None:
    assert dialect_of(url) == dialect


def test_unknown_url_scheme_names_only_the_scheme() -> None:
    with pytest.raises(ValueError) as caught:
        dialect_of("oracle+cx://scott:tiger@db/x")
    assert "oracle+cx" in str(caught.value) and "tiger" not in str(caught.value)


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SQL dialect"):
        check_read("SELECT 1", "oracle")  # type: ignore[arg-type]


def test_public_names_exist() -> None:
    for name in ldims.sql.__all__:
        assert getattr(ldims.sql, name) is not None, name
