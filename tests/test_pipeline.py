"""End to end through real Celery workers: upload → extract → index → content, and back out."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from indexer import DocumentIndex
from ldims.blobs import BlobStore
from tests.conftest import DOCS, RedisServer, Stack, key_of


def test_markdown_and_text_reach_completed_and_serve_their_text(stack: Stack) -> None:
    md = stack.upload("notes.md", "# Квартальный отчёт\n\nRevenue grew 12% in Q4.\n".encode())
    txt = stack.upload(
        "plain.txt", (DOCS / "tika__russian.cp866.txt").read_bytes(), documentType="poem"
    )
    assert md.status_code == txt.status_code == 202
    md_id, txt_id = md.json()["documentId"], txt.json()["documentId"]

    early = stack.client.get(f"/api/documents/{md_id}/content")
    if early.status_code == 202:  # the worker may already be done on a fast machine
        assert early.json()["status"] == "processing"

    assert stack.wait_final(md_id)["status"] == "completed"
    record = stack.wait_final(txt_id)
    assert record["status"] == "completed" and record["documentType"] == "poem"
    assert record["format"] == "text/plain" and record["extractedAt"]

    content = stack.client.get(f"/api/documents/{md_id}/content").json()
    assert "Revenue grew 12%" in content["text"]
    assert content["metadata"]["documentName"] == "notes.md"
    assert content["metadata"]["format"] == "text/markdown"
    cp866 = stack.client.get(f"/api/documents/{txt_id}/content").json()
    assert "Однажды, в студеную зимнюю пору" in cp866["text"]

    index = DocumentIndex(stack.settings.index_dir)
    assert index.chunk_count(key_of(md_id)) == 1 and index.chunk_count(key_of(txt_id)) == 1


def test_content_is_202_until_a_worker_takes_it(stack: Stack) -> None:
    stack.extract_worker.stop()
    doc_id = stack.upload("later.txt", b"processed later").json()["documentId"]
    response = stack.client.get(f"/api/documents/{doc_id}/content")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "processing" and body["documentStatus"] == "queued"
    assert "try again later" in body["message"].lower()
    stack.extract_worker.start()
    assert stack.wait_final(doc_id)["status"] == "completed"
    assert stack.client.get(f"/api/documents/{doc_id}/content").json()["text"] == "processed later"


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("empty.txt", (DOCS / "unstructured__empty.txt").read_bytes(), "EMPTY_FILE"),
        (
            "blank.txt",
            (DOCS / "unstructured__fake-text-all-whitespace.txt").read_bytes(),
            "EMPTY_FILE",
        ),
        ("picture.png", b"\x89PNG\r\n\x1a\n" + bytes(200), "CORRUPT_FILE"),  # a broken image
        ("notes.gz", b"\x1f\x8b\x08\x00" + bytes(60), "UNSUPPORTED_FORMAT"),
    ],
)
def test_bad_files_end_failed_with_a_code_and_409(
    stack: Stack, name: str, data: bytes, code: str
) -> None:
    doc_id = stack.upload(name, data).json()["documentId"]
    record = stack.wait_final(doc_id)
    assert record["status"] == "failed"
    assert record["error"]["code"] == code and record["error"]["message"]
    response = stack.client.get(f"/api/documents/{doc_id}/content")
    assert response.status_code == 409
    body = response.json()
    assert body["isError"] is True and body["errorCode"] == "CONTENT_UNAVAILABLE_OR_FAILED"
    assert body["errorDetails"]["failureCode"] == code


def test_same_content_is_a_noop_and_new_content_a_new_version(stack: Stack) -> None:
    first = stack.upload("doc.txt", b"version one text")
    doc_id = first.json()["documentId"]
    stack.wait_final(doc_id)
    again = stack.upload("doc.txt", b"version one text")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert again.json()["documentId"] == doc_id

    old_sha = first.json()["document"]["sha256"]
    second = stack.upload("doc.txt", b"version two text", documentId=doc_id)
    assert second.status_code == 202 and second.json()["version"] == 2
    record = stack.wait_final(doc_id)
    assert record["status"] == "completed" and record["version"] == 2
    assert stack.client.get(f"/api/documents/{doc_id}/content").json()["text"] == "version two text"
    index = DocumentIndex(stack.settings.index_dir)
    assert index.indexed_versions(key_of(doc_id)) == {2} and index.chunk_count(key_of(doc_id)) == 1
    assert not BlobStore(stack.settings.blobs_dir).exists(old_sha)
    listing = stack.client.get("/api/documents").json()
    assert listing["total"] == 1


def test_delete_removes_catalog_row_index_chunks_and_files(stack: Stack) -> None:
    response = stack.upload("gone.md", b"# Gone\n\nsoon deleted")
    doc_id, sha = response.json()["documentId"], response.json()["document"]["sha256"]
    stack.wait_final(doc_id)
    index = DocumentIndex(stack.settings.index_dir)
    assert index.chunk_count(key_of(doc_id)) == 1

    deleted = stack.client.delete(f"/api/documents/{doc_id}")
    assert deleted.status_code == 200 and deleted.json() == {"documentId": doc_id, "deleted": True}
    assert stack.client.get(f"/api/documents/{doc_id}").status_code == 404
    assert not BlobStore(stack.settings.blobs_dir).exists(sha)
    deadline = time.monotonic() + 20
    while index.chunk_count(key_of(doc_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert index.chunk_count(key_of(doc_id)) == 0


def test_the_pipeline_runs_on_a_postgresql_catalog(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer, postgres_url: str
) -> None:
    stack = stack_factory(shared_redis.url, database_url=postgres_url)
    doc_id = stack.upload("pg.md", "# PostgreSQL\n\n目录存储在 PostgreSQL 中。".encode()).json()[
        "documentId"
    ]
    record = stack.wait_final(doc_id)
    assert record["status"] == "completed" and record["title"] == "PostgreSQL"
    assert "目录存储" in stack.client.get(f"/api/documents/{doc_id}/content").json()["text"]
    stack.stop()  # release the database's connections before it is dropped


def test_uploaded_documents_are_found_by_search_with_filters(stack: Stack) -> None:
    first = stack.upload(
        "turbines.md",
        b"# Turbines\n\nThe turbine blade cracked during the test.",
        documentType="report",
        submitter="ops",
    ).json()["documentId"]
    second = stack.upload(
        "манускрипт.txt", "Турбины работали без остановки.".encode(), documentType="memo"
    ).json()["documentId"]
    for doc_id in (first, second):
        assert stack.wait_final(doc_id)["status"] == "completed"
    body = stack.client.get("/api/search", params={"query": "turbines blade"}).json()
    assert body["totalMatches"] == 1 and body["results"][0]["documentId"] == first
    hit = body["results"][0]
    assert hit["pageNumber"] == 1 and "**blade**" in hit["matchedContext"]
    assert hit["metadata"]["documentType"] == "report" and hit["metadata"]["submitter"] == "ops"
    russian = stack.client.get("/api/search", params={"query": "турбина"}).json()
    assert [r["documentId"] for r in russian["results"]] == [second]
    none = stack.client.get("/api/search", params={"query": "turbine", "documentType": "memo"})
    assert none.status_code == 200 and none.json()["results"] == []
    other = stack.client.get(
        "/api/search", params={"query": "turbine"}, headers={"X-LDIMS-Tenant": "rival"}
    )
    assert other.json()["totalMatches"] == 0
    bad = stack.client.get("/api/search", params={"query": "the of"})
    assert bad.status_code == 422 and bad.json()["errorCode"] == "QUERY_UNPROCESSABLE"
    too_many = stack.client.get("/api/search", params={"query": "x", "maxResults": 1000})
    assert too_many.status_code == 400 and too_many.json()["errorDetails"]["field"] == "maxResults"
