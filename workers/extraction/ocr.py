"""Text recognition (OCR) of page images: Tesseract 5 in the extractor process (tesserocr).

The engine is the tesserocr wheel, which carries libtesseract itself, so OCR runs inside the
extractor process under its time and memory limits (not in a child of its own that a killed
extractor would leave running). The language data are not on PyPI for Russian and Chinese:
they come from Debian's ``tesseract-ocr-{eng,rus,chi-sim}`` packages (or any folder named by
``LDIMS_OCR_TESSDATA``). Without the engine or a configured language, a page that needs OCR
is :func:`unavailable` (``OCR_UNAVAILABLE``, naming the packages to install), never silently
skipped.

Language per page: Tesseract's orientation and script detection (OSD) names the page's
script and how far it is turned; the page is turned upright and read in the configured
language of that script (``LDIMS_OCR_LANGUAGES``), with English beside Russian and Chinese
(their documents carry Latin codes, names and numbers). When OSD cannot tell (little text),
the page is read in every configured language at once.

One engine per language set is kept for the life of the process (loading Chinese takes about
a second); OpenMP is held to one thread, as each extractor process reads one file at a time.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_THREAD_LIMIT", "1")  # before libtesseract starts OpenMP

import numpy as np  # noqa: E402
from PIL import Image, ImageOps  # noqa: E402

from ldims.errors import PermanentError  # noqa: E402
from workers.extraction.result import OcrOptions  # noqa: E402

log = logging.getLogger(__name__)

SCRIPT_LANGUAGES = {
    "Latin": "eng",
    "Cyrillic": "rus",
    "Han": "chi_sim",
    "HanS": "chi_sim",
    "HanT": "chi_sim",
    "Japanese": "chi_sim",  # OSD's usual name for a Chinese page (kanji are Han)
}
# OSD tells Chinese from Japanese poorly (a confidence near 0), CJK from other scripts well.
CJK_SCRIPTS = frozenset({"Han", "HanS", "HanT", "Japanese"})
PACKAGES = {
    "eng": "tesseract-ocr-eng",
    "rus": "tesseract-ocr-rus",
    "chi_sim": "tesseract-ocr-chi-sim",
    "osd": "tesseract-ocr-osd",
}
TESSDATA_FOLDERS = (
    "/usr/share/tesseract-ocr/5/tessdata",
    "/usr/share/tesseract-ocr/4.00/tessdata",
    "/usr/share/tessdata",
    "/usr/local/share/tessdata",
)
SKEW_STEPS, SKEW_STEP_DEGREES = 10, 0.5  # levelling tried from -5 to +5 degrees
MIN_OSD_CONFIDENCE = 1.0  # below it OSD's script is a guess: read in every language
_WIDE = "[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]"  # CJK characters and punctuation
_HAN_GAP = re.compile(f"(?<={_WIDE}) +(?={_WIDE})")
_BLANK_LINES = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class RecognizedPage:
    text: str
    confidence: float  # Tesseract's mean word confidence, 0..100
    languages: str  # what the page was read in ("rus+eng")
    turned: int  # degrees (counterclockwise) the page was turned to read it upright


def tessdata_folder(options: OcrOptions) -> str | None:
    if options.tessdata:
        return options.tessdata
    prefix = os.environ.get("TESSDATA_PREFIX")
    for folder in (prefix, *TESSDATA_FOLDERS):
        if folder and Path(folder).is_dir():
            return folder
    return None


@functools.cache
def installed_languages(folder: str | None) -> frozenset[str]:
    """The languages whose data are in ``folder`` (empty without the engine or data)."""
    if folder is None:
        return frozenset()
    try:
        import tesserocr
    except ImportError:
        return frozenset()
    return frozenset(tesserocr.get_languages(folder.rstrip("/") + "/")[1])


def unavailable(options: OcrOptions) -> PermanentError | None:
    """Why OCR cannot run with ``options`` (the error a document needing it fails with), or
    None when it can."""
    installed = installed_languages(tessdata_folder(options))
    missing = [language for language in (*options.languages, "osd") if language not in installed]
    if not missing:
        return None
    packages = " ".join(PACKAGES.get(language, f"tesseract-ocr-{language}") for language in missing)
    return PermanentError(
        "OCR_UNAVAILABLE",
        "The document needs text recognition (OCR), and its language data are not installed: "
        f"missing {', '.join(missing)}. Install them (Debian/Ubuntu: apt-get install {packages}) "
        "or set LDIMS_OCR_TESSDATA, then reprocess the document.",
    )


def ocr_metadata(
    read: list[int], found: list[RecognizedPage], skipped: list[int]
) -> dict[str, Any]:
    """What a document's record says of its recognition: the pages read, Tesseract's mean
    confidence over them, the languages they were read in, and the pages left out."""
    metadata: dict[str, Any] = {
        "ocr_pages": read,
        "ocr_confidence": round(sum(page.confidence for page in found) / len(found), 1),
        "ocr_languages": sorted({page.languages for page in found}),
    }
    if skipped:
        metadata["ocr_skipped_pages"] = skipped
    return metadata


def recognize(image: Image.Image, options: OcrOptions) -> RecognizedPage:
    """The text of one page image (call :func:`unavailable` first)."""
    folder = tessdata_folder(options)
    assert folder is not None
    gray = image.convert("L")
    turned, script = _orientation(gray, folder)
    if turned:
        gray = gray.rotate(turned, expand=True, fillcolor=255)
    skew = _skew(gray)
    if skew:
        gray = gray.rotate(skew, expand=True, fillcolor=255, resample=Image.Resampling.BICUBIC)
    languages = _languages_for(script, options)
    api = _engine(folder, languages)
    api.SetImage(gray)
    try:
        text = api.GetUTF8Text()
        confidence = float(api.MeanTextConf())
    finally:
        api.Clear()
    return RecognizedPage(_tidy(text), max(confidence, 0.0), languages, turned)


def _orientation(gray: Image.Image, folder: str) -> tuple[int, str | None]:
    """(degrees to turn the page counterclockwise to read it upright, its script), or
    (0, None) when OSD cannot tell."""
    api = _engine(folder, "osd", osd_only=True)
    api.SetImage(gray)
    try:
        found: dict[str, Any] | None = api.DetectOrientationScript()
    finally:
        api.Clear()
    if not found:
        return 0, None
    script = found.get("script_name")
    if script not in CJK_SCRIPTS and found.get("script_conf", 0) < MIN_OSD_CONFIDENCE:
        script = None
    turned = int(found.get("orient_deg", 0)) if found.get("orient_conf", 0) >= 1.0 else 0
    return turned, script


def _skew(gray: Image.Image) -> float:
    """The small angle (degrees, counterclockwise) that levels the page's lines: the one whose
    rows of ink are sharpest (the largest variance of ink per row), searched on a reduced copy.

    Tesseract reads a page turned by a degree or two, but its layout analysis then cuts the
    lines into blocks and gives them out of order; a levelled page reads in order."""
    small = ImageOps.invert(gray.reduce(max(1, min(gray.size) // 800)))
    best, best_score = 0.0, _row_sharpness(small)
    for step in range(-SKEW_STEPS, SKEW_STEPS + 1):
        angle = step * SKEW_STEP_DEGREES
        if not angle:
            continue
        score = _row_sharpness(small.rotate(angle, expand=False, fillcolor=0))
        if score > best_score * 1.02:  # levelled only when clearly sharper
            best, best_score = angle, score
    return best


def _row_sharpness(image: Image.Image) -> float:
    rows = np.asarray(image, dtype=np.float32).sum(axis=1)
    return float(rows.var())


def _languages_for(script: str | None, options: OcrOptions) -> str:
    wanted = SCRIPT_LANGUAGES.get(script or "")
    if wanted is not None and wanted in options.languages:
        extra = ["eng"] if wanted != "eng" and "eng" in options.languages else []
        return "+".join([wanted, *extra])
    return "+".join(options.languages)


@functools.cache
def _engine(folder: str, languages: str, osd_only: bool = False) -> Any:
    """One Tesseract engine per language set, for the life of the process."""
    import tesserocr

    psm = tesserocr.PSM.OSD_ONLY if osd_only else tesserocr.PSM.AUTO
    log.debug("loading Tesseract for %s", languages)
    return tesserocr.PyTessBaseAPI(path=folder.rstrip("/") + "/", lang=languages, psm=psm)


def _tidy(text: str) -> str:
    """Tesseract's text with the spaces it puts between Chinese characters removed."""
    lines = [_HAN_GAP.sub("", line).rstrip() for line in text.splitlines()]
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
