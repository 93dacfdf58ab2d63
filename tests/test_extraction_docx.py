"""DOCX extraction on corpus files: headings, tables, pages, headers, languages, failures."""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import docx
import pytest

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from tests.conftest import DOCS
from workers.extraction.result import ExtractionLimits
from workers.extraction.word import extract_docx

LIMITS = ExtractionLimits()
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"


def extract(name: str, limits: ExtractionLimits = LIMITS) -> ExtractionResult:
    return extract_docx(DOCS / name, limits)


def write_docx(path: Path, body: str) -> Path:
    """A minimal hand-written package: content types, one relationship, the document part."""
    main_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
    office = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "[Content_Types].xml",
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            f'<Override PartName="/word/document.xml" ContentType="{main_type}"/></Types>',
        )
        archive.writestr(
            "_rels/.rels",
            '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
            f'<Relationship Id="rId1" Type="{office}" Target="word/document.xml"/>'
            "</Relationships>",
        )
        archive.writestr(
            "word/document.xml",
            f'<w:document xmlns:w="{W}" xmlns:mc="{MC}"><w:body>{body}</w:body></w:document>',
        )
    return path


def test_heading_hierarchy_becomes_sections() -> None:
    result = extract("docling__unit_test_headers.docx")
    assert [(s.heading, s.level) for s in result.sections] == [
        ("Test Document", 1),
        ("Section 1", 1),
        ("Section 1.1", 2),
        ("Section 1.2", 2),
        ("Section 1.2.3", 3),
        ("Section 2", 1),
        ("Section 2.1.1", 3),
        ("Section 2.1", 2),
    ]
    assert result.sections[2].text == "Paragraph 1.1.1\nParagraph 1.1.2"
    # Word's rendered page break before "Section 2.1.1" starts page 2.
    assert [p.number for p in result.pages] == [1, 2]
    assert (result.sections[6].page_start, result.sections[5].page_end) == (2, 1)
    assert result.metadata["page_count"] == result.metadata["declared_page_count"] == 2
    assert result.format.endswith("wordprocessingml.document")
    assert result.extractor == "python-docx"


def test_tables_keep_merged_cells_once() -> None:
    result = extract("docling__word_tables.docx")
    assert len(result.tables) == 7
    horizontal, vertical = result.tables[1].text, result.tables[3].text
    assert horizontal.splitlines()[1] == "Cell 1.0 | Merged Cell 1.1 1.2"
    assert vertical.splitlines()[1:3] == [
        "Cell 1.0 | Merged Cell 1.1 2.1 | Cell 1.2",
        "Cell 2.0 |  | Cell 2.2",
    ]
    assert vertical.count("Merged Cell 1.1 2.1") == 1
    # Once per table that has it (the vertical-span table and the all-spans table).
    assert result.text.count("Merged Cell 1.1 2.1") == 2
    # Tables are also in the page text, in body order after their captions.
    assert result.text.index("A non-uniform table with vertical spans") < result.text.index(
        "Merged Cell 3.1 4.1"
    )


def test_sample_headings_table_and_page_number_footer() -> None:
    result = extract("docling__word_sample.docx")
    assert [(s.heading, s.level) for s in result.sections] == [
        ("Swimming in the lake", 1),  # the Title style
        ("Let’s swim!", 1),
        ("Let’s eat", 2),
    ]
    assert result.tables[0].page == 2
    assert "Berries | Blueberry, Strawberry, Cranberry | 150" in result.tables[0].text
    assert "Grain | Corn, Buckwheat, Barley | 200" in result.pages[1].text
    # The only footer is a PAGE field ("2"): no running text worth keeping.
    assert result.headers_footers == []


def test_long_handbook_is_split_at_page_breaks_quickly() -> None:
    started = time.perf_counter()
    result = extract("unstructured__handbook-872p.docx")
    assert time.perf_counter() - started < 10
    assert len(result.pages) == result.metadata["page_count"] == 82
    assert "declared_page_count" not in result.metadata  # the file has no docProps/app.xml
    assert all(page.text for page in result.pages)
    first = result.sections[0]
    assert (first.heading, first.level, first.page_start) == ("CHAPTER 1 – INTRODUCTION", 1, 4)
    assert {s.level for s in result.sections} == {1, 2, 3}
    assert ("A. PURPOSE", 2) in [(s.heading, s.level) for s in result.sections]
    phrase = "The United States Trustee appoints and supervises standing trustees"
    assert phrase in result.pages[3].text
    assert any("Handbook for Chapter 13 Standing Trustees" in h for h in result.headers_footers)
    assert "Effective October 1, 2012" not in result.text


def test_various_features_cjk_footnote_and_headers_apart() -> None:
    result = extract("tika__testWORD_various.docx")
    assert "ゾルゲと尾崎、淡々と最期" in result.text and "𐌲𐌿𐍄𐌹𐍃𐌺" in result.text
    assert result.tables[0].text.splitlines()[0] == "Row 1 Col 1 | Row 1 Col 2 | Row 1 Col 3"
    assert result.headers_footers == ["This is the header text.", "This is the footer text."]
    assert "This is the header text." not in result.text
    assert "This is the footer text." not in result.text
    # The text box is stored twice (DrawingML and a VML fallback) but read once.
    assert result.text.count("Here is a text box") == 1
    assert result.pages[-1].text.endswith("This is a footnote.")
    assert "SEQ Figure" not in result.text and "Figure 1 This is a caption" in result.text
    assert result.metadata["language"] == "en"  # en-GB in the core properties
    assert result.metadata["author"] == "Michael McCandless"


