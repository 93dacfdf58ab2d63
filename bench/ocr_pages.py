"""The OCR part of the extraction benchmark (``bench/extract.py``): scanned pages of known text
in English, Russian and Chinese through the worker's path, and a 20-page scan.

For each language, ``--ocr-pages`` pages are rendered from text of the corpus (English: War and
Peace; Russian: ``poi__bug65649.docx``; Chinese: ``poi__stress009.docx`` and the text layer of
``pdfplumber__issue-67-example.pdf``) at 300 dpi in 12 pt (DejaVu Serif; WenQuanYi Micro Hei,
unpacked by ``tests/system_packages.sh``) and saved as one image-only PDF, which a fresh
:class:`ExtractionSandbox` child (the extract worker's) reads with default limits
(``LDIMS_OCR=auto``, 300 dpi). Reported per language: pages/s, the child's CPU seconds per page
(``psutil`` on the child, around the call), its peak RSS, and the character error rate of the
recognized text against the paragraphs (Levenshtein, white space and width folded). Beside them,
in the same run: the same documents with OCR off would fail ``NO_TEXT_LAYER`` at once, so the
text-layer path is the PDF row of the per-format table.

The 20-page scan (English pages) is timed from the blob to searchable: the sandbox's OCR, then
chunking and one index commit of :class:`DocumentIndex` in a temporary folder, and a search
for a sentence of its last page.
"""

from __future__ import annotations

import functools
import tempfile
import textwrap
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import psutil
from PIL import Image, ImageDraw, ImageFont
from rapidfuzz.distance import Levenshtein

from indexer import DocumentIndex, IndexedDocument, SearchRequest
from ldims.text import Page
from ldims.text.chunking import chunk_pages
from workers.extraction import ExtractionLimits, ExtractionSandbox, extract_file
from workers.extraction.containers import DOCX

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT.parent / "shared" / "corpus" / "docs"
LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
CJK_FONT = ROOT / "tests" / ".fonts" / "wqy-microhei.ttc"
PDF = "application/pdf"
LANGUAGES = ("en", "ru", "zh")
HEADER = ["language", "pages", "seconds", "pages/s", "CPU-s a page", "peak RSS MiB", "CER"]


@dataclass
class OcrRow:
    language: str
    pages: int
    seconds: float
    cpu: float
    peak_rss: int
    cer: float


@functools.cache
def paragraphs() -> dict[str, list[str]]:
    """Page-sized paragraphs in each language, from the corpus."""
    novel = (DOCS / "unstructured__book-war-and-peace-1225p.txt").read_text(encoding="utf-8")
    english = " ".join(novel[20_000:120_000].split())
    russian = " ".join(_docx_text("poi__bug65649.docx").split())[:60_000]
    report = extract_file(DOCS / "pdfplumber__issue-67-example.pdf", PDF, ExtractionLimits())
    chinese = "".join((_docx_text("poi__stress009.docx") + report.text).split())
    return {
        "en": [english[i : i + 1800] for i in range(0, len(english), 1800)],
        "ru": [russian[i : i + 1200] for i in range(0, len(russian), 1200)],
        "zh": [chinese[i : i + 700] for i in range(0, len(chinese), 700)],
    }


def _docx_text(name: str) -> str:
    return extract_file(DOCS / name, DOCX, ExtractionLimits()).text


def render(text: str, language: str, dpi: int = 300) -> Image.Image:
    size = round(12 * dpi / 72)
    font = ImageFont.truetype(str(CJK_FONT) if language == "zh" else LATIN_FONT, size)
    lines = (
        [text[i : i + 36] for i in range(0, len(text), 36)]
        if language == "zh"
        else textwrap.wrap(text, 70)
    )
    page = Image.new("L", (round(8.5 * dpi), round(11 * dpi)), 255)
    draw = ImageDraw.Draw(page)
    for number, line in enumerate(lines):
        draw.text((dpi, dpi + number * round(size * 1.6)), line, font=font, fill=0)
    return page


