"""Plain text and Markdown: charset detection, and Markdown headings as sections."""

from __future__ import annotations

import re

import charset_normalizer

from ldims.errors import PermanentError
from ldims.text import ExtractionResult, Page, Section
from workers.extraction.wide_text import SAMPLE_BYTES, wide_encoding

# Longest first: the UTF-32 LE mark starts with the UTF-16 LE one.
BOMS = [
    (b"\xff\xfe\x00\x00", "utf-32"),
    (b"\x00\x00\xfe\xff", "utf-32"),
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
]
# Linear on long runs of blanks (a lazy group followed by optional blanks is not).
_HEADING = re.compile(r"^(#{1,6})[ \t]+(\S.*)$")
_CLOSING_HASHES = re.compile(r"[ \t]+#+$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode ``data``: BOM first, then strict UTF-8, then UTF-16/32 without a BOM, then
    charset detection."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            # Damaged bytes after the mark are replaced, not fatal: the rest is still text.
            return data.decode(encoding, errors="replace"), encoding
    if b"\x00" not in data[:SAMPLE_BYTES]:  # UTF-8 text has no NUL; UTF-16 text nearly always
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    wide = wide_encoding(data)
    if wide is not None:
        return data.decode(wide, errors="replace"), wide
    if b"\x00" in data[:SAMPLE_BYTES]:  # not tried above: UTF-8 with NULs is still UTF-8
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    matches = list(charset_normalizer.from_bytes(data))
    if not matches:
        raise PermanentError("UNSUPPORTED_FORMAT", "The file is not text in any known encoding.")
    # Several single-byte code pages decode Western text about equally well (cp1250 turns
    # "très" into "trčs"); among the least chaotic guesses take the most coherent, and on a
    # tie the code page most files in the wild use.
    least_chaos = min(match.chaos for match in matches)
    close = [match for match in matches if match.chaos - least_chaos < 0.01]
    best = max(close, key=lambda m: (round(m.coherence, 2), _preference(m.encoding)))
    encoding = _equivalent_common_encoding(data, str(best), best.encoding)
    return str(best), encoding


# Most common first: a guess named here wins a tie against one that is not.
_PREFERRED = ["cp1252", "cp1251", "gb18030", "cp866", "koi8_r", "latin_1", "big5", "shift_jis"]


def _preference(encoding: str) -> int:
    return len(_PREFERRED) - _PREFERRED.index(encoding) if encoding in _PREFERRED else 0


def _equivalent_common_encoding(data: bytes, text: str, encoding: str) -> str:
    """Report a common code page (cp866 for cp1125) when it decodes the bytes identically."""
    for common in _PREFERRED:
        if common == encoding:
            break
        try:
            if data.decode(common) == text:
                return common
        except UnicodeDecodeError:
            continue
    return encoding


def markdown_sections(text: str) -> list[Section]:
    """Sections under ATX headings (``#`` … ``######``), ignoring fenced code."""
    sections: list[Section] = []
    heading: tuple[str, int] | None = None
    body: list[str] = []
    in_fence = False

    def close() -> None:
        if heading is not None:
            sections.append(Section(heading[0], heading[1], 1, 1, "\n".join(body).strip()))

    for line in text.splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
        match = None if in_fence else _HEADING.match(line)
        if match:
            close()
            title = _CLOSING_HASHES.sub("", match.group(2).rstrip()).strip()
            heading, body = (title, len(match.group(1))), []
        else:
            body.append(line)
    close()
    return sections


_TITLE = re.compile(r"^##?\s+(.+)$", re.MULTILINE)
_SECOND_LEVEL = re.compile(r"^##\s+(.+)$", re.MULTILINE)


def markdown_title(text: str) -> str | None:
    """The first ``#`` or ``##`` heading (after one named Notes, the first ``##`` one): the
    title qmd gives a Markdown file, so both name it alike."""
    match = _TITLE.search(text)
    if not match:
        return None
    title = match.group(1).strip()
    if title in ("📝 Notes", "Notes"):
        second = _SECOND_LEVEL.search(text)
        if second:
            return second.group(1).strip()
    return title or None


def extract_text(data: bytes, mime: str) -> ExtractionResult:
    """Extract a text or Markdown file given as bytes."""
    text, encoding = decode_text(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise PermanentError("EMPTY_FILE", "The file holds no text (empty or whitespace only).")
    sections = markdown_sections(text) if mime == "text/markdown" else []
    title = markdown_title(text) if mime == "text/markdown" else None
    metadata = {"encoding": encoding, "title": title, "page_count": 1}
    return ExtractionResult(
        format=mime,
        extractor="text",
        text=text,
        pages=[Page(1, text)],
        sections=sections,
        metadata=metadata,
    )
