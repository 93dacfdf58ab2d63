"""Every error path of the REST API: status code and the seed's body shape.

The app runs in process (FastAPI's TestClient) against a real Redis; no worker consumes
the queue here, so documents stay ``queued`` unless a test runs a pipeline step itself.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ldims.errors import PermanentError
from ldims.settings import Settings
from runtime import create_app
from tests.conftest import RedisServer, free_port, key_of
from tests.tika_server import running_tika_server
from workers import pipeline


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["isError"] is True
    assert body["errorCode"] == code
    assert isinstance(body["errorMessage"], str) and body["errorMessage"]
    return body  # type: ignore[no-any-return]


def make_client(settings: Settings) -> TestClient:
    return TestClient(create_app(settings), base_url="http://127.0.0.1")


@pytest.fixture
def settings(tmp_path: Path, shared_redis: RedisServer) -> Settings:
    return Settings(data_dir=tmp_path / "data", redis_url=shared_redis.url, max_upload_bytes=1000)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with make_client(settings) as client:
        yield client


def upload(client: TestClient, data: bytes = b"hello", **fields: str) -> Any:
    headers = {k: fields.pop(k) for k in list(fields) if k.startswith("X-")}
    return client.post(
        "/api/documents", files={"file": ("a.txt", data)}, data=fields, headers=headers
    )


def test_upload_without_file_part_is_400_naming_the_field(client: TestClient) -> None:
    response = client.post("/api/documents", files={"other": ("a.txt", b"x")})
    assert assert_error(response, 400, "INVALID_INPUT")["errorDetails"]["field"] == "file"


def test_upload_that_is_not_multipart_is_400(client: TestClient) -> None:
    response = client.post("/api/documents", content=b"raw", headers={"content-type": "text/plain"})
    assert assert_error(response, 400, "INVALID_INPUT")["errorDetails"]["field"] == "file"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"documentId": "bad id with spaces"}, "documentId"),
        ({"createdAt": "yesterday"}, "createdAt"),
        ({"X-LDIMS-Tenant": "no/slashes"}, "X-LDIMS-Tenant"),
    ],
)
def test_upload_with_bad_metadata_is_400_naming_the_field(
    client: TestClient, fields: dict[str, str], field: str
) -> None:
    body = assert_error(upload(client, **fields), 400, "INVALID_INPUT")
    assert body["errorDetails"]["field"] == field


def test_upload_over_the_limit_is_413_and_leaves_no_file(
    client: TestClient, settings: Settings
) -> None:
    body = assert_error(upload(client, b"x" * 1001), 413, "TOO_LARGE")
    assert body["errorDetails"]["limitBytes"] == 1000
    leftovers = [p for p in settings.blobs_dir.rglob("*") if p.is_file()]
    assert leftovers == []


def test_declared_length_over_the_limit_is_413_before_reading(client: TestClient) -> None:
    response = client.post(
        "/api/documents",
        content=b"--b--",
        headers={"content-type": "multipart/form-data; boundary=b", "content-length": str(10**9)},
    )
    assert_error(response, 413, "TOO_LARGE")


def test_unknown_document_is_404_everywhere(client: TestClient) -> None:
    for method, path in [
        ("GET", "/api/documents/nope"),
        ("GET", "/api/documents/nope/content"),
        ("DELETE", "/api/documents/nope"),
    ]:
        body = assert_error(client.request(method, path), 404, "RESOURCE_NOT_FOUND")
        assert body["errorDetails"]["documentId"] == "nope"


def test_another_tenants_document_is_not_found_as_an_unknown_one(client: TestClient) -> None:
    doc_id = upload(client, b"tenant a text", **{"X-LDIMS-Tenant": "a"}).json()["documentId"]
    other = {"X-LDIMS-Tenant": "b"}
    for method, path in [
        ("GET", "/api/documents/{}"),
        ("GET", "/api/documents/{}/content"),
        ("GET", "/api/documents/{}/lines/1-2"),
        ("DELETE", "/api/documents/{}"),
    ]:
        foreign = client.request(method, path.format(doc_id), headers=other)
        unknown = client.request(method, path.format("nope-0000"), headers=other)
        assert_error(foreign, 404, "RESOURCE_NOT_FOUND")
        assert foreign.text.replace(doc_id, "<id>") == unknown.text.replace("nope-0000", "<id>")
    assert client.get("/api/documents", headers=other).json()["total"] == 0
    # Ids are each tenant's own: b naming a's id makes a document of b's, and a's stays a's.
    taken = upload(client, b"tenant b text", documentId=doc_id, **other)
    assert taken.status_code == 202 and taken.json()["created"] is True, taken.text
    mine = client.get(f"/api/documents/{doc_id}", headers={"X-LDIMS-Tenant": "a"}).json()
    theirs = client.get(f"/api/documents/{doc_id}", headers=other).json()
    assert (mine["tenant"], mine["size"]) == ("a", len(b"tenant a text"))
    assert (theirs["tenant"], theirs["size"]) == ("b", len(b"tenant b text"))


def test_content_of_a_queued_document_is_202_processing(client: TestClient) -> None:
    doc_id = upload(client, b"waiting").json()["documentId"]
    response = client.get(f"/api/documents/{doc_id}/content")
    assert response.status_code == 202
    assert response.json()["status"] == "processing"
    assert response.json()["documentId"] == doc_id
    assert response.headers["retry-after"]


def test_content_of_a_failed_document_is_409_with_the_failure(
    client: TestClient, settings: Settings
) -> None:
    response = upload(client, gzip.compress(b"a gzip archive is not read"))
    doc_id, sha = response.json()["documentId"], response.json()["document"]["sha256"]
    # Run the real extract step in this process: it must record UNSUPPORTED_FORMAT.
    rt = pipeline.Runtime(settings)
    with rt.sandbox, pytest.raises(PermanentError) as raised:
        pipeline.run_extract(rt, key_of(doc_id), sha, first_delivery=True)
    pipeline.record_failure(rt, key_of(doc_id), sha, raised.value.code, raised.value.message)
    body = assert_error(
        client.get(f"/api/documents/{doc_id}/content"), 409, "CONTENT_UNAVAILABLE_OR_FAILED"
    )
    assert body["errorDetails"]["failureCode"] == "UNSUPPORTED_FORMAT"
    assert body["errorDetails"]["status"] == "failed"


def test_bad_query_parameters_are_400(client: TestClient) -> None:
    assert_error(client.get("/api/documents", params={"limit": 0}), 400, "INVALID_INPUT")
    assert_error(client.get("/api/documents", params={"status": "lost"}), 400, "INVALID_INPUT")
    body = assert_error(
        client.get("/api/documents", params={"createdFrom": "x"}), 400, "INVALID_INPUT"
    )
    assert body["errorDetails"]["field"] == "createdFrom"


def test_unknown_endpoint_is_404_in_the_same_shape(client: TestClient) -> None:
    assert_error(client.get("/api/nothing-here"), 404, "RESOURCE_NOT_FOUND")


def test_api_keys_401_without_or_with_a_wrong_key_and_map_to_tenants(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    key = "k-" + "s" * 30
    settings = Settings(
        data_dir=tmp_path / "data",
        redis_url=shared_redis.url,
        api_keys={hashlib.sha256(key.encode()).hexdigest(): "acme"},
    )
    with make_client(settings) as client:
        response = client.get("/api/documents")
        assert_error(response, 401, "UNAUTHORIZED")
        assert response.headers["www-authenticate"] == "Bearer"
        assert_error(
            client.get("/api/documents", headers={"Authorization": "Bearer nope"}),
            401,
            "UNAUTHORIZED",
        )
        good = {"Authorization": f"Bearer {key}"}
        created = client.post("/api/documents", files={"file": ("a.txt", b"acme")}, headers=good)
        assert created.json()["document"]["tenant"] == "acme"


def test_broker_down_is_503_and_nothing_is_recorded(tmp_path: Path) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    settings = Settings(data_dir=tmp_path / "data", redis_url=dead)
    with make_client(settings) as client:
        body = assert_error(upload(client), 503, "SERVER_ERROR")
        assert body["errorDetails"]["component"] == "broker"
        assert client.get("/api/documents").json()["total"] == 0
        health = client.get("/health")
        body = assert_error(health, 503, "SERVER_ERROR")
        checks = body["errorDetails"]["checks"]
        assert checks["broker"]["ok"] is False and checks["catalog"]["ok"] is True


def test_catalog_down_is_503(tmp_path: Path, shared_redis: RedisServer) -> None:
    dead_pg = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/none?connect_timeout=2"
    settings = Settings(
        data_dir=tmp_path / "data", redis_url=shared_redis.url, database_url=dead_pg
    )
    client = TestClient(create_app(settings, migrate=False), base_url="http://127.0.0.1")
    body = assert_error(client.get("/api/documents"), 503, "SERVER_ERROR")
    assert body["errorDetails"]["component"] == "catalog"
    assert_error(client.get("/health"), 503, "SERVER_ERROR")


def test_health_is_200_when_everything_answers(client: TestClient) -> None:
    body = client.get("/health").json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"broker", "catalog", "index", "extractor"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["extractor"]["detail"]["tika"] == "in-process"


def test_health_checks_the_tika_server_when_one_is_configured(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    with running_tika_server() as tika_url:
        settings = Settings(data_dir=tmp_path / "up", redis_url=shared_redis.url, tika_url=tika_url)
        with make_client(settings) as client:
            body = client.get("/health").json()
            assert body["checks"]["extractor"]["detail"]["tika"] == "rest"
    gone = Settings(data_dir=tmp_path / "down", redis_url=shared_redis.url, tika_url=tika_url)
    with make_client(gone) as client:
        body = assert_error(client.get("/health"), 503, "SERVER_ERROR")
        assert body["errorDetails"]["checks"]["extractor"]["ok"] is False
        assert body["errorMessage"] == "Unavailable: extractor."


def test_a_broken_catalog_file_is_500_server_error_without_internals(
    tmp_path: Path, shared_redis: RedisServer
) -> None:
    settings = Settings(data_dir=tmp_path / "data", redis_url=shared_redis.url)
    app = create_app(settings)
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        assert client.get("/api/documents").status_code == 200
        app.state.services.catalog.dispose()
        (tmp_path / "data" / "catalog.sqlite3").write_bytes(b"this is not a database" * 100)
        for suffix in ("-wal", "-shm"):
            (tmp_path / "data" / f"catalog.sqlite3{suffix}").unlink(missing_ok=True)
        body = assert_error(client.get("/api/documents"), 500, "SERVER_ERROR")
        assert body["errorMessage"] == "An unexpected error occurred on the server."
        assert "sqlite" not in str(body).lower()


def test_wrong_method_is_405_in_the_same_shape(client: TestClient) -> None:
    assert_error(client.put("/api/documents"), 405, "INVALID_INPUT")


def test_completed_document_whose_extraction_vanished_is_409(
    client: TestClient, settings: Settings
) -> None:
    response = upload(client, b"short lived")
    doc_id, sha = response.json()["documentId"], response.json()["document"]["sha256"]
    rt = pipeline.Runtime(settings)
    with rt.sandbox:
        assert pipeline.run_extract(rt, key_of(doc_id), sha, first_delivery=True)
    assert pipeline.run_index_batch(rt, [pipeline.IndexJob(key_of(doc_id), sha)]) == {}
    assert client.get(f"/api/documents/{doc_id}/content").json()["text"] == "short lived"
    rt.extracts.delete(sha)
    body = assert_error(
        client.get(f"/api/documents/{doc_id}/content"), 409, "CONTENT_UNAVAILABLE_OR_FAILED"
    )
    assert body["errorDetails"]["failureCode"] == "CONTENT_MISSING"
