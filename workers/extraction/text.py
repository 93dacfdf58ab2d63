"""Plain text and Markdown: charset detection, and Markdown headings as sections."""

from __future__ import annotations

import re

import charset_normalizer

from ldims.errors import PermanentError
from workers.extraction.result import ExtractionResult, Page, Section

_BOMS = [
    (b"\xef\xbb\xbf", "utf-8-sig"),
    (b"\xff\xfe", "utf-16"),
    (b"\xfe\xff", "utf-16"),
]
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


def decode_text(data: bytes) -> tuple[str, str]:
    """Decode ``data``: BOM first, then strict UTF-8, then charset detection."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding), encoding
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    best = charset_normalizer.from_bytes(data).best()
    if best is None:
        raise PermanentError("UNSUPPORTED_FORMAT", "The file is not text in any known encoding.")
    return str(best), best.encoding


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
            heading, body = (match.group(2), len(match.group(1))), []
        else:
            body.append(line)
    close()
    return sections


def extract_text(data: bytes, mime: str) -> ExtractionResult:
    """Extract a text or Markdown file given as bytes."""
    text, encoding = decode_text(data)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise PermanentError("EMPTY_FILE", "The file holds no text (empty or whitespace only).")
    sections = markdown_sections(text) if mime == "text/markdown" else []
    title = sections[0].heading if sections and sections[0].level == 1 else None
    metadata = {"encoding": encoding, "title": title, "page_count": 1}
    return ExtractionResult(
        format=mime,
        extractor="text",
        text=text,
        pages=[Page(1, text)],
        sections=sections,
        metadata=metadata,
    )
