"""Images (PNG, JPEG, TIFF with all its pages, WebP, BMP, GIF's first frame): their text, read
by OCR (:mod:`workers.extraction.ocr`), a page per image or TIFF page.

Pillow decodes them; an image larger than :data:`MAX_PIXELS` is refused (``TOO_LARGE``)
before its pixels are decoded, which bounds what a decompression bomb can take.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from PIL import Image, ImageSequence, UnidentifiedImageError

from ldims.errors import OcrDeferred, PermanentError
from ldims.text import ExtractionResult, Page
from workers.extraction.common import clean_text, ensure_chars
from workers.extraction.ocr import RecognizedPage, ocr_metadata, recognize, unavailable
from workers.extraction.pdf_ocr import TIME_SHARE
from workers.extraction.result import ExtractionLimits

EXTRACTOR = "tesseract"
MAX_PIXELS = 100_000_000  # of one frame: a 10,000 x 10,000 scan


def extract_image(path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
    """The text of the image (of each TIFF page) at ``path``."""
    started = time.monotonic()
    options = limits.ocr
    if options.mode == "off":
        raise PermanentError(
            "UNSUPPORTED_FORMAT",
            f"The file is an image ({mime}) and text recognition is off (LDIMS_OCR=off).",
        )
    error = unavailable(options)
    if error is not None:
        raise error
    if options.defer:
        _check_decodes(path)  # a file that is no image fails here, not after a wait for OCR
        raise OcrDeferred("OCR_DEFERRED", "The image waits for OCR.")
    try:
        texts, found, skipped = _read_frames(path, mime, limits, started)
    except (OSError, ValueError, SyntaxError, EOFError) as exc:  # a frame that cannot decode
        raise PermanentError(
            "CORRUPT_FILE", f"The image cannot be decoded ({type(exc).__name__})."
        ) from exc
    if not any(text.strip() for text in texts):
        raise PermanentError("EMPTY_FILE", "No text was recognized in the image.")
    read = [number for number in range(1, len(texts) + 1) if number not in skipped]
    return ExtractionResult(
        format=mime,
        extractor=EXTRACTOR,
        text="\n\n".join(text for text in texts if text),
        pages=[Page(number, text) for number, text in enumerate(texts, start=1)],
        metadata={"page_count": len(texts), **ocr_metadata(read, found, skipped)},
    )


def _read_frames(
    path: Path, mime: str, limits: ExtractionLimits, started: float
) -> tuple[list[str], list[RecognizedPage], list[int]]:
    """Each frame's text (empty when skipped), what was recognized of those read, and the
    numbers of those skipped (over LDIMS_OCR_MAX_PAGES, or out of time)."""
    options = limits.ocr
    texts: list[str] = []
    found: list[RecognizedPage] = []
    skipped: list[int] = []
    with _opened(path) as image:
        frames = [image] if mime == "image/gif" else ImageSequence.Iterator(image)
        deadline = started + TIME_SHARE * limits.timeout_seconds
        for number, frame in enumerate(frames, start=1):
            if number > limits.max_pages:
                raise PermanentError(
                    "TOO_LARGE", f"The image has more than {limits.max_pages} pages."
                )
            if number > options.max_pages or (texts and time.monotonic() > deadline):
                skipped.append(number)
                texts.append("")
                continue
            _check_size(frame)
            page = recognize(frame.convert("L"), options)
            texts.append(clean_text(page.text))
            found.append(page)
            ensure_chars(sum(len(text) for text in texts), limits)
    return texts, found, skipped


def _check_decodes(path: Path) -> None:
    """Decode the first frame (tens of milliseconds for a page), or raise as OCR would."""
    with _opened(path) as image:
        try:
            image.load()
        except (OSError, ValueError, SyntaxError, EOFError) as exc:
            raise PermanentError(
                "CORRUPT_FILE", f"The image cannot be decoded ({type(exc).__name__})."
            ) from exc


def _opened(path: Path) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(path)
            _check_size(image)
            return image
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise PermanentError("TOO_LARGE", "The image has too many pixels to read.") from exc
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise PermanentError(
            "CORRUPT_FILE", f"The image cannot be decoded ({type(exc).__name__})."
        ) from exc


def _check_size(frame: Image.Image) -> None:
    width, height = frame.size
    if width * height > MAX_PIXELS:
        raise PermanentError(
            "TOO_LARGE",
            f"The image is {width} x {height} pixels; at most {MAX_PIXELS:,} are read.",
        )
