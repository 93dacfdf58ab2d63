"""The statement guard of the safe SQL toolset: decide, by parsing, what SQL may run.

``check_read`` (read-query) accepts one SELECT / UNION / ``WITH … SELECT``, SHOW or EXPLAIN;
``check_write`` (write-query) one INSERT / UPDATE / DELETE. Both return a plan whose ``sql`` is
rendered from sqlglot's tree, never the caller's text: comments (MySQL *executes*
``/*! … */``), optimizer hints (``/*+ MAX_EXECUTION_TIME(…) */`` lifts MySQL's timeout) and
anything the parser did not understand cannot ride along. The rendering is parsed again and
must give the same kind of statement and pass the same checks.

Steps: length (before anything else), tokens, bracket nesting, a parse with a work budget (on
some nestings — ``STRUCT(STRUCT(…))``, ``INT[INT[…]]`` — sqlglot's backtracking is exponential:
16 levels take seconds), exactly one statement, the root's type, then a walk of the whole tree
for writes (also inside CTEs and subqueries), locking clauses, ``SELECT … INTO`` and functions
on the deny-list. Statements sqlglot cannot classify (``exp.Command``: COPY, SET, CALL, DO …)
are refused, never passed through.

Decisions:

* EXPLAIN ANALYZE executes the explained statement, so EXPLAIN (with or without ANALYZE) is
  only accepted around a query that passes every read rule; it then does what read-query would
  do anyway (``analyze=True`` tells the executor). No LIMIT is added inside EXPLAIN: it would
  change the plan asked about.
* ``current_setting()`` is allowed (it reads what SHOW reads); ``set_config()`` is denied.
  ``nextval()`` is denied in reads (it writes a sequence), allowed in writes.
* Text that is empty or only comments is a syntax error (KWDB-4001): there is nothing to run.
* An UPDATE / DELETE whose WHERE names no column (``WHERE 1=1``) counts as unfiltered, and so
  do an upsert fed by a SELECT and an UPDATE / DELETE across several tables (``UPDATE a, b``,
  ``UPDATE … FROM``, ``DELETE … USING``): their WHERE need not limit the target's rows.
* PostgreSQL calls ``name(x)`` for ``(x).name`` and, when ``t`` has no such column, for
  ``t.name``: field selection from an expression is refused, and ``t.name`` when ``name`` is
  a denied function. ``ts_rewrite`` (like ``query_to_xml``) runs SQL given as a string.
* Writes to the databases' own catalogs (``pg_catalog``, ``information_schema``, ``mysql``,
  ``sys``, ``pg_*`` / ``sqlite_*`` tables) are refused (``system_table``); MySQL user
  variables (``@x``) are refused because they outlive the statement on a pooled connection.
* The guard is one layer. The executor still runs reads in a read-only transaction with a
  statement timeout, as a least-privileged role, one statement per call, fetching at most
  ``max_rows``; it sets PostgreSQL's ``standard_conforming_strings`` on (with it off a
  backslash would end a string early) and keeps MySQL's backslash escapes at their default,
  which is how sqlglot writes string literals.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import re
from dataclasses import dataclass
from typing import Literal, get_args

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect as SqlglotDialect
from sqlglot.errors import ErrorLevel, ParseError, TokenError, UnsupportedError
from sqlglot.tokens import Token, TokenType

from ldims.errors import InvalidInput
from ldims.sql.errors import SqlRejected, SqlSyntaxError

# sqlglot warns about statements it parses as commands, quoting them: callers' SQL (their data)
# does not belong in the log, and the guard decides about those statements itself.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

Dialect = Literal["postgres", "mysql", "sqlite"]
DIALECTS: tuple[Dialect, ...] = get_args(Dialect)
_SCHEMES: dict[str, Dialect] = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
}

# Functions refused anywhere in a statement, compared lower-case, schema ignored.
DENIED_FUNCTIONS = frozenset(
    {
        # PostgreSQL: server files, large objects, other servers, SQL run from a string.
        *("pg_read_file", "pg_read_binary_file", "pg_stat_file", "pg_logdir_ls"),
        *("lowrite", "loread", "ts_stat", "http", "copy"),
        # PostgreSQL: session / server state, signals, WAL and statistics side effects.
        *("set_config", "setval", "pg_notify", "pg_reload_conf", "pg_rotate_logfile"),
        *("pg_terminate_backend", "pg_cancel_backend", "pg_promote", "pg_switch_wal"),
        *("pg_switch_xlog", "pg_start_backup", "pg_stop_backup", "pg_drop_replication_slot"),
        *("pg_replication_slot_advance", "pg_import_system_collations"),
        *("pg_log_backend_memory_contexts", "pg_truncate_visibility_map"),
        *("brin_summarize_new_values", "brin_summarize_range", "brin_desummarize_range"),
        *("gin_clean_pending_list",),
        # MySQL / MariaDB: files, time, locks, replication waits, UDF shells.
        *("load_file", "sleep", "benchmark", "get_lock", "release_lock", "release_all_locks"),
        *("master_pos_wait", "source_pos_wait", "master_gtid_wait"),
        *("wait_for_executed_gtid_set", "wait_until_sql_thread_after_gtids"),
        *("sys_exec", "sys_eval", "sys_get", "sys_set", "lib_mysqludf_sys_info"),
        # SQLite: extensions, the shell's and sqlean's file functions, SQL run from a string.
        *("load_extension", "readfile", "writefile", "edit", "fsdir", "zipfile"),
        *("fts3_tokenizer", "eval", "define"),
        # PostgreSQL: ts_rewrite(query, 'SELECT …') runs SQL given as a string.
        *("ts_rewrite",),
    }
)
DENIED_PREFIXES = (
    "pg_ls_",  # directory listings: pg_ls_dir, pg_ls_logdir, pg_ls_waldir …
    "pg_file_",  # adminpack: pg_file_write, pg_file_rename, pg_file_unlink
    "lo_",  # large objects: lo_import, lo_export, lo_from_bytea, lo_put …
    "dblink",  # dblink, dblink_exec, dblink_connect …
    "pg_sleep",  # pg_sleep, pg_sleep_for, pg_sleep_until
    "pg_advisory",  # advisory locks can block other sessions
    "pg_try_advisory",
    "pg_stat_reset",  # pg_stat_reset*, resets statistics
    "pg_stat_statements_reset",
    "pg_create_",  # replication slots, restore points
    "pg_copy_",  # replication slot copies
    "pg_logical_",  # consuming slots, emitting WAL messages
    "pg_replication_origin_",
    "pg_backup_",
    "pg_wal_replay_",
    "pg_restore_",  # PostgreSQL 18 statistics writes
    "pg_clear_",
    "binary_upgrade_",
    "pg_background_",  # runs SQL in a background worker
    "query_to_xml",  # query_to_xml* and cursor_to_xml* run SQL given as a string
    "cursor_to_xml",
    "table_to_xml",  # whole tables / schemas / databases, past any LIMIT
    "schema_to_xml",
    "database_to_xml",
    "http_",  # the pgsql-http extension: requests from the database server
    "fileio_",  # sqlean's file functions
)
_DENIED_IN_READS = frozenset({"nextval", "txid_current", "pg_current_xact_id"})
# Schemas (and name prefixes) of the databases' own catalogs: never a write target.
_SYSTEM_SCHEMAS = frozenset(
    {"pg_catalog", "pg_toast", "information_schema", "mysql", "performance_schema", "sys"}
)
_SYSTEM_TABLE_PREFIXES = ("pg_", "sqlite_")


def _classes(*names: str) -> tuple[type[exp.Expr], ...]:
    # getattr: a class renamed in another sqlglot 30.x release must not break the import.
    return tuple(c for n in names if isinstance(c := getattr(exp, n, None), type))


# Statements; anywhere below the root of a query they mean the query writes or changes state.
_WRITE_NODES = _classes(
    *("Insert", "Update", "Delete", "Merge", "Copy", "Create", "Drop", "Alter", "TruncateTable"),
    *("Command", "Transaction", "Commit", "Rollback", "Set", "Use", "Pragma", "Attach"),
    *("Detach", "Grant", "Revoke", "Comment", "Analyze", "LoadData", "Kill", "Cache"),
    *("Uncache", "Refresh", "Export", "Declare", "Execute", "ExecuteSql", "Put", "Install"),
    *("Undrop", "SwapTable", "AlterSession", "LockingStatement", "MultitableInserts"),
    *("ConditionalInsert", "Describe", "Show", "Summarize"),
)
_DDL_NODES = _classes("Create", "Drop", "Alter", "TruncateTable", "Comment", "Grant", "Revoke")
_DDL_WORDS = frozenset(
    {"CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE", "COMMENT", "RENAME", "REINDEX"}
)
_QUERY_ROOTS = (exp.Select, exp.SetOperation, exp.Subquery)
_WRITE_ROOTS = (exp.Insert, exp.Update, exp.Delete)

# EXPLAIN options per dialect (PostgreSQL's list form, MySQL's FORMAT=, SQLite's QUERY PLAN).
_EXPLAIN_WORDS: dict[str, frozenset[str]] = {
    "postgres": frozenset(
        {
            *("ANALYZE", "ANALYSE", "VERBOSE", "COSTS", "SETTINGS", "GENERIC_PLAN", "BUFFERS"),
            *("SERIALIZE", "WAL", "TIMING", "SUMMARY", "MEMORY", "FORMAT", "TEXT", "XML", "JSON"),
            *("YAML", "TRUE", "FALSE", "ON", "OFF", "NONE", "BINARY", "0", "1", "(", ")", ","),
        }
    ),
    "mysql": frozenset(
        {"ANALYZE", "FORMAT", "=", "TRADITIONAL", "JSON", "TREE", "EXTENDED", "PARTITIONS"}
    ),
    "sqlite": frozenset({"QUERY", "PLAN"}),
}
_PG_SHOW = re.compile(
    r"all|[a-z_][a-z0-9_$]*(\.[a-z_][a-z0-9_$]*)?|transaction\s+isolation\s+level"
    r"|time\s+zone|session\s+authorization",
    re.IGNORECASE,
)
_OPENERS = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE}
_CLOSERS = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE}
# Parser work budget: ordinary SQL reads each token 1–7 times; pathological input millions.
_BASE_STEPS = 5_000
_STEPS_PER_TOKEN = 25
_ROUND_TRIP_SLACK = 8  # the rendering may add a few brackets for precedence


@dataclass(frozen=True)
class ReadPlan:
    """What read-query runs, and how the guard bounded it."""

    sql: str
    kind: Literal["select", "show", "explain"]
    limit: int | None = None  # the row limit the SQL carries (selects only)
    limit_added: bool = False  # there was no LIMIT; default_limit was added
    limit_capped: bool = False  # the LIMIT was over max_rows (or not a number) and was lowered
    offset: int | None = None  # the OFFSET set for paging (None: the caller asked for none)
    analyze: bool = False  # EXPLAIN ANALYZE: the explained query is executed
    probe: bool = False  # the SQL asks for limit + 1 rows: one more than shown says "truncated"
    notes: tuple[str, ...] = ()  # what the guard changed, in words for the model


@dataclass(frozen=True)
class WritePlan:
    """What write-query runs."""

    sql: str
    kind: Literal["insert", "update", "delete"]
    returning: bool = False  # a RETURNING clause: the statement yields rows
    unfiltered: bool = False  # an UPDATE / DELETE of every row, allowed by allow_unfiltered


def dialect_of(url: str) -> Dialect:
    """The guard's dialect for a SQLAlchemy-style URL (``postgresql+psycopg://…`` → postgres)."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    dialect = _SCHEMES.get(scheme.split("+", 1)[0].lower())
    if dialect is None:  # the scheme only: the rest of a URL may hold a password
        raise ValueError(f"no SQL dialect for the URL scheme {scheme!r}")
    return dialect


