"""Schema introspection behind the KWDB seed's resources (§3.2): product, database, table.

``kwdb://product_info`` → :func:`product_info`, ``kwdb://db_info/{database_name}`` →
:func:`db_info`, ``kwdb://table/{table_name}`` → :func:`table_info`. Each is a plain function of
a SQLAlchemy ``Connection`` and the guard's :data:`~ldims.sql.guard.Dialect`; the caller owns
the pool, the read-only transaction and the time limits, so nothing here commits or changes a
session setting. Results are JSON-ready dicts (str / int / bool / None, lists, dicts).

Decisions:

* Names are looked up in the catalog with bound parameters (exactly, then case-insensitively
  when that gives exactly one match); only a name the catalog returned is handed on to
  SQLAlchemy's inspector, which quotes it itself. No name is ever formatted into SQL text.
* Listings and row estimates come from the catalog (PostgreSQL ``pg_class.reltuples``,
  MySQL ``information_schema.tables.table_rows``, SQLite ``sqlite_stat1``), never from
  ``count(*)``: they stay cheap on big tables and are ``None`` until statistics exist.
* Column types are the database's own words (``format_type``, ``column_type``, the declared
  SQLite type), not SQLAlchemy's generic names. SQLAlchemy's inspector reads keys and indexes
  everywhere and MySQL's and SQLite's columns; PostgreSQL's columns come from ``pg_attribute``,
  because the inspector warns on every type it does not know (``xid``, PostGIS, KaiwuDB's).
* Materialized views are reported as views, foreign and partitioned tables as tables; the
  partitions of a partitioned table are not listed; sequences are left out.
* Database errors (a statement timeout, a missing privilege) propagate as SQLAlchemy
  ``DBAPIError`` for the caller to map, as it does for the statements it runs; only an unknown
  database or table is reported here, as :class:`~ldims.sql.errors.SqlObjectNotFound`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Inspector, bindparam, inspect, text

from ldims.sql.errors import SqlObjectNotFound
from ldims.sql.guard import Dialect

MAX_TABLES = 500
_VERSION = re.compile(r"\d+(?:\.\d+)+")
_PG_SYSTEM = frozenset({"information_schema", "crdb_internal", "kwdb_internal"})

_SERVER_SQL: dict[Dialect, str] = {
    "postgres": "SELECT version(), current_database(), current_user",
    "mysql": "SELECT version(), database(), current_user()",
    "sqlite": "SELECT sqlite_version(), 'main', NULL",
}
_SCHEMAS_SQL: dict[Dialect, str] = {
    "postgres": "SELECT nspname FROM pg_catalog.pg_namespace ORDER BY nspname",
    "mysql": "SELECT schema_name FROM information_schema.schemata ORDER BY schema_name",
    "sqlite": "SELECT 'main'",
}
# (base query, filter on one name, order); each row: schema, name, kind, row estimate.
_RELATIONS_SQL: dict[Dialect, tuple[str, str, str]] = {
    "postgres": (
        "SELECT n.nspname, c.relname, c.relkind, c.reltuples"
        " FROM pg_catalog.pg_class AS c"
        " JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE c.relkind IN ('r', 'p', 'f', 'v', 'm') AND NOT c.relispartition"
        " AND n.nspname IN :schemas",
        " AND lower(c.relname) = lower(:name)",
        " ORDER BY n.nspname, c.relname",
    ),
    "mysql": (
        "SELECT table_schema, table_name, table_type, table_rows"
        " FROM information_schema.tables"
        " WHERE table_schema IN :schemas AND table_type <> 'SEQUENCE'",
        " AND lower(table_name) = lower(:name)",
        " ORDER BY table_schema, table_name",
    ),
    "sqlite": (
        "SELECT 'main', name, type, NULL FROM sqlite_master"
        " WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'"
        " AND 'main' IN :schemas",
        " AND lower(name) = lower(:name)",
        " ORDER BY name",
    ),
}
_PLAIN_VIEWS = frozenset({"v", "VIEW", "SYSTEM VIEW", "view"})  # no rows of their own
_VIEW_KINDS = _PLAIN_VIEWS | {"m"}  # PostgreSQL's materialized views count as views
# PostgreSQL's columns come whole from the catalog: the inspector warns (SAWarning) on every type
# SQLAlchemy does not know (xid, PostGIS, KaiwuDB's own) and its type names are not the
# database's. Each row: name, type, nullable, default, comment.
_PG_COLUMNS_SQL = (
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), NOT a.attnotnull,"
    " pg_catalog.pg_get_expr(d.adbin, d.adrelid), pg_catalog.col_description(c.oid, a.attnum)"
    " FROM pg_catalog.pg_attribute AS a"
    " JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid"
    " JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace"
    " LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
    " WHERE n.nspname = :schema AND c.relname = :name AND a.attnum > 0"
    " AND NOT a.attisdropped ORDER BY a.attnum"
)
# The types MySQL and SQLite give their columns, in their own words (the inspector's are
# SQLAlchemy's: INTEGER(11) for int(11)).
_TYPES_SQL: dict[Dialect, str] = {
    "mysql": "SELECT column_name, column_type FROM information_schema.columns"
    " WHERE table_schema = :schema AND table_name = :name",
    "sqlite": "SELECT name, type FROM pragma_table_xinfo(:name, :schema)",
}


@dataclass(frozen=True)
class _Relation:
    schema: str
    name: str
    type: str  # "table" | "view"
    row_estimate: int | None


def product_info(conn: Connection, dialect: Dialect) -> dict[str, Any]:
    """The server behind the connection: product, versions, current database and user, driver.

    ``product`` is KaiwuDB when a PostgreSQL-wire server's ``version()`` names KaiwuDB / KWDB,
    MariaDB when the version says so; ``user`` is left out for SQLite, which has none.
    """
    version, database, user = conn.execute(text(_SERVER_SQL[dialect])).one()
    match = _VERSION.search(version)
    info: dict[str, Any] = {
        "product": _product(dialect, version),
        "dialect": dialect,
        "serverVersion": match.group(0) if match else version,
        "versionString": version,
        "database": database,  # MySQL: None when the connection selected no database
    }
    if dialect != "sqlite":
        info["user"] = user
    info["driver"] = conn.dialect.driver
    return info


def db_info(
    conn: Connection, dialect: Dialect, database_name: str, *, max_tables: int = MAX_TABLES
) -> dict[str, Any]:
    """The schemas and tables (with views) of one database, at most ``max_tables`` of them.

    PostgreSQL: ``database_name`` is the connected database (every non-system schema) or one of
    its schemas (that schema alone); a connection cannot read another database's catalog, so
    any other name is unknown. MySQL / MariaDB: a database (= schema); the system ones
    (``mysql``, ``information_schema`` …) too, when named. SQLite: ``main`` or the stem of the
    database file. ``tableCount`` counts every table; ``truncated`` says the list was cut.

    Raises:
        SqlObjectNotFound: (KWDB-4004, kind ``database``) for any other name.
    """
    if max_tables < 1:
        raise ValueError("max_tables must be at least 1")
    database, schemas = _database_scope(conn, dialect, database_name)
    relations = _relations(conn, dialect, schemas, limit=max_tables + 1)
    truncated = len(relations) > max_tables
    relations = relations[:max_tables]
    count = _relation_count(conn, dialect, schemas) if truncated else len(relations)
    version = conn.execute(text(_SERVER_SQL[dialect])).one()[0]
    return {
        "database": database,
        "product": _product(dialect, version),
        "schemas": schemas,
        "tables": [
            {"schema": r.schema, "name": r.name, "type": r.type, "rowEstimate": r.row_estimate}
            for r in relations
        ],
        "tableCount": count,
        "truncated": truncated,
    }


def table_info(conn: Connection, dialect: Dialect, table_name: str) -> dict[str, Any]:
    """Columns, keys, indexes and row estimate of one table or view.

    ``table_name`` is ``name`` or ``schema.name`` (MySQL: ``database.name``). An unqualified
    name resolves as the database would: PostgreSQL along ``current_schemas(false)``, MySQL in
    the current database, SQLite in ``main``. Views come back with ``type`` ``view`` and no
    keys or indexes.

    Raises:
        SqlObjectNotFound: (KWDB-4004, kind ``table``) when nothing, or more than one table
            differing only in case, matches.
    """
    relation = _resolve_table(conn, dialect, table_name)
    inspector = inspect(conn)
    schema, name = relation.schema, relation.name
    primary_key: list[str] = []
    foreign_keys: list[dict[str, Any]] = []
    indexes: list[dict[str, Any]] = []
    if relation.type == "table":
        primary_key = list(inspector.get_pk_constraint(name, schema=schema)["constrained_columns"])
        foreign_keys = [
            _foreign_key(conn, dialect, schema, fk)
            for fk in inspector.get_foreign_keys(name, schema=schema)
        ]
        indexes = _indexes(conn, dialect, inspector, schema, name)
    columns = _columns(conn, dialect, inspector, schema, name)
    for column in columns:
        column["primaryKey"] = column["name"] in primary_key
        if dialect == "sqlite" and primary_key == [column["name"]]:
            # The rowid alias: SQLite's table_info calls it nullable, it never is.
            column["nullable"] = column["nullable"] and column["type"].upper() != "INTEGER"
    return {
        "schema": schema,
        "name": name,
        "type": relation.type,
        "columns": columns,
        "primaryKey": primary_key,
        "foreignKeys": foreign_keys,
        "indexes": indexes,
        "rowEstimate": relation.row_estimate,
    }


# --- names -----------------------------------------------------------------------------------
def _match(wanted: str, names: list[str]) -> str | None:
    """``wanted`` itself when listed, else the one name equal to it ignoring case."""
    if wanted in names:
        return wanted
    folded = [n for n in names if n.lower() == wanted.lower()]
    return folded[0] if len(set(folded)) == 1 else None


def _schemas(conn: Connection, dialect: Dialect) -> list[str]:
    return list(conn.execute(text(_SCHEMAS_SQL[dialect])).scalars())


def _database_scope(conn: Connection, dialect: Dialect, wanted: str) -> tuple[str, list[str]]:
    """The database's canonical name and the schemas db_info lists for ``wanted``."""
    schemas = _schemas(conn, dialect)
    if dialect == "postgres":
        current = conn.execute(text("SELECT current_database()")).scalar_one()
        found = _match(wanted, [current, *schemas])
        if found == current:  # the database wins over a schema of the same name
            user_schemas = [s for s in schemas if not _pg_system(s)]
            return current, user_schemas
        if found is not None:
            return found, [found]
    elif dialect == "mysql":
        found = _match(wanted, schemas)
        if found is not None:
            return found, [found]
    else:
        files = conn.execute(text("SELECT file FROM pragma_database_list WHERE name = 'main'"))
        file = files.scalar_one_or_none()
        names = ["main", *([Path(file).stem] if file else [])]
        if _match(wanted, names) is not None:
            return "main", ["main"]
    raise SqlObjectNotFound("database", wanted)


