"""The index stage in batches: one commit for many documents, each document's outcome its own.

The first part calls :func:`workers.pipeline.run_index_batch` in this process on a real
catalog, extract store and index. The second runs the real index worker (Celery on Redis) and
kills it, or restarts Redis, while it writes a batch: nothing is lost and nothing doubled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from indexer import Chunk, DocumentIndex, IndexedDocument, SearchRequest
from ldims.catalog import repository
from ldims.settings import Settings
from ldims.text import ExtractionResult, Page
from tests.conftest import RedisServer, Stack, document_row, key_of, wait_until
from workers import pipeline
from workers.pipeline import IndexJob, run_index_batch


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[pipeline.Runtime]:
    runtime = pipeline.Runtime(Settings(data_dir=tmp_path / "data"))
    runtime.catalog.upgrade()
    yield runtime
    runtime.index.close()


def add(
    rt: pipeline.Runtime,
    document_id: str,
    text: str,
    *,
    extract: bool = True,
    page_number: int = 1,
) -> IndexJob:
    """A document extracted and waiting for the index (catalog row + extraction result)."""
    sha = hashlib.sha256(f"{document_id}:{text}".encode()).hexdigest()
    with rt.catalog.session() as session:
        session.add(document_row(document_id, "acme", sha256=sha, status="processing", attempts=1))
    if extract:
        result = ExtractionResult("text/plain", "text", text, [Page(page_number, text)])
        rt.extracts.save(sha, result)
    return IndexJob(document_id, sha)


def status(rt: pipeline.Runtime, document_id: str) -> tuple[str, str | None]:
    with rt.catalog.session() as session:
        document = repository.get_document(session, document_id)
        assert document is not None
        return document.status, document.error_code


def found(index: DocumentIndex, word: str) -> set[str]:
    results = index.search(SearchRequest(tenant="acme", query=word, limit=100))
    return {hit.document_id for hit in results.hits}


def generation(rt: pipeline.Runtime) -> int:
    return rt.index._index.latest_generation()


def test_a_batch_is_one_commit_and_completes_every_document(rt: pipeline.Runtime) -> None:
    jobs = [add(rt, f"d{n}", f"ledger number{n} archived") for n in range(20)]
    before = generation(rt)
    assert run_index_batch(rt, jobs) == {}
    assert generation(rt) == before + 1
    assert {status(rt, job.document_id)[0] for job in jobs} == {"completed"}
    assert found(rt.index, "ledger") == {job.document_id for job in jobs}
    assert found(rt.index, "number7") == {"d7"}


def test_the_bytes_bound_splits_a_batch_into_commits(rt: pipeline.Runtime) -> None:
    jobs = [add(rt, f"d{n}", f"invoice {n} " * 50) for n in range(6)]
    size = rt.extracts.path(jobs[0].sha256, "text/plain").stat().st_size
    before = generation(rt)
    # Room for two results per commit: three commits.
    rt.settings = rt.settings.model_copy(update={"index_batch_max_bytes": 2 * size + size // 2})
    assert run_index_batch(rt, jobs) == {}
    assert generation(rt) == before + 3
    assert found(rt.index, "invoice") == {job.document_id for job in jobs}


def test_the_documents_bound_splits_a_batch_into_commits(rt: pipeline.Runtime) -> None:
    # An index message may name a whole extract batch: a commit still takes at most the bound.
    jobs = [add(rt, f"d{n}", f"receipt {n}") for n in range(7)]
    before = generation(rt)
    rt.settings = rt.settings.model_copy(update={"index_batch_max_documents": 3})
    assert run_index_batch(rt, jobs) == {}
    assert generation(rt) == before + 3  # 3 + 3 + 1
    assert found(rt.index, "receipt") == {job.document_id for job in jobs}


def test_each_document_has_its_own_outcome(rt: pipeline.Runtime) -> None:
    good = [add(rt, f"good{n}", f"budget review {n}") for n in range(3)]
    not_extracted = add(rt, "pending", "budget pending", extract=False)
    corrupt = add(rt, "corrupt", "budget corrupt")
    rt.extracts.path(corrupt.sha256, "text/plain").write_text("{not json", encoding="utf-8")
    # A page number the index cannot hold: adding it fails inside the writer, mid-batch.
    unwritable = add(rt, "unwritable", "budget unwritable", page_number=2**40)
    stale = IndexJob("good0", "0" * 64)  # an older version of good0
    deleted = IndexJob("gone", "1" * 64)  # no such document any more
    jobs = [good[0], not_extracted, corrupt, good[1], unwritable, stale, deleted, good[2], good[0]]

    later = run_index_batch(rt, jobs)

    # Only the one whose extraction is missing is for later (transient), nothing else.
    assert list(later) == [not_extracted] and later[not_extracted].code == "INDEX_ERROR"
    assert status(rt, "pending") == ("processing", None)
    # The good ones are written and completed despite their neighbours.
    assert {status(rt, job.document_id) for job in good} == {("completed", None)}
    assert found(rt.index, "budget") == {job.document_id for job in good}
    # The bad ones failed on their own, with a code, and left no chunk behind.
    assert status(rt, "corrupt") == ("failed", "INTERNAL_ERROR")
    assert status(rt, "unwritable") == ("failed", "INTERNAL_ERROR")
    assert rt.index.chunk_count("unwritable") == 0
    # The duplicate and the stale job of good0 added nothing: one version, one chunk.
    assert rt.index.indexed_versions("good0") == {1} and rt.index.chunk_count("good0") == 1


def test_an_index_batch_refuses_a_document_twice(tmp_path: Path) -> None:
    # Whoosh's delete does not see chunks added earlier in the same commit: a second write of
    # an id would keep both versions' chunks.
    index = DocumentIndex(tmp_path / "index")
    first = IndexedDocument("twice", "acme", "c", "twice.txt", 1, [Chunk("first words")])
    second = IndexedDocument("twice", "acme", "c", "twice.txt", 2, [Chunk("second words")])
    with pytest.raises(ValueError, match="already written"), index.batch() as batch:
        batch.replace(first)
        batch.replace(second)
    assert index.chunk_count("twice") == 0  # the whole commit was cancelled
    index.delete_documents(["gone", "gone"])  # the same id twice in a delete is one delete
    index.close()


class _RacingIndex:
    """The real index; ``during_commit`` runs while a batch is being written (the race)."""

    def __init__(self, index: DocumentIndex, during_commit: Callable[[], None]) -> None:
        self._index = index
        self._during_commit = during_commit

    @contextlib.contextmanager
    def batch(self) -> Iterator[object]:
        with self._index.batch() as batch:
            yield batch
            self._during_commit()

    def __getattr__(self, name: str) -> object:
        return getattr(self._index, name)


def test_a_document_deleted_while_its_batch_is_written_leaves_no_chunks(
    rt: pipeline.Runtime,
) -> None:
    kept, removed = add(rt, "kept", "retention policy"), add(rt, "removed", "retention policy")

    def delete_removed() -> None:
        with rt.catalog.session() as session:
            session.delete(repository.get_document(session, "removed"))

    real = rt.index
    rt.__dict__["index"] = _RacingIndex(real, delete_removed)
    assert run_index_batch(rt, [kept, removed]) == {}
    assert status(rt, "kept")[0] == "completed"
    assert found(real, "retention") == {"kept"}
    assert real.chunk_count("removed") == 0


def test_a_document_replaced_while_its_batch_is_written_ends_with_its_new_version(
    rt: pipeline.Runtime,
) -> None:
    old = add(rt, "doc", "first draft")
    new_text = "second draft"
    new_sha = hashlib.sha256(b"doc:v2").hexdigest()

    def replace() -> None:
        with rt.catalog.session() as session:
            document = repository.get_document(session, "doc")
            document.sha256, document.version = new_sha, 2
        rt.extracts.save(
            new_sha, ExtractionResult("text/plain", "text", new_text, [Page(1, new_text)])
        )

    real = rt.index
    rt.__dict__["index"] = _RacingIndex(real, replace)
    assert run_index_batch(rt, [old]) == {}
    # The old version's commit landed, but the catalog waits for the new one: not completed.
    assert status(rt, "doc") == ("processing", None)
    rt.__dict__["index"] = real
    assert run_index_batch(rt, [old, IndexJob("doc", new_sha)]) == {}
    assert status(rt, "doc") == ("completed", None)
    assert real.indexed_versions("doc") == {2}
    assert found(real, "second") == {"doc"} and found(real, "first") == set()


# --- the real index worker, killed or cut off from Redis mid-batch ------------------------------
BATCH = 120


def _writer_busy(index_dir: Path) -> bool:
    """Whether a writer holds the index lock (Whoosh's fcntl lock on MAIN_WRITELOCK)."""
    lock = next(index_dir.glob("v*/MAIN_WRITELOCK"), None)
    if lock is None:
        return False
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def _extracted_backlog(stack: Stack, broker: redis.Redis) -> list[str]:
    """``BATCH`` documents uploaded and extracted while the index worker is stopped."""
    stack.index_worker.stop()
    # Each ~25 KB (a dozen chunks), so that writing the batch takes a while.
    ids = [
        stack.upload(
            f"r{n}.txt", (f"report{n}\n" + "quarterly ledger audit of the archive\n" * 700).encode()
        ).json()["documentId"]
        for n in range(BATCH)
    ]
    wait_until(lambda: broker.llen("index") == BATCH, 240, 0.2)
    return ids


def _exactly_once(stack: Stack, ids: list[str]) -> None:
    """Every document completed, once in the index, with the chunks of one clean write."""
    records = [stack.wait_final(i, timeout=240) for i in ids]
    assert {r["status"] for r in records} == {"completed"}, [r["error"] for r in records]
    index = DocumentIndex(stack.settings.index_dir)
    assert index.document_ids() == {key_of(i) for i in ids}
    counts = {index.chunk_count(key_of(i)) for i in ids}
    assert len(counts) == 1 and counts.pop() > 1  # the same for each: nothing doubled
    assert {v for i in ids for v in index.indexed_versions(key_of(i))} == {1}
    hits = index.search(SearchRequest(tenant="default", query="report7", limit=10)).hits
    assert [hit.document_id for hit in hits] == [key_of(ids[7])]
    index.close()


def test_kill_9_of_the_index_worker_mid_batch_loses_and_doubles_nothing(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = stack_factory(
        redis_server.url,
        broker_visibility_timeout_seconds=5,
        retry_backoff_max_seconds=2,
        stuck_after_seconds=30,
        reconcile_interval_seconds=2,
        index_batch_max_documents=BATCH,
        extract_batch_max_documents=1,  # one index message a document: a batch pulls many
    )
    broker = redis.Redis.from_url(redis_server.url)
    ids = _extracted_backlog(stack, broker)
    stack.index_worker.start()
    wait_until(lambda: _writer_busy(stack.settings.index_dir), 120, 0.01)
    stack.index_worker.kill9()
    # The batch was pulled whole and never acknowledged: the delivered message and the others.
    assert broker.hlen("unacked") > 1
    assert len(DocumentIndex(stack.settings.index_dir).document_ids()) == 0  # no commit landed
    stack.index_worker.start()
    _exactly_once(stack, ids)


def test_a_redis_restart_mid_batch_loses_and_doubles_nothing(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    # Redis here keeps nothing across a restart: the queued and pulled messages are gone, and
    # the reconciler re-drives what the catalog says is still waiting.
    stack = stack_factory(
        redis_server.url,
        stuck_after_seconds=5,
        reconcile_interval_seconds=2,
        index_batch_max_documents=BATCH // 3,
        extract_batch_max_documents=1,
    )
    broker = redis.Redis.from_url(redis_server.url)
    ids = _extracted_backlog(stack, broker)
    stack.index_worker.start()
    wait_until(lambda: _writer_busy(stack.settings.index_dir), 120, 0.01)
    redis_server.stop()
    redis_server.start()
    assert broker.llen("index") == 0  # the backlog is gone from Redis
    _exactly_once(stack, ids)
