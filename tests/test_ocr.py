"""Text recognition with the real Tesseract (tesserocr, Debian's language data): the corpus
scans, and pages rendered by the test from known English, Russian and Chinese paragraphs of
the corpus, clean and degraded (turned a few degrees, JPEG-compressed), read within the
character error rates of the issue; images of every supported kind; the settings."""

from __future__ import annotations

import functools
import io
import re
import textwrap
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest
from PIL import Image, ImageDraw, ImageFilter, ImageFont
from rapidfuzz.distance import Levenshtein

from ldims.errors import PermanentError
from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, OcrOptions, detect_format, extract_file
from workers.extraction.containers import DOCX

LIMIT = ExtractionLimits()
LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"
CJK_FONT = str(Path(__file__).parent / ".fonts" / "wqy-microhei.ttc")  # tests/system_packages.sh
CLEAN_CER, DEGRADED_CER = 0.05, 0.10


def cer(reference: str, recognized: str) -> float:
    """Character error rate: edits / reference characters, white space and width folded."""

    def fold(text: str) -> str:
        return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))

    truth = fold(reference)
    return Levenshtein.distance(truth, fold(recognized)) / max(1, len(truth))


@functools.cache
def paragraphs() -> dict[str, str]:
    """A paragraph in each language, from the corpus."""
    novel = (DOCS / "unstructured__book-war-and-peace-1225p.txt").read_text(encoding="utf-8")
    start = novel.index("Anna Pavlovna's drawing room was gradually filling")
    english = " ".join(novel[start : start + 700].split()).rsplit(" ", 1)[0]
    russian = " ".join((DOCS / "tika__russian.cp866.txt").read_bytes().decode("cp866").split())
    chinese = extract_file(DOCS / "poi__stress009.docx", DOCX, LIMIT).text
    chinese = max((p.strip() for p in chinese.split("\n") if p.strip()), key=len)[:300]
    return {"en": english, "ru": russian[:600], "zh": chinese}


