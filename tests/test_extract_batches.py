"""The extract stage in batches: one task takes the documents waiting behind it, each extracted
alone in the extractor process, each outcome its own, the extracted ones sent to the index in
few messages.

A real stack (API, Celery workers on Redis): the documents are queued while the extract worker
is stopped, so that its first task finds them all waiting.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import redis

from indexer import DocumentIndex
from tests.conftest import DOCS, RedisServer, Stack, key_of, wait_until


def index_messages(broker: redis.Redis) -> list[list[object]]:
    """The arguments of each message waiting in the index queue."""
    messages = []
    for raw in broker.lrange("index", 0, -1):
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        messages.append(body[0])
    return messages


def jobs_in(args: list[object]) -> int:
    return 1 + (len(args[2]) if len(args) > 2 else 0)  # type: ignore[arg-type]


def test_one_task_extracts_the_waiting_documents_each_with_its_own_outcome(
    stack_factory: Callable[..., Stack], redis_server: RedisServer
) -> None:
    stack = stack_factory(redis_server.url, extract_batch_max_documents=8)
    broker = redis.Redis.from_url(redis_server.url)
    stack.extract_worker.stop()
    stack.index_worker.stop()
    good = [
        stack.upload(f"g{n}.txt", f"ledger{n} archive audit".encode()).json()["documentId"]
        for n in range(10)
    ]
    blank = stack.upload(
        "blank.txt", (DOCS / "unstructured__fake-text-all-whitespace.txt").read_bytes()
    ).json()["documentId"]
    picture = stack.upload("p.png", b"\x89PNG\r\n\x1a\n" + bytes(200)).json()["documentId"]
    gone = stack.upload("gone.txt", b"deleted before extraction").json()["documentId"]
    assert stack.client.delete(f"/api/documents/{gone}").status_code == 200
    replaced = stack.upload("r.txt", b"first version").json()["documentId"]
    stack.upload("r.txt", b"second version quarterly", documentId=replaced)
    assert broker.llen("extract") == 15  # one message per upload, the stale version's too

    stack.extract_worker.start()
    extracted = {key_of(i) for i in good} | {key_of(replaced)}
    wait_until(lambda: sum(map(jobs_in, index_messages(broker))) == len(extracted), 120, 0.1)
    messages = index_messages(broker)
    # Batches of at most 8 documents: the 11 extracted versions in fewer messages than that.
    assert len(messages) < len(extracted)
    assert {str(args[0]) for args in messages} <= extracted
    for bad, code in ((blank, "EMPTY_FILE"), (picture, "CORRUPT_FILE")):  # a broken PNG
        record = stack.wait_final(bad)
        assert record["status"] == "failed" and record["error"]["code"] == code

    stack.index_worker.start()
    for doc_id in [*good, replaced]:
        assert stack.wait_final(doc_id)["status"] == "completed"
    index = DocumentIndex(stack.settings.index_dir)
    assert index.document_ids() == extracted
    assert index.indexed_versions(key_of(replaced)) == {2}
    assert stack.client.get(f"/api/documents/{replaced}/content").json()["text"] == (
        "second version quarterly"
    )
    assert stack.client.get(f"/api/documents/{gone}").status_code == 404
    index.close()
