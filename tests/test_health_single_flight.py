"""``GET /health`` is single-flight (issue 33): it needs no key, so a flood of calls must not
run the four probes each. Concurrent callers await one probe run, whose answer serves for
about a second.

Real parts: the ``ldims`` app under uvicorn on Redis, its catalog, called over HTTP. The
catalog's real ``ping`` is counted on the running app's services.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from runtime import create_app
from tests.conftest import RedisServer, ThreadedServer, make_settings

CALLERS = 16


@pytest.fixture
def api(tmp_path: Path, shared_redis: RedisServer) -> Iterator[tuple[ThreadedServer, list[int]]]:
    settings = make_settings(
        tmp_path,
        shared_redis.url.rsplit("/", 1)[0] + "/7",
        health_probe_timeout_seconds=0.5,  # no extractor here: it fails fast or times out
    )
    app = create_app(settings)
    server = ThreadedServer(app, settings).start()
    services = app.state.services
    pings: list[int] = []
    lock = threading.Lock()
    real_ping = services.catalog.ping

    def counted_ping() -> None:
        with lock:
            pings.append(1)
        time.sleep(0.05)  # a probe takes a moment: the callers overlap it
        real_ping()

    services.catalog.ping = counted_ping
    try:
        yield server, pings
    finally:
        server.stop()
        services.close()


async def _calls(url: str, count: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return list(await asyncio.gather(*(client.get("/health") for _ in range(count))))


def test_concurrent_health_calls_share_one_probe_run(
    api: tuple[ThreadedServer, list[int]],
) -> None:
    server, pings = api
    started = time.perf_counter()
    answers = asyncio.run(_calls(server.url, CALLERS))
    elapsed = time.perf_counter() - started
    assert len({(answer.status_code, answer.text) for answer in answers}) == 1
    assert answers[0].status_code in (200, 503), answers[0].text
    assert answers[0].json()["checks" if answers[0].status_code == 200 else "errorDetails"]
    assert elapsed < 1.0, f"{CALLERS} calls took {elapsed:.2f} s: past the reuse window"
    assert len(pings) == 1, f"{CALLERS} concurrent /health calls ran {len(pings)} probe sets"

    time.sleep(1.2)  # past the answer's freshness: the next call probes again
    with httpx.Client(base_url=server.url, timeout=30) as client:
        assert client.get("/health").status_code in (200, 503)
    assert len(pings) == 2
