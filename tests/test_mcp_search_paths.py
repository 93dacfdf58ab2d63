"""searchDocuments runs on the event loop when it is quick and in a worker thread otherwise:
both give the same answers, a searcher held elsewhere never blocks the loop, and a search past
the call's time limit answers SEARCH_TIMEOUT, stops by itself and lets go of the searcher."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from api.mcp import build_mcp_server
from indexer import DocumentIndex, SearchRequest, SearchResults
from ldims.documents import Documents
from ldims.services import Services
from runtime import build_services
from tests.conftest import RedisServer, make_settings
from tests.test_index_evaluate import _documents

QUERIES = [
    {"query": "storage drive"},
    {"query": "документы поиск", "maxResults": 10},
    {"query": "硬盘", "filters": {"documentType": "memo"}},
    {"query": '"storage drive"', "filters": {"searchMode": "exact"}},
]


class RecordingIndex(DocumentIndex):
    """The index, noting the thread and the outcome of each search."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.calls: list[tuple[int, str]] = []

    def search(self, request: SearchRequest, *args: Any, **kwargs: Any) -> SearchResults:
        try:
            found = super().search(request, *args, **kwargs)
        except Exception as exc:
            self.calls.append((threading.get_ident(), type(exc).__name__))
            raise
        self.calls.append((threading.get_ident(), "found"))
        return found


@pytest.fixture
def services(tmp_path: Path, shared_redis: RedisServer) -> Iterator[Services]:
    services = build_services(make_settings(tmp_path, shared_redis.url))
    services.catalog.upgrade()
    index = RecordingIndex(services.settings.index_dir)
    with index.batch() as batch:
        for document in _documents(300, seed=5):
            # The in-memory client is the default tenant.
            batch.replace(dataclasses.replace(document, tenant="default"))
    index.search(SearchRequest("default", "storage"))  # opens the searcher
    index.calls.clear()
    services.index = index
    yield services
    services.index.close()
    services.catalog.dispose()


def _with(services: Services, **settings: Any) -> Services:
    """The same services (the same index object) with other settings."""
    new_settings = services.settings.model_copy(update=settings)
    documents = Documents(new_settings, services.catalog, services.dispatcher)
    changed = dataclasses.replace(services, settings=new_settings, documents=documents)
    changed.index = services.index
    return changed


async def _answers(services: Services) -> list[dict[str, Any]]:
    async with Client(build_mcp_server(services)) as client:
        answers = []
        for arguments in QUERIES:
            result = await client.call_tool("searchDocuments", arguments)
            assert not result.is_error, result
            body = result.structured_content
            assert body is not None
            del body["searchMetadata"]["executionTime"]
            answers.append(body)
        return answers


def test_on_the_loop_or_in_a_thread_the_answers_are_the_same(services: Services) -> None:
    index = services.index
    assert isinstance(index, RecordingIndex)
    loop_thread = threading.get_ident()  # asyncio.run runs the loop in this thread

    # (A budget that a busy machine cannot overrun: this part is about the answers.)
    inline = asyncio.run(_answers(_with(services, mcp_inline_search_seconds=1.0)))
    assert index.calls == [(loop_thread, "found")] * len(QUERIES)
    assert all(answer["results"] for answer in inline)

    index.calls.clear()
    threaded = asyncio.run(_answers(_with(services, mcp_inline_search_seconds=0)))
    assert threaded == inline
    assert all(thread != loop_thread for thread, _ in index.calls)

    # Over its budget on the loop, a search stops there and goes on in a thread.
    index.calls.clear()
    moved = asyncio.run(_answers(_with(services, mcp_inline_search_seconds=1e-9)))
    assert moved == inline
    for tried, finished in zip(index.calls[::2], index.calls[1::2], strict=True):
        assert tried == (loop_thread, "SearchOverdue")
        assert finished[0] != loop_thread and finished[1] == "found"


def _hold_searcher(index: DocumentIndex, seconds: float) -> threading.Event:
    """Hold the searcher from another thread for ``seconds``; the event is set once held."""
    held = threading.Event()

    def hold() -> None:
        with index.searcher():
            held.set()
            time.sleep(seconds)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)
    return held


def test_a_held_searcher_does_not_block_the_loop(services: Services) -> None:
    async def check() -> tuple[float, int, Any]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async with Client(build_mcp_server(services)) as client:
            ticker = asyncio.create_task(tick())
            _hold_searcher(services.index, 0.5)
            started = time.monotonic()
            result = await client.call_tool("searchDocuments", QUERIES[0])
            waited = time.monotonic() - started
            ticker.cancel()
            return waited, ticks, result

    waited, ticks, result = asyncio.run(check())
    assert not result.is_error and result.structured_content["results"]
    # Searches do not queue behind one another: a searcher held elsewhere delays nothing.
    assert waited < 0.3


def test_a_search_past_the_time_limit_times_out_and_lets_go(services: Services) -> None:
    index = services.index
    assert isinstance(index, RecordingIndex)
    quick = _with(services, search_timeout_seconds=1e-9, mcp_inline_search_seconds=0)

    async def call(with_services: Services) -> Any:
        async with Client(build_mcp_server(with_services)) as client:
            return await client.call_tool("searchDocuments", QUERIES[0])

    result = asyncio.run(call(quick))
    assert result.is_error
    assert result.structured_content["errorCode"] == "SEARCH_TIMEOUT"
    assert index.calls[-1][1] == "SearchOverdue"  # the search itself stopped, nothing left
    # The next call within its time is answered.
    assert not asyncio.run(call(services)).is_error
    assert index.calls[-1][1] == "found"
