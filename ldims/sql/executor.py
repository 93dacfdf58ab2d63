"""Run what the guard accepted: pooled connections, read-only transactions, time limits.

The guard (:mod:`ldims.sql.guard`) decides *what* may run; this module decides *how*, as the
second layer the guard's docstring relies on:

* one statement per call, sent as the guard rendered it (drivers that could run several —
  SQLite's ``executescript``, MySQL's multi-statement flag — are never asked to);
* reads in a read-only transaction (PostgreSQL ``BEGIN READ ONLY``, MySQL/MariaDB
  ``START TRANSACTION READ ONLY``, SQLite ``PRAGMA query_only``) that is always rolled back;
* writes in a transaction of their own, committed only when the statement succeeded, each one
  written to the ``ldims.sql.audit`` log (statement, rows affected, caller, time);
* a statement time limit the database enforces, set once per pooled connection
  (``statement_timeout``; MariaDB ``max_statement_time``; MySQL ``max_execution_time``, which
  bounds SELECTs only — a MySQL write is bounded by its lock waits alone; SQLite: a progress
  handler that interrupts the statement, and a cap on the size of one value);
* connections from a pool, with ``sql_connect_retries`` attempts and doubling backoff before
  KWDB-4003;
* at most ``max_rows`` rows and ``sql_max_result_chars`` characters fetched into a result.

Database errors are mapped to the seed's codes (:func:`map_database_error`): syntax → 4001,
permissions / read-only violations → 4002, timeouts → 4003, unknown objects → 4004.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import json
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ldims.errors import BackendError, LdimsError
from ldims.settings import Settings
from ldims.sql.errors import SqlObjectNotFound, SqlRejected, SqlSyntaxError, SqlTimeout
from ldims.sql.guard import Dialect, ReadPlan, WritePlan, check_read, check_write, dialect_of

log = logging.getLogger(__name__)
audit = logging.getLogger("ldims.sql.audit")
T = TypeVar("T")

# The drivers LDIMS ships, per dialect (a URL naming another driver keeps it).
_DRIVERS = {"postgres": "postgresql+psycopg", "mysql": "mysql+pymysql", "sqlite": "sqlite"}
_MAX_CELL_CHARS = 10_000
_SQLITE_MAX_VALUE_BYTES = 64 * 1024 * 1024


@dataclass
class QueryResult:
    """Rows of a read-query (or of a write's RETURNING), JSON-ready."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False
    next_offset: int | None = None
    notes: list[str] = field(default_factory=list)
    execution_ms: float = 0.0

    @property
    def row_count(self) -> int:
        return len(self.rows)


@dataclass
class WriteResult:
    """What a write-query changed."""

    kind: str
    rows_affected: int
    returned: QueryResult | None = None
    execution_ms: float = 0.0


@dataclass
class SqlExecutor:
    """One target database: its pool, its dialect and the limits from the settings."""

    settings: Settings
    dialect: Dialect = field(init=False)
    engine: Engine = field(init=False)

    def __post_init__(self) -> None:
        if self.settings.sql_url is None:
            raise ValueError("the sql toolset needs LDIMS_SQL_URL")
        raw = self.settings.sql_url.get_secret_value()
        self.dialect = dialect_of(raw)
        self.engine = _engine(raw, self.dialect, self.settings)
        # Session set-up once per new connection, not one round trip per statement.
        event.listen(self.engine, "connect", self._on_connect)

    # --- public ------------------------------------------------------------------------------
    def read(self, sql: str, offset: int | None = None) -> QueryResult:
        """read-query: check, then run in a read-only transaction."""
        plan = _checked_read(
            sql,
            self.dialect,
            self.settings.sql_default_limit,
            self.settings.sql_max_rows,
            offset,
            self.settings.sql_max_statement_chars,
        )
        started = time.perf_counter()
        with self.read_only() as connection:
            stream = plan.kind == "select" and self.dialect != "sqlite"
            cursor = _run(connection, plan.sql, stream=stream)
            try:
                result = self._collect(cursor, plan)
            finally:
                cursor.close()  # reads what is left of a streamed result before the ROLLBACK
        result.execution_ms = (time.perf_counter() - started) * 1000
        return result

    def write(self, sql: str, caller: str) -> WriteResult:
        """write-query: check, run in a transaction, commit on success, audit."""
        plan = _checked_write(
            sql,
            self.dialect,
            self.settings.sql_write,
            self.settings.sql_allow_unfiltered_writes,
            self.settings.sql_max_statement_chars,
        )
        started = time.perf_counter()
        with self._connection() as connection, self._mapped_errors(), connection.begin():
            self._limit_time(connection)  # SQLite only; the servers' limit is per session
            cursor = _run(connection, plan.sql)
            returned = self._returned(cursor, plan)
            affected = cursor.rowcount if cursor.rowcount is not None else -1
            if affected < 0 and returned is not None:  # psycopg with RETURNING
                affected = returned.row_count
        elapsed = (time.perf_counter() - started) * 1000
        audit.info(
            "write-query by %s: %s row(s) %s in %.1f ms: %s",
            caller,
            affected,
            plan.kind,
            elapsed,
            plan.sql,
        )
        return WriteResult(plan.kind, affected, returned, elapsed)

    def inspect(self, reader: Callable[[Connection, Dialect], T]) -> T:
        """Run a schema reader inside a read-only transaction with the time limit."""
        with self.read_only() as connection:
            return reader(connection, self.dialect)

    def dispose(self) -> None:
        self.engine.dispose()

    # --- transactions ------------------------------------------------------------------------
    @contextmanager
    def read_only(self) -> Iterator[Connection]:
        """A connection in a read-only transaction that is rolled back afterwards."""
        with self._connection() as connection, self._mapped_errors():
            if self.dialect == "mysql":
                # Explicit: SQLAlchemy's implicit BEGIN cannot be made read-only here.
                connection = connection.execution_options(isolation_level="AUTOCOMMIT")
                connection.exec_driver_sql("START TRANSACTION READ ONLY")
                try:
                    yield connection
                finally:
                    connection.exec_driver_sql("ROLLBACK")
                return
            if self.dialect == "postgres":
                # psycopg then opens the transaction with BEGIN READ ONLY (one round trip);
                # SQLAlchemy resets the flag when the connection goes back to the pool.
                connection = connection.execution_options(postgresql_readonly=True)
            transaction = connection.begin()
            try:
                if self.dialect == "sqlite":
                    connection.exec_driver_sql("PRAGMA query_only = ON")
                    self._limit_time(connection)
                yield connection
            finally:
                transaction.rollback()
                if self.dialect == "sqlite":
                    connection.exec_driver_sql("PRAGMA query_only = OFF")

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A pooled connection, after up to ``sql_connect_retries`` attempts (KWDB-4003)."""
        attempts = self.settings.sql_connect_retries
        for attempt in range(1, attempts + 1):
            try:
                connection = self.engine.connect()
                break
            except PoolTimeout:
                # Every pooled connection is busy (calls abandoned by a timeout still hold one).
                raise SqlTimeout(
                    "All database connections are busy; try again shortly.",
                    phase="pool",
                    poolSize=self.settings.sql_pool_size,
                ) from None
            except DBAPIError as exc:
                if attempt == attempts:
                    log.warning("sql: no connection after %d attempts", attempts)
                    raise SqlTimeout(
                        f"Could not connect to the database after {attempts} attempts.",
                        phase="connect",
                        attempts=attempts,
                        reason=_first_line(exc.orig),
                    ) from None
                time.sleep(0.25 * 2 ** (attempt - 1))
        with connection:
            yield connection

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        try:
            yield
        except LdimsError:
            raise
        except DBAPIError as exc:
            raise map_database_error(exc, self.dialect, self.settings.sql_timeout_seconds) from None
        except SQLAlchemyError as exc:
            log.error("sql: %s", type(exc).__name__)
            raise BackendError("The database layer failed.", reason=type(exc).__name__) from None

    def _limit_time(self, connection: Connection) -> None:
        """SQLite has no server-side limit: interrupt from a progress handler."""
        if self.dialect == "sqlite":
            _sqlite_deadline(connection, self.settings.sql_timeout_seconds)

    def _on_connect(self, dbapi_connection: Any, _record: Any) -> None:
        """A new connection's session: its statement time limit (and SQLite's switches)."""
        seconds = self.settings.sql_timeout_seconds
        if self.dialect == "sqlite":
            _sqlite_on_connect(dbapi_connection)
            return
        cursor = dbapi_connection.cursor()
        try:
            if self.dialect == "postgres":
                cursor.execute(f"SET statement_timeout = {int(seconds * 1000)}")
                # The guard writes string literals the standard way; with this off, a
                # backslash would end a string early and the rest would run as SQL.
                cursor.execute("SET standard_conforming_strings = on")
            else:
                cursor.execute("SELECT VERSION()")
                if "mariadb" in str(cursor.fetchone()[0]).lower():
                    cursor.execute(f"SET SESSION max_statement_time = {seconds:.3f}")
                else:
                    cursor.execute(f"SET SESSION max_execution_time = {int(seconds * 1000)}")
        finally:
            cursor.close()
        dbapi_connection.commit()  # psycopg opened a transaction for the SET

    # --- results -----------------------------------------------------------------------------
    def _collect(self, cursor: Any, plan: ReadPlan) -> QueryResult:
        columns = list(map(str, cursor.keys()))
        wanted = plan.limit if plan.limit is not None else self.settings.sql_max_rows
        rows, cut_by_size = self._fetch(cursor, wanted + 1)
        truncated = len(rows) > wanted or cut_by_size
        rows = rows[:wanted]
        notes = list(plan.notes)
        if cut_by_size:
            notes.append(
                f"Result cut at {self.settings.sql_max_result_chars} characters "
                "(LDIMS_SQL_MAX_RESULT_CHARS); select fewer columns or rows."
            )
        next_offset = None
        if truncated and plan.kind == "select" and (plan.limit_added or plan.limit_capped):
            next_offset = (plan.offset or 0) + len(rows)
        return QueryResult(columns, rows, truncated, next_offset, notes)

    def _returned(self, cursor: Any, plan: WritePlan) -> QueryResult | None:
        if not cursor.returns_rows:
            return None
        columns = list(map(str, cursor.keys()))
        wanted = self.settings.sql_max_rows
        rows, cut = self._fetch(cursor, wanted + 1)
        # Drain the rest: some drivers report rowcount only once every row was read.
        for _ in cursor:
            pass
        return QueryResult(columns, rows[:wanted], len(rows) > wanted or cut)

    def _fetch(self, cursor: Any, most: int) -> tuple[list[list[Any]], bool]:
        budget = self.settings.sql_max_result_chars
        rows: list[list[Any]] = []
        for row in cursor.fetchmany(most):
            values = [_shown(value) for value in row]
            budget -= len(json.dumps(values, ensure_ascii=False, default=str))
            if budget < 0 and rows:
                return rows, True
            rows.append(values)
        return rows, False


def _run(connection: Connection, sql: str, stream: bool = False) -> Any:
    # No parameters at all: PyMySQL would otherwise %-format the text with an empty tuple.
    # Streaming (server-side cursor, batches of 50 rows): a result of huge rows stops at the
    # size budget instead of being loaded whole into this process. It costs PostgreSQL reads
    # ~1.5 ms (DECLARE / FETCH / CLOSE round trips), measured; safety first.
    options: dict[str, Any] = {"no_parameters": True}
    if stream:
        options.update(yield_per=50)
    return connection.exec_driver_sql(sql, execution_options=options)


def _shown(value: Any) -> Any:
    """``json_value`` that never fails: a value too big or too deep for JSON becomes a note."""
    try:
        shown = json_value(value)
        json.dumps(shown, default=str)
        return shown
    except (ValueError, RecursionError, OverflowError):
        return f"<{type(value).__name__} too large or too deeply nested to show>"


def json_value(value: Any) -> Any:
    """A database value as JSON: numbers stay numbers, the rest becomes readable text."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if isinstance(value, decimal.Decimal):
        return (
            int(value) if value == value.to_integral_value() and abs(value) < 2**53 else str(value)
        )
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return {"base64": base64.b64encode(data[:_MAX_CELL_CHARS]).decode(), "bytes": len(data)}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_value(item) for key, item in value.items()}
    text = str(value)
    return text if len(text) <= _MAX_CELL_CHARS else text[:_MAX_CELL_CHARS] + "…"


