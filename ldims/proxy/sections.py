"""Sections of a document with stable ids: ``sec_`` and the heading as a slug.

An id depends only on the headings, in order (``sec_ldap``; a second "LDAP" heading is
``sec_ldap_2``), so extracting the same content again gives the same ids, and a model can
cite one. Headings in any script keep their letters (``sec_настройка_ldap``,
``sec_安装``); a heading without letters or digits gets its position (``sec_7``).

A section whose stored shape is wrong (not text, pages outside the document) is kept as
``damaged``: listing it is harmless, reading it is a ``TOOL_ERROR``, never garbage.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

_NOT_WORD = re.compile(r"[\W_]+")
MAX_SLUG_CHARS = 48


@dataclass(frozen=True)
class SectionView:
    id: str
    heading: str
    level: int
    page_start: int
    page_end: int
    text: str
    damaged: bool = False


def slug(heading: str) -> str:
    """Lower-case words of ``heading`` joined by ``_``, at most ``MAX_SLUG_CHARS``."""
    words = _NOT_WORD.sub(" ", unicodedata.normalize("NFKC", heading).casefold()).split()
    out = "_".join(words)
    return out[:MAX_SLUG_CHARS].rstrip("_")


def sections_of(raw: Iterable[object], page_count: int) -> list[SectionView]:
    """The extraction's sections (``workers.extraction.Section`` or equivalents), with ids."""
    seen: dict[str, int] = {}
    out: list[SectionView] = []
    for position, section in enumerate(raw, start=1):
        heading = getattr(section, "heading", None)
        text = getattr(section, "text", None)
        level = getattr(section, "level", None)
        start = getattr(section, "page_start", None)
        end = getattr(section, "page_end", None)
        damaged = not (
            isinstance(heading, str)
            and isinstance(text, str)
            and isinstance(level, int)
            and isinstance(start, int)
            and isinstance(end, int)
            and 1 <= start <= end <= max(page_count, 1)
        )
        heading_text = heading if isinstance(heading, str) else ""
        base = "sec_" + (slug(heading_text) or str(position))
        seen[base] = seen.get(base, 0) + 1
        section_id = base if seen[base] == 1 else f"{base}_{seen[base]}"
        out.append(
            SectionView(
                id=section_id,
                heading=heading_text[:500],
                level=level if isinstance(level, int) else 1,
                page_start=start if isinstance(start, int) else 0,
                page_end=end if isinstance(end, int) else 0,
                text=text if isinstance(text, str) else "",
                damaged=damaged,
            )
        )
    return out