def check_read(
    sql: str,
    dialect: Dialect,
    *,
    default_limit: int = 20,
    max_rows: int = 1000,
    offset: int | None = None,
    max_chars: int = 20_000,
    max_depth: int = 32,
    probe: bool = False,
) -> ReadPlan:
    """Accept one SELECT / SHOW / EXPLAIN for read-query, or raise KWDB-4001 / KWDB-4002.

    With ``probe``, a LIMIT the guard added or lowered asks for one row more than
    ``plan.limit``, so the executor can tell a cut result from a complete one.
    """
    _check_dialect(dialect)
    if offset is not None and offset < 0:
        raise InvalidInput("offset must be 0 or more.", field="offset")
    root, tokens = _parse_single(sql, dialect, max_chars=max_chars, max_depth=max_depth)
    word = tokens[0].text.upper()
    explain = word == "EXPLAIN" and isinstance(root, (exp.Command, exp.Describe))
    show = isinstance(root, exp.Show) or (isinstance(root, exp.Command) and root.name == "SHOW")
    if (explain or show) and offset is not None:
        raise InvalidInput("offset pages SELECT results only.", field="offset")
    if explain:
        return _explain(sql[tokens[0].end + 1 :], dialect, max_depth)
    if show:
        return _show(root, dialect, max_depth)
    if not isinstance(root, _QUERY_ROOTS):
        raise SqlRejected(
            "not_read_only",
            f"read-query runs one SELECT, SHOW or EXPLAIN; this statement is {word}"
            " (INSERT / UPDATE / DELETE go through write-query).",
            statement=word,
        )
    _check_tree(root, write=False)
    plan = _bound_rows(root, min(default_limit, max_rows), max_rows, offset, probe)
    text = _render(root, dialect)
    _round_trip(text, dialect, type(root), write=False, max_depth=max_depth)
    return dataclasses.replace(plan, sql=text)