# --- engines -------------------------------------------------------------------------------
def _engine(raw_url: str, dialect: Dialect, settings: Settings) -> Engine:
    url = make_url(raw_url)
    if "+" not in url.drivername:
        url = url.set(drivername=_DRIVERS[dialect])
    if dialect == "sqlite":
        return create_engine(url, connect_args={"timeout": settings.sql_connect_timeout_seconds})
    connect_timeout = max(1, round(settings.sql_connect_timeout_seconds))
    return create_engine(
        url,
        pool_size=settings.sql_pool_size,
        max_overflow=0,
        pool_timeout=settings.sql_timeout_seconds,
        pool_pre_ping=True,
        pool_recycle=1800,
        connect_args={"connect_timeout": connect_timeout},
    )


@functools.lru_cache(maxsize=1024)
def _checked_read(
    sql: str, dialect: Dialect, default_limit: int, max_rows: int, offset: int | None, chars: int
) -> ReadPlan:
    # Agents repeat statements (paging, retries): the plan of a text is always the same.
    return check_read(
        sql,
        dialect,
        default_limit=default_limit,
        max_rows=max_rows,
        offset=offset,
        max_chars=chars,
        probe=True,
    )


@functools.lru_cache(maxsize=1024)
def _checked_write(
    sql: str, dialect: Dialect, enabled: bool, allow_unfiltered: bool, chars: int
) -> WritePlan:
    return check_write(
        sql, dialect, writes_enabled=enabled, allow_unfiltered=allow_unfiltered, max_chars=chars
    )