def scanned_pdf(texts: list[str], language: str, path: Path) -> Path:
    pages = [render(text, language) for text in texts]
    pages[0].save(path, "PDF", resolution=300, save_all=True, append_images=pages[1:])
    return path


def cer(reference: str, recognized: str) -> float:
    def fold(text: str) -> str:
        return "".join(unicodedata.normalize("NFKC", text).split())

    truth = fold(reference)
    return Levenshtein.distance(truth, fold(recognized)) / max(1, len(truth))


def measure(path: Path, texts: list[str], language: str) -> tuple[OcrRow, list[str]]:
    """One scanned PDF through a fresh sandbox child."""
    with ExtractionSandbox(recycle_after=1_000_000) as sandbox:
        warm = path.parent / "warm.md"
        warm.write_text("# warm\n\nup\n")
        sandbox.run(warm, "text/markdown", ExtractionLimits())
        child = psutil.Process(sandbox.pid)
        cpu_before = sum(child.cpu_times()[:2])
        started = time.perf_counter()
        result = sandbox.run(path, "application/pdf", ExtractionLimits(timeout_seconds=3600))
        seconds = time.perf_counter() - started
        cpu = sum(child.cpu_times()[:2]) - cpu_before
        peak = sandbox.last_peak_rss
    recognized = [page.text for page in result.pages]
    errors = cer("".join(texts), "".join(recognized))
    return OcrRow(language, len(result.pages), seconds, cpu / len(result.pages), peak, errors), (
        recognized
    )


def run(pages_per_language: int, scan_pages: int) -> tuple[list[OcrRow], list[str]]:
    """The OCR rows and the lines about the 20-page scan."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="ldims-ocr-bench-") as folder:
        for language in LANGUAGES:
            texts = paragraphs()[language][:pages_per_language]
            pdf = scanned_pdf(texts, language, Path(folder) / f"{language}.pdf")
            print(f"  OCR {language}: {len(texts)} pages ...", flush=True)
            rows.append(measure(pdf, texts, language)[0])
        texts = paragraphs()["en"][:scan_pages]
        pdf = scanned_pdf(texts, "en", Path(folder) / "scan20.pdf")
        print(f"  OCR: a {len(texts)}-page scan, to searchable ...", flush=True)
        started = time.perf_counter()
        row, recognized = measure(pdf, texts, "en")
        index = DocumentIndex(Path(folder) / "index")
        pages = [Page(number, text) for number, text in enumerate(recognized, start=1)]
        indexed = IndexedDocument(
            document_id="bench/scan20",
            tenant="bench",
            collection="default",
            name="scan20.pdf",
            version=1,
            chunks=chunk_pages(pages),
        )
        with index.batch() as batch:
            batch.replace(indexed)
        total = time.perf_counter() - started
        sentence = " ".join(texts[-1].split()[10:16])
        found = index.search(SearchRequest(tenant="bench", query=sentence, mode="exact", limit=3))
        page = found.hits[0].page if found.hits else None
        index.close()
    lines = [
        f"A {len(texts)}-page scan (English, 300 dpi) from its blob to searchable: "
        f"{total:.1f} s ({row.seconds:.1f} s of OCR in the worker's sandbox, "
        f"{total - row.seconds:.1f} s chunking and one index commit); "
        f'CER {row.cer:.1%}; a sentence of its last page ("{sentence}") is found on page '
        f"{page} (of {len(texts)}).",
    ]
    return rows, lines


def table_rows(rows: list[OcrRow]) -> list[list[str]]:
    return [
        [
            row.language,
            str(row.pages),
            f"{row.seconds:.1f}",
            f"{row.pages / row.seconds:.2f}",
            f"{row.cpu:.2f}",
            f"{row.peak_rss / 2**20:.0f}",
            f"{row.cer:.1%}",
        ]
        for row in rows
    ]