def check_write(
    sql: str,
    dialect: Dialect,
    *,
    writes_enabled: bool,
    allow_unfiltered: bool = False,
    max_chars: int = 20_000,
    max_depth: int = 32,
) -> WritePlan:
    """Accept one INSERT / UPDATE / DELETE for write-query, or raise KWDB-4001 / KWDB-4002."""
    _check_dialect(dialect)
    if not writes_enabled:
        raise SqlRejected(
            "writes_disabled", "writes are switched off on this server; use read-query."
        )
    root, tokens = _parse_single(sql, dialect, max_chars=max_chars, max_depth=max_depth)
    word = tokens[0].text.upper()
    if isinstance(root, _DDL_NODES) or word in _DDL_WORDS:
        raise SqlRejected(
            "ddl", f"{word} changes the schema; write-query runs INSERT, UPDATE or DELETE only."
        )
    if not isinstance(root, _WRITE_ROOTS):
        raise SqlRejected(
            "statement_not_allowed",
            f"write-query runs one INSERT, UPDATE or DELETE; this statement is {word}.",
            statement=word,
        )
    _check_tree(root, write=True)
    _check_target(root)
    unfiltered = _check_filter(root, allow_unfiltered)
    text = _render(root, dialect)
    _round_trip(text, dialect, type(root), write=True, max_depth=max_depth)
    kind: Literal["insert", "update", "delete"] = root.key  # type: ignore[assignment]
    returning = root.args.get("returning") is not None
    return WritePlan(sql=text, kind=kind, returning=returning, unfiltered=unfiltered)


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {DIALECTS}")


