"""Splitting extracted pages into bounded passages for the index, with their line numbers.

Line numbers count the lines of the document's pages joined with one blank line between
pages (``"\\n\\n".join(page.text for page in pages)``), from 1: the numbering a line-numbered
view of the document uses, so a hit can be cited and read on.

Every chunk is at most ``max_chars`` long whatever the line structure: lines are gathered up
to the bound and cut at line ends; a line longer than the bound (a text without line breaks,
a minified file) is cut into pieces of its own, each a chunk whose ``line_start`` and
``line_end`` are that line's number — several chunks then share one line number, and their
texts joined in order give the line back exactly. (One 19 MB line once was one 19 MB chunk:
2.4 s of CPU for a search that hit it, a phrase search on it never finished.)
"""

from __future__ import annotations

from collections.abc import Iterator

from indexer import Chunk
from ldims.text.lines import in_page_order, numbered_pages
from ldims.text.model import Page

MAX_CHUNK_CHARS = 2000
# A long line is cut after the last white space of a piece's second half (a word stays
# whole); a piece without one (CJK, a base64 run) is cut at the bound itself.
_SOFT_CUT = 0.5


def chunk_pages(pages: list[Page], max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """Passages of at most ``max_chars`` characters, cut at line ends (a longer line in
    pieces of its own)."""
    chunks: list[Chunk] = []
    ordered = in_page_order(pages)
    numbered = numbered_pages(page.text for page in ordered)
    for page, (line, lines) in zip(ordered, numbered, strict=True):
        buffer: list[str] = []
        first = line
        size = 0
        for number, text in enumerate(lines, start=line):
            if len(text) > max_chars:
                _close(chunks, buffer, page.number, first)
                buffer, size = [], 0
                if text.strip():  # every piece kept, blank ones too: joined, they are the line
                    for piece in line_pieces(text, max_chars):
                        chunks.append(Chunk(piece, page.number, number, number))
                continue
            if buffer and size + len(text) + 1 > max_chars:
                _close(chunks, buffer, page.number, first)
                buffer, size = [], 0
            if not buffer:
                first = number
            buffer.append(text)
            size += len(text) + 1
        _close(chunks, buffer, page.number, first)
    return chunks


def line_pieces(text: str, max_chars: int) -> Iterator[str]:
    """``text`` in consecutive pieces of at most ``max_chars`` characters (joined: ``text``),
    each cut after a white space when its second half has one."""
    start = 0
    while len(text) - start > max_chars:
        end = start + max_chars
        soft = start + int(max_chars * _SOFT_CUT)
        cut = max(text.rfind(" ", soft, end), text.rfind("\t", soft, end))
        if cut > start:
            end = cut + 1  # the space ends this piece
        yield text[start:end]
        start = end
    if start < len(text):
        yield text[start:]


def _close(chunks: list[Chunk], buffer: list[str], page: int, first: int) -> None:
    if any(part.strip() for part in buffer):
        chunks.append(Chunk("\n".join(buffer), page, first, first + len(buffer) - 1))
