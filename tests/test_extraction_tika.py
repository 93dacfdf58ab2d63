"""The Tika path on corpus files, through both backends: iscc-tika in-process, and REST.

The REST backend talks to ``tests.tika_server`` (a Tika-server stand-in over iscc-tika) over
real HTTP, started once for this module. Every content test runs against both backends.
"""

from __future__ import annotations

import socket
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from ldims.errors import PermanentError, TransientError
from ldims.text import ExtractionResult
from tests.tika_server import running_tika_server
from workers.extraction.containers import EPUB, PPTX, XLSX
from workers.extraction.result import ExtractionLimits
from workers.extraction.tika import extract_with_tika

DOCS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docs"
RTF = "application/rtf"
DOC = "application/msword"
ODT = "application/vnd.oasis.opendocument.text"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"


@pytest.fixture(scope="module")
def tika_url() -> Iterator[str]:
    with running_tika_server() as url:
        yield url


@pytest.fixture(params=["inprocess", "rest"])
def limits(request: pytest.FixtureRequest) -> ExtractionLimits:
    """Default limits for one backend (``tika_url`` set means REST)."""
    if request.param == "rest":
        return ExtractionLimits(tika_url=request.getfixturevalue("tika_url"))
    return ExtractionLimits()


def extract(name: str, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    result = extract_with_tika(DOCS / name, mime, limits)
    backend = "tika-rest" if limits.tika_url else "tika-inprocess"
    assert result.extractor == backend and result.format == mime
    assert result.metadata["page_count"] == len(result.pages)
    assert [page.number for page in result.pages] == list(range(1, len(result.pages) + 1))
    return result


def failure(name: str, mime: str, limits: ExtractionLimits) -> PermanentError:
    with pytest.raises(PermanentError) as raised:
        extract_with_tika(DOCS / name, mime, limits)
    return raised.value


def test_simple_slide(limits: ExtractionLimits) -> None:
    result = extract("unstructured__fake-power-point.pptx", PPTX, limits)
    assert len(result.pages) == 1
    assert result.pages[0].text.startswith("Adding a Bullet Slide\nFind the bullet slide layout")
    assert [(s.heading, s.level) for s in result.sections] == [("Adding a Bullet Slide", 1)]
    assert "Use _TextFrame.add_paragraph() for subsequent bullets" in result.sections[0].text


def test_slide_table(limits: ExtractionLimits) -> None:
    result = extract("unstructured__fake-power-point-table.pptx", PPTX, limits)
    assert len(result.tables) == 1 and result.tables[0].page == 1
    assert result.tables[0].text.splitlines()[0] == "Column 1 | Column 2 | Column 3"
    assert "Tangerine | Pink | Aqua" in result.tables[0].text
    assert "Tangerine | Pink | Aqua" in result.pages[0].text


def test_one_page_per_slide_with_its_notes(limits: ExtractionLimits) -> None:
    result = extract("docling__powerpoint_sample.pptx", PPTX, limits)
    assert len(result.pages) == 3 and result.metadata["declared_page_count"] == 3
    assert [s.heading for s in result.sections] == [
        "Test Table Slide",
        "Second slide title",
        "List item4",
    ]
    assert [(s.page_start, s.page_end) for s in result.sections] == [(1, 1), (2, 2), (3, 3)]
    assert "A rectangle shape with this text inside." in result.pages[1].text
    # Speaker notes follow their slide's div in Tika's XHTML and stay with that slide.
    assert "Some notes on the second slide." in result.pages[1].text
    assert "Final notes on the third slide." in result.pages[2].text
    assert [table.page for table in result.tables] == [1]
    assert "R1 | True | False" in result.tables[0].text
    assert result.metadata["author"] == "Maxim Lysak"


def test_slide_masters_and_footers_are_kept_out_of_pages(limits: ExtractionLimits) -> None:
    result = extract("tika__testPPT_various.pptx", PPTX, limits)
    page = result.pages[0].text
    assert "Here is a text box" in page and "ゾルゲと尾崎、淡々と最期" in page
    assert "Row 1 Col 1 | Row 1 Col 2 | Row 1 Col 3" in page
    assert "This is the footer text." not in result.text
    assert "This is the header text." not in result.text
    assert "‹#›" not in result.text
    assert {"This is the footer text.", "This is the header text.", "‹#›"} <= set(
        result.headers_footers
    )
    assert result.sections[0].heading == "Slide 1"  # the slide opens with a table


def test_sheets_are_pages_and_sections(limits: ExtractionLimits) -> None:
    result = extract("docling__xlsx_01.xlsx", XLSX, limits)
    names = ["Sheet1", "Sheet2", "Sheet3", "Sheet4"]
    assert [s.heading for s in result.sections] == names
    assert [s.page_start for s in result.sections] == [1, 2, 3, 4]
    assert [page.text.splitlines()[0] for page in result.pages] == names
    assert "first | second | third\n1 | 5 | 9" in result.pages[0].text
    assert "col-1 | col-2 | col-3 | col-4" in result.pages[1].text
    assert [table.page for table in result.tables] == [1, 2, 3, 4]
    assert "image1.png" not in result.text  # an embedded picture's name is no content


def test_financial_workbook(limits: ExtractionLimits) -> None:
    result = extract("unstructured__2023-half-year-analyses-by-segment.xlsx", XLSX, limits)
    assert len(result.pages) == 5
    assert result.sections[0].heading == "OS-Rev.and results 30 06 2023"
    assert "Zone NA | 12,553 | 2,713 | 2,632" in result.pages[0].text
    assert "Zone NA" in result.sections[0].text


def test_russian_price_list(limits: ExtractionLimits) -> None:
    result = extract("poi__no_drawing_patriarch.xlsx", XLSX, limits)
    assert [s.heading for s in result.sections] == ["Лист 1"]
    lines = result.pages[0].text.splitlines()
    assert lines[:3] == ["Лист 1", "Прайс-лист", "ИП Заикина Т. М."]
    assert "Код товара | Артикул | Наименование товара" in result.text


def test_simple_rtf(limits: ExtractionLimits) -> None:
    result = extract("unstructured__fake-doc.rtf", RTF, limits)
    assert len(result.pages) == 1
    assert result.text.splitlines()[:2] == ["My First Heading", "My first paragraph."]
    assert "Row 2, Cell 2" in result.text


def test_rtf_with_many_features(limits: ExtractionLimits) -> None:
    result = extract("tika__testRTFVarious.rtf", RTF, limits)
    assert "Suddenly some Japanese text:\nゾルゲと尾崎、淡々と最期" in result.text
    assert "Bullet 1\nBullet 2\nBullet 3" in result.text
    assert "\n\n" not in result.text  # Tika's empty <p /> do not pile up blank lines
    assert result.metadata["author"] == "Michael McCandless"
    assert result.metadata["declared_page_count"] == 2 and result.metadata["page_count"] == 1


def test_epub_book(limits: ExtractionLimits) -> None:
    result = extract("unstructured__winter-sports.epub", EPUB, limits)
    assert result.metadata["title"] == "Winter Sports in Switzerland"
    assert result.metadata["author"] == "E. F. Benson"
    assert result.metadata["language"] == "en"
    # The book's source lines are hard-wrapped; HTML whitespace rules join them.
    assert "But at every Swiss resort there are rinks made, which render the skater" in (
        result.text.replace("\n", " ")
    )
    headings = [s.heading for s in result.sections]
    assert "CONTENTS" in headings and "CHAPTER II RINKS AND SKATERS" in headings
    assert any("Rinks and Skaters" in table.text for table in result.tables)


def test_legacy_word(limits: ExtractionLimits) -> None:
    result = extract("unstructured__fake.doc", DOC, limits)
    assert result.text == "Lorem ipsum dolor sit amet."
    assert result.metadata["author"] == "Mr. Miagi"


@pytest.mark.parametrize(
    ("name", "mime", "code"),
    [
        ("unstructured__empty.xlsx", XLSX, "EMPTY_FILE"),
        ("tika__testWORD_truncated.docx", XLSX, "CORRUPT_FILE"),
        ("tika__testWORD_protected_passtika.docx", XLSX, "ENCRYPTED"),
        ("unstructured__password_protected.xlsx", XLSX, "ENCRYPTED"),
        ("pdfplumber__empty.pdf", RTF, "EMPTY_FILE"),  # zero bytes, whatever the type
    ],
)
def test_files_that_fail_with_a_code(
    name: str, mime: str, code: str, limits: ExtractionLimits
) -> None:
    error = failure(name, mime, limits)
    assert error.code == code
    if code == "CORRUPT_FILE":
        assert "Couldn't find core part" in error.message


def test_limits_are_enforced_early(limits: ExtractionLimits) -> None:
    pages = failure("docling__powerpoint_sample.pptx", PPTX, replace(limits, max_pages=2))
    assert pages.code == "TOO_LARGE" and "3 pages" in pages.message
    chars = failure("poi__no_drawing_patriarch.xlsx", XLSX, replace(limits, max_chars=50_000))
    assert chars.code == "TOO_LARGE" and "50000" in chars.message
    # Under the XHTML cap but over max_chars once the text is read.
    text = failure("docling__xlsx_01.xlsx", XLSX, replace(limits, max_chars=300))
    assert text.code == "TOO_LARGE"


def test_both_backends_agree(tika_url: str) -> None:
    for name, mime in [
        ("tika__testPPT_various.pptx", PPTX),
        ("docling__xlsx_01.xlsx", XLSX),
        ("unstructured__winter-sports.epub", EPUB),
    ]:
        local = extract_with_tika(DOCS / name, mime, ExtractionLimits())
        remote = extract_with_tika(DOCS / name, mime, ExtractionLimits(tika_url=tika_url))
        assert replace(remote, extractor=local.extractor) == local


def test_unreachable_server_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    limits = ExtractionLimits(tika_url=f"http://127.0.0.1:{port}", timeout_seconds=5)
    with pytest.raises(TransientError) as raised:
        extract_with_tika(DOCS / "unstructured__fake.doc", DOC, limits)
    assert raised.value.code == "TIKA_UNAVAILABLE" and f"127.0.0.1:{port}" in raised.value.message


def test_server_speaks_like_tika(tika_url: str) -> None:
    with httpx.Client(base_url=tika_url, timeout=30) as client:
        assert client.get("/tika").text.startswith("This is Tika Server")
        assert "Tika" in client.get("/version").text
        doc = (DOCS / "unstructured__fake.doc").read_bytes()
        answer = client.put("/tika", content=doc, headers={"Accept": "application/json"})
        assert answer.status_code == 200
        body = answer.json()
        assert body["Content-Type"] == DOC and isinstance(body["X-TIKA:Parsed-By"], list)
        assert "<p>Lorem ipsum dolor sit amet.</p>" in body["X-TIKA:content"]
        assert client.put("/tika", content=b"").status_code == 422
        locked = (DOCS / "unstructured__password_protected.xlsx").read_bytes()
        refused = client.put("/tika", content=locked)
        assert refused.status_code == 422 and "EncryptedDocumentException" in refused.text


def odf(path: Path, mime: str, body: str) -> Path:
    """A minimal OpenDocument file (the corpus has none): mimetype, manifest, content."""
    namespaces = " ".join(
        f'xmlns:{prefix}="urn:oasis:names:tc:opendocument:xmlns:{name}:1.0"'
        for prefix, name in [
            ("office", "office"),
            ("text", "text"),
            ("table", "table"),
            ("draw", "drawing"),
            ("manifest", "manifest"),
        ]
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("mimetype", mime)
        archive.writestr(
            "META-INF/manifest.xml",
            f'<manifest:manifest {namespaces} manifest:version="1.2">'
            f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{mime}"/>'
            '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
            "</manifest:manifest>",
        )
        archive.writestr(
            "content.xml",
            f'<office:document-content {namespaces} office:version="1.2">'
            f"<office:body>{body}</office:body></office:document-content>",
        )
    return path


def test_opendocument_layouts(tmp_path: Path, limits: ExtractionLimits) -> None:
    odt = odf(
        tmp_path / "a.odt",
        ODT,
        '<office:text><text:h text:outline-level="1">Einleitung</text:h>'
        '<text:p>Grüße aus Zürich</text:p><text:h text:outline-level="2">Teil</text:h>'
        "<text:p>Mehr Text</text:p></office:text>",
    )
    text = extract_with_tika(odt, ODT, limits)
    assert [(s.heading, s.level, s.text) for s in text.sections] == [
        ("Einleitung", 1, "Grüße aus Zürich"),
        ("Teil", 2, "Mehr Text"),
    ]
    cell = "<table:table-cell><text:p>{}</text:p></table:table-cell>"
    ods = odf(
        tmp_path / "a.ods",
        ODS,
        "<office:spreadsheet>"
        f'<table:table table:name="A"><table:table-row>{cell.format("a1")}{cell.format("b1")}'
        f'</table:table-row></table:table><table:table table:name="B"><table:table-row>'
        f"{cell.format('x')}</table:table-row></table:table></office:spreadsheet>",
    )
    sheets = extract_with_tika(ods, ODS, limits)
    assert [page.text for page in sheets.pages] == ["Sheet 1\na1 | b1", "Sheet 2\nx"]
    assert [s.heading for s in sheets.sections] == ["Sheet 1", "Sheet 2"]
    frame = "<draw:page><draw:frame><draw:text-box><text:p>{}</text:p></draw:text-box></draw:frame>"
    odp = odf(
        tmp_path / "a.odp",
        ODP,
        f"<office:presentation>{frame.format('Erste Folie')}</draw:page>"
        f"{frame.format('Zweite Folie')}</draw:page></office:presentation>",
    )
    slides = extract_with_tika(odp, ODP, limits)
    assert [s.heading for s in slides.sections] == ["Erste Folie", "Zweite Folie"]
    assert [page.text for page in slides.pages] == ["Erste Folie", "Zweite Folie"]