class _BudgetExceeded(Exception):
    """The parser's work budget is spent (not a ParseError: backtracking must not catch it)."""


@functools.cache
def _parser_class(dialect: str) -> type:
    base = SqlglotDialect.get_or_raise(dialect).parser_class

    class BudgetedParser(base):  # type: ignore[misc, valid-type]
        # Every token the parser reads, again after a backtrack too, goes through _advance, the
        # primitive sqlglot's own dialect parsers build on; counting calls bounds the work.
        steps_left = 0

        def _advance(self, times: int = 1) -> None:
            self.steps_left -= 1
            if self.steps_left < 0:
                raise _BudgetExceeded
            super()._advance(times)

    return BudgetedParser


def _parse_single(
    sql: str, dialect: str, *, max_chars: int | None, max_depth: int
) -> tuple[exp.Expr, list[Token]]:
    """The one statement in ``sql`` and its tokens, or the error that refuses it."""
    if max_chars is not None and len(sql) > max_chars:
        raise SqlRejected(
            "too_long",
            f"the statement is {len(sql)} characters; the limit is {max_chars}.",
            length=len(sql),
            max_chars=max_chars,
        )
    sqlglot_dialect = SqlglotDialect.get_or_raise(dialect)
    try:
        tokens = sqlglot_dialect.tokenize(sql)
    except TokenError as error:
        raise _token_error(error, sql) from None
    _check_nesting(tokens, max_depth)
    parser = _parser_class(dialect)(dialect=sqlglot_dialect)
    parser.steps_left = _BASE_STEPS + _STEPS_PER_TOKEN * len(tokens)
    try:
        statements = parser.parse(tokens, sql)
    except _BudgetExceeded:
        raise SqlRejected("too_complex", "the statement is too complex to check.") from None
    except RecursionError:
        raise SqlRejected("too_deep", "the statement is nested too deeply to check.") from None
    except ParseError as error:
        if any(
            a.token_type == TokenType.INTO and b.text.upper() in ("OUTFILE", "DUMPFILE")
            for a, b in zip(tokens, tokens[1:], strict=False)
        ):  # sqlglot cannot parse MySQL's INTO OUTFILE; it is refused either way
            raise SqlRejected("select_into", "INTO OUTFILE / DUMPFILE writes a file.") from None
        raise _parse_error(error) from None
    # A comment after the last ';' comes back as an exp.Semicolon statement holding only it.
    found = [s for s in statements if s is not None and not isinstance(s, exp.Semicolon)]
    if not found:
        raise SqlSyntaxError("no SQL statement: the text is empty or only comments.")
    if len(found) > 1:
        raise SqlRejected(
            "multiple_statements",
            f"found {len(found)} statements; send exactly one (a trailing ';' is fine).",
            statements=len(found),
        )
    # Optimizer hints go too: MySQL's /*+ MAX_EXECUTION_TIME(…) */ would lift the timeout and
    # SET_VAR(…) would change session variables; no answer depends on a hint.
    for hint in list(found[0].find_all(exp.Hint)):
        hint.pop()
    return found[0], tokens


