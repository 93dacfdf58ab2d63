"""One tenant flooding the server with expensive searches stalls no other (issue 33, finding 2).

Measured before: 48 concurrent 16-phrase ``exact`` searches of tenant B, each running to the
deadline, filled the thread pool every sync route shares; A's REST search went from 10 ms to
8.6 s p50, ``/health`` from 4 ms to 2.5 s. Now the cost estimate refuses such a query before
it runs, and the searches that do run take a slot of the process's search pool: B runs at
most its share, waits briefly or gets 429 ``TOO_MANY_REQUESTS`` with ``Retry-After``, while
A's searches (REST and MCP) and ``/health`` stay fast and A is never refused.

Real parts: the ``ldims`` API and workers on Redis, API keys of two tenants, the official MCP
client over HTTP. Small limits (a pool of 4, 2 a tenant, a 1 s deadline) keep it quick.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import DOCS, RedisServer, Stack, make_settings
from tests.test_search_oracle import Tenants

BOOK = DOCS / "unstructured__book-war-and-peace-1225p.txt"
PHRASES = [
    "of the", "in the", "and the", "to the", "on the", "at the", "he was", "it was",
    "that he", "with the", "from the", "for the", "by the", "she was", "had been", "did not",
]  # fmt: skip
FLOODERS = 32
DEADLINE = 1.0
# B's clients, in a process of their own (as an attacker's would be: in this one they would
# share the API's interpreter lock): FLOODERS threads asking without pause until the stop
# file appears, then one JSON line per answer (status, seconds, Retry-After).
FLOOD = """
import json, sys, threading, time, pathlib, httpx
url, key, query, count, stop = sys.argv[1:6]
answers = []
def hammer():
    with httpx.Client(base_url=url, timeout=60) as client:
        while not pathlib.Path(stop).exists():
            started = time.perf_counter()
            response = client.get("/api/search", params={"query": query, "searchMode": "exact"},
                                  headers={"Authorization": "Bearer " + key})
            answers.append([response.status_code, time.perf_counter() - started,
                            response.headers.get("retry-after")])
