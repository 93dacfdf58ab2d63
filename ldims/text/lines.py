"""How a document's lines are numbered: the one rule the index's chunks, REST and MCP reads
and qmd's ``get`` share, so a line a search hit names is the line a read shows.

A document's text is its pages' texts in page order, with exactly one line between two pages
(:data:`LINES_BETWEEN_PAGES`): a blank one (:func:`blank_line`: the documents toolset and
REST), or qmd's page marker (``<!-- page N -->``, in place of the blank line). Lines are
counted from 1 in that text. A document without pages is its ``text`` alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from ldims.text.model import ExtractionResult, Page

# The text between page n-1 and page n (n >= 2): one line of its own, newlines around it.
Separator = Callable[[int], str]
LINES_BETWEEN_PAGES = 1


def blank_line(number: int) -> str:
    """Between two pages: one blank line."""
    return "\n\n"


def in_page_order(pages: Iterable[Page]) -> list[Page]:
    """``pages`` in the order their lines are counted."""
    return sorted(pages, key=lambda page: page.number)


def page_texts(result: ExtractionResult) -> list[str]:
    """The texts a document's lines are counted over: its pages' in page order, or its
    ``text`` when it has none."""
    if result.pages:
        return [page.text for page in in_page_order(result.pages)]
    return [result.text]


def joined(texts: Iterable[str], separator: Separator = blank_line) -> str:
    """The document's text: ``texts`` with ``separator(n)`` before page ``n``."""
    parts: list[str] = []
    for number, text in enumerate(texts, start=1):
        if number > 1:
            parts.append(separator(number))
        parts.append(text)
    return "".join(parts)


def numbered_pages(texts: Iterable[str]) -> Iterator[tuple[int, list[str]]]:
    """Each page's lines, with the number of its first line."""
    line = 1
    for text in texts:
        lines = text.split("\n")
        yield line, lines
        line += len(lines) + LINES_BETWEEN_PAGES


def line_count(newlines: int, pages: int) -> int:
    """The lines of a document whose pages hold ``newlines`` line breaks in all."""
    return newlines + pages + (pages - 1) * LINES_BETWEEN_PAGES
