"""PDF extraction on real corpus files: text per page, tables, outline sections, running
headers, metadata, and the failure codes for encrypted, image-only, damaged and huge files."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from workers.extraction.pdf import extract_pdf, parse_pdf_date
from workers.extraction.result import ExtractionLimits, OcrOptions

DOCS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "docs"
LIMITS = ExtractionLimits()


@functools.cache
def extracted(name: str) -> ExtractionResult:
    """Each corpus file is extracted once per test run; tests only read the result."""
    return extract_pdf(DOCS / name, LIMITS)


def failure(path: Path, limits: ExtractionLimits = LIMITS) -> PermanentError:
    with pytest.raises(PermanentError) as raised:
        extract_pdf(path, limits)
    return raised.value


@pytest.mark.parametrize(
    ("name", "pages", "phrase"),
    [
        ("pdfplumber__federal-register-2020-17221.pdf", 15, "Airworthiness Directives; The Boeing"),
        ("pdfplumber__chelsea_pdta.pdf", 65, "Plan directeur de transport actif"),
        ("pdfplumber__nics-background-checks-2015-11-rotated.pdf", 1, "Alabama 18,870"),
        ("pdfplumber__issue-67-example.pdf", 22, "2018 年第一季度报告"),
        ("pdfplumber__pr-136-example.pdf", 6, "Add:128 XxRd.,Hangzhou,China"),
        ("pypdf__multilang.pdf", 1, "Привет, мир"),
        ("poppler-test__russian.pdf", 1, "Простой осваивать"),
        ("pypdf__r2-empty-password.pdf", 1, "pdf encryption test"),
        ("pypdf__Seige_of_Vicksburg_Sample_OCR.pdf", 6, "Johnston is coming with fifty"),
        ("unstructured__copy-protected.pdf", 2, "LayoutParser"),
        (
            "unstructured__invalid-pdf-structure-pdfminer-one-page.pdf",
            2,
            "Leadership in Cybersecurity",
        ),
        ("docling__redp5110_sampled.pdf", 18, "Row and Column Access Control"),
        ("tika__testPDFVarious.pdf", 2, "Suddenly some Japanese text"),
        ("tika__testPDF_bad_page_303226.pdf", 19, "Drug Enforcement Administration"),
        ("tika__testPDF_protected.pdf", 41, "RETHINKING THE FINANCIAL NETWORK"),
        ("pdfjs__helloworld-bad.pdf", 1, "Hello, world!"),
        ("pdfplumber__malformed-from-issue-932.pdf", 1, "2021 3 31"),
        ("unstructured__pdf2image-memory-error-test-400p.pdf", 400, "Command Code BMFOL"),
    ],
)
def test_pdf_completes_with_its_pages_and_text(name: str, pages: int, phrase: str) -> None:
    result = extracted(name)
    assert result.format == "application/pdf" and result.extractor == "pypdfium2+pdfplumber"
    assert [page.number for page in result.pages] == list(range(1, pages + 1))
    assert result.metadata["page_count"] == pages
    assert phrase in result.text
    assert any(phrase in page.text for page in result.pages)
    assert result.text == "\n\n".join(page.text for page in result.pages if page.text)


def test_scripts_survive_extraction() -> None:
    multilang = extracted("pypdf__multilang.pdf")
    for phrase in ("Привет, мир", "你好世界", "こんにちは世界", "مرحبا بالعالم"):
        assert phrase in multilang.text
    assert multilang.metadata["language"] == "en"  # the catalog's /Lang en-US
    report = extracted("pdfplumber__issue-67-example.pdf")
    assert "所有董事均已出席了审议本次季报的董事会会议" in report.text
    # pdfium joins a hyphenated word across lines and marks it with U+0002: the word is whole.
    assert "composition of the substance" in extracted("tika__testPDF_bad_page_303226.pdf").text


def test_tables_are_found_on_ruled_pages() -> None:
    chelsea = extracted("pdfplumber__chelsea_pdta.pdf")
    assert len(chelsea.tables) >= 20
    assert all(table.text.strip() and 1 <= table.page <= 65 for table in chelsea.tables)
    nics = extracted("pdfplumber__nics-background-checks-2015-11-rotated.pdf")
    assert len(nics.tables) == 1 and "Alabama" in nics.tables[0].text
    redbook = extracted("docling__redp5110_sampled.pdf")
    assert any(
        "Column name | Data type | Description" in table.text and table.page == 8
        for table in redbook.tables
    )
    # Only horizontal rules under its running headers: no table searched, none found.
    assert extracted("unstructured__pdf2image-memory-error-test-400p.pdf").tables == []
    # pdfminer cannot parse this file's structure the way pdfium does: tables just skipped.
    assert (
        "broken_pages"
        not in extracted("unstructured__invalid-pdf-structure-pdfminer-one-page.pdf").metadata
    )


def test_outline_becomes_sections() -> None:
    chelsea = extracted("pdfplumber__chelsea_pdta.pdf")
    first = chelsea.sections[0]
    assert (first.heading, first.level, first.page_start, first.page_end) == (
        "1. Mise en contexte",
        1,
        5,
        6,
    )
    sub = next(s for s in chelsea.sections if s.heading.startswith("1.1. Pourquoi"))
    assert (sub.level, sub.page_start, sub.page_end) == (2, 6, 6)
    assert sub.text == chelsea.pages[5].text
    assert all(len(section.text) <= 20_000 for section in chelsea.sections)
    manual = extracted("unstructured__pdf2image-memory-error-test-400p.pdf")
    assert len(manual.sections) == 134 and manual.sections[-1].page_end == 400
    assert extracted("pdfplumber__federal-register-2020-17221.pdf").sections == []


def test_running_headers_and_footers_leave_the_pages() -> None:
    register = extracted("pdfplumber__federal-register-2020-17221.pdf")
    header = "Federal Register / Vol. 85, No. 152 / Thursday, August 6, 2020 / Proposed Rules"
    # Even pages carry the page number first, odd pages last: both are the same header.
    assert any(line.startswith(header) for line in register.headers_footers)
    assert any(line.startswith("VerDate Sep<11>2014") for line in register.headers_footers)
    assert all(header not in page.text for page in register.pages[1:])
    assert "Airworthiness Directives" in register.pages[0].text
    # Two pages are too few to call anything a running header.
    assert extracted("tika__testPDFVarious.pdf").headers_footers == []
    assert "This is the header text." in extracted("tika__testPDFVarious.pdf").pages[1].text


def test_metadata() -> None:
    chelsea = extracted("pdfplumber__chelsea_pdta.pdf").metadata
    assert (
        chelsea["title"] == "Plan stratégique du sentier récréatif régional de Prescott et Russell"
    )
    assert chelsea["language"] == "fr" and chelsea["created"] == "2021-01-28T16:02:04-05:00"
    assert "encrypted" not in chelsea
    protected = extracted("tika__testPDF_protected.pdf").metadata
    assert protected["author"] == "The Bank of England" and protected["encrypted"] is True
    assert extracted("pypdf__r2-empty-password.pdf").metadata["encrypted"] is True
    assert extracted("pdfjs__helloworld-bad.pdf").metadata == {
        "page_count": 1,
        "text_source": "pdfium",
    }


def test_cjk_ocr_layer_pdfium_cannot_map_is_read_with_pdfminer() -> None:
    result = extracted("pdfplumber__pr-136-example.pdf")
    assert result.metadata["text_source"] == "pdfminer"
    assert "关于浙江菲达环保科技股份有限公司" in result.pages[0].text
    # Files PDFium reads well keep its (much faster) reading.
    assert extracted("pdfplumber__issue-67-example.pdf").metadata["text_source"] == "pdfium"


def test_pdf_dates() -> None:
    assert parse_pdf_date("D:20200806095125Z") == "2020-08-06T09:51:25+00:00"
    assert parse_pdf_date("D:20241008114040+02'00") == "2024-10-08T11:40:40+02:00"
    assert parse_pdf_date("D:20230814143339Z00'00'") == "2023-08-14T14:33:39+00:00"
    assert parse_pdf_date("D:20110902052425") == "2011-09-02T05:24:25"
    assert parse_pdf_date("D:2019") == "2019-01-01T00:00:00"
    for garbage in ("", "yesterday", "D:20231399", "D:2023010125"):
        assert parse_pdf_date(garbage) is None


@pytest.mark.parametrize(
    "name",
    [
        "pdfplumber__password-example.pdf",
        "pypdf__r4-aes-user-password.pdf",
        "unstructured__password.pdf",
        "docling__2206.01062_pg3.pdf",
    ],
)
def test_password_protected_pdf_is_encrypted(name: str) -> None:
    error = failure(DOCS / name)
    assert error.code == "ENCRYPTED" and "password" in error.message


@pytest.mark.parametrize("name", ["docling__ocr_test.pdf", "pypdf__imagemagick-CCITTFaxDecode.pdf"])
def test_image_only_pdf_with_ocr_off_has_no_text_layer(name: str) -> None:
    error = failure(DOCS / name, ExtractionLimits(ocr=OcrOptions(mode="off")))
    assert error.code == "NO_TEXT_LAYER"
    assert "without a text layer" in error.message and "LDIMS_OCR=off" in error.message


def test_limits_refuse_early() -> None:
    register = DOCS / "pdfplumber__federal-register-2020-17221.pdf"
    pages = failure(register, ExtractionLimits(max_pages=10))
    assert pages.code == "TOO_LARGE" and "15 pages" in pages.message
    chars = failure(register, ExtractionLimits(max_chars=10_000))
    assert chars.code == "TOO_LARGE" and "10000 characters" in chars.message


def test_empty_and_truncated_files_fail_cleanly(tmp_path: Path) -> None:
    assert failure(DOCS / "pdfplumber__empty.pdf").code == "EMPTY_FILE"
    for name in ("pdfplumber__federal-register-2020-17221.pdf", "docling__redp5110_sampled.pdf"):
        data = (DOCS / name).read_bytes()
        cut = tmp_path / name
        cut.write_bytes(data[: len(data) // 2])
        try:
            result = extract_pdf(cut, LIMITS)
        except PermanentError as error:
            assert error.code == "CORRUPT_FILE" and "damaged" in error.message
        else:
            assert any(page.text for page in result.pages)
    garbage = tmp_path / "not.pdf"
    garbage.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    assert failure(garbage).code == "CORRUPT_FILE"


def test_a_page_that_cannot_load_is_kept_empty(tmp_path: Path) -> None:
    """Page 2's entry in the page tree is a number, not a page: pages 1 and 3 still count."""
    path = tmp_path / "broken-page.pdf"
    path.write_bytes(_three_page_pdf(second_page=b"42"))
    result = extract_pdf(path, LIMITS)
    assert [page.text for page in result.pages] == ["First page text", "", "Third page text"]
    assert result.metadata["broken_pages"] == [2]
    assert result.text == "First page text\n\nThird page text"


def test_four_hundred_pages_are_fast() -> None:
    started = time.perf_counter()
    result = extract_pdf(DOCS / "unstructured__pdf2image-memory-error-test-400p.pdf", LIMITS)
    assert len(result.pages) == 400
    assert time.perf_counter() - started < 10


def _three_page_pdf(second_page: bytes) -> bytes:
    """A minimal PDF whose pages 1 and 3 show a line of text; page 2's object is given."""

    def stream(data: bytes) -> bytes:
        return b"<< /Length %d >>\nstream\n%s\nendstream" % (len(data), data)

    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents %d 0 R "
    page += b"/Resources << /Font << /F1 8 0 R >> >> >>"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R 5 0 R] /Count 3 >>",
        page % 6,
        second_page,
        page % 7,
        stream(b"BT /F1 12 Tf 20 100 Td (First page text) Tj ET"),
        stream(b"BT /F1 12 Tf 20 100 Td (Third page text) Tj ET"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)