def _pg_system(schema: str) -> bool:
    return schema.startswith("pg_") or schema in _PG_SYSTEM


def _default_schemas(conn: Connection, dialect: Dialect) -> list[str]:
    """Where an unqualified table name is looked up, in the database's order."""
    if dialect == "postgres":
        path = conn.execute(text("SELECT current_schemas(false)")).scalar_one()
        return list(path) or ["public"]
    if dialect == "mysql":
        current = conn.execute(text("SELECT database()")).scalar_one()
        return [current] if current else []
    return ["main"]


def _resolve_table(conn: Connection, dialect: Dialect, table_name: str) -> _Relation:
    attempts: list[tuple[list[str], str]] = []
    if "." in table_name:
        schema_part, name_part = table_name.split(".", 1)
        schema = _match(schema_part, _schemas(conn, dialect))
        if schema is not None:
            attempts.append(([schema], name_part))
    default = _default_schemas(conn, dialect)
    attempts.append((default, table_name))  # also a name with a dot in it
    for schemas, name in attempts:
        found = _relations(conn, dialect, schemas, name=name) if schemas else []
        # Again in Python: MySQL's collations also equate trailing spaces and accents.
        found = [r for r in found if r.schema in schemas and r.name.lower() == name.lower()]
        exact = [r for s in schemas for r in found if (r.schema, r.name) == (s, name)]
        if exact:  # the first schema on the path holding the name wins, as in the database
            return exact[0]
        if len(found) == 1:
            return found[0]
    if not default and "." not in table_name:  # MySQL without a current database
        raise SqlObjectNotFound(
            "table",
            table_name,
            f"No table named {table_name!r}: no database is selected; name it database.table.",
        )
    raise SqlObjectNotFound("table", table_name)


