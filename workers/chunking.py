"""Splitting extracted pages into bounded passages for the index."""

from __future__ import annotations

from indexer import Chunk
from workers.extraction import Page

MAX_CHUNK_CHARS = 2000


def chunk_pages(pages: list[Page], max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """Passages of at most ``max_chars`` (one longer line stays whole), cut at line ends."""
    chunks: list[Chunk] = []
    for page in pages:
        buffer: list[str] = []
        size = 0
        for line in page.text.split("\n"):
            if buffer and size + len(line) + 1 > max_chars:
                chunks.append(Chunk("\n".join(buffer), page.number))
                buffer, size = [], 0
            buffer.append(line)
            size += len(line) + 1
        if any(part.strip() for part in buffer):
            chunks.append(Chunk("\n".join(buffer), page.number))
    return chunks
