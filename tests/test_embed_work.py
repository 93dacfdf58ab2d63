"""The embed stage's parts on their own: the catalog's work list and claims (SQLite and
PostgreSQL, migration 0008 over existing rows), the round-robin plan, and the scratch that
keeps a long document's finished slices. The stage through real workers:
``tests/test_embed_batches.py``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from sqlalchemy import text

from ldims.catalog import Catalog, Document, repository, utcnow
from ldims.catalog.database import _alembic_config
from ldims.lifecycle import states, vector_work
from ldims.lifecycle.vector_work import Candidate
from ldims.settings import Settings
from workers.embed_plan import plan
from workers.embed_scratch import Scratch, digest

MODEL = "model-a"


def add(catalog: Catalog, key: str, tenant: str, chunks: int, age: int, **fields: object) -> None:
    """A completed document, completed ``age`` seconds ago."""
    when = utcnow() - timedelta(seconds=age)
    values: dict[str, object] = dict(
        id=key,
        tenant=tenant,
        collection="c",
        name=key,
        sha256="a" * 64,
        created_at=when,
        updated_at=when,
        status_changed_at=when,
        status="completed",
        chunk_count=chunks,
    )
    with catalog.session() as session:
        session.add(Document(**(values | fields)))


def test_work_is_listed_by_tenant_oldest_first_and_claimed_once(catalog: Catalog) -> None:
    add(catalog, "a/1", "a", 10, age=30)
    add(catalog, "a/2", "a", 5, age=20)
    add(catalog, "b/1", "b", 1, age=10)
    add(catalog, "b/done", "b", 1, age=40, vectors_sha256="a" * 64, vectors_model=MODEL)
    now = utcnow()
    with catalog.session() as session:
        assert vector_work.tenants_with_work(session, MODEL, "w1", now) == ["a", "b"]
        found = vector_work.candidates(session, MODEL, ["a", "b"], 5, "w1", now)
    assert [c.document_id for c in found["a"]] == ["a/1", "a/2"]  # completed first, first
    assert [c.document_id for c in found["b"]] == ["b/1"]
    first = found["a"][0]
    until = now + timedelta(seconds=60)
    with catalog.session() as session:
        assert vector_work.claim(session, first, MODEL, "w1", now, until)
        assert not vector_work.claim(session, first, MODEL, "w2", now, until)  # held
        assert vector_work.claim(session, first, MODEL, "w1", now, until)  # its own again
        listed = vector_work.candidates(session, MODEL, ["a"], 5, "w2", now)["a"]
        assert [c.document_id for c in listed] == ["a/2"]
        # A claim that ran out (its worker killed) is free again.
        later = now + timedelta(seconds=61)
        assert vector_work.claim(session, first, MODEL, "w2", later, later)
        assert vector_work.claimable(session, MODEL, later) == 2  # a/1 is held again
    with catalog.session() as session:
        vector_work.release(session, "a/1", "a" * 64, "w2", done=4)
        assert vector_work.backlog(session, MODEL) == (3, 6 + 5 + 1, 0)
        assert vector_work.backlog(session, MODEL, "b") == (1, 1, 0)
        assert states.record_vectors(session, "b/1", "a" * 64, MODEL, "chunk 0: refused")
    with catalog.session() as session:
        assert vector_work.backlog(session, MODEL, "b") == (0, 0, 1)
        assert vector_work.backlog(session, "model-b", "b") == (2, 2, 0)  # another model
        assert vector_work.forget(session, MODEL) == 1  # the failed one, to retry
        assert vector_work.backlog(session, MODEL, "b") == (1, 1, 0)


def test_the_end_of_an_interrupted_call_stays_and_counts_tries_of_one_chunk(
    catalog: Catalog,
) -> None:
    add(catalog, "a/1", "a", 8, age=5)
    now = utcnow()
    with catalog.session() as session:
        (first,) = vector_work.candidates(session, MODEL, ["a"], 5, "w", now)["a"]
        assert vector_work.claim(session, first, MODEL, "w", now, now + timedelta(60))
        vector_work.in_flight(session, "w", {"a/1": 8}, [])
    with catalog.session() as session:  # the task stopped in that call: the end stays
        vector_work.release(session, "a/1", "a" * 64, "w", done=None, interrupted=True)
    with catalog.session() as session:
        (suspect,) = vector_work.candidates(session, MODEL, ["a"], 5, "w", now)["a"]
    assert (suspect.suspect_end, suspect.suspect, suspect.attempts) == (8, 8, 0)
    with catalog.session() as session:  # half of it passed: the rest is still suspect
        assert vector_work.claim(session, suspect, MODEL, "w", now, now)
        vector_work.release(session, "a/1", "a" * 64, "w", done=7, suspect_end=8)
        (alone,) = vector_work.candidates(session, MODEL, ["a"], 5, "w", now)["a"]
        assert (alone.suspect, alone.attempts) == (1, 0)
        assert vector_work.claim(session, alone, MODEL, "w", now, now)  # a try of it alone
        (tried,) = vector_work.candidates(session, MODEL, ["a"], 5, "w", now)["a"]
        assert tried.attempts == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_revision_0008_keeps_existing_documents_as_they_were(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'old.sqlite3'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    catalog = Catalog(url)
    config = _alembic_config(url)
    with catalog.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0007")
        connection.execute(
            text(
                "INSERT INTO documents (id, tenant, collection, name, created_at, updated_at, "
                "version, status, status_changed_at, attempts, sha256, chunk_count, "
                "vectors_sha256, vectors_model) VALUES ('t/d', 't', 'c', 'n', :now, :now, 1, "
                "'completed', :now, 1, 'sha', 3, 'sha', :model)"
            ),
            {"now": utcnow(), "model": MODEL},
        )
    catalog.upgrade()
    with catalog.session() as session:
        document = repository.get_document(session, "t/d")
        assert document is not None
        assert (document.vectors_done, document.vectors_attempts) == (0, 0)
        assert document.vectors_error is None and document.vectors_lease_until is None
        assert vector_work.backlog(session, MODEL) == (0, 0, 0)
    catalog.dispose()


def candidate(key: str, chunks: int, done: int = 0, suspect_end: int | None = None) -> Candidate:
    return Candidate(key, key.split("/")[0], "s", chunks, done, 0, suspect_end)


def test_the_plan_serves_every_tenant_in_turn_in_slices() -> None:
    settings = Settings(embed_batch_max_chunks=100, embed_slice_chunks=30)
    chosen = plan(
        settings,
        {
            "big": [candidate("big/novel", 5000, done=60), candidate("big/memo", 2)],
            "small": [candidate("small/note", 1)],
        },
    )
    turns = [(s.candidate.document_id, s.first, s.count) for s in chosen.segments]
    assert turns == [
        ("big/novel", 60, 30),
        ("small/note", 0, 1),
        ("big/memo", 0, 2),
        ("big/novel", 90, 67),  # its turns in a row, one segment, to the task's 100 chunks
    ]
    assert sum(count for *_, count in turns) == 100 and not chosen.alone


def test_a_suspect_leads_alone_with_the_first_half_of_its_range() -> None:
    settings = Settings()
    suspect = candidate("a/1", 50, done=10, suspect_end=17)
    chosen = plan(settings, {"a": [suspect, candidate("a/2", 3)], "b": [candidate("b/1", 1)]})
    assert chosen.alone
    assert [(s.candidate.document_id, s.first, s.count) for s in chosen.segments] == [
        ("a/1", 10, 4)
    ]
    # Led by another tenant, a batch leaves the suspect out.
    chosen = plan(settings, {"b": [candidate("b/1", 1)], "a": [suspect, candidate("a/2", 3)]})
    assert [s.candidate.document_id for s in chosen.segments] == ["b/1", "a/2"]


def test_the_scratch_keeps_slices_until_the_texts_change(tmp_path: Path) -> None:
    scratch = Scratch(tmp_path / "scratch")
    texts = digest(["one", "two", "three", "four"])
    progress = scratch.open("t/doc", "sha1", MODEL, texts)
    progress.add(0, np.ones((2, 3), np.float32))
    assert progress.done() == 2 and not any((tmp_path / "scratch").rglob("*.npy"))
    progress.flush()
    progress.give_up(2, "chunk 2: refused")
    again = scratch.open("t/doc", "sha1", MODEL, texts)
    assert again.done() == 3 and again.failed == {2: "chunk 2: refused"}
    again.add(3, np.full((1, 3), 2, np.float32))
    chunks, vectors = again.vectors(4)
    assert chunks == [0, 1, 3] and vectors is not None and vectors.shape == (3, 3)
    # Other texts (a new title): it starts over; a new version removes the old one's.
    assert scratch.open("t/doc", "sha1", MODEL, digest(["ONE"])).done() == 0
    scratch.open("t/doc", "sha1", MODEL, texts).add(0, np.ones((1, 3), np.float32))
    assert scratch.open("t/doc", "sha2", MODEL, texts).done() == 0
    assert [meta["sha256"] for _, meta in scratch.kept()] == []