# --- catalog ---------------------------------------------------------------------------------
def _relations(
    conn: Connection,
    dialect: Dialect,
    schemas: list[str],
    *,
    name: str | None = None,
    limit: int | None = None,
) -> list[_Relation]:
    """Tables and views of ``schemas`` (all, or those named ``name`` in any case)."""
    base, by_name, order = _RELATIONS_SQL[dialect]
    sql = base + (by_name if name is not None else "") + order
    params: dict[str, Any] = {"schemas": schemas}
    if name is not None:
        params["name"] = name
    if limit is not None:
        sql += " LIMIT :limit"
        params["limit"] = limit
    rows = conn.execute(text(sql).bindparams(bindparam("schemas", expanding=True)), params)
    relations = [
        _Relation(
            schema=schema,
            name=relation,
            type="view" if kind in _VIEW_KINDS else "table",
            row_estimate=_estimate(dialect, kind, rows_),
        )
        for schema, relation, kind, rows_ in rows
    ]
    if dialect == "sqlite":
        relations = _with_sqlite_stats(conn, relations)
    return relations


def _relation_count(conn: Connection, dialect: Dialect, schemas: list[str]) -> int:
    base = _RELATIONS_SQL[dialect][0]
    sql = text(f"SELECT count(*) FROM ({base}) AS listed")  # constant text, no names in it
    result = conn.execute(
        sql.bindparams(bindparam("schemas", expanding=True)), {"schemas": schemas}
    )
    return int(result.scalar_one())