def render(text: str, language: str, dpi: int = 300) -> Image.Image:
    """``text`` set in 12 pt on a page-wide column at ``dpi``, black on white."""
    size = round(12 * dpi / 72)
    font = ImageFont.truetype(CJK_FONT if language == "zh" else LATIN_FONT, size)
    width = round(6.5 * dpi)  # a 6.5-inch column
    per_line = 36 if language == "zh" else 70
    lines = (
        [text[i : i + per_line] for i in range(0, len(text), per_line)]
        if language == "zh"
        else textwrap.wrap(text, per_line)
    )
    page = Image.new("L", (width + 2 * dpi // 2, round(size * 1.6) * len(lines) + dpi), 255)
    draw = ImageDraw.Draw(page)
    for number, line in enumerate(lines):
        draw.text((dpi // 2, dpi // 2 + number * round(size * 1.6)), line, font=font, fill=0)
    return page


def degrade(page: Image.Image) -> Image.Image:
    """As a photographed or faxed page: turned 2 degrees, softened, JPEG at quality 40."""
    turned = page.rotate(2, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC)
    soft = turned.filter(ImageFilter.GaussianBlur(0.8))
    buffer = io.BytesIO()
    soft.save(buffer, "JPEG", quality=40)
    return Image.open(io.BytesIO(buffer.getvalue()))


def read(image: Image.Image, tmp_path: Path, kind: str = "PNG") -> tuple[str, dict[str, object]]:
    path = tmp_path / f"page.{kind.lower()}"
    image.save(path, kind)
    mime = detect_format(path.read_bytes()[:8192], path.name)
    result = extract_file(path, mime, LIMIT)
    return result.text, result.metadata


@pytest.mark.parametrize("language", ["en", "ru", "zh"])
@pytest.mark.parametrize("dpi", [200, 300])
def test_a_clean_page_reads_within_five_percent(tmp_path: Path, language: str, dpi: int) -> None:
    text = paragraphs()[language]
    recognized, metadata = read(render(text, language, dpi), tmp_path)
    assert cer(text, recognized) <= CLEAN_CER, recognized
    expected = {"en": "eng", "ru": "rus+eng", "zh": "chi_sim+eng"}[language]
    assert metadata["ocr_languages"] == [expected]  # chosen by the page's script
    assert metadata["ocr_pages"] == [1] and float(metadata["ocr_confidence"]) > 70  # type: ignore[arg-type]


@pytest.mark.parametrize("language", ["en", "ru", "zh"])
def test_a_degraded_page_reads_within_ten_percent(tmp_path: Path, language: str) -> None:
    text = paragraphs()[language]
    recognized, _ = read(degrade(render(text, language, 300)), tmp_path, "JPEG")
    assert cer(text, recognized) <= DEGRADED_CER, recognized


def test_a_page_upside_down_or_sideways_is_turned_upright(tmp_path: Path) -> None:
    text = paragraphs()["en"]
    for angle in (90, 180):
        page = render(text, "en").rotate(angle, expand=True, fillcolor=255)
        recognized, _ = read(page, tmp_path)
        assert cer(text, recognized) <= CLEAN_CER, (angle, recognized)


def test_the_scanned_corpus_pdf_is_read_with_its_page_number() -> None:
    result = extract_file(DOCS / "docling__ocr_test.pdf", "application/pdf", LIMIT)
    assert "Docling bundles PDF document conversion" in result.text
    assert result.pages[0].number == 1 and "JSON and Markdown" in result.pages[0].text
    assert result.metadata["ocr_pages"] == [1] and result.metadata["ocr_confidence"] > 80


def test_a_scan_without_legible_text_fails_empty_not_silently() -> None:
    # The corpus's CCITT fax test page is a 16 x 16 pixel image: nothing to read.
    with pytest.raises(PermanentError) as failed:
        extract_file(DOCS / "pypdf__imagemagick-CCITTFaxDecode.pdf", "application/pdf", LIMIT)
    assert failed.value.code == "EMPTY_FILE" and "OCR" in failed.value.message


def test_forced_ocr_of_the_vicksburg_scans_agrees_with_their_text_layer() -> None:
    """The file's own text layer came from another OCR engine; reading its page images again
    must agree with it closely, page by page."""
    path = DOCS / "pypdf__Seige_of_Vicksburg_Sample_OCR.pdf"
    layer = extract_file(path, "application/pdf", LIMIT)
    assert "ocr_pages" not in layer.metadata  # auto: the pages have text, nothing is read
    forced = replace(LIMIT, ocr=OcrOptions(mode="force"))
    result = extract_file(path, "application/pdf", forced)
    assert result.metadata["ocr_pages"] == [page.number for page in layer.pages]
    pairs = [
        (theirs.text, ours.text)
        for theirs, ours in zip(layer.pages, result.pages, strict=True)
        if len(theirs.text) > 200
    ]
    # Their layer misses words of its own (page 3 lacks half a line), so the agreement is
    # taken over the pages together, and no page may stray far.
    assert cer("".join(t for t, _ in pairs), "".join(o for _, o in pairs)) <= CLEAN_CER
    for number, (theirs, ours) in enumerate(pairs, start=1):
        assert cer(theirs, ours) <= 0.15, number


def test_ocr_off_and_the_page_limit(tmp_path: Path) -> None:
    off = replace(LIMIT, ocr=OcrOptions(mode="off"))
    with pytest.raises(PermanentError) as failed:
        extract_file(DOCS / "docling__ocr_test.pdf", "application/pdf", off)
    assert failed.value.code == "NO_TEXT_LAYER" and "LDIMS_OCR" in failed.value.message
    pages = [render(paragraphs()["en"][:200], "en", 200) for _ in range(3)]
    path = tmp_path / "scan.tiff"
    pages[0].save(path, "TIFF", save_all=True, append_images=pages[1:])
    two = replace(LIMIT, ocr=OcrOptions(max_pages=2))
    result = extract_file(path, "image/tiff", two)
    assert [bool(page.text) for page in result.pages] == [True, True, False]
    assert result.metadata["ocr_pages"] == [1, 2] and result.metadata["ocr_skipped_pages"] == [3]


def test_missing_language_data_fail_with_what_to_install(tmp_path: Path) -> None:
    empty = tmp_path / "tessdata"
    empty.mkdir()
    nowhere = replace(LIMIT, ocr=OcrOptions(tessdata=str(empty)))
    with pytest.raises(PermanentError) as failed:
        extract_file(DOCS / "docling__ocr_test.pdf", "application/pdf", nowhere)
    assert failed.value.code == "OCR_UNAVAILABLE"
    assert "tesseract-ocr-rus" in failed.value.message and "chi-sim" in failed.value.message


@pytest.mark.parametrize("kind", ["PNG", "JPEG", "TIFF", "WEBP", "BMP", "GIF"])
def test_every_image_kind_is_detected_and_read(tmp_path: Path, kind: str) -> None:
    text = paragraphs()["en"][:300]
    page = render(text, "en", 200)
    path = tmp_path / f"scan.{kind.lower()}"
    page.save(path, kind)
    mime = detect_format(path.read_bytes()[:8192], "no-extension")
    assert mime == f"image/{kind.lower()}"
    result = extract_file(path, mime, LIMIT)
    assert cer(text, result.text) <= CLEAN_CER
