"""The /mcp endpoint of the real app refuses what the hostile test found open: a GET that held
an SSE stream for ever, and Host / Origin values that passed the SDK's prefix match."""

from __future__ import annotations

from collections.abc import Iterator

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
