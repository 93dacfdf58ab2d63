"""Bulk uploads (``POST /api/documents/bulk``) on the real stack: each file's outcome is its
own, as if it had come alone; the limits and an outage refuse the whole request and record
nothing; one tenant's bulk learns nothing of another's documents."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.conftest import RedisServer, Stack


def bulk(stack: Stack, files: list[tuple[str, bytes]], **fields: str) -> httpx.Response:
    return stack.client.post(
        "/api/documents/bulk",
        files=[("file", (name, data)) for name, data in files],
        data=fields,
    )


def stored_blobs(stack: Stack) -> set[str]:
    root = stack.settings.blobs_dir
    return {p.name for p in root.glob("*/*/*") if p.is_file()}


def test_each_file_of_a_bulk_ends_as_if_uploaded_alone(stack: Stack) -> None:
    known = stack.upload("known.txt", b"a document the tenant already holds").json()["documentId"]
    assert stack.wait_final(known)["status"] == "completed"
    files = [
        ("alpha.txt", b"alpha bulkword first file"),
        ("beta.md", b"# Beta\n\nbulkword second file"),
        ("known-again.txt", b"a document the tenant already holds"),
        ("alpha-again.txt", b"alpha bulkword first file"),
        ("empty.txt", b""),
        ("   ", b"a file without a name is rejected alone"),
    ]

    response = bulk(stack, files, collection="bulk", submitter="tester")

    assert response.status_code == 202, response.text
    body = response.json()
    assert (body["queued"], body["duplicates"], body["rejected"]) == (3, 2, 1)
    alpha, beta, known_again, alpha_again, empty, nameless = body["documents"]
    assert alpha["name"] == "alpha.txt" and alpha["created"] is True
    assert alpha["duplicate"] is False and alpha["status"] == "queued"
    assert beta["created"] is True and beta["documentId"] != alpha["documentId"]
    assert known_again["documentId"] == known and known_again["duplicate"] is True
    assert alpha_again["documentId"] == alpha["documentId"] and alpha_again["duplicate"] is True
    assert nameless["errorCode"] == "INVALID_INPUT" and "documentId" not in nameless
    assert "name" in nameless["message"]

    assert stack.wait_final(alpha["documentId"])["status"] == "completed"
    done_beta = stack.wait_final(beta["documentId"])
    assert done_beta["status"] == "completed" and done_beta["collection"] == "bulk"
    failed = stack.wait_final(empty["documentId"])
    assert failed["status"] == "failed" and failed["error"]["code"] == "EMPTY_FILE"
    found = stack.client.get("/api/search", params={"query": "bulkword", "searchMode": "exact"})
    ids = {hit["documentId"] for hit in found.json()["results"]}
    assert ids == {alpha["documentId"], beta["documentId"]}
    page = stack.client.get("/api/documents", params={"collection": "bulk"}).json()
    assert page["total"] == 3  # the nameless file was not recorded, the duplicates added nothing
    assert hashlib.sha256(files[5][1]).hexdigest() not in stored_blobs(stack)


def test_another_tenant_gets_its_own_document_for_the_same_content(stack: Stack) -> None:
    data = b"the same words in two tenants"
    first = stack.client.post(
        "/api/documents/bulk",
        files=[("file", ("a.txt", data)), ("file", ("b.txt", b"only tenant a has this"))],
        headers={"X-LDIMS-Tenant": "tenant-a"},
    ).json()["documents"]
    second = stack.client.post(
        "/api/documents/bulk",
        files=[("file", ("a.txt", data)), ("file", ("c.txt", b"only tenant b has this"))],
        headers={"X-LDIMS-Tenant": "tenant-b"},
    )
    assert second.status_code == 202
    theirs = second.json()["documents"]
    assert theirs[0]["created"] is True and theirs[0]["duplicate"] is False
    assert theirs[0]["documentId"] not in {item["documentId"] for item in first}
    assert first[0]["documentId"] not in second.text and first[1]["documentId"] not in second.text


def test_limits_and_an_outage_refuse_the_whole_bulk_and_record_nothing(
    stack_factory: Callable[..., Stack], redis_server: RedisServer, tmp_path: Path
) -> None:
    # No extract batch time: every listed document after a message's first goes back to the
    # queue in a message of its own, and still ends completed.
    stack = stack_factory(
        redis_server.url,
        bulk_upload_max_files=3,
        bulk_upload_max_bytes=4000,
        max_upload_bytes=1500,
        extract_batch_max_seconds=0,
    )

    def refused(response: httpx.Response, status: int, code: str) -> str:
        assert response.status_code == status, response.text
        assert response.json()["errorCode"] == code
        return str(response.json()["errorMessage"])

    four = [(f"f{i}.txt", f"file {i}".encode()) for i in range(4)]
    assert "At most 3 files" in refused(bulk(stack, four), 400, "INVALID_INPUT")
    refused(bulk(stack, [("big.txt", b"x" * 2000), ("small.txt", b"s")]), 413, "TOO_LARGE")
    over = [(f"g{i}.txt", bytes([65 + i]) * 1400) for i in range(3)]  # 4,200 bytes in all
    refused(bulk(stack, over), 413, "TOO_LARGE")
    assert "name" in refused(bulk(stack, [(" ", b"one"), ("  ", b"two")]), 400, "INVALID_INPUT")
    refused(bulk(stack, [("a.txt", b"a")], createdAt="yesterday"), 400, "INVALID_INPUT")
    no_file = stack.client.post(
        "/api/documents/bulk", data={"collection": "x"}, files={"x": ("x", b"x")}
    )
    refused(no_file, 400, "INVALID_INPUT")
    assert stack.client.get("/api/documents").json()["total"] == 0
    assert stored_blobs(stack) == set()
    assert not any((stack.settings.blobs_dir / "tmp").iterdir())

    three = [(f"h{i}.txt", f"bulk document number {i}".encode()) for i in range(3)]
    accepted = bulk(stack, three)
    assert accepted.status_code == 202 and accepted.json()["queued"] == 3
    for item in accepted.json()["documents"]:
        assert stack.wait_final(item["documentId"], timeout=90)["status"] == "completed"

    redis_server.stop()
    outage = bulk(stack, [(f"o{i}.txt", f"during the outage {i}".encode()) for i in range(2)])
    refused(outage, 503, "SERVER_ERROR")
    assert stack.client.get("/api/documents").json()["total"] == 3
    assert len(stored_blobs(stack)) == 3
