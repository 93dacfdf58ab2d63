"""Signed webhook ingestion: signatures, replay window, idempotent events, SSRF guard."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from fastapi.testclient import TestClient

from ldims.documents import sign
from ldims.settings import Settings
from runtime import create_app
from tests.conftest import RedisServer, Stack, ThreadedServer

SECRET = "s3cret-for-webhook-tests"


def post_event(
    client: Any, event: dict[str, Any], secret: str = SECRET, timestamp: int | None = None
) -> Any:
    body = json.dumps(event).encode()
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    headers = {
        "content-type": "application/json",
        "X-LDIMS-Timestamp": stamp,
        "X-LDIMS-Signature": sign(secret, stamp, body),
    }
    return client.post("/api/webhooks/ingest", content=body, headers=headers)


def created(event_id: str, **document: Any) -> dict[str, Any]:
    return {"id": event_id, "type": "document.created", "document": document}


@pytest.fixture
def client(tmp_path: Path, shared_redis: RedisServer) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data", redis_url=shared_redis.url, webhook_secret=SECRET
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client


def test_signed_event_with_inline_content_is_queued(client: TestClient) -> None:
    response = post_event(
        client, created("evt-1", id="wh-1", name="note.md", content="# Hi\n\ntext")
    )
    assert response.status_code == 202
    assert response.json() == {
        "eventId": "evt-1",
        "documentId": "wh-1",
        "duplicate": False,
        "status": "queued",
    }
    record = client.get("/api/documents/wh-1").json()
    assert record["name"] == "note.md" and record["format"] == "text/markdown"


def test_base64_content_is_accepted(client: TestClient) -> None:
    data = base64.b64encode("Привет, мир".encode()).decode()
    response = post_event(client, created("evt-b64", name="ru.txt", contentBase64=data))
    assert response.status_code == 202
    assert client.get(f"/api/documents/{response.json()['documentId']}").json()["size"] == len(
        "Привет, мир".encode()
    )


def test_bad_signature_is_401_and_records_nothing(client: TestClient) -> None:
    response = post_event(client, created("evt-2", content="x"), secret="wrong-secret-wrong-secret")
    assert response.status_code == 401 and response.json()["errorCode"] == "UNAUTHORIZED"
    assert client.get("/api/documents").json()["total"] == 0


@pytest.mark.parametrize("age", [310, -310, 86400])
def test_timestamp_outside_the_window_is_401(client: TestClient, age: int) -> None:
    response = post_event(client, created("evt-3", content="x"), timestamp=int(time.time()) - age)
    assert response.status_code == 401 and "replay window" in response.json()["errorMessage"]


def test_missing_signature_headers_are_401(client: TestClient) -> None:
    response = client.post("/api/webhooks/ingest", content=b"{}")
    assert response.status_code == 401 and response.json()["errorCode"] == "UNAUTHORIZED"


def test_replayed_event_id_creates_no_second_document(client: TestClient) -> None:
    first = post_event(client, created("evt-4", name="a.txt", content="first body"))
    assert first.status_code == 202
    replay = post_event(client, created("evt-4", name="b.txt", content="different body"))
    assert replay.status_code == 200 and replay.json() == {"eventId": "evt-4", "duplicate": True}
    assert client.get("/api/documents").json()["total"] == 1


def test_url_to_loopback_is_refused_by_default(client: TestClient) -> None:
    for url in [
        "http://127.0.0.1:8000/x",
        "http://localhost/x",
        "http://[::1]/x",
        "http://10.0.0.8/x",
    ]:
        response = post_event(client, created(f"evt-url-{url}", url=url))
        assert response.status_code == 400, url
        body = response.json()
        assert body["errorCode"] == "INVALID_INPUT"
        assert body["errorDetails"] == {"field": "document.url", "reason": "URL_NOT_ALLOWED"}
        if "localhost" in url:  # a name: what it resolves to is not told (an SSRF probe)
            assert "127.0.0.1" not in body["errorMessage"]
            assert "private or reserved address" in body["errorMessage"]
    response = post_event(client, created("evt-ftp", url="ftp://example.org/file.txt"))
    assert response.json()["errorDetails"]["reason"] == "URL_NOT_ALLOWED"
    assert client.get("/api/documents").json()["total"] == 0


def test_a_refused_event_can_be_sent_again(client: TestClient) -> None:
    assert post_event(client, created("evt-5", url="http://127.0.0.1/x")).status_code == 400
    fixed = post_event(client, created("evt-5", content="now inline"))
    assert fixed.status_code == 202


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"id": "e", "type": "document.updated", "document": {"content": "x"}}, "document.id"),
        ({"id": "e", "type": "document.deleted", "document": {}}, "document.id"),
        ({"id": "e", "type": "document.created", "document": {"name": "n"}}, "document"),
        ({"id": "e", "type": "document.exploded", "document": {}}, "type"),
    ],
)
def test_malformed_events_are_400_naming_the_field(
    client: TestClient, event: dict[str, Any], field: str
) -> None:
    response = post_event(client, event)
    assert response.status_code == 400
    assert response.json()["errorCode"] == "INVALID_INPUT"
    assert response.json()["errorDetails"]["field"] == field


def test_update_and_delete_events(client: TestClient) -> None:
    post_event(client, created("evt-6", id="wh-6", content="v1"))
    update = {
        "id": "evt-7",
        "type": "document.updated",
        "document": {"id": "wh-6", "content": "v2"},
    }
    assert post_event(client, update).status_code == 202
    assert client.get("/api/documents/wh-6").json()["version"] == 2
    delete = {"id": "evt-8", "type": "document.deleted", "document": {"id": "wh-6"}}
    assert post_event(client, delete).json()["deleted"] is True
    assert client.get("/api/documents/wh-6").status_code == 404
    again = {"id": "evt-9", "type": "document.deleted", "document": {"id": "wh-6"}}
    assert post_event(client, again).status_code == 200  # deleting twice is not an error


def test_webhooks_are_disabled_without_a_secret(tmp_path: Path, shared_redis: RedisServer) -> None:
    settings = Settings(data_dir=tmp_path / "data", redis_url=shared_redis.url)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        response = post_event(client, created("evt-x", content="x"))
        assert (
            response.status_code == 403
            and "LDIMS_WEBHOOK_SECRET" in response.json()["errorMessage"]
        )


def test_url_documents_are_fetched_by_a_worker_when_private_addresses_are_allowed(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer, http_file_server: str
) -> None:
    stack = stack_factory(
        shared_redis.url, webhook_secret=SECRET, fetch_allow_private_addresses=True
    )
    response = post_event(
        stack.client, created("evt-fetch", id="fetched", name="remote.txt", url=http_file_server)
    )
    assert response.status_code == 202
    record = stack.wait_final("fetched")
    assert record["status"] == "completed" and record["sourceUrl"] == http_file_server
    assert (
        stack.client.get("/api/documents/fetched/content").json()["text"]
        == "Fetched over HTTP by a worker.\n"
    )


# --- hostile senders -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url", ["http://example.com:99999/a.txt", "http://example.com:-1/a.txt", "http://[::1/a.txt"]
)
def test_a_malformed_url_is_400_and_the_event_id_stays_usable(client: TestClient, url: str) -> None:
    refused = post_event(client, created("evt-bad-url", name="a.txt", url=url))
    assert refused.status_code == 400, refused.text
    assert refused.json()["errorCode"] == "INVALID_INPUT"
    assert refused.json()["errorDetails"]["field"] == "document.url"
    assert "Traceback" not in refused.text
    # The sender fixes the event and sends it again under the same id: it is applied.
    again = post_event(client, created("evt-bad-url", name="a.txt", content="fixed"))
    assert again.status_code == 202 and again.json()["duplicate"] is False


def test_unsigned_large_bodies_do_not_grow_the_servers_memory(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    """The body is hashed as it streams and spooled to disk past 1 MiB: four unsigned 60 MB
    posts cost the API (in this process) no more than a few MB of memory."""
    settings = Settings(
        data_dir=tmp_path / "data", redis_url=shared_redis.url, webhook_secret=SECRET
    )
    server = ThreadedServer(create_app(settings)).start()
    payload = b"x" * (60 * 1024 * 1024)
    view = memoryview(payload)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(payload), 256 * 1024):
            yield bytes(view[start : start + 256 * 1024])

    stamp = str(int(time.time()))
    headers = {
        "content-type": "application/json",
        "X-LDIMS-Timestamp": stamp,
        "X-LDIMS-Signature": "sha256=" + "0" * 64,  # well-formed, wrong
    }
    process = psutil.Process()
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:  # the peak, not what is left after each request
        while not done.is_set():
            samples.append(process.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    try:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            before = process.memory_info().rss
            sampler.start()
            for _ in range(4):
                answer = http.post("/api/webhooks/ingest", content=chunks(), headers=headers)
                assert answer.status_code == 401 and answer.json()["errorCode"] == "UNAUTHORIZED"
            # Without the headers nothing is read at all: refused before the body.
            bare = http.post("/api/webhooks/ingest", content=chunks())
            assert bare.status_code == 401
    finally:
        done.set()
        sampler.join()
        server.stop()
    grown = max(samples) - before
    assert grown < 40 * 1024 * 1024, f"RSS grew by {grown >> 20} MiB"


def test_with_keys_on_only_a_tenants_own_secret_works_and_only_for_it(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    acme_secret, globex_secret = "acme-webhook-secret-1", "globex-webhook-secret-2"
    key = "k-" + "w" * 30
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        webhook_secret=SECRET,
        webhook_secrets={"acme": acme_secret, "globex": globex_secret},
        api_keys={hashlib.sha256(key.encode()).hexdigest(): "acme"},
    )

    def post(event: dict[str, Any], secret: str, tenant: str | None) -> Any:
        body = json.dumps(event).encode()
        stamp = str(int(time.time()))
        headers = {
            "content-type": "application/json",
            "X-LDIMS-Timestamp": stamp,
            "X-LDIMS-Signature": sign(secret, stamp, body),
        }
        if tenant:
            headers["X-LDIMS-Tenant"] = tenant
        return client.post("/api/webhooks/ingest", content=body, headers=headers)

    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        # The shared secret would act for any tenant: refused while keys are on.
        shared = post(created("evt-s", id="s-1", content="x"), SECRET, None)
        assert shared.status_code == 403 and "LDIMS_WEBHOOK_SECRETS" in shared.text
        # A tenant's secret acts for that tenant, whatever the event leaves out ...
        ok = post(created("evt-a", id="a-1", content="acme text"), acme_secret, "acme")
        assert ok.status_code == 202
        record = client.get("/api/documents/a-1", headers={"Authorization": f"Bearer {key}"})
        assert record.status_code == 200 and record.json()["documentId"] == "a-1"
        # ... and never for another: signed for globex, naming acme, or with acme's header.
        other = {"id": "evt-g", "type": "document.created", "tenant": "acme"}
        other["document"] = {"id": "a-2", "content": "x"}
        assert post(other, globex_secret, "globex").status_code == 403
        assert (
            post(created("evt-g2", id="a-3", content="x"), globex_secret, "acme").status_code == 401
        )
        assert (
            post(created("evt-n", id="a-4", content="x"), acme_secret, "nobody").status_code == 401
        )


# --- issue 33: no tenant oracle, bounded JSON --------------------------------------------------
def signed_headers(secret: str, body: bytes, tenant: str | None = None) -> dict[str, str]:
    stamp = str(int(time.time()))
    headers = {
        "content-type": "application/json",
        "X-LDIMS-Timestamp": stamp,
        "X-LDIMS-Signature": sign(secret, stamp, body),
    }
    if tenant is not None:
        headers["X-LDIMS-Tenant"] = tenant
    return headers


@pytest.fixture
def tenant_client(tmp_path: Path, shared_redis: RedisServer) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        webhook_secrets={"acme": "acme-webhook-secret-1"},
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client


def test_an_unknown_tenant_is_answered_as_a_bad_signature(tenant_client: TestClient) -> None:
    """A sender cannot tell a tenant name that has a secret from one that has none: the same
    status and body, and the body is read and hashed in both cases (no early answer)."""
    body = json.dumps(created("evt-oracle", content="x")).encode()
    wrong = "not-the-secret-of-anyone-1"
    known = tenant_client.post(
        "/api/webhooks/ingest", content=body, headers=signed_headers(wrong, body, "acme")
    )
    unknown = tenant_client.post(
        "/api/webhooks/ingest", content=body, headers=signed_headers(wrong, body, "nobody")
    )
    assert known.status_code == unknown.status_code == 401
    assert known.json() == unknown.json()
    assert known.json()["errorCode"] == "UNAUTHORIZED"

    # Timing class: with a 24 MB body, hashing it dominates; an answer that skipped the body
    # for an unknown tenant would come back in a small fraction of the time.
    large = b" " * (24 * 1024 * 1024)
    times: dict[str, list[float]] = {"acme": [], "nobody": []}
    for _ in range(3):
        for tenant in times:
            headers = signed_headers(wrong, b"", tenant)  # well-formed, wrong for this body
            started = time.perf_counter()
            answer = tenant_client.post("/api/webhooks/ingest", content=large, headers=headers)
            times[tenant].append(time.perf_counter() - started)
            assert answer.status_code == 401
    known_time, unknown_time = sorted(times["acme"])[1], sorted(times["nobody"])[1]
    assert unknown_time > 0.5 * known_time, (known_time, unknown_time)


@pytest.mark.parametrize("depth", [40, 1000, 100_000])  # 40: past the bound, short of recursion
def test_deeply_nested_json_is_400_without_a_traceback(
    client: TestClient, caplog: pytest.LogCaptureFixture, depth: int
) -> None:
    body = ("[" * depth + "]" * depth).encode()
    event = b'{"id": "evt-deep", "type": "document.created", "document": {"x": ' + body + b"}}"
    for payload in (body, event):
        response = client.post(
            "/api/webhooks/ingest", content=payload, headers=signed_headers(SECRET, payload)
        )
        assert response.status_code == 400, response.text
        answer = response.json()
        assert answer["errorCode"] == "INVALID_INPUT"
        assert "nested deeper than" in answer["errorMessage"]
        assert "\n" not in answer["errorMessage"]
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert "Traceback" not in caplog.text
    # The event id was not used up by the refused events.
    fixed = post_event(client, created("evt-deep", content="fine"))
    assert fixed.status_code == 202
