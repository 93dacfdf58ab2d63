"""``ldims check --repair`` with the real workers: a completed document lost from the index and
a chunk left of a deleted one are found by ``ldims check`` (exit 1, each named), repaired by
the index worker through its queue, and ``ldims check`` then agrees (exit 0) and search finds
the document again."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest
import redis

from indexer import DocumentIndex, SearchRequest
from tests.conftest import RedisServer, Stack, key_of, run_ldims


def check(stack: Stack, *options: str) -> subprocess.CompletedProcess[str]:
    return run_ldims(stack.settings, "check", *options, check=False)


@pytest.fixture
def stack(stack_factory: Callable[..., Stack], shared_redis: RedisServer) -> Stack:
    """A running stack whose reconciler does not sweep the damage before the check sees it."""
    redis.Redis.from_url(shared_redis.url).flushdb()
    return stack_factory(shared_redis.url, reconcile_interval_seconds=3600)


def test_check_finds_what_the_index_lost_and_the_index_worker_repairs_it(stack: Stack) -> None:
    kept = stack.upload("kept.txt", b"The heron waits by the reeds.").json()["documentId"]
    gone = stack.upload("gone.txt", b"The mallard left the pond.").json()["documentId"]
    for document_id in (kept, gone):
        assert stack.wait_final(document_id)["status"] == "completed"
    assert check(stack).returncode == 0
    # Damage as a crash between stores would leave it: the kept document's chunks gone from
    # the index; the other document's row gone from the catalog with its chunks still there.
    index = DocumentIndex(stack.settings.index_dir)
    index.delete_documents([key_of(kept)])
    with stack_catalog(stack) as session:
        session.execute(_delete_row(key_of(gone)))
    found = check(stack)
    assert found.returncode == 1, found.stdout + found.stderr
    assert f"completed, not in the index (indexed again): {key_of(kept)}" in found.stdout
    assert f"in the index, not in the catalog (removed from the index): {key_of(gone)}" in (
        found.stdout
    )
    repaired = check(stack, "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: 1 index missing" in repaired.stdout
    deadline = time.monotonic() + 30
    while check(stack).returncode != 0:
        assert time.monotonic() < deadline, check(stack).stdout + stack.log_tail()
        time.sleep(0.5)
    hits = index.search(SearchRequest(tenant="default", query="heron")).hits
    assert [hit.document_id for hit in hits] == [key_of(kept)]
    assert key_of(gone) not in index.document_ids()


def stack_catalog(stack: Stack):  # type: ignore[no-untyped-def]
    from ldims.catalog import Catalog

    return Catalog(stack.settings.catalog_url).session()


def _delete_row(document_id: str):  # type: ignore[no-untyped-def]
    from sqlalchemy import delete

    from ldims.catalog import Document

    return delete(Document).where(Document.id == document_id)
