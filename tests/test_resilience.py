"""Nothing is lost: a worker killed mid-task, Redis down and back, 200 uploads at once."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import redis
from fastapi.testclient import TestClient

from indexer import DocumentIndex
from ldims.catalog import Catalog, repository, utcnow
from ldims.lifecycle import states
from ldims.settings import Settings
from runtime import create_app
from tests.conftest import RedisServer, Stack, key_of, wait_until
from workers import pipeline


def test_kill_9_of_the_extract_worker_loses_nothing(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    # A short visibility timeout and reconciler deadline, so redelivery happens in seconds.
    stack = stack_factory(
        redis_server.url,
        broker_visibility_timeout_seconds=5,
        retry_backoff_max_seconds=2,
        stuck_after_seconds=6,
        reconcile_interval_seconds=2,
    )
    big = ("Война и мир. " * 20 + "\n") * 10_000  # ~2.5 MB of text: extraction takes a while
    ids = [
        stack.upload(f"novel-{n}.txt", f"{n}\n{big}".encode()).json()["documentId"]
        for n in range(4)
    ]
    broker = redis.Redis.from_url(redis_server.url)

    def holding_a_task() -> bool:
        statuses = [stack.client.get(f"/api/documents/{i}").json()["status"] for i in ids]
        # kombu keeps delivered-but-unacknowledged messages in the "unacked" hash.
        return "processing" in statuses and broker.hlen("unacked") > 0

    wait_until(holding_a_task, 60, 0.02)
    stack.extract_worker.kill9()
    assert broker.hlen("unacked") > 0  # the killed worker's task was never acknowledged

    stack.extract_worker.start()
    # Generous: on a loaded 2-core machine indexing 4 x 1,400 chunks alone can take minutes.
    records = [stack.wait_final(i, timeout=240) for i in ids]
    assert [r["status"] for r in records] == ["completed"] * 4, [r["error"] for r in records]
    index = DocumentIndex(stack.settings.index_dir)
    for record in records:
        # Exactly once: one version in the index, and the same number of chunks as a clean run.
        assert index.indexed_versions(key_of(record["documentId"])) == {1}
    chunk_counts = {index.chunk_count(key_of(i)) for i in ids}
    assert len(chunk_counts) == 1 and chunk_counts.pop() > 1
    assert len(index.document_ids()) == 4


def test_redis_down_gives_503_and_the_api_recovers_without_restart(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = stack_factory(redis_server.url)
    before = stack.upload("before.txt", b"before the outage").json()["documentId"]
    assert stack.wait_final(before)["status"] == "completed"

    redis_server.stop()
    response = stack.upload("during.txt", b"during the outage")
    assert response.status_code == 503
    body = response.json()
    assert body["isError"] is True and body["errorCode"] == "SERVER_ERROR"
    assert body["errorDetails"]["component"] == "broker"
    assert stack.client.delete(f"/api/documents/{before}").status_code == 503
    health = stack.client.get("/health")
    assert (
        health.status_code == 503
        and health.json()["errorDetails"]["checks"]["broker"]["ok"] is False
    )
    # Reads do not need the broker.
    assert stack.client.get(f"/api/documents/{before}/content").status_code == 200
    assert stack.client.get("/api/documents").json()["total"] == 1  # nothing half-recorded

    redis_server.start()  # same port, empty: the API must reconnect by itself
    wait_until(lambda: stack.client.get("/health").status_code == 200, 30, 0.2)
    after = stack.upload("after.txt", b"after the outage")
    assert after.status_code == 202
    assert stack.wait_final(after.json()["documentId"], timeout=90)["status"] == "completed"


def test_200_concurrent_uploads_all_end_final_and_duplicates_add_nothing(stack: Stack) -> None:
    rng = random.Random(7)
    bodies = [
        (f"doc {n} " + "lorem ipsum dolor " * rng.choice([1, 10, 100, 1000, 5000])).encode()
        for n in range(190)
    ]
    bodies += bodies[:10]  # ten exact duplicates among the 200 uploads

    def upload(pair: tuple[int, bytes]) -> httpx.Response:
        number, data = pair
        with httpx.Client(base_url=stack.api.url, timeout=120) as client:
            return client.post("/api/documents", files={"file": (f"f{number}.txt", data)})

    with ThreadPoolExecutor(max_workers=50) as pool:
        responses = list(pool.map(upload, enumerate(bodies)))
    assert all(r.status_code in (200, 202) for r in responses), {r.status_code for r in responses}
    ids = {r.json()["documentId"] for r in responses}
    assert len(ids) == 190

    def all_final() -> bool:
        page = stack.client.get("/api/documents", params={"status": "completed", "limit": 1}).json()
        return page["total"] == 190

    wait_until(all_final, 240, 0.5)
    listing = stack.client.get("/api/documents", params={"limit": 500}).json()
    assert listing["total"] == 190
    assert {item["documentId"] for item in listing["items"]} == ids
    assert len(DocumentIndex(stack.settings.index_dir).document_ids()) == 190


def _attempts(settings: Settings, document_ids: list[str]) -> list[int]:
    catalog = Catalog(settings.catalog_url)
    with catalog.session() as session:
        return [repository.get_document(session, key_of(i)).attempts for i in document_ids]


def test_a_backlog_is_waiting_not_stuck(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    # Documents wait in the queues far longer than the stuck deadline: the reconciler must
    # leave them alone (their queue is busy), so none burns an attempt or ends WORKER_LOST.
    stack = stack_factory(
        redis_server.url, stuck_after_seconds=1, reconcile_interval_seconds=1, max_attempts=2
    )
    bodies = [f"backlog {n} ".encode() + b"lorem ipsum dolor sit amet " * 3000 for n in range(30)]
    ids = [stack.upload(f"b{n}.txt", body).json()["documentId"] for n, body in enumerate(bodies)]
    records = [stack.wait_final(i, timeout=180) for i in ids]
    assert [r["status"] for r in records] == ["completed"] * 30, [r["error"] for r in records]
    assert _attempts(stack.settings, ids) == [1] * 30


def test_a_duplicate_delivery_of_a_held_document_is_dropped(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data", redis_url=shared_redis.url, stuck_after_seconds=3
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        response = client.post("/api/documents", files={"file": ("a.txt", b"held by a worker")})
    doc_id, sha = response.json()["documentId"], response.json()["document"]["sha256"]
    key = key_of(doc_id)
    rt = pipeline.Runtime(settings)
    # The sandbox starts first: on a loaded machine its start alone can outlast the 1.5 s
    # in which a holder counts as live, and the holder must be live when the duplicate comes.
    with rt.sandbox:
        with rt.catalog.session() as session:
            states.start_processing(session, key, sha)  # a live worker took it just now
        assert pipeline.run_extract(rt, key, sha, first_delivery=True) is False
        assert _attempts(settings, [doc_id]) == [1]
        # The holder keeps it fresh with heartbeats for as long as it works...
        with pipeline.heartbeat(rt, key, sha):
            time.sleep(3 * pipeline.heartbeat_seconds(settings))
            assert pipeline.run_extract(rt, key, sha, first_delivery=True) is False
        # A message the broker gave back (its holder died) takes the document over at once.
        assert pipeline.run_extract(rt, key, sha, first_delivery=True, redelivered=True)
        assert _attempts(settings, [doc_id]) == [2]
        # And once the heartbeats stop (a lost message), a fresh delivery takes it over too.
        with rt.catalog.session() as session:
            repository.get_document(session, key).status_changed_at = utcnow() - timedelta(
                seconds=2 * pipeline.heartbeat_seconds(settings)
            )
        assert pipeline.run_extract(rt, key, sha, first_delivery=True) is True
    assert _attempts(settings, [doc_id]) == [3]
