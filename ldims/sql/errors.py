"""The two errors of the SQL statement guard, with the KWDB seed's codes.

::

    LdimsError
    ├── SqlSyntaxError     400  KWDB-4001  does not parse (details: position, description, near)
    ├── SqlRejected        403  KWDB-4002  refused by the guard or the database's permissions
    ├── SqlTimeout         504  KWDB-4003  no connection after the retries, or over the time limit
    └── SqlObjectNotFound  404  KWDB-4004  the database, table or column named does not exist

``rule`` is a short machine-readable name (``multiple_statements``, ``not_read_only``,
``denied_function`` …; :data:`RULES` lists them all) so that callers and tests can tell refusals
apart without reading the prose. KWDB-4003 and KWDB-4004 come from executing a statement or
reading the schema, not from the guard.
"""

from __future__ import annotations

from typing import Any

from ldims.errors import LdimsError

# Every rule SqlRejected may carry; tests check that each one is reachable.
RULES = frozenset(
    {
        "too_long",  # the text is over max_chars (checked before parsing)
        "too_deep",  # brackets nested over max_depth, or sqlglot ran out of stack
        "too_complex",  # the parser's work budget ran out (pathological backtracking)
        "multiple_statements",  # more than one statement in the text
        "not_read_only",  # read-query got something other than SELECT / SHOW / EXPLAIN
        "explain_option",  # an EXPLAIN option outside the allow-list
        "locking_clause",  # SELECT … FOR UPDATE / FOR SHARE
        "select_into",  # SELECT … INTO table / @var / OUTFILE / DUMPFILE
        "denied_function",  # a function on the deny-list (file access, sleep, dblink …)
        "writes_disabled",  # write-query while writes are switched off
        "ddl",  # CREATE / DROP / ALTER / TRUNCATE / GRANT … through write-query
        "statement_not_allowed",  # write-query got something other than INSERT / UPDATE / DELETE
        "data_modifying_cte",  # a write inside a CTE of a write
        "nested_write",  # a write nested anywhere else in a write
        "no_where",  # UPDATE / DELETE without a filtering WHERE
        "unsupported",  # sqlglot cannot render the statement back faithfully
        "permission_denied",  # the database itself refused (privileges, read-only transaction)
        "system_table",  # a write to the database's own catalog (pg_catalog, mysql.user …)
        "session_variable",  # @name user variables: they outlive the statement (MySQL)
    }
)


class SqlSyntaxError(LdimsError):
    """The SQL does not parse; ``details['position']`` says where, when sqlglot knows."""

    code = "KWDB-4001"
    http_status = 400
    default_message = "The SQL statement has a syntax error."

    def __init__(
        self,
        description: str,
        *,
        line: int | None = None,
        column: int | None = None,
        near: str | None = None,
    ) -> None:
        details: dict[str, Any] = {"description": description}
        where = ""
        if line is not None and column is not None:
            details["position"] = {"line": line, "column": column}
            where = f" at line {line}, column {column}"
        if near:
            details["near"] = near
        super().__init__(f"SQL syntax error{where}: {description}", **details)


class SqlRejected(LdimsError):
    """The SQL parses but is refused; ``rule`` names the check that refused it."""

    code = "KWDB-4002"
    http_status = 403
    default_message = "The SQL statement is not allowed."

    def __init__(self, rule: str, reason: str, **details: Any) -> None:
        if rule not in RULES:  # a typo here would hand callers an undocumented rule
            raise ValueError(f"unknown guard rule {rule!r}")
        self.rule = rule
        super().__init__(
            f"Statement refused ({rule}): {reason}", rule=rule, reason=reason, **details
        )


class SqlTimeout(LdimsError):
    """No connection after the retries (``phase: connect``) or a statement over its time limit."""

    code = "KWDB-4003"
    http_status = 504
    default_message = "The database did not answer in time."


class SqlObjectNotFound(LdimsError):
    """A database, schema, table or column that does not exist (``details: kind, name``)."""

    code = "KWDB-4004"
    http_status = 404
    default_message = "The database object does not exist."

    def __init__(self, kind: str, name: str, message: str | None = None, **details: Any) -> None:
        super().__init__(message or f"No {kind} named {name!r}.", kind=kind, name=name, **details)
