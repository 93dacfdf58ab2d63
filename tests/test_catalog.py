"""The catalog on SQLite and on PostgreSQL: migrations, conditional transitions, queries."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect, text

from ldims.catalog import (
    Catalog,
    DocumentFilter,
    DocumentStatus,
    document_key,
    repository,
    utcnow,
)
from ldims.catalog.database import _alembic_config
from ldims.lifecycle import states
from tests.conftest import document_row


def add(
    catalog: Catalog, doc_id: str, tenant: str = "t", sha: str = "a" * 64, **fields: object
) -> None:
    with catalog.session() as session:
        session.add(document_row(doc_id, tenant, sha256=sha, **fields))


def test_migrations_create_the_schema_and_are_idempotent(catalog: Catalog) -> None:
    catalog.upgrade()  # a second run changes nothing
    tables = set(inspect(catalog.engine).get_table_names())
    assert {"documents", "webhook_events", "alembic_version"} <= tables
    assert {"folder_collections", "path_contexts"} <= tables
    assert {"api_keys", "audit_records"} <= tables
    with catalog.engine.connect() as connection:
        assert (
            connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0008"
        )
    columns = {column["name"] for column in inspect(catalog.engine).get_columns("documents")}
    assert {"chunk_count", "vectors_sha256", "vectors_model"} <= columns
    assert {"source_path", "source_mtime_ns"} <= columns
    assert {"ocr_pages", "ocr_confidence", "ocr_sha256"} <= columns
    assert {
        "vectors_error",
        "vectors_done",
        "vectors_attempts",
        "vectors_suspect_end",
        "vectors_lease_owner",
        "vectors_lease_until",
    } <= columns


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_revision_0005_scopes_existing_document_ids_by_tenant(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A catalog of global ids (revision 0004) keeps its documents, each now under its
    tenant's key, with its vectors marked missing (the vector store is keyed anew)."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_url")
    catalog = Catalog(url)
    config = _alembic_config(url)
    with catalog.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0004")
    with catalog.engine.begin() as connection:
        for doc_id, tenant in (("invoice-1", "acme"), ("doc_x", "default")):
            connection.execute(
                text(
                    "INSERT INTO documents (id, tenant, collection, name, created_at, updated_at, "
                    "version, status, status_changed_at, attempts, vectors_sha256, "
                    "vectors_model) VALUES (:id, :tenant, 'c', 'n', :now, :now, 1, 'completed', "
                    ":now, 1, 'sha', 'model')"
                ),
                {"id": doc_id, "tenant": tenant, "now": utcnow()},
            )
    catalog.upgrade()
    with catalog.session() as session:
        found = {
            d.id: (d.public_id, d.tenant, d.vectors_sha256)
            for d in repository.get_documents(
                session, {document_key("acme", "invoice-1"), document_key("default", "doc_x")}
            ).values()
        }
    assert found == {
        "acme/invoice-1": ("invoice-1", "acme", None),
        "default/doc_x": ("doc_x", "default", None),
    }
    add(catalog, document_key("rival", "invoice-1"), tenant="rival")  # the same id, elsewhere
    catalog.dispose()


def test_sqlite_runs_in_wal_mode(tmp_path: Path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'wal.sqlite3'}")
    with catalog.engine.connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    catalog.dispose()


def test_transitions_only_apply_to_the_version_they_were_keyed_by(catalog: Catalog) -> None:
    add(catalog, "d1", sha="a" * 64)
    with catalog.session() as session:
        assert states.start_processing(session, "d1", "b" * 64) is False  # stale task
        assert states.start_processing(session, "d1", "a" * 64) is True
        assert states.complete(session, "d1", "b" * 64, page_count=1) is False
        assert states.complete(session, "d1", "a" * 64, page_count=3) is True
    with catalog.session() as session:
        document = repository.get_document(session, "d1")
        assert document is not None
        assert (
            document.status == "completed" and document.attempts == 1 and document.page_count == 3
        )
        assert document.status_changed_at.tzinfo is not None


def test_fail_records_code_and_reason(catalog: Catalog) -> None:
    add(catalog, "d2")
    with catalog.session() as session:
        assert states.fail(session, "d2", "a" * 64, "EMPTY_FILE", "nothing in it")
    with catalog.session() as session:
        document = repository.get_document(session, "d2")
        assert document is not None
        assert (document.status, document.error_code, document.error_message) == (
            "failed",
            "EMPTY_FILE",
            "nothing in it",
        )


def test_listing_filters_pages_and_isolates_tenants(catalog: Catalog) -> None:
    base = datetime(2025, 1, 1, tzinfo=UTC)
    for n in range(7):
        add(
            catalog,
            f"l{n}",
            sha=f"{n:064d}",
            created_at=base + timedelta(days=n),
            submitter="ann" if n % 2 else "bob",
            document_type="memo" if n < 3 else "report",
        )
    add(catalog, "other", tenant="u")
    with catalog.session() as session:
        items, total = repository.list_documents(session, "t", DocumentFilter(), 3, 0)
        assert total == 7 and [d.id for d in items] == ["l6", "l5", "l4"]
        items, total = repository.list_documents(session, "t", DocumentFilter(), 3, 6)
        assert total == 7 and [d.id for d in items] == ["l0"]
        ann = DocumentFilter(submitter="ann", document_type="report")
        assert {d.id for d in repository.list_documents(session, "t", ann, 50, 0)[0]} == {
            "l3",
            "l5",
        }
        window = DocumentFilter(
            created_from=base + timedelta(days=2), created_to=base + timedelta(days=4)
        )
        assert repository.list_documents(session, "t", window, 50, 0)[1] == 3
        assert repository.list_documents(session, "u", DocumentFilter(), 50, 0)[1] == 1
        assert repository.count_by_status(session, "t") == {
            "queued": 7,
            "processing": 0,
            "completed": 0,
            "failed": 0,
        }


def test_stuck_documents_are_the_unfinished_ones_past_the_deadline(catalog: Catalog) -> None:
    old = utcnow() - timedelta(hours=1)
    add(catalog, "s1", sha="1" * 64, status_changed_at=old)
    add(catalog, "s2", sha="2" * 64, status="processing", status_changed_at=old)
    add(catalog, "s3", sha="3" * 64, status="completed", status_changed_at=old)
    add(catalog, "s4", sha="4" * 64)  # recent
    with catalog.session() as session:
        stuck = repository.stuck_documents(session, utcnow() - timedelta(minutes=5))
        assert {d.id for d in stuck} == {"s1", "s2"}
        assert repository.find_by_content(session, "t", "3" * 64).id == "s3"  # type: ignore[union-attr]
        assert repository.find_by_content(session, "u", "3" * 64) is None
    assert DocumentStatus.COMPLETED.is_final and not DocumentStatus.PROCESSING.is_final
