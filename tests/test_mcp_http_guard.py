"""The /mcp endpoint of the real app refuses what the hostile test found open: a GET that held
an SSE stream for ever, and Host / Origin values that passed the SDK's prefix match."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from ldims.settings import Settings
from runtime import create_app
from tests.conftest import ACCEPT, INITIALIZE, RedisServer, ThreadedServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[str]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("guard"), redis_url=shared_redis.url)
    running = ThreadedServer(create_app(settings)).start()
    yield running.url
    running.stop()


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT"])
def test_only_post_reaches_the_mcp_server(server: str, method: str) -> None:
    with httpx.Client(base_url=server, timeout=5) as client:
        response = client.request(method, "/mcp", headers={"accept": "text/event-stream"})
    assert response.status_code == 405  # at once: no stream is opened
    assert response.headers["allow"] == "POST"
    assert response.json()["isError"] is True


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "127.0.0.1:8200, evil.com"}, 421),
        ({"host": "127.0.0.1:8200@evil.com"}, 421),
        ({"host": "evil.com"}, 421),
        ({"origin": "http://127.0.0.1:8200@evil.com"}, 403),
        ({"origin": "http://127.0.0.1:8200.evil.com"}, 403),
        ({"origin": "http://localhost.evil.com:80"}, 403),
        ({"origin": "null"}, 403),
    ],
)
def test_host_and_origin_tricks_are_refused(
    server: str, headers: dict[str, str], status: int
) -> None:
    with httpx.Client(base_url=server, timeout=5) as client:
        response = client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})
    assert response.status_code == status, response.text
    assert "evil.com" not in response.headers.get("access-control-allow-origin", "")


@pytest.mark.parametrize(
    "headers", [{}, {"origin": "http://localhost:3000"}, {"origin": "http://127.0.0.1:8000"}]
)
def test_the_allowed_names_are_served(server: str, headers: dict[str, str]) -> None:
    with httpx.Client(base_url=server, timeout=5) as client:
        response = client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["serverInfo"]["name"] == "ldims"
    assert response.headers["x-request-id"]  # every request has an id on its log lines


class _Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def warnings_logged() -> Iterator[list[logging.LogRecord]]:
    """WARNING and worse, from our loggers, the SDK's and uvicorn's (which does not propagate)."""
    handler = _Collected()
    loggers = [logging.getLogger(), logging.getLogger("uvicorn")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("host", "origin", "status"),
    [
        ("LOCALHOST:{port}", None, 200),
        ("LocalHost:{port}", "HTTP://LOCALHOST:3000", 200),
        ("[0:0::1]:{port}", None, 200),
        ("127.0.0.1:{port}", "http://LocalHost:3000", 200),
        ("EVIL.com:{port}", None, 421),
        ("127.0.0.1:{port}", "HTTP://EVIL.com", 403),
    ],
)
def test_names_are_compared_whatever_their_case_and_refusals_are_clean(
    server: str, host: str, origin: str | None, status: int
) -> None:
    """``Host: LOCALHOST:…`` passed the guard, then the SDK's case-sensitive check answered 421
    in plain text with two ERROR tracebacks (on /sse); now one spelling goes on past the guard,
    and a refusal is LDIMS's JSON body without a log line above INFO."""
    headers = {"host": host.format(port=server.rsplit(":", 1)[1])}
    if origin:
        headers["origin"] = origin
    with warnings_logged() as records, httpx.Client(base_url=server, timeout=5) as client:
        response = client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **headers})
        assert response.status_code == status, response.text
        with client.stream("GET", "/sse", headers=headers) as stream:
            assert stream.status_code == status
            if status == 200:
                first = next(line for line in stream.iter_lines() if line.startswith("data:"))
                assert "session_id=" in first
            else:
                assert json.loads(stream.read())["isError"] is True
    if status == 200:
        assert response.json()["result"]["serverInfo"]["name"] == "ldims"
    else:
        assert response.json()["isError"] is True
    assert [(r.name, r.levelname, r.getMessage()[:80]) for r in records] == []