def _sqlite_on_connect(dbapi_connection: sqlite3.Connection) -> None:
    # SQLite's own safety switches: no extension loading, defensive mode where available.
    if hasattr(dbapi_connection, "enable_load_extension"):
        dbapi_connection.enable_load_extension(False)
    # One value (randomblob(500000000)) cannot outgrow this: the progress handler that
    # enforces the time limit is never called inside a single function.
    if hasattr(dbapi_connection, "setlimit"):
        dbapi_connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _SQLITE_MAX_VALUE_BYTES)
    if hasattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE"):
        dbapi_connection.setconfig(sqlite3.SQLITE_DBCONFIG_DEFENSIVE, True)


def _sqlite_deadline(connection: Connection, seconds: float) -> None:
    """Interrupt the connection's statements once ``seconds`` have passed from now."""
    raw = connection.connection.driver_connection
    deadline = time.monotonic() + seconds

    def over_time() -> int:
        return 1 if time.monotonic() > deadline else 0

    raw.set_progress_handler(over_time, 10_000)


# --- errors ----------------------------------------------------------------------------------
_PG_SQLSTATE_CLASSES = {
    "42601": "syntax",
    "42P01": "missing",
    "42703": "missing",
    "42883": "missing",
    "3F000": "missing",
    "3D000": "missing",
    "42704": "missing",
    "42501": "denied",
    "25006": "denied",
    "57014": "timeout",
    "55P03": "timeout",
}
_MYSQL_ERRNO_CLASSES = {
    1064: "syntax",
    1146: "missing",
    1054: "missing",
    1049: "missing",
    1305: "missing",
    1109: "missing",
    1044: "denied",
    1045: "denied",
    1142: "denied",
    1143: "denied",
    1227: "denied",
    1792: "denied",
    1290: "denied",
    3024: "timeout",
    1969: "timeout",
    1317: "timeout",
    2003: "connect",
    2006: "connect",
    2013: "connect",
}
_SQLITE_PATTERNS = (
    (re.compile(r"syntax error|incomplete input|unrecognized token"), "syntax"),
    (re.compile(r"no such (table|column|function|module|collation)"), "missing"),
    (re.compile(r"readonly database|read-only|not authorized|query_only"), "denied"),
    (re.compile(r"interrupted|database is locked"), "timeout"),
)
_QUOTED = re.compile(r"""["'`]([^"'`]{1,128})["'`]""")