def test_russian_contract_with_many_tables() -> None:
    started = time.perf_counter()
    result = extract("poi__bug65649.docx")
    assert time.perf_counter() - started < 10
    assert result.pages[0].text.startswith("Комитет по информатизации и связи")
    assert "Сумма контракта | 39 921 700,00 руб." in result.tables[0].text
    # 21 tables in the body; one is an empty signature grid with no text at all.
    assert len(result.tables) == 20
    assert ("Перечень сокращений", 1) in [(s.heading, s.level) for s in result.sections]
    assert "КСОБ | Комплексные системы обеспечения безопасности" in result.text
    assert result.metadata["title"] == "ЧАСТЬ II"
    # Word's saved page count is stale (1); the rendered page breaks give the real split.
    assert result.metadata["declared_page_count"] == 1
    assert result.metadata["page_count"] == len(result.pages) > 90


def test_chinese_headings_from_outline_levels() -> None:
    result = extract("poi__stress009.docx")
    assert [(s.heading, s.level) for s in result.sections] == [
        ("NANDrive 微型固态硬盘设计方案", 2),
        ("产品介绍", 3),
        ("技术规格", 3),
        ("资料下载", 3),
        ("购买信息", 3),
    ]
    assert (
        "本款固态硬盘是一款微型尺寸完全兼容ATA标准IDE接口规范的固态硬盘" in result.sections[1].text
    )
    assert result.headers_footers == ["NANDrive 设计方案"]
    assert result.metadata["page_count"] == 2


def test_page_breaks_rendered_and_explicit_count_once(tmp_path: Path) -> None:
    def paragraph(inner: str, properties: str = "") -> str:
        return f"<w:p><w:pPr>{properties}</w:pPr>{inner}</w:p>"

    def run(text: str) -> str:
        return f"<w:r><w:t>{text}</w:t></w:r>"

    box = "<w:r><w:txbxContent><w:p>" + run("Boxed") + "</w:p></w:txbxContent></w:r>"
    body = "".join(
        [
            paragraph(run("One"), '<w:outlineLvl w:val="0"/>'),
            paragraph('<w:r><w:br w:type="page"/></w:r>'),
            paragraph("<w:r><w:lastRenderedPageBreak/><w:t>Two</w:t></w:r>"),
            paragraph(run("Three"), "<w:pageBreakBefore/>"),
            paragraph(run("Four a") + "<w:r><w:lastRenderedPageBreak/></w:r>" + run("Four b")),
            paragraph("<w:del><w:r><w:delText>gone</w:delText></w:r></w:del>" + run("kept")),
            "<w:sdt><w:sdtContent>" + paragraph(run("Controlled")) + "</w:sdtContent></w:sdt>",
            paragraph(
                f"<mc:AlternateContent><mc:Choice>{box}</mc:Choice>"
                f"<mc:Fallback>{box}</mc:Fallback></mc:AlternateContent>"
            ),
        ]
    )
    result = extract_docx(write_docx(tmp_path / "breaks.docx", body), LIMITS)
    assert [page.text for page in result.pages] == [
        "One",
        "Two",
        "Three\nFour a",
        "Four b\nkept\nControlled\nBoxed",
    ]
    assert [(s.heading, s.level, s.page_start, s.page_end) for s in result.sections] == [
        ("One", 1, 1, 4)
    ]


def test_merged_cells_and_nested_tables_are_read_once(tmp_path: Path) -> None:
    def cell(text: str, properties: str = "") -> str:
        return f"<w:tc><w:tcPr>{properties}</w:tcPr><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:tc>"

    restart, span = '<w:vMerge w:val="restart"/>', '<w:gridSpan w:val="2"/>'
    nested = "<w:tbl><w:tr>" + cell("inner 1") + cell("inner 2") + "</w:tr></w:tbl>"
    last = "<w:tc><w:p><w:r><w:t>b</w:t></w:r></w:p>" + nested + "<w:p/></w:tc>"
    first_row = cell("Spanning", restart) + cell("Wide", span)
    # Some writers repeat the merged text in the continuation cell: it is not read.
    second_row = cell("Spanning", "<w:vMerge/>") + cell("a") + last
    body = f"<w:tbl><w:tr>{first_row}</w:tr><w:tr>{second_row}</w:tr></w:tbl>"
    result = extract_docx(write_docx(tmp_path / "merged.docx", body), LIMITS)
    assert [table.text for table in result.tables] == [
        "Spanning | Wide\n | a | b inner 1 | inner 2"
    ]
    assert result.text == result.tables[0].text


@pytest.mark.parametrize(
    ("name", "limits"),
    [
        ("unstructured__handbook-872p.docx", ExtractionLimits(max_pages=10)),
        ("docling__word_sample.docx", ExtractionLimits(max_chars=200)),
    ],
)
def test_over_the_limits_is_too_large(name: str, limits: ExtractionLimits) -> None:
    with pytest.raises(PermanentError) as caught:
        extract(name, limits)
    assert caught.value.code == "TOO_LARGE"


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("tika__testWORD_truncated.docx", "CORRUPT_FILE"),
        ("tika__testWORD_protected_passtika.docx", "ENCRYPTED"),
        ("docling__xlsx_01.xlsx", "UNSUPPORTED_FORMAT"),
    ],
)
def test_files_that_cannot_be_extracted(name: str, code: str) -> None:
    with pytest.raises(PermanentError) as caught:
        extract(name)
    assert caught.value.code == code


def test_document_without_text_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "blank.docx"
    docx.Document().save(str(path))
    with pytest.raises(PermanentError) as caught:
        extract_docx(path, LIMITS)
    assert caught.value.code == "EMPTY_FILE"