threads = [threading.Thread(target=hammer) for _ in range(int(count))]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(answers))
"""


def _phrases(count: int) -> str:
    return " ".join(f'"{phrase}"' for phrase in PHRASES[:count])


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


@pytest.fixture(scope="module")
def tenants(
    tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer
) -> Iterator[Tenants]:
    tmp = tmp_path_factory.mktemp("fairness")
    settings = make_settings(
        tmp,
        shared_redis.url.rsplit("/", 1)[0] + "/6",
        search_concurrency=4,
        search_concurrency_per_tenant=2,
        search_concurrency_per_key=2,
        search_queue_seconds=0.3,
        search_timeout_seconds=DEADLINE,
    )
    stack = Stack(settings, tmp).start()
    found = Tenants(stack)
    try:
        found.upload("bravo", [BOOK.read_text(encoding="utf-8")])
        found.upload("alpha", ["quarterly turbine inspection report"])
        yield found
    finally:
        stack.stop()
        found.services.close()


def _search(client: httpx.Client, tenants: Tenants, tenant: str, query: str) -> httpx.Response:
    return client.get(
        "/api/search",
        params={"query": query, "searchMode": "exact"},
        headers=tenants.headers(tenant),
    )


def test_sixteen_phrases_of_common_words_are_refused_before_they_run(tenants: Tenants) -> None:
    started = time.perf_counter()
    response = _search(tenants.stack.client, tenants, "bravo", _phrases(16))
    elapsed = time.perf_counter() - started
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["errorCode"] == "QUERY_UNPROCESSABLE"
    assert "your documents" in body["errorMessage"]
    assert elapsed < DEADLINE / 2


def _heaviest_allowed(tenants: Tenants) -> str:
    """The most phrases of common words the budget still lets B run (an expensive search)."""
    for count in range(len(PHRASES), 0, -1):
        response = _search(tenants.stack.client, tenants, "bravo", _phrases(count))
        if response.status_code != 422:
            assert response.status_code in (200, 504), response.text
            return _phrases(count)
    raise AssertionError("no phrase of common words is allowed")


def test_a_flood_of_one_tenant_stalls_no_other(tenants: Tenants, tmp_path: Path) -> None:
    stack = tenants.stack
    heavy = _heaviest_allowed(tenants)
    stop = tmp_path / "stop"
    key = tenants.keys["bravo"]
    flooder = subprocess.Popen(
        [sys.executable, "-c", FLOOD, stack.api.url, key, heavy, str(FLOODERS), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    rest: list[float] = []
    health: list[float] = []
    mcp: list[float] = []
    try:
        time.sleep(1.5)  # the flood at full strength
        with httpx.Client(base_url=stack.api.url, timeout=60) as client:
            _search(client, tenants, "alpha", "turbine")  # the connection's first
            for _ in range(30):
                started = time.perf_counter()
                found = _search(client, tenants, "alpha", "turbine")
                rest.append(time.perf_counter() - started)
                assert found.status_code == 200, found.text
                assert found.json()["totalMatches"] == 1
                started = time.perf_counter()
                answer = client.get("/health")
                health.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
        mcp = asyncio.run(_mcp_searches(tenants, 10))
    finally:
        stop.touch()
        out, _ = flooder.communicate(timeout=60)
    flood: list[tuple[int, float, str | None]] = [tuple(answer) for answer in json.loads(out)]

    statuses = {status for status, _, _ in flood}
    assert statuses <= {200, 429, 504}, statuses
    refused = [(seconds, retry) for status, seconds, retry in flood if status == 429]
    assert refused, "B ran past its share without being refused"
    assert all(retry is not None and int(retry) >= 1 for _, retry in refused)
    ran = [seconds for status, seconds, _ in flood if status in (200, 504)]
    b_median = statistics.median(ran)
    figures = (
        f"A REST p50/p95 {statistics.median(rest):.3f}/{p95(rest):.3f}s, "
        f"MCP p95 {p95(mcp):.3f}s, /health p95 {p95(health):.3f}s; "
        f"B median {b_median:.3f}s, {len(flood)} answers, {len(refused)} refused"
    )
    # A's searches and /health answer well within the time one of B's takes: none of them
    # queues behind B's. Queued behind B, A's waits would be at least one of B's whole searches
    # (before the search pool A's REST search took 8.6 s p50, /health 2.5 s); running beside B,
    # A's typical answer is a fraction of one of B's and even its slowest stays under one. The
    # median carries the tight bound, the p95 the loose one: on two shared cores a loaded CI
    # machine put A's REST p95 at 0.77 s against B's 1.48 s (measured here: A's p95 0.44-0.77 s
    # REST, 0.11-0.49 s MCP, /health 0.24-0.53 s, against 1.2-1.5 s for one of B's).
    for name, times in (("REST", rest), ("MCP", mcp), ("/health", health)):
        assert statistics.median(times) < 0.5 * b_median, (name, figures)
        assert p95(times) < min(b_median, 1.5), (name, figures)


async def _mcp_searches(tenants: Tenants, count: int) -> list[float]:
    """A's ``searchDocuments`` calls over MCP: each answered, never refused; their times."""
    seconds = []
    async with (
        httpx2.AsyncClient(headers=tenants.headers("alpha"), timeout=60) as http,
        Client(
            streamable_http_client(f"{tenants.stack.api.url}/mcp", http_client=http)  # type: ignore[arg-type]
        ) as client,
    ):
        await client.call_tool("searchDocuments", {"query": "turbine"})  # the session's first
        for _ in range(count):
            started = time.perf_counter()
            result = await client.call_tool(
                "searchDocuments", {"query": "turbine", "filters": {"searchMode": "exact"}}
            )
            seconds.append(time.perf_counter() - started)
            body: Any = result.structured_content
            assert not result.is_error, body
            assert body["totalMatches"] == 1
    return seconds


# --- the admission itself, without a server (fast) ------------------------------------------
def _admission(
    total: int = 2,
    per_tenant: int = 1,
    per_key: int = 1,
    queue: float = 5.0,
    queue_per_tenant: int = 12,
) -> Any:
    from ldims.admission import AdmissionLimits, SearchAdmission

    return SearchAdmission(AdmissionLimits(total, per_tenant, per_key, queue, queue_per_tenant))


def test_tenants_take_turns_and_a_key_keeps_to_its_share() -> None:
    from ldims.caller import Caller
    from ldims.errors import TooManyRequests

    admission = _admission(total=1, per_tenant=1, per_key=1)
    b, a = Caller("bravo", key_id="key_b"), Caller("alpha", key_id="key_a")
    order: list[str] = []
    release = threading.Event()

    async def search(caller: Caller, name: str) -> None:
        async with admission.admitted(caller) as on_pool:
            order.append(name)
            await on_pool(lambda: release.wait(5))

    async def flood() -> None:
        first = asyncio.create_task(search(b, "b1"))
        await asyncio.sleep(0.05)  # b1 runs; b2, b3 wait, then a1 arrives
        waiting = [asyncio.create_task(search(b, name)) for name in ("b2", "b3")]
        await asyncio.sleep(0.05)
        waiting.append(asyncio.create_task(search(a, "a1")))
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(first, *waiting)

    asyncio.run(flood())
    assert order == ["b1", "a1", "b2", "b3"]  # a1 went before b's backlog

    # In a thread: a key over its share waits its turn, then is refused, saying when to retry.
    quick = _admission(total=4, per_tenant=2, per_key=1, queue=0.2)
    started = time.perf_counter()
    with quick.slot(b), pytest.raises(TooManyRequests) as refused, quick.slot(b):
        pass
    assert 0.2 <= time.perf_counter() - started < 2
    assert refused.value.details["retryAfterSeconds"] == 1 and quick.running == 0
    with quick.slot(a), quick.slot(Caller("alpha", key_id="key_a2")):
        assert quick.running == 2  # another key of alpha runs within the tenant's share


