"""The typed result of extracting one file, and its JSON form on disk."""

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
class ExtractionResult:
    """Everything later stages need of a file; produced once per content hash."""

    format: str
    extractor: str
    text: str
    pages: list[Page] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> ExtractionResult:
        data = json.loads(raw)
        data["pages"] = [Page(**page) for page in data.get("pages", [])]
        data["sections"] = [Section(**section) for section in data.get("sections", [])]
        return cls(**data)