def _check_nesting(tokens: list[Token], max_depth: int) -> None:
    depth = 0
    for token in tokens:
        if token.token_type in _OPENERS:
            depth += 1
            if depth > max_depth:
                raise SqlRejected(
                    "too_deep",
                    f"brackets are nested more than {max_depth} levels deep.",
                    max_depth=max_depth,
                )
        elif token.token_type in _CLOSERS:
            depth -= 1


def _token_error(error: TokenError, sql: str) -> SqlSyntaxError:
    # sqlglot keeps the tokenizer's own message as the cause: "Missing ' from 1:10", where
    # 10 is the 0-based offset in the text of the quote left open.
    cause = str(error.__cause__ or error)
    match = re.search(r" from \d+:(\d+)\s*$", cause)
    if match is None:
        return SqlSyntaxError(cause)
    offset = min(int(match[1]), len(sql))
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return SqlSyntaxError(cause[: match.start()], line=line, column=column)


def _parse_error(error: ParseError) -> SqlSyntaxError:
    info = error.errors[0] if error.errors else {}
    line, column, near = info.get("line"), info.get("col"), info.get("highlight") or None
    if isinstance(column, int) and near and "\n" not in near:
        column = max(1, column - len(near) + 1)  # sqlglot points at the token's last character
    return SqlSyntaxError(
        info.get("description") or str(error), line=line, column=column, near=near
    )


