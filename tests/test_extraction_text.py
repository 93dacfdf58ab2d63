"""Text and Markdown extraction on corpus files; type detection; the blob store's limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from ldims.blobs import BlobStore
from ldims.errors import PayloadTooLarge, PermanentError
from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, detect_format, extract_file

LIMIT = ExtractionLimits()


def test_cp866_russian_text_is_decoded() -> None:
    result = extract_file(DOCS / "tika__russian.cp866.txt", "text/plain", LIMIT)
    assert "Однажды, в студеную зимнюю пору" in result.text
    assert result.extractor == "text" and [p.number for p in result.pages] == [1]


def test_markdown_headings_become_sections() -> None:
    result = extract_file(DOCS / "docling__wiki.md", "text/markdown", LIMIT)
    headings = [(s.heading, s.level) for s in result.sections]
    assert headings[0] == ("IBM", 1) and ("1960s–1980s", 2) in headings
    assert result.metadata["title"] == "IBM"


def test_multilingual_and_long_text() -> None:
    udhr = extract_file(DOCS / "unstructured__UDHR_first_article_all.txt", "text/plain", LIMIT)
    assert "人人生而自由" in udhr.text and "Все люди рождаются свободными" in udhr.text
    novel = extract_file(DOCS / "unstructured__book-war-and-peace-1225p.txt", "text/plain", LIMIT)
    assert len(novel.text) > 3_000_000 and "Pierre" in novel.text


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("unstructured__empty.txt", "EMPTY_FILE"),
        ("unstructured__fake-text-all-whitespace.txt", "EMPTY_FILE"),
    ],
)
def test_empty_text_fails_with_a_code(name: str, code: str) -> None:
    with pytest.raises(PermanentError) as raised:
        extract_file(DOCS / name, "text/plain", LIMIT)
    assert raised.value.code == code


def test_over_the_size_limit_is_too_large() -> None:
    with pytest.raises(PermanentError) as raised:
        extract_file(DOCS / "docling__wiki.md", "text/markdown", ExtractionLimits(max_bytes=100))
    assert raised.value.code == "TOO_LARGE"


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("pdfplumber__federal-register-2020-17221.pdf", "application/pdf"),
        ("docling__word_sample.docx", "application/zip"),
        ("unstructured__fake.doc", "application/x-ole-storage"),
        ("tika__testRTFVarious.rtf", "application/rtf"),
        ("tika__resume.html", "text/html"),
        ("docling__wiki.md", "text/markdown"),
        ("tika__russian.cp866.txt", "text/plain"),
    ],
)
def test_type_is_detected_from_bytes(name: str, mime: str) -> None:
    head = (DOCS / name).read_bytes()[:8192]
    assert detect_format(head, name) == mime
    # The name does not fool detection of binary formats.
    if not mime.startswith("text/"):
        assert detect_format(head, "renamed.txt") == mime


def test_unknown_binary_fails_as_unsupported(tmp_path: Path) -> None:
    blob = tmp_path / "report.pdf"
    blob.write_bytes(bytes(range(256)) * 64)
    mime = detect_format(blob.read_bytes()[:8192], blob.name)
    assert mime == "application/octet-stream"
    with pytest.raises(PermanentError) as raised:
        extract_file(blob, mime, LIMIT)
    assert raised.value.code == "UNSUPPORTED_FORMAT"


def test_text_over_the_character_limit_is_too_large() -> None:
    with pytest.raises(PermanentError) as raised:
        extract_file(DOCS / "docling__wiki.md", "text/markdown", ExtractionLimits(max_chars=1000))
    assert raised.value.code == "TOO_LARGE"


def test_blob_store_streams_names_by_hash_and_enforces_its_limit(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    writer = store.writer(max_bytes=10)
    for chunk in (b"abc", b"def"):
        writer.write(chunk)
    blob = writer.commit()
    assert blob.size == 6 and blob.path.read_bytes() == b"abcdef"
    assert blob.sha256 == "bef57ec7f53a6d40beb640a780a639c83bc29ac8a9816f1fc6c5c6dcd93c4721"
    again = store.writer(max_bytes=10)
    again.write(b"abcdef")
    assert again.commit().path == blob.path
    too_big = store.writer(max_bytes=10)
    too_big.write(b"12345")
    with pytest.raises(PayloadTooLarge):
        too_big.write(b"678901")
    assert list(store.tmp_dir.iterdir()) == []
