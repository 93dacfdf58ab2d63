"""UTF-16 and UTF-32 text without a byte-order mark: detected, decoded to the right text in
English, Russian and Chinese; single-byte code pages and binary data are not mistaken for it.
The texts are paragraphs of corpus files, written in each encoding by the test."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.conftest import DOCS
from workers.extraction import ExtractionLimits, detect_format, extract_file
from workers.extraction.wide_text import wide_encoding

LIMIT = ExtractionLimits()
WIDE = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]


def paragraphs() -> dict[str, str]:
    """An English, a Russian and a Chinese paragraph of the corpus, and a short line each."""
    udhr = (DOCS / "unstructured__UDHR_first_article_all.txt").read_text(encoding="utf-8")
    chinese = next(line for line in udhr.splitlines() if "人人生而自由" in line)
    russian = next(line for line in udhr.splitlines() if "Все люди рождаются свободными" in line)
    novel = (DOCS / "unstructured__book-war-and-peace-1225p.txt").read_text(encoding="utf-8")
    start = novel.index("Well, Prince, so Genoa and Lucca")
    english = novel[start : start + 1500]
    cp866 = (DOCS / "tika__russian.cp866.txt").read_bytes().decode("cp866")
    return {
        "en": english,
        "ru": cp866 + "\n" + russian,
        "zh": chinese,
        "en-short": "Minutes of the board.",
        "ru-short": "Протокол собрания.",
        "zh-short": "董事会会议记录。",
    }


TEXTS = paragraphs()


@pytest.mark.parametrize("encoding", WIDE)
@pytest.mark.parametrize("language", sorted(TEXTS))
def test_wide_text_without_a_mark_is_text_and_decodes_exactly(
    tmp_path: Path, encoding: str, language: str
) -> None:
    text = TEXTS[language]
    data = text.encode(encoding)
    assert not data.startswith((b"\xff\xfe", b"\xfe\xff"))  # no mark: the case in question
    path = tmp_path / "notes.txt"
    path.write_bytes(data)
    mime = detect_format(data[:8192], path.name)
    assert mime == "text/plain"
    result = extract_file(path, mime, LIMIT)
    assert result.text == text.replace("\r\n", "\n")
    assert result.metadata["encoding"] == encoding


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (TEXTS["ru"], "cp1251"),
        (TEXTS["ru"], "koi8_r"),
        (TEXTS["ru"], "cp866"),
        ("Le cœur a ses raisons que la raison ne connaît point. Très bien, à bientôt !", "cp1252"),
        (TEXTS["en"], "utf-8"),
        (TEXTS["zh"], "gb18030"),
        (TEXTS["zh"] + TEXTS["ru"], "utf-8"),
    ],
)
def test_narrow_encodings_are_not_taken_for_wide_ones(text: str, encoding: str) -> None:
    data = text.encode(encoding)
    assert wide_encoding(data) is None


def test_binary_data_with_nul_bytes_stays_binary(tmp_path: Path) -> None:
    rng = random.Random(7)
    noise = bytes(rng.randrange(256) for _ in range(4096))
    sparse = bytes(rng.choice([0, 0, 0, rng.randrange(256)]) for _ in range(4096))
    for data in (noise, sparse, (DOCS / "docling__word_sample.docx").read_bytes()[4096:]):
        assert wide_encoding(data) is None
        assert detect_format(data[:8192], "blob.bin") == "application/octet-stream"