def _check_tree(root: exp.Expr, *, write: bool) -> None:
    """Refuse writes, locks, SELECT … INTO and denied functions anywhere below ``root``."""
    for node in root.walk():
        if isinstance(node, exp.Into):
            raise SqlRejected(
                "select_into", "SELECT … INTO creates or fills a table, variable or file."
            )
        if isinstance(node, exp.Lock):
            raise SqlRejected("locking_clause", "FOR UPDATE / FOR SHARE take row locks.")
        if isinstance(node, exp.Dot) and isinstance(node.this, exp.Paren):
            # PostgreSQL reads (value).name as name(value): a function call in disguise.
            raise SqlRejected(
                "denied_function",
                "(expression).name is refused: PostgreSQL would call the function name() "
                "with the expression.",
                function=node.name.lower(),
            )
        if isinstance(node, exp.Column) and node.table and node.name.lower() in DENIED_FUNCTIONS:
            # row.name is name(row) in PostgreSQL when the row has no such column.
            raise SqlRejected(
                "denied_function",
                f"{node.sql()} may call the function {node.name}(), which is not allowed here.",
                function=node.name.lower(),
            )
        if isinstance(node, exp.Parameter | exp.PropertyEQ) and node.find(exp.Var) is not None:
            # @name user variables outlive the statement on a pooled connection (MySQL).
            raise SqlRejected(
                "session_variable", "user variables (@name) would stay on a shared connection."
            )
        if node is not root and isinstance(node, _WRITE_NODES):
            word = node.name.upper() if isinstance(node, exp.Command) else node.key.upper()
            in_cte = node.find_ancestor(exp.CTE) is not None
            where = " inside a CTE" if in_cte else ""
            if not write:
                raise SqlRejected(
                    "not_read_only", f"the query contains a {word}{where}.", statement=word
                )
            rule = "data_modifying_cte" if in_cte else "nested_write"
            raise SqlRejected(rule, f"the statement contains a {word}{where}.", statement=word)
        if isinstance(node, exp.Func):
            names = {node.name} if isinstance(node, exp.Anonymous) else set(type(node).sql_names())
            for name in (n.lower() for n in names):
                if _is_denied(name, write=write):
                    raise SqlRejected(
                        "denied_function",
                        f"{name}() is not allowed here (files, sleeping, locks, other servers"
                        " or server state).",
                        function=name,
                    )


def _is_denied(name: str, *, write: bool) -> bool:
    if name in DENIED_FUNCTIONS or name.startswith(DENIED_PREFIXES):
        return True
    return not write and name in _DENIED_IN_READS


def _check_target(root: exp.Expr) -> None:
    """Refuse writes to the databases' own catalogs (pg_catalog, mysql.user, sqlite_master …)."""
    target = root.this if isinstance(root.this, exp.Table) else root.find(exp.Table)
    if target is None:
        return
    schema, name = target.db.lower(), target.name.lower()
    if schema in _SYSTEM_SCHEMAS or name.startswith(_SYSTEM_TABLE_PREFIXES):
        raise SqlRejected(
            "system_table",
            f"{target.sql()} belongs to the database's own catalog; writes there change the "
            "schema or the server.",
            table=target.sql(),
        )


