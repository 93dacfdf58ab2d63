"""The text extracted from one file, as every stage after extraction sees it: its pages, sections,
tables and metadata (:class:`ExtractionResult`), and its JSON form on disk (:mod:`ldims.extracts`).

Pages are numbered from 1; a section's page span refers to them. How their lines are numbered
is :mod:`ldims.text.lines`; their passages for the index, :mod:`ldims.text.chunking`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Page:
    number: int
    text: str


@dataclass(frozen=True)
class Section:
    heading: str
    level: int
    page_start: int
    page_end: int
    text: str


@dataclass(frozen=True)
class Table:
    """A table as readable text: one line per row, cells separated by `` | ``."""

    page: int
    text: str


@dataclass(frozen=True)
class ExtractionResult:
    """Everything later stages need of a file; produced once per content hash.

    ``metadata`` keys, each optional: ``title``, ``author``, ``language`` (ISO 639-1),
    ``created`` (ISO 8601), ``page_count``, ``encoding``, ``broken_pages`` (numbers of pages
    that could not be parsed and are empty here), plus extractor-specific facts.
    ``headers_footers`` holds running header/footer text, kept out of ``text`` and ``pages``.
    """

    format: str
    extractor: str
    text: str
    pages: list[Page] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    headers_footers: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> ExtractionResult:
        data = json.loads(raw)
        data["pages"] = [Page(**page) for page in data.get("pages", [])]
        data["sections"] = [Section(**section) for section in data.get("sections", [])]
        data["tables"] = [Table(**table) for table in data.get("tables", [])]
        return cls(**data)