def test_a_slot_goes_back_when_its_work_ends_even_if_nobody_waits_for_it() -> None:
    from ldims.caller import Caller

    admission = _admission(total=1, per_tenant=1, per_key=1)
    caller = Caller("bravo")
    done = threading.Event()

    async def abandoned() -> None:
        async def search() -> None:
            async with admission.admitted(caller) as on_pool:
                await on_pool(lambda: done.wait(5))

        task = asyncio.create_task(search())
        await asyncio.sleep(0.05)
        task.cancel()  # the caller gives up; the search runs on to its end
        await asyncio.sleep(0.05)
        assert admission.running == 1
        done.set()
        await asyncio.sleep(0.1)
        assert admission.running == 0

    asyncio.run(abandoned())


def test_a_second_key_takes_a_free_slot_while_the_first_keys_backlog_waits() -> None:
    from ldims.caller import Caller

    # Key 1 runs its whole share and has more waiting; the tenant is under its share.
    admission = _admission(total=4, per_tenant=3, per_key=1, queue=2.0)
    first, second = Caller("bravo", key_id="key_1"), Caller("bravo", key_id="key_2")
    release = threading.Event()
    running = threading.Event()

    def hold(caller: Caller, ran: threading.Event | None = None) -> None:
        with admission.slot(caller):
            if ran is not None:
                ran.set()
            release.wait(5)

    holder = threading.Thread(target=hold, args=(first, running))
    holder.start()
    assert running.wait(2)
    backlog = threading.Thread(target=hold, args=(first,))  # waits for key 1's share
    backlog.start()
    time.sleep(0.05)
    started = time.perf_counter()
    try:
        with admission.slot(second):  # before: queued behind key 1's backlog, then 429
            waited = time.perf_counter() - started
            assert admission.running == 2
    finally:
        release.set()
        holder.join(5)
        backlog.join(5)
    assert waited < 0.5, f"key 2 waited {waited:.2f} s with slots free"
    assert admission.running == 0


def test_at_most_queue_per_tenant_searches_of_a_tenant_wait() -> None:
    from ldims.caller import Caller
    from ldims.errors import TooManyRequests

    admission = _admission(total=4, per_tenant=1, per_key=1, queue=0.5, queue_per_tenant=2)
    bravo = Caller("bravo", key_id="key_b")
    release = threading.Event()
    outcome: dict[str, str] = {}

    async def search(name: str) -> None:
        try:
            async with admission.admitted(bravo) as on_pool:
                await on_pool(lambda: release.wait(5) if name == "b1" else None)
            outcome[name] = "ran"
        except TooManyRequests as refused:
            outcome[name] = f"429 after {refused.details['retryAfterSeconds']} s"

    async def flood() -> None:
        tasks = [asyncio.create_task(search("b1"))]
        await asyncio.sleep(0.05)
        tasks += [asyncio.create_task(search(name)) for name in ("b2", "b3")]  # the bound
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        tasks.append(asyncio.create_task(search("b4")))  # one past it: not queued
        await asyncio.sleep(0.1)
        release.set()  # b1 ends: the queued run, well before the waits run out
        await asyncio.gather(*tasks)
        # Refused, but paced like a timed-out waiter (a client told "no" at once hammers).
        assert time.perf_counter() - started >= 0.45

    asyncio.run(flood())
    assert outcome == {"b1": "ran", "b2": "ran", "b3": "ran", "b4": "429 after 1 s"}
    assert admission.running == 0

    # A search holding a thread past the bound is refused at once.
    threaded = _admission(total=4, per_tenant=2, per_key=1, queue=5.0, queue_per_tenant=1)
    hold = threading.Event()
    keys = [Caller("bravo", key_id=f"key_{n}") for n in range(4)]

    def wait_in_thread(caller: Caller) -> None:
        with threaded.slot(caller):
            hold.wait(5)

    workers = [threading.Thread(target=wait_in_thread, args=(key,)) for key in keys[:3]]
    for worker in workers:
        worker.start()
        time.sleep(0.05)  # two run (the tenant's share), the third waits (the bound of one)
    assert threaded.running == 2
    started = time.perf_counter()
    with pytest.raises(TooManyRequests), threaded.slot(keys[3]):
        pass
    assert time.perf_counter() - started < 0.5
    hold.set()
    for worker in workers:
        worker.join(5)