def _check_filter(root: exp.Expr, allow_unfiltered: bool) -> bool:
    """True for an allowed write of every row; raise ``no_where`` if not allowed.

    Besides UPDATE / DELETE without a WHERE naming a column, two forms can change every row
    of a table whatever their WHERE says: an upsert fed by a SELECT (``INSERT … SELECT … ON
    CONFLICT DO UPDATE`` / ``ON DUPLICATE KEY UPDATE`` / ``INSERT OR REPLACE … SELECT``) and
    an UPDATE / DELETE across several tables (``UPDATE a, b``, ``UPDATE … FROM``,
    ``DELETE … USING``), whose WHERE may only name the other table.
    """
    if isinstance(root, exp.Insert):
        source = root.args.get("expression")
        upsert = root.args.get("conflict") is not None or root.args.get("alternative")
        if not (upsert and isinstance(source, exp.Query)):
            return False
        reason = "an upsert fed by a SELECT can overwrite every row of the table."
    else:
        target = root.this
        several = (
            root.args.get("from_") is not None
            or bool(root.args.get("using"))
            or bool(root.args.get("tables"))
            or bool(root.args.get("joins"))
            or (isinstance(target, exp.Table) and bool(target.args.get("joins")))
        )
        where = root.args.get("where")
        if not several and where is not None and where.find(exp.Column) is not None:
            return False
        reason = (
            f"{root.key.upper()} across several tables can change rows its WHERE does not name."
            if several
            else f"{root.key.upper()} without a WHERE naming a column would change every row."
        )
    if allow_unfiltered:
        return True
    raise SqlRejected("no_where", reason)


def _bound_rows(
    query: exp.Query, default_limit: int, max_rows: int, offset: int | None, probe: bool = False
) -> ReadPlan:
    """Add or lower the LIMIT and set the paging OFFSET, in place; the plan says what changed."""
    notes: list[str] = []
    node = query.args.get("limit")
    added = capped = False
    if node is None:
        query.limit(default_limit + probe, copy=False)
        limit, added = default_limit, True
        notes.append(f"LIMIT {default_limit} added; ask again with offset for more rows.")
    else:
        fetch = isinstance(node, exp.Fetch)
        count = node.args.get("count") if fetch else node.expression
        requested = 1 if fetch and count is None else _int_literal(count)
        if requested is not None and requested <= max_rows:
            limit = requested
        else:
            node.set("count" if fetch else "expression", exp.Literal.number(max_rows + probe))
            limit, capped = max_rows, True
            notes.append(f"LIMIT lowered to the maximum of {max_rows} rows.")
    if offset is not None:
        query.offset(offset, copy=False)
        if query.args.get("order") is None:
            notes.append("No ORDER BY: pages may overlap or skip rows.")
    return ReadPlan(
        sql="",  # rendered by the caller once the tree is final
        kind="select",
        limit=limit,
        limit_added=added,
        limit_capped=capped,
        offset=offset,
        notes=tuple(notes),
        probe=probe and (added or capped),
    )


def _int_literal(node: exp.Expr | None) -> int | None:
    if isinstance(node, exp.Literal) and not node.is_string and node.name.isdigit():
        if len(node.name) > 18:  # far over any max_rows; int() would refuse 4,300+ digits
            return None
        return int(node.name)
    return None


