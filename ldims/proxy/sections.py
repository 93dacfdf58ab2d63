"""Sections of a document with stable ids: ``sec_`` and the heading as a slug.

An id depends only on the headings, in order (``sec_ldap``; a second "LDAP" heading is
``sec_ldap_2``), so extracting the same content again gives the same ids, and a model can
cite one. Headings in any script keep their letters (``sec_настройка_ldap``,
``sec_安装``); a heading without letters or digits gets its position (``sec_7``).
An id is made of the heading as the proxy shows it, masked (:mod:`ldims.proxy.masking`): a
heading "Card 4111 1111 1111 1111" was ``sec_card_4111_1111_1111_1111``, the card in an id
that the last masking pass leaves alone. A heading that masking changes gets its position
too, so no part of what was masked (nor of what lies next to it) reaches an id.

A section whose stored shape is wrong (not text, pages outside the document) is kept as
``damaged``: listing it is harmless, reading it is a ``TOOL_ERROR``, never garbage.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from ldims.proxy.masking import mask

_NOT_WORD = re.compile(r"[\W_]+")
MAX_SLUG_CHARS = 48
MAX_HEADING_CHARS = 500


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


def section_base(heading: str, position: int, mask_kinds: frozenset[str] | None = None) -> str:
    """The id of the section at ``position`` (from 1) before duplicates are numbered: the slug
    of ``heading``, or the position when the heading has no word or masking (of ``mask_kinds``,
    None: every kind) changes it."""
    if mask(heading, mask_kinds).text != heading:
        return f"sec_{position}"
    return "sec_" + (slug(heading) or str(position))


def sections_of(
    raw: Iterable[object], page_count: int, mask_kinds: frozenset[str] | None = None
) -> list[SectionView]:
    """The extraction's sections (``workers.extraction.Section`` or equivalents), with ids
    (:func:`section_base`; the only rule ids are made by, for listing and reading alike)."""
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
        heading_text = heading_text[:MAX_HEADING_CHARS]
        base = section_base(heading_text, position, mask_kinds)
        seen[base] = seen.get(base, 0) + 1
        section_id = base if seen[base] == 1 else f"{base}_{seen[base]}"
        out.append(
            SectionView(
                id=section_id,
                heading=heading_text,
                level=level if isinstance(level, int) else 1,
                page_start=start if isinstance(start, int) else 0,
                page_end=end if isinstance(end, int) else 0,
                text=text if isinstance(text, str) else "",
                damaged=damaged,
            )
        )
    return out
