"""Every part of a multipart upload counts against the part limit, named or not (issue 33:
1.5 M nameless parts were accepted): refused with 400 while the body streams, its rest unread.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient

from api.multipart import MAX_FIELDS, parse_bulk_upload, parse_upload
from ldims.blobs import BlobStore
from ldims.errors import InvalidInput
from ldims.settings import Settings
from runtime import create_app
from tests.conftest import RedisServer

BOUNDARY = "b0undary"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"
FILE_PART = (
    f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n"
    "Content-Type: text/plain\r\n\r\nthe document\r\n"
).encode()
# Kinds of parts that were never counted: no name, no Content-Disposition, a name repeated.
NAMELESS = f"--{BOUNDARY}\r\nContent-Disposition: form-data\r\n\r\nx\r\n".encode()
BARE = f"--{BOUNDARY}\r\n\r\nx\r\n".encode()
REPEATED = f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"collection\"\r\n\r\nx\r\n"
END = f"--{BOUNDARY}--\r\n".encode()


def body(part: bytes, count: int) -> bytes:
    return FILE_PART + part * count + END


@pytest.fixture
def client(tmp_path: Path, shared_redis: RedisServer) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path / "data", redis_url=shared_redis.url)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as client:
        yield client


@pytest.mark.parametrize(
    "part", [NAMELESS, BARE, REPEATED.encode()], ids=["nameless", "bare", "same-name"]
)
@pytest.mark.parametrize("route", ["/api/documents", "/api/documents/bulk"])
def test_twenty_thousand_uncounted_parts_are_refused(
    client: TestClient, route: str, part: bytes
) -> None:
    started = time.perf_counter()
    headers = {"content-type": CONTENT_TYPE}
    response = client.post(route, content=body(part, 20_000), headers=headers)
    elapsed = time.perf_counter() - started
    assert response.status_code == 400, response.text
    answer = response.json()
    assert answer["errorCode"] == "INVALID_INPUT"
    assert "parts" in answer["errorMessage"] and "\n" not in answer["errorMessage"]
    assert elapsed < 5, elapsed
    assert client.get("/api/documents").json()["total"] == 0


def test_a_form_within_the_limit_is_accepted(client: TestClient) -> None:
    fields = "".join(
        f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"f{i}\"\r\n\r\nv\r\n"
        for i in range(MAX_FIELDS)
    ).encode()
    response = client.post(
        "/api/documents", content=FILE_PART + fields + END, headers={"content-type": CONTENT_TYPE}
    )
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("bulk", [False, True])
def test_the_rest_of_the_body_is_not_read(tmp_path: Path, bulk: bool) -> None:
    """1.5 M nameless parts (about 75 MB) offered chunk by chunk: the parser stops within the
    first chunks, so neither time nor memory grows with what was sent."""
    store = BlobStore(tmp_path / "blobs")
    pulled = 0

    async def stream() -> AsyncIterator[bytes]:
        nonlocal pulled
        yield FILE_PART
        chunk = NAMELESS * 1000
        for _ in range(1500):
            pulled += 1
            yield chunk

    async def parse() -> None:
        if bulk:
            await parse_bulk_upload(CONTENT_TYPE, stream(), store, 1 << 20, 100, 1 << 30)
        else:
            await parse_upload(CONTENT_TYPE, stream(), store, 1 << 20)

    with pytest.raises(InvalidInput) as refused:
        anyio.run(parse)
    assert "parts" in refused.value.message
    assert pulled <= 2, pulled
    assert not any((tmp_path / "blobs" / "tmp").glob("*"))  # the file part's blob was dropped