def _explain(rest: str, dialect: str, max_depth: int) -> ReadPlan:
    """EXPLAIN [options] <query>: options from an allow-list, the query by the read rules."""
    try:
        tokens = SqlglotDialect.get_or_raise(dialect).tokenize(rest)
    except TokenError as error:
        raise _token_error(error, rest) from None
    words: list[str] = []
    allowed, depth, start = _EXPLAIN_WORDS[dialect], 0, None
    for token in tokens:
        word = token.text.upper()
        if token.token_type in (TokenType.SELECT, TokenType.WITH) and depth == 0:
            start = token.start
            break
        if word not in allowed:
            if depth:
                raise SqlRejected("explain_option", f"EXPLAIN option {word} is not allowed.")
            raise SqlRejected("not_read_only", f"EXPLAIN is allowed for a query only, not {word}.")
        depth += (word == "(") - (word == ")")
        words.append(word)
    if start is None:
        raise SqlRejected("not_read_only", "EXPLAIN needs a SELECT to explain.")
    query, _ = _parse_single(rest[start:], dialect, max_chars=None, max_depth=max_depth)
    if not isinstance(query, _QUERY_ROOTS):
        raise SqlRejected("not_read_only", "EXPLAIN is allowed for a query only.")
    _check_tree(query, write=False)
    text = _render(query, dialect)
    _round_trip(text, dialect, type(query), write=False, max_depth=max_depth)
    analyze = any(w in ("ANALYZE", "ANALYSE") for w in words) and not any(
        a in ("ANALYZE", "ANALYSE") and b in ("FALSE", "OFF", "0")
        for a, b in zip(words, words[1:], strict=False)
    )
    notes = ("EXPLAIN ANALYZE runs the query to measure it.",) if analyze else ()
    options = re.sub(r"\( | (?=[),])| ?= ?", lambda m: m[0].strip(), " ".join(words))
    sql = f"EXPLAIN {options} {text}" if options else f"EXPLAIN {text}"
    return ReadPlan(sql=sql, kind="explain", analyze=analyze, notes=notes)


def _show(root: exp.Expr, dialect: str, max_depth: int) -> ReadPlan:
    """SHOW: MySQL's forms as sqlglot parses them; PostgreSQL's ``SHOW name``; none in SQLite."""
    if isinstance(root, exp.Show):
        _check_tree(root, write=False)  # SHOW TABLES WHERE sleep(5) is valid MySQL
        text = _render(root, dialect)
        if text == "SHOW GRANTS FOR":  # sqlglot 30 writes a bare SHOW GRANTS this way
            text = "SHOW GRANTS"
        _round_trip(text, dialect, exp.Show, write=False, max_depth=max_depth)
        return ReadPlan(sql=text, kind="show")
    if dialect == "sqlite":
        raise SqlRejected(
            "not_read_only", "SQLite has no SHOW; select from sqlite_master or pragma_table_info()."
        )
    rest = root.expression  # a string literal (PostgreSQL) or a plain str (MySQL)
    rest = rest.name if isinstance(rest, exp.Expr) else str(rest or "")
    try:  # tokens, not the raw text: comments after the name fall away
        words = [token.text for token in SqlglotDialect.get_or_raise(dialect).tokenize(rest)]
    except TokenError as error:
        raise _token_error(error, rest) from None
    name = re.sub(r" ?\. ?", ".", " ".join(words))
    if dialect != "postgres" or not _PG_SHOW.fullmatch(name):
        raise SqlRejected("unsupported", f"this form of SHOW cannot be checked: SHOW {name}.")
    return ReadPlan(sql=f"SHOW {name}", kind="show")


def _render(node: exp.Expr, dialect: str) -> str:
    try:
        return node.sql(
            dialect=dialect,
            comments=False,
            # keep function names as written: upper-casing a quoted name changes its meaning
            normalize_functions=False,
            unsupported_level=ErrorLevel.RAISE,
        )
    except UnsupportedError as error:
        raise SqlRejected("unsupported", f"sqlglot cannot write this back: {error}") from None
    except RecursionError:
        raise SqlRejected("too_deep", "the statement is nested too deeply to check.") from None


def _round_trip(
    text: str, dialect: str, expected: type[exp.Expr], *, write: bool, max_depth: int
) -> None:
    """The rendering must parse back to the same kind of statement and pass the same checks."""
    try:
        again, _ = _parse_single(
            text, dialect, max_chars=None, max_depth=max_depth + _ROUND_TRIP_SLACK
        )
    except (SqlSyntaxError, SqlRejected) as error:
        raise SqlRejected(
            "unsupported", f"sqlglot writes this back as {text!r}, which does not parse back."
        ) from error
    if type(again) is not expected:
        raise SqlRejected(
            "unsupported",
            f"sqlglot writes this back as {text!r}, a {again.key.upper()} statement.",
        )
    _check_tree(again, write=write)