def _estimate(dialect: Dialect, kind: str, rows: Any) -> int | None:
    if rows is None or kind in _PLAIN_VIEWS:
        return None
    if dialect == "postgres" and rows < 0:  # -1: never vacuumed or analyzed (PostgreSQL 14+)
        return None
    return int(round(rows))


def _with_sqlite_stats(conn: Connection, relations: list[_Relation]) -> list[_Relation]:
    """Row estimates from ``sqlite_stat1`` (written by ANALYZE), when it exists."""
    tables = [r.name for r in relations if r.type == "table"]
    has_stats = conn.execute(
        text("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1'")
    ).scalar_one()
    if not tables or not has_stats:
        return relations
    query = text("SELECT tbl, stat FROM sqlite_stat1 WHERE tbl IN :tables")
    estimates: dict[str, int] = {}
    for table, stat in conn.execute(
        query.bindparams(bindparam("tables", expanding=True)), {"tables": tables}
    ):
        first = str(stat).split(" ", 1)[0]
        if not first.isdigit():
            continue
        # A table without indexes has one row with idx NULL; otherwise each index row starts
        # with the index's row count (smaller for a partial index), so the largest is taken.
        estimates[table] = max(estimates.get(table, 0), int(first))
    return [
        _Relation(r.schema, r.name, r.type, estimates.get(r.name, r.row_estimate))
        for r in relations
    ]