def map_database_error(error: DBAPIError, dialect: Dialect, timeout: float) -> LdimsError:
    """The seed's error for a failure the database reported."""
    original = error.orig
    message = _first_line(original)
    kind, position = _classify(original, dialect, message)
    if kind == "syntax":
        return (
            SqlSyntaxError(message, line=position[0], column=position[1])
            if position
            else (SqlSyntaxError(message))
        )
    if kind == "missing":
        match = _QUOTED.search(message)
        return SqlObjectNotFound(
            "object", match.group(1) if match else "?", f"Not found: {message}", reason=message
        )
    if kind == "denied":
        return SqlRejected("permission_denied", message)
    if kind == "timeout":
        return SqlTimeout(
            f"The statement was stopped after the {timeout:g}s limit or while waiting for a lock.",
            phase="query",
            timeoutSeconds=timeout,
            reason=message,
        )
    if kind == "connect":
        return SqlTimeout("The database connection was lost.", phase="connect", reason=message)
    if error.connection_invalidated:
        return SqlTimeout("The database connection was lost.", phase="connect", reason=message)
    # Anything else the statement itself caused (bad cast, division by zero …): the caller's
    # statement is at fault, so it is reported like a syntax error, with the database's words.
    return SqlSyntaxError(message)


def _classify(
    original: BaseException | None, dialect: Dialect, message: str
) -> tuple[str | None, tuple[int, int] | None]:
    if dialect == "postgres":
        state = getattr(original, "sqlstate", None) or ""
        kind = _PG_SQLSTATE_CLASSES.get(state)
        if kind is None and state.startswith("08"):
            kind = "connect"
        position = None
        diag = getattr(original, "diag", None)
        if kind == "syntax" and diag is not None and diag.statement_position:
            position = (1, int(diag.statement_position))
        return kind, position
    if dialect == "mysql":
        args = getattr(original, "args", ())
        errno = args[0] if args and isinstance(args[0], int) else None
        kind = _MYSQL_ERRNO_CLASSES.get(errno) if errno is not None else None
        position = None
        if kind == "syntax":
            line = re.search(r"at line (\d+)", message)
            position = (int(line.group(1)), 0) if line else None
        return kind, position
    lowered = message.lower()
    for pattern, kind in _SQLITE_PATTERNS:
        if pattern.search(lowered):
            return kind, None
    return None, None


def _first_line(error: BaseException | None) -> str:
    if error is None:
        return "unknown database error"
    args = getattr(error, "args", ())
    if len(args) >= 2 and isinstance(args[0], int):  # PyMySQL: (errno, message)
        return str(args[1]).splitlines()[0][:500]
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:500]
