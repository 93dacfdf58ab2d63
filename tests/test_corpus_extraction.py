"""Every file of the shared corpus through the worker's extraction path, with its expected outcome.

The table below names every file in ``../shared/corpus/docs/manifest.tsv``: either the pages,
phrases (in the file's own language), a heading and tables a completed extraction must have,
or the failure code it must end with. A file added to the corpus without a row fails
``test_every_corpus_file_has_an_expectation``.

Each file runs through :class:`ExtractionSandbox` (the child process the extract workers use),
twice: with Tika in-process (iscc-tika) and with Tika over REST (``tika-client`` against a
Tika-compatible server the test starts over iscc-tika).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pypdfium2
import pytest

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from tests.conftest import DOCS
from tests.tika_server import running_tika_server
from workers.extraction import ExtractionLimits, ExtractionSandbox, detect_format

MIB = 1024 * 1024


@dataclass(frozen=True)
class Expect:
    code: str | None = None  # the failure code; None: the file completes
    pages: int | None = None
    phrases: tuple[str, ...] = ()
    heading: str | None = None  # one of the sections
    language: str | None = None
    tables: int = 0  # at least this many


def ok(
    pages: int,
    *phrases: str,
    heading: str | None = None,
    language: str | None = None,
    tables: int = 0,
) -> Expect:
    return Expect(None, pages, phrases, heading, language, tables)


def fails(code: str) -> Expect:
    return Expect(code)


EXPECTED: dict[str, Expect] = {
    # --- PDF ----------------------------------------------------------------------------
    "pdfplumber__empty.pdf": fails("EMPTY_FILE"),
    "pdfplumber__password-example.pdf": fails("ENCRYPTED"),
    "pdfplumber__malformed-from-issue-932.pdf": ok(1, "2021 3 31"),
    "pdfplumber__federal-register-2020-17221.pdf": ok(
        15, "horizontal stabilizer", language="en", tables=1
    ),
    "pdfplumber__chelsea_pdta.pdf": ok(
        65, "Il est très important", heading="1. Mise en contexte", language="fr", tables=20
    ),
    "pdfplumber__nics-background-checks-2015-11-rotated.pdf": ok(1, "Mariana Islands", tables=1),
    "pdfplumber__issue-67-example.pdf": ok(22, "日上午开市起复牌", language="zh", tables=1),
    "pdfplumber__pr-136-example.pdf": ok(6, "关于浙江菲达环保科技股份有限公司", language="zh"),
    "pypdf__multilang.pdf": ok(1, "Привет, мир", "你好世界", "Hello World"),
    "pypdf__r2-empty-password.pdf": ok(1, "pdf encryption test"),
    "pypdf__r4-aes-user-password.pdf": fails("ENCRYPTED"),
    "pypdf__Seige_of_Vicksburg_Sample_OCR.pdf": ok(6, "The balls are made of", language="en"),
    # A 16 x 16 pixel fax image: OCR runs and finds nothing legible.
    "pypdf__imagemagick-CCITTFaxDecode.pdf": fails("EMPTY_FILE"),
    "unstructured__pdf2image-memory-error-test-400p.pdf": ok(
        400, "Exam Unagreed Amount", heading="Table of Contents", language="en"
    ),
    "unstructured__copy-protected.pdf": ok(
        2,
        "University of Washington",
        heading=("LayoutParser: A Unified Toolkit for Deep Learning Based Document Image Analysis"),
    ),
    "unstructured__password.pdf": fails("ENCRYPTED"),
    "unstructured__invalid-pdf-structure-pdfminer-one-page.pdf": ok(
        2, "Modernize federal defenses"
    ),
    "docling__redp5110_sampled.pdf": ok(18, "FUNCTION_USAGE view", tables=3),
    "docling__ocr_test.pdf": ok(1, "Docling bundles PDF document conversion", language="en"),
    "docling__2206.01062_pg3.pdf": fails("ENCRYPTED"),
    "tika__testPDF_bad_page_303226.pdf": ok(19, "43 FR 3359"),
    "tika__testPDFVarious.pdf": ok(2, "Here is a numbered list:"),
    "tika__testPDF_protected.pdf": ok(41, "in excess of 1 billion pages", language="en"),
    "poppler-test__russian.pdf": ok(1, "редактировать"),
    "pdfjs__helloworld-bad.pdf": ok(1, "Hello, world!"),
    # --- DOCX (python-docx) -------------------------------------------------------------
    "docling__unit_test_headers.docx": ok(2, "Paragraph 1.1", heading="Section 1.1"),
    "docling__word_tables.docx": ok(1, "Merged Cell", heading="Test with tables", tables=7),
    "docling__word_sample.docx": ok(
        2, "Don’t forget to drink water", heading="Let’s swim!", tables=1
    ),
    "unstructured__handbook-872p.docx": ok(
        82, "Non-discrimination", heading="CHAPTER 1 – INTRODUCTION", language="en"
    ),
    "tika__testWORD_various.docx": ok(1, "Here is a numbered list:", tables=1),
    "tika__testWORD_truncated.docx": fails("CORRUPT_FILE"),
    "tika__testWORD_protected_passtika.docx": fails("ENCRYPTED"),
    "poi__bug65649.docx": ok(
        101,
        "Перечень сокращений",
        heading="Цели и правовое основание для выполнения работ",
        language="ru",
        tables=20,
    ),
    "poi__stress009.docx": ok(
        2, "无需驱动程序就可支持绝大部分主流或偏门操作系统", heading="产品介绍", language="zh"
    ),
    # --- through Tika ---------------------------------------------------------------------
    "unstructured__fake-power-point.pptx": ok(1, "Adding a Bullet Slide"),
    "unstructured__fake-power-point-table.pptx": ok(1, "Tangerine", tables=1),
    "docling__powerpoint_sample.pptx": ok(3, "Test Table Slide"),
    "tika__testPPT_various.pptx": ok(1, "Here is a text box", tables=1),
    "docling__xlsx_01.xlsx": ok(4, "second", heading="Sheet2", tables=3),
    "unstructured__2023-half-year-analyses-by-segment.xlsx": ok(
        5, "Zone NA", heading="OS-Rev.and results 30 06 2023", tables=1
    ),
    "unstructured__empty.xlsx": fails("EMPTY_FILE"),
    "unstructured__password_protected.xlsx": fails("ENCRYPTED"),
    "poi__no_drawing_patriarch.xlsx": ok(1, "Прайс-лист", heading="Лист 1", language="ru"),
    "unstructured__winter-sports.epub": ok(1, "Winter Sports in Switzerland", language="en"),
    "unstructured__fake-doc.rtf": ok(1, "My first paragraph."),
    "tika__testRTFVarious.rtf": ok(1, "Here is a numbered list:"),
    "unstructured__fake.doc": ok(1, "Lorem ipsum dolor sit amet."),
    # --- HTML -------------------------------------------------------------------------------
    "docling__wiki_duck.html": ok(
        1,
        "Duck is the common name for numerous species of waterfowl",
        heading="Etymology",
        language="en",
        tables=1,
    ),
    "unstructured__example-with-scripts.html": ok(
        1,
        "Belarusian forces remain unlikely to attack Ukraine",
        heading="Russian Offensive Campaign Assessment, December 13",
    ),
    "unstructured__fake-html-cp1252.html": ok(
        1, "très", "niño", "15,50 €", heading="My First Heading"
    ),
    "tika__resume.html": ok(1, "Предлагаем Вам ознакомиться", language="ru"),
    # --- Markdown and text ------------------------------------------------------------------
    "docling__wiki.md": ok(1, "International Business Machines", heading="1960s–1980s"),
    "unstructured__empty.txt": fails("EMPTY_FILE"),
    "unstructured__fake-text-all-whitespace.txt": fails("EMPTY_FILE"),
    "unstructured__book-war-and-peace-1225p.txt": ok(
        1, "Rostov, who had unconsciously returned", language="en"
    ),
    "unstructured__UDHR_first_article_all.txt": ok(
        1, "人人生而自由", "Все люди рождаются свободными", "All human beings are born free"
    ),
    "tika__russian.cp866.txt": ok(1, "Гляжу, поднимается медленно в гору", language="ru"),
}

TIKA_EXTRACTED = {
    name for name in EXPECTED if name.endswith((".pptx", ".xlsx", ".epub", ".rtf", ".doc"))
}


def manifest_names() -> list[str]:
    with (DOCS / "manifest.tsv").open(encoding="utf-8") as stream:
        return [row["file"] for row in csv.DictReader(stream, delimiter="\t")]


def test_every_corpus_file_has_an_expectation() -> None:
    listed = manifest_names()
    on_disk = {path.name for path in DOCS.iterdir() if path.is_file()} - {"manifest.tsv"}
    assert set(listed) == on_disk, "manifest.tsv and the folder disagree"
    assert set(listed) - set(EXPECTED) == set(), "corpus files without an expected outcome"
    assert set(EXPECTED) - set(listed) == set(), "expectations for files not in the corpus"


@pytest.fixture(scope="module", params=["inprocess", "rest"])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[str, ExtractionLimits]]:
    if request.param == "inprocess":
        yield "tika-inprocess", ExtractionLimits()
        return
    with running_tika_server() as url:
        yield "tika-rest", ExtractionLimits(tika_url=url)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[ExtractionSandbox]:
    box = ExtractionSandbox()
    yield box
    box.close()


def extract(sandbox: ExtractionSandbox, name: str, limits: ExtractionLimits) -> ExtractionResult:
    path = DOCS / name
    return sandbox.run(path, detect_format(path.read_bytes()[:8192], name), limits)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file_outcome(
    name: str, backend: tuple[str, ExtractionLimits], sandbox: ExtractionSandbox
) -> None:
    tika_extractor, limits = backend
    expect = EXPECTED[name]
    if expect.code is not None:
        with pytest.raises(PermanentError) as raised:
            extract(sandbox, name, limits)
        assert raised.value.code == expect.code, raised.value.message
        assert raised.value.message
        return
    result = extract(sandbox, name, limits)
    assert len(result.pages) == expect.pages
    assert [page.number for page in result.pages] == list(range(1, len(result.pages) + 1))
    assert result.metadata["page_count"] == len(result.pages)
    for phrase in expect.phrases:
        assert phrase in result.text, phrase
    if expect.heading is not None:
        assert expect.heading in [section.heading for section in result.sections]
    if expect.language is not None:
        assert result.metadata["language"] == expect.language
    assert len(result.tables) >= expect.tables
    # Pages carry the text too: what later tools read page by page is the same text.
    paged = "\n".join(page.text for page in result.pages)
    assert all(phrase in paged for phrase in expect.phrases)
    if name in TIKA_EXTRACTED:
        assert result.extractor == tika_extractor


BIG_FILES = [
    "unstructured__pdf2image-memory-error-test-400p.pdf",
    "unstructured__handbook-872p.docx",
    "unstructured__book-war-and-peace-1225p.txt",
]


@pytest.mark.parametrize("name", BIG_FILES)
def test_big_files_stay_within_the_default_limits(name: str, sandbox: ExtractionSandbox) -> None:
    limits = ExtractionLimits()
    result = extract(sandbox, name, limits)
    assert result.text and sandbox.last_peak_rss < limits.max_memory_mib * MIB


def test_a_619_page_pdf_stays_within_the_default_limits(
    tmp_path: Path, sandbox: ExtractionSandbox
) -> None:
    source = pypdfium2.PdfDocument(DOCS / "unstructured__pdf2image-memory-error-test-400p.pdf")
    combined = pypdfium2.PdfDocument.new()
    combined.import_pages(source)
    combined.import_pages(source, list(range(219)))
    target = tmp_path / "619-pages.pdf"
    combined.save(target)
    combined.close()
    source.close()
    limits = ExtractionLimits()
    result = sandbox.run(target, "application/pdf", limits)
    assert len(result.pages) == 619 and result.pages[400 + 37].text == result.pages[37].text
    assert sandbox.last_peak_rss < limits.max_memory_mib * MIB
