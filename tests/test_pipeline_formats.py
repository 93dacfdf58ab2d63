"""Real office files through the whole stack: upload → extract worker (Tika over REST) → index,
with the refined type, page count, language and extractor on the record, and failure codes in
the record and in the 409 body."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from tests.conftest import DOCS, RedisServer, Stack
from tests.tika_server import running_tika_server
from workers.extraction.containers import DOCX, PPTX


@pytest.fixture
def tika_url() -> Iterator[str]:
    with running_tika_server() as url:
        yield url


@pytest.fixture
def office_stack(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer, tika_url: str
) -> Stack:
    redis.Redis.from_url(shared_redis.url).flushdb()
    return stack_factory(shared_redis.url, tika_url=tika_url, extract_timeout_seconds=60)


def test_office_files_complete_with_their_facts(office_stack: Stack) -> None:
    uploads = {
        # A Chinese DOCX uploaded under a misleading name: the bytes decide.
        "stress009.bin": ("poi__stress009.docx", DOCX, "python-docx", 2, "zh", "产品介绍"),
        "deck.pptx": (
            "unstructured__fake-power-point.pptx",
            PPTX,
            "tika-rest",
            1,
            None,
            "Adding a Bullet Slide",
        ),
        "russian.pdf": (
            "poppler-test__russian.pdf",
            "application/pdf",
            "pypdfium2+pdfplumber",
            1,
            None,
            "редактировать",
        ),
        # A scan: its page read by OCR, which the record says.
        "scan.pdf": (
            "docling__ocr_test.pdf",
            "application/pdf",
            "pypdfium2+pdfplumber",
            1,
            "en",
            "Docling bundles PDF document conversion",
        ),
    }
    ids = {
        name: office_stack.upload(name, (DOCS / source).read_bytes()).json()["documentId"]
        for name, (source, *_rest) in uploads.items()
    }
    for name, (_source, mime, extractor, pages, language, phrase) in uploads.items():
        record = office_stack.wait_final(ids[name], timeout=120)
        assert record["status"] == "completed", record["error"]
        assert record["format"] == mime and record["extractor"] == extractor
        assert record["pageCount"] == pages
        if language:
            assert record["language"] == language
        content = office_stack.client.get(f"/api/documents/{ids[name]}/content").json()
        assert phrase in content["text"] and content["metadata"]["format"] == mime
        if name == "scan.pdf":
            assert record["ocrPages"] == [1] and record["ocrConfidence"] > 80
            # A sentence of the scan finds it, with its page.
            found = office_stack.client.get(
                "/api/search",
                params={"query": "self contained package", "searchMode": "exact"},
            ).json()
            hits = [r for r in found["results"] if r["documentId"] == ids[name]]
            assert hits and hits[0]["pageNumber"] == 1, found
            assert "**self** **contained** **package**" in hits[0]["matchedContext"]
        else:
            assert record["ocrPages"] is None and record["ocrConfidence"] is None


BAD_FILES = [
    ("pdfplumber__password-example.pdf", "ENCRYPTED", "password"),
    ("pypdf__imagemagick-CCITTFaxDecode.pdf", "EMPTY_FILE", "OCR"),
    ("tika__testWORD_truncated.docx", "CORRUPT_FILE", "ZIP"),
    ("unstructured__password_protected.xlsx", "ENCRYPTED", "password"),
]


def test_bad_office_files_fail_with_their_code_in_the_record_and_the_409(
    office_stack: Stack,
) -> None:
    ids = [
        office_stack.upload(source, (DOCS / source).read_bytes()).json()["documentId"]
        for source, _code, _hint in BAD_FILES
    ]
    for doc_id, (_source, code, hint) in zip(ids, BAD_FILES, strict=True):
        record = office_stack.wait_final(doc_id, timeout=120)
        assert record["status"] == "failed" and record["error"]["code"] == code
        assert hint in record["error"]["message"]
        response = office_stack.client.get(f"/api/documents/{doc_id}/content")
        assert response.status_code == 409
        details = response.json()["errorDetails"]
        assert details["failureCode"] == code and hint in details["reason"]


def test_a_file_over_the_wall_time_fails_and_the_worker_goes_on(
    stack_factory: Callable[..., Stack], shared_redis: RedisServer
) -> None:
    redis.Redis.from_url(shared_redis.url).flushdb()
    stack = stack_factory(shared_redis.url, extract_timeout_seconds=0.2)
    big = "unstructured__pdf2image-memory-error-test-400p.pdf"
    slow_id = stack.upload(big, (DOCS / big).read_bytes()).json()["documentId"]
    record = stack.wait_final(slow_id, timeout=120)
    assert record["status"] == "failed" and record["error"]["code"] == "TIMEOUT"
    assert "0.2 s" in record["error"]["message"]
    quick_id = stack.upload("after.txt", b"the worker is still here").json()["documentId"]
    assert stack.wait_final(quick_id, timeout=60)["status"] == "completed"
