"""A document version's text, the base every stage after extraction shares: the data model an
extraction produces (:mod:`ldims.text.model`), the one rule numbering its lines
(:mod:`ldims.text.lines`) and its passages for the index and the vectors
(:mod:`ldims.text.chunking`). Stored once per content by :mod:`ldims.extracts`.
"""

from __future__ import annotations

from ldims.text.chunking import MAX_CHUNK_CHARS, chunk_pages
from ldims.text.lines import (
    Separator,
    blank_line,
    joined,
    line_count,
    numbered_pages,
    page_texts,
)
from ldims.text.model import ExtractionResult, Page, Section, Table

__all__ = [
    "MAX_CHUNK_CHARS",
    "ExtractionResult",
    "Page",
    "Section",
    "Separator",
    "Table",
    "blank_line",
    "chunk_pages",
    "joined",
    "line_count",
    "numbered_pages",
    "page_texts",
]
