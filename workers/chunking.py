"""Splitting extracted pages into bounded passages for the index, with their line numbers.

Line numbers count the lines of the document's pages joined with one blank line between
pages (``"\\n\\n".join(page.text for page in pages)``), from 1: the numbering a line-numbered
view of the document uses, so a hit can be cited and read on.
"""

from __future__ import annotations

from indexer import Chunk
from workers.extraction import Page

MAX_CHUNK_CHARS = 2000


def chunk_pages(pages: list[Page], max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """Passages of at most ``max_chars`` (one longer line stays whole), cut at line ends."""
    chunks: list[Chunk] = []
    line = 1  # the document line number of the page's first line
    for page in pages:
        lines = page.text.split("\n")
        buffer: list[str] = []
        first = line
        size = 0
        for number, text in enumerate(lines, start=line):
            if buffer and size + len(text) + 1 > max_chars:
                _close(chunks, buffer, page.number, first)
                buffer, size, first = [], 0, number
            buffer.append(text)
            size += len(text) + 1
        _close(chunks, buffer, page.number, first)
        line += len(lines) + 1  # the blank line between pages
    return chunks


def _close(chunks: list[Chunk], buffer: list[str], page: int, first: int) -> None:
    if any(part.strip() for part in buffer):
        chunks.append(Chunk("\n".join(buffer), page, first, first + len(buffer) - 1))
