"""Strict Open XML (ISO/IEC 29500 Strict) DOCX, XLSX and PPTX extract with the same text,
sections and tables as the Transitional files they were made from. The test makes each Strict
file from a corpus file as Office's "Strict Open XML" save does: every namespace and
relationship type under ``http://purl.oclc.org/ooxml/``, ``conformance="strict"`` on the main
part; the package-level names (content types, core properties) stay as they are."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest
from docx.package import Package

from ldims.errors import PermanentError
from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, extract_file
from workers.extraction.containers import DOCX, PPTX, XLSX
from workers.extraction.registry import _extractor_for
from workers.extraction.strict_ooxml import is_strict, to_transitional, transitional_copy

LIMIT = ExtractionLimits()
_TRANSITIONAL = re.compile(
    rb"http://schemas\.openxmlformats\.org/"
    rb"(wordprocessingml|spreadsheetml|presentationml|drawingml|officeDocument|schemaLibrary)"
    rb"/2006/([\w-]+)(/[\w-]+)?"
)
_STRICT_SPELLING = {b"extended-properties": b"extendedProperties"}
_MAIN_ROOTS = {
    "word/document.xml": b"<w:document ",
    "xl/workbook.xml": b"<workbook ",
    "ppt/presentation.xml": b"<p:presentation ",
}


def _strict_name(match: re.Match[bytes]) -> bytes:
    area, name, rest = match.group(1), match.group(2), match.group(3) or b""
    if rest:
        rest = b"/" + _STRICT_SPELLING.get(rest[1:], rest[1:])
    return b"http://purl.oclc.org/ooxml/" + area + b"/" + _STRICT_SPELLING.get(name, name) + rest


def make_strict(source: Path, destination: Path) -> Path:
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(destination, "w") as strict:
        for info in original.infolist():
            data = original.read(info)
            if info.filename.endswith((".xml", ".rels")):
                data = _TRANSITIONAL.sub(_strict_name, data)
                root = _MAIN_ROOTS.get(info.filename)
                if root is not None and root in data:
                    data = data.replace(root, root + b'conformance="strict" ', 1)
            strict.writestr(info, data)
    return destination


@pytest.mark.parametrize(
    ("name", "mime", "phrase"),
    [
        ("docling__word_sample.docx", DOCX, "Summer activities"),
        ("docling__word_tables.docx", DOCX, None),
        ("docling__xlsx_01.xlsx", XLSX, None),
        ("docling__powerpoint_sample.pptx", PPTX, None),
    ],
)
def test_a_strict_package_reads_as_its_transitional_original(
    tmp_path: Path, name: str, mime: str, phrase: str | None
) -> None:
    original = DOCS / name
    strict = make_strict(original, tmp_path / name)
    assert is_strict(strict) and not is_strict(original)
    if mime == DOCX:  # the case in question: python-docx alone finds no Word document in it
        with pytest.raises(KeyError):
            Package.open(str(strict)).main_document_part  # noqa: B018
    # ... and the extractor alone (python-docx; Tika for XLSX and PPTX) fails on it.
    with pytest.raises(PermanentError) as failed:
        _extractor_for(mime)(strict, mime, LIMIT)
    assert failed.value.code in ("CORRUPT_FILE", "EMPTY_FILE")
    expected = extract_file(original, mime, LIMIT)
    result = extract_file(strict, mime, LIMIT)
    assert result.text == expected.text and result.text.strip()
    assert result.pages == expected.pages
    assert result.sections == expected.sections
    assert result.tables == expected.tables
    assert result.metadata["ooxml_conformance"] == "strict"
    assert "ooxml_conformance" not in expected.metadata
    if phrase is not None:
        assert phrase in result.text


def test_the_copy_rewrites_only_names_and_keeps_other_members(tmp_path: Path) -> None:
    strict = make_strict(DOCS / "docling__word_sample.docx", tmp_path / "strict.docx")
    with zipfile.ZipFile(strict) as archive:
        document = archive.read("word/document.xml")
        media = {n: archive.read(n) for n in archive.namelist() if n.startswith("word/media/")}
    assert b"http://purl.oclc.org/ooxml/wordprocessingml/main" in document
    copy = transitional_copy(strict, tmp_path / "copy.docx")
    with (
        zipfile.ZipFile(copy) as archive,
        zipfile.ZipFile(DOCS / "docling__word_sample.docx") as first,
    ):
        assert archive.read("word/document.xml") == to_transitional(document)
        assert b"purl.oclc.org" not in archive.read("word/document.xml")
        assert b"purl.oclc.org" not in archive.read("_rels/.rels")
        assert archive.read("_rels/.rels") == first.read("_rels/.rels")
        assert {n: archive.read(n) for n in media} == media  # images copied byte for byte