def _columns(
    conn: Connection, dialect: Dialect, inspector: Inspector, schema: str, name: str
) -> list[dict[str, Any]]:
    """Name, type (the database's words), nullable, default and comment of each column."""
    params = {"schema": schema, "name": name}
    if dialect == "postgres":
        rows = conn.execute(text(_PG_COLUMNS_SQL), params)
        keys = ("name", "type", "nullable", "default", "primaryKey", "comment")
        return [
            dict(zip(keys, (n, t, bool(null), d, False, c), strict=True))
            for n, t, null, d, c in rows
        ]
    declared = {str(c): str(t or "") for c, t in conn.execute(text(_TYPES_SQL[dialect]), params)}
    columns = []
    for column in inspector.get_columns(name, schema=schema):
        default = column.get("default")
        columns.append(
            {
                "name": column["name"],
                "type": declared.get(column["name"], str(column["type"])),
                "nullable": bool(column["nullable"]),
                "default": None if default is None else str(default),
                "primaryKey": False,  # set by table_info
                "comment": column.get("comment") or None,
            }
        )
    return columns


def _foreign_key(
    conn: Connection, dialect: Dialect, schema: str, fk: dict[str, Any]
) -> dict[str, Any]:
    referred_schema = fk.get("referred_schema")
    referred_table = fk["referred_table"]
    if referred_schema is None:
        # Left out when the database leaves it out: PostgreSQL when the referred table is
        # visible on the search path, MySQL and SQLite when it is in the same schema.
        referred_schema = schema
        if dialect == "postgres":
            path = _default_schemas(conn, dialect)
            found = _relations(conn, dialect, path, name=referred_table)
            on_path = [s for s in path for r in found if (r.schema, r.name) == (s, referred_table)]
            referred_schema = on_path[0] if on_path else schema
    return {
        "columns": list(fk["constrained_columns"]),
        "referredSchema": referred_schema,
        "referredTable": referred_table,
        "referredColumns": list(fk["referred_columns"]),
    }


def _indexes(
    conn: Connection, dialect: Dialect, inspector: Inspector, schema: str, name: str
) -> list[dict[str, Any]]:
    indexes = [
        {
            "name": index["name"],
            "columns": [str(c) for c in (index.get("expressions") or index["column_names"])],
            "unique": bool(index["unique"]),
        }
        for index in inspector.get_indexes(name, schema=schema)
    ]
    if dialect == "sqlite":
        indexes += _sqlite_unique_constraints(conn, name)
    return indexes


def _sqlite_unique_constraints(conn: Connection, name: str) -> list[dict[str, Any]]:
    """UNIQUE constraints, which SQLite backs with ``sqlite_autoindex_*`` indexes.

    SQLAlchemy leaves those indexes out of ``get_indexes`` and finds only table-level
    ``UNIQUE (…)`` clauses in ``get_unique_constraints``, not a column's own ``UNIQUE``; the
    index list (origin ``u``) has both.
    """
    rows = conn.execute(
        text(
            "SELECT l.name, i.name FROM pragma_index_list(:name, 'main') AS l,"
            " pragma_index_info(l.name, 'main') AS i"
            " WHERE l.origin = 'u' ORDER BY l.seq, i.seqno"
        ),
        {"name": name},
    )
    columns: dict[str, list[str]] = {}
    for index, column in rows:
        columns.setdefault(index, []).append(str(column))
    return [{"name": None, "columns": cols, "unique": True} for cols in columns.values()]


def _product(dialect: Dialect, version: str) -> str:
    lowered = version.lower()
    if dialect == "postgres":
        return "KaiwuDB" if "kaiwudb" in lowered or "kwdb" in lowered else "PostgreSQL"
    if dialect == "mysql":
        return "MariaDB" if "mariadb" in lowered else "MySQL"
    return "SQLite"
