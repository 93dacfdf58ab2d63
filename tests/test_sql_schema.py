"""Schema introspection (product, database, table) on real PostgreSQL, MariaDB and SQLite.

Each backend gets a fresh database with the same fixtures (customers ← orders with a unique and
a plain index, a nullable column with a default and a comment, a view, and ``shipments`` in a
second schema — PostgreSQL ``archive``, a second MariaDB database, SQLite's ``main``), dropped
afterwards; the same assertions then run on all three. Reads go through a read-only
transaction, as the executor runs them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine, text

from ldims.sql import Dialect, SqlObjectNotFound
from ldims.sql.schema import db_info, product_info, table_info

PG_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432"
MY_SERVER = "mysql+pymysql://root@127.0.0.1:3306"
ORDERS = 1200


@dataclass(frozen=True)
class Backend:
    dialect: Dialect
    engine: Engine
    database: str  # what db_info takes for the whole database; product_info's ``database``
    schema: str  # where the main tables live (PostgreSQL public, MariaDB the database, main)
    other_schema: str  # where shipments lives
    other_database: str  # a second name db_info accepts (a schema, a database, the file stem)
    other_tables: frozenset[str]  # what db_info lists for other_database
    product: str
    user: str | None


def fixture_ddl(dialect: Dialect, other: str, orders: str) -> list[str]:
    """The fixture tables; ``other`` is the second schema and ``orders`` the main orders table
    as seen from it, both quoted (MySQL resolves a foreign key in the table's own database)."""
    comment = " COMMENT 'free text'" if dialect == "mysql" else ""
    ddl = [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, email VARCHAR(120) NOT NULL UNIQUE,"
        " name VARCHAR(80))",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL,"
        " code VARCHAR(20) NOT NULL, status VARCHAR(16) DEFAULT 'new',"
        f" amount NUMERIC(10, 2), note TEXT{comment},"
        " FOREIGN KEY (customer_id) REFERENCES customers (id))",
        "CREATE UNIQUE INDEX orders_code_uq ON orders (code)",
        "CREATE INDEX orders_status_ix ON orders (status, amount)",
        "CREATE VIEW open_orders AS SELECT id, code FROM orders WHERE status = 'new'",
        f"CREATE TABLE {other}.shipments (id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL,"
        f" FOREIGN KEY (order_id) REFERENCES {orders} (id))",
        "INSERT INTO customers (id, email) VALUES (1, 'a@example.org'), (2, 'b@example.org')",
    ]
    if dialect == "postgres":
        ddl.append("COMMENT ON COLUMN orders.note IS 'free text'")
    if dialect != "sqlite":  # a table of the same name in the second schema, never the default
        ddl.append(f"CREATE TABLE {other}.orders (id INTEGER PRIMARY KEY, archived_on DATE)")
    return ddl


def build(engine: Engine, dialect: Dialect, other: str, orders: str = "orders") -> None:
    with engine.begin() as conn:
        for statement in fixture_ddl(dialect, other, orders):
            conn.execute(text(statement))
        rows = [
            {"id": i, "customer": 1 + i % 2, "code": f"C{i:05d}", "status": "new" if i % 3 else "x"}
            for i in range(ORDERS)
        ]
        conn.execute(
            text(
                "INSERT INTO orders (id, customer_id, code, status)"
                " VALUES (:id, :customer, :code, :status)"
            ),
            rows,
        )


def postgres() -> Iterator[Backend]:
    name = f"ldims_schema_{uuid.uuid4().hex[:12]}"
    admin = create_engine(f"{PG_SERVER}/postgres", isolation_level="AUTOCOMMIT")
    engine = create_engine(f"{PG_SERVER}/{name}")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        with engine.begin() as conn:
            conn.execute(text("CREATE SCHEMA archive"))
        build(engine, "postgres", "archive")
        yield Backend(
            "postgres",
            engine,
            database=name,
            schema="public",
            other_schema="archive",
            other_database="archive",
            other_tables=frozenset({"orders", "shipments"}),
            product="PostgreSQL",
            user="postgres",
        )
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def mariadb() -> Iterator[Backend]:
    name = f"ldims_schema_{uuid.uuid4().hex[:12]}"
    other = f"{name}_archive"
    admin = create_engine(f"{MY_SERVER}/")
    engine = create_engine(f"{MY_SERVER}/{name}")
    try:
        with admin.begin() as conn:
            conn.execute(text(f"CREATE DATABASE `{name}`"))
            conn.execute(text(f"CREATE DATABASE `{other}`"))
        build(engine, "mysql", f"`{other}`", f"`{name}`.orders")
        yield Backend(
            "mysql",
            engine,
            database=name,
            schema=name,
            other_schema=other,
            other_database=other,
            other_tables=frozenset({"orders", "shipments"}),
            product="MariaDB",
            user="root",  # the account is root@localhost or root@127.0.0.1 as the server has it
        )
    finally:
        engine.dispose()
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{other}`"))
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def sqlite(directory: Path) -> Iterator[Backend]:
    path = directory / "shop.db"
    engine = create_engine(f"sqlite:///{path}")
    try:
        build(engine, "sqlite", "main")
        yield Backend(
            "sqlite",
            engine,
            database="main",
            schema="main",
            other_schema="main",
            other_database="shop",
            other_tables=frozenset({"customers", "orders", "open_orders", "shipments"}),
            product="SQLite",
            user=None,
        )
    finally:
        engine.dispose()


@pytest.fixture(scope="module", params=["postgres", "mysql", "sqlite"])
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    if request.param == "postgres":
        yield from postgres()
    elif request.param == "mysql":
        yield from mariadb()
    else:
        yield from sqlite(tmp_path_factory.mktemp("sqlite"))


@contextmanager
def reading(backend: Backend) -> Iterator[Connection]:
    """A connection in a read-only transaction, rolled back afterwards (as the executor does)."""
    with backend.engine.connect() as conn:
        if backend.dialect == "postgres":
            conn.execute(text("SET TRANSACTION READ ONLY"))
        elif backend.dialect == "mysql":
            conn.execute(text("START TRANSACTION READ ONLY"))
        else:
            conn.execute(text("PRAGMA query_only = ON"))
        try:
            yield conn
        finally:
            conn.rollback()
            if backend.dialect == "sqlite":
                conn.execute(text("PRAGMA query_only = OFF"))


def json_ready(value: dict[str, Any]) -> dict[str, Any]:
    assert json.loads(json.dumps(value)) == value
    return value


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_product_info(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(product_info(conn, backend.dialect))
    assert info["product"] == backend.product
    assert info["dialect"] == backend.dialect
    assert info["serverVersion"][0].isdigit() and "." in info["serverVersion"]
    assert info["serverVersion"] in info["versionString"]
    assert info["database"] == backend.database
    assert ("user" in info) == (backend.user is not None)
    assert info.get("user", "").split("@")[0] == (backend.user or "")
    assert info["driver"] == {"postgres": "psycopg", "mysql": "pymysql"}.get(
        backend.dialect, "pysqlite"
    )


def test_db_info_lists_tables_and_views(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(db_info(conn, backend.dialect, backend.database))
    assert info["database"] == backend.database
    assert info["product"] == backend.product
    assert backend.schema in info["schemas"]
    assert backend.other_schema in info["schemas"] or backend.dialect == "mysql"
    tables = {(t["schema"], t["name"]): t for t in info["tables"]}
    assert tables[(backend.schema, "customers")]["type"] == "table"
    assert tables[(backend.schema, "orders")]["type"] == "table"
    assert tables[(backend.schema, "open_orders")]["type"] == "view"
    assert tables[(backend.schema, "open_orders")]["rowEstimate"] is None
    assert info["tableCount"] == len(info["tables"])
    assert info["truncated"] is False


def test_db_info_of_a_second_schema_or_name(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(db_info(conn, backend.dialect, backend.other_database))
    assert {t["name"] for t in info["tables"]} == backend.other_tables
    assert all(t["schema"] == backend.other_schema for t in info["tables"])
    assert backend.other_schema in info["schemas"]


def test_db_info_is_bounded(backend: Backend) -> None:
    with reading(backend) as conn:
        whole = db_info(conn, backend.dialect, backend.database)
        cut = json_ready(db_info(conn, backend.dialect, backend.database, max_tables=2))
    assert cut["truncated"] is True
    assert cut["tables"] == whole["tables"][:2]
    assert cut["tableCount"] == whole["tableCount"] > 2


@pytest.mark.parametrize("name", ["no_such_database", "ldims_schema_missing", ""])
def test_db_info_of_an_unknown_database(backend: Backend, name: str) -> None:
    with reading(backend) as conn, pytest.raises(SqlObjectNotFound) as caught:
        db_info(conn, backend.dialect, name)
    assert caught.value.code == "KWDB-4004"
    assert caught.value.details == {"kind": "database", "name": name}
    json_ready(caught.value.body())


def test_table_info_columns_keys_indexes(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(table_info(conn, backend.dialect, "orders"))
    assert (info["schema"], info["name"], info["type"]) == (backend.schema, "orders", "table")
    columns = by_name(info["columns"])
    assert list(columns) == ["id", "customer_id", "code", "status", "amount", "note"]
    types = {name: c["type"].lower().replace(" ", "") for name, c in columns.items()}
    assert "int" in types["id"] and "int" in types["customer_id"]
    assert types["code"] in {"varchar(20)", "charactervarying(20)"}
    assert types["amount"] in {"numeric(10,2)", "decimal(10,2)"}
    assert types["note"] == "text"
    nullable = {name: c["nullable"] for name, c in columns.items()}
    assert nullable == {
        "id": False,
        "customer_id": False,
        "code": False,
        "status": True,
        "amount": True,
        "note": True,
    }
    assert "'new'" in columns["status"]["default"]
    assert columns["code"]["default"] is None
    assert columns["note"]["comment"] == (None if backend.dialect == "sqlite" else "free text")
    assert columns["code"]["comment"] is None
    assert [name for name, c in columns.items() if c["primaryKey"]] == ["id"]
    assert info["primaryKey"] == ["id"]
    assert info["foreignKeys"] == [
        {
            "columns": ["customer_id"],
            "referredSchema": backend.schema,
            "referredTable": "customers",
            "referredColumns": ["id"],
        }
    ]
    indexes = by_name(info["indexes"])
    assert indexes["orders_code_uq"] == {
        "name": "orders_code_uq",
        "columns": ["code"],
        "unique": True,
    }
    assert indexes["orders_status_ix"]["columns"] == ["status", "amount"]
    assert indexes["orders_status_ix"]["unique"] is False


def test_table_info_lists_unique_constraints(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(table_info(conn, backend.dialect, "customers"))
    assert [(i["columns"], i["unique"]) for i in info["indexes"]] == [(["email"], True)]
    assert info["foreignKeys"] == []


def test_table_info_of_a_view(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(table_info(conn, backend.dialect, "open_orders"))
    assert (info["name"], info["type"]) == ("open_orders", "view")
    assert [c["name"] for c in info["columns"]] == ["id", "code"]
    assert info["primaryKey"] == info["foreignKeys"] == info["indexes"] == []
    assert info["rowEstimate"] is None


def test_table_info_with_a_schema_qualified_name(backend: Backend) -> None:
    with reading(backend) as conn:
        info = json_ready(table_info(conn, backend.dialect, f"{backend.other_schema}.shipments"))
        main = table_info(conn, backend.dialect, f"{backend.schema}.orders")
    assert (info["schema"], info["name"]) == (backend.other_schema, "shipments")
    assert info["foreignKeys"] == [
        {
            "columns": ["order_id"],
            "referredSchema": backend.schema,
            "referredTable": "orders",
            "referredColumns": ["id"],
        }
    ]
    assert (main["schema"], main["name"]) == (backend.schema, "orders")
    assert "customer_id" in by_name(main["columns"])


def test_table_info_matches_case_insensitively(backend: Backend) -> None:
    with reading(backend) as conn:
        info = table_info(conn, backend.dialect, "ORDERS")
        qualified = table_info(conn, backend.dialect, f"{backend.schema.upper()}.Customers")
    assert (info["schema"], info["name"]) == (backend.schema, "orders")
    assert (qualified["schema"], qualified["name"]) == (backend.schema, "customers")


@pytest.mark.parametrize(
    "name", ["no_such_table", "nowhere.orders", "orders.id", "customers ", "pg_class", ""]
)
def test_table_info_of_an_unknown_table(backend: Backend, name: str) -> None:
    with reading(backend) as conn, pytest.raises(SqlObjectNotFound) as caught:
        table_info(conn, backend.dialect, name)
    assert caught.value.code == "KWDB-4004"
    assert caught.value.details == {"kind": "table", "name": name}


def test_row_estimates_after_analyze(backend: Backend) -> None:
    with backend.engine.begin() as conn:
        analyze = {"postgres": "ANALYZE", "mysql": "ANALYZE TABLE orders, customers"}
        conn.execute(text(analyze.get(backend.dialect, "ANALYZE")))
    with reading(backend) as conn:
        listed = db_info(conn, backend.dialect, backend.database)
        info = table_info(conn, backend.dialect, "orders")
    estimates = {t["name"]: t["rowEstimate"] for t in listed["tables"]}
    for estimate in (estimates["orders"], info["rowEstimate"]):
        assert isinstance(estimate, int) and ORDERS // 10 <= estimate <= ORDERS * 10
    assert isinstance(estimates["customers"], int) and 0 <= estimates["customers"] <= 20
    assert estimates["open_orders"] is None


# --- one database's rules ---------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_resolves_along_the_search_path(backend: Backend) -> None:
    pg = backend
    with reading(pg) as conn:
        assert table_info(conn, "postgres", "orders")["schema"] == "public"
        conn.execute(text("SET LOCAL search_path = archive, public"))
        archived = table_info(conn, "postgres", "orders")
        customers = table_info(conn, "postgres", "customers")
    assert archived["schema"] == "archive"
    assert [c["name"] for c in archived["columns"]] == ["id", "archived_on"]
    assert archived["columns"][1]["type"] == "date"
    assert customers["schema"] == "public"


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_types_sqlalchemy_does_not_know(backend: Backend) -> None:
    # pg_class has xid and aclitem[] columns: the inspector would warn (an error under pytest).
    with reading(backend) as conn:
        info = table_info(conn, "postgres", "pg_catalog.pg_class")
    types = {c["name"]: c["type"] for c in info["columns"]}
    assert types["relfrozenxid"] == "xid"
    assert types["relacl"] == "aclitem[]"
    assert info["type"] == "table" and info["rowEstimate"] is not None


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_postgres_reads_no_other_database(backend: Backend) -> None:
    pg = backend
    with reading(pg) as conn:
        with pytest.raises(SqlObjectNotFound) as caught:
            db_info(conn, "postgres", "postgres")
        catalog = db_info(conn, "postgres", "pg_catalog")  # a system schema, asked by name
        whole = db_info(conn, "postgres", pg.database)
    assert caught.value.details == {"kind": "database", "name": "postgres"}
    assert {t["name"] for t in catalog["tables"]} >= {"pg_class", "pg_tables"}
    assert whole["schemas"] == ["archive", "public"]


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_mysql_system_schemas_only_by_name(backend: Backend) -> None:
    with reading(backend) as conn:
        info = db_info(conn, "mysql", "information_schema")
        info_ci = db_info(conn, "mysql", backend.database.upper())
        tables = table_info(conn, "mysql", "information_schema.TABLES")
    assert info["schemas"] == ["information_schema"]
    assert by_name(info["tables"])["TABLES"]["type"] == "view"
    assert info_ci["database"] == backend.database
    assert tables["type"] == "view" and "TABLE_ROWS" in by_name(tables["columns"])
