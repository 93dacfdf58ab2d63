"""The body of a Word document as pages, sections and tables, read straight from its XML.

python-docx's ``paragraph.style`` looks the style up among all styles on every call, which is
quadratic on long documents, so heading levels come from a :class:`StyleMap` built once. Text
is read from the WordprocessingML elements directly: runs, tabs and breaks, but not deleted
text, field codes or the VML fallback copy of a drawing. Page breaks travel inside paragraph
text as ``PAGE`` (a form feed, which XML 1.0 cannot contain, so it never clashes with text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from docx.oxml.ns import qn
from lxml import etree

from ldims.text import Page, Section, Table
from workers.extraction.common import (
    SectionBuilder,
    clean_text,
    ensure_chars,
    ensure_pages,
    parse_count,
    rows_to_text,
)
from workers.extraction.result import ExtractionLimits

PAGE = "\f"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"

_P, _TBL, _TR, _TC = qn("w:p"), qn("w:tbl"), qn("w:tr"), qn("w:tc")
_T, _BR, _TXBX, _VAL = qn("w:t"), qn("w:br"), qn("w:txbxContent"), qn("w:val")
_TYPE = qn("w:type")
# Run text and the text of equations (Office Math).
_TEXTS = {_T, qn("m:t")}
_PPR, _SECTPR = qn("w:pPr"), qn("w:sectPr")
_BREAK_BEFORE = qn("w:pageBreakBefore")
# Elements that only wrap content (content controls, custom XML): their children count.
_WRAPPERS = {qn("w:sdt"), qn("w:sdtContent"), qn("w:customXml"), qn("w:smartTag")}
# Subtrees whose text is not part of what a reader sees (or is a duplicate of it).
_SKIPPED = {
    f"{_MC}Fallback",
    qn("w:del"),
    qn("w:moveFrom"),
    qn("w:pPr"),
    qn("w:rPr"),
    qn("w:instrText"),
    qn("w:sdtPr"),
}
_MARKS = {
    qn("w:tab"): "\t",
    qn("w:ptab"): "\t",
    qn("w:cr"): "\n",
    qn("w:noBreakHyphen"): "-",
    qn("w:lastRenderedPageBreak"): PAGE,
}
_HEADING_NAME = re.compile(r"heading\s*([1-9])")
_FALSE = {"0", "false", "off"}
_NEW_PAGE_SECTIONS = {"nextPage", "oddPage", "evenPage"}


def _on(element: etree._Element | None) -> bool:
    """A WordprocessingML on/off property: present and not switched off."""
    return element is not None and element.get(_VAL, "1") not in _FALSE


def _outline(ppr: etree._Element | None) -> int | None:
    """The outline level of a pPr as a heading level 1..9, 0 for body text, None if unset."""
    element = ppr.find(qn("w:outlineLvl")) if ppr is not None else None
    if element is None:
        return None
    level = parse_count(element.get(_VAL, ""))
    if level is None:
        return None
    return level + 1 if level < 9 else 0


class StyleMap:
    """Paragraph styles by id: the heading level and page-break-before each one implies."""

    def __init__(self, styles: etree._Element | None) -> None:
        self._styles: dict[str, etree._Element] = {}
        self.default_id: str | None = None
        for style in styles.iterchildren(qn("w:style")) if styles is not None else ():
            if style.get(_TYPE, "paragraph") != "paragraph":
                continue
            style_id = style.get(qn("w:styleId"), "")
            self._styles[style_id] = style
            if style.get(qn("w:default")) in ("1", "true", "on"):
                self.default_id = style_id
        self._levels: dict[str, int] = {}
        self._breaks: dict[str, bool] = {}

    def level(self, style_id: str | None) -> int:
        """Heading level 1..9 of a paragraph in this style, 0 if it is not a heading."""
        style_id = style_id if style_id is not None else self.default_id
        if style_id is None:
            return 0
        if style_id not in self._levels:
            self._levels[style_id] = self._resolve_level(style_id)
        return self._levels[style_id]

    def page_break_before(self, style_id: str | None) -> bool:
        style_id = style_id if style_id is not None else self.default_id
        if style_id is None:
            return False
        if style_id not in self._breaks:
            # The nearest style that sets the property decides (a base style may be overridden).
            settings = (style.find(f"{_PPR}/{_BREAK_BEFORE}") for style in self._chain(style_id))
            self._breaks[style_id] = _on(next((s for s in settings if s is not None), None))
        return self._breaks[style_id]

    def _resolve_level(self, style_id: str) -> int:
        for depth, style in enumerate(self._chain(style_id)):
            name_element = style.find(qn("w:name"))
            name = (name_element.get(_VAL, "") if name_element is not None else "").lower()
            match = _HEADING_NAME.fullmatch(name.strip())
            if match:
                return int(match.group(1))
            # "Title" is a top heading, but styles merely based on it (Subtitle) are not.
            if name == "title" and depth == 0:
                return 1
            outline = _outline(style.find(qn("w:pPr")))
            if outline is not None:
                return outline
        return 0

    def _chain(self, style_id: str) -> Iterator[etree._Element]:
        """The style and its base styles, nearest first (a loop in basedOn ends the chain)."""
        seen: set[str] = set()
        current: str | None = style_id
        while current is not None and current not in seen and current in self._styles:
            seen.add(current)
            style = self._styles[current]
            yield style
            based_on = style.find(qn("w:basedOn"))
            current = based_on.get(_VAL) if based_on is not None else None


def content(container: etree._Element, tags: frozenset[str]) -> Iterator[etree._Element]:
    """Children of ``container`` with one of ``tags``, looking through content controls."""
    for child in container:
        if child.tag in tags:
            yield child
        elif child.tag in _WRAPPERS:
            yield from content(child, tags)


BLOCKS = frozenset({_P, _TBL})
_ROWS = frozenset({_TR})
_CELLS = frozenset({_TC})


def _collect(element: etree._Element, out: list[str], boxes: list[etree._Element]) -> None:
    for child in element:
        tag = child.tag
        if tag in _TEXTS:
            out.append(child.text or "")
        elif tag in _MARKS:
            out.append(_MARKS[tag])
        elif tag == _BR:
            out.append(PAGE if child.get(_TYPE) == "page" else "\n")
        elif tag == _TXBX:
            boxes.append(child)
        elif tag not in _SKIPPED:
            _collect(child, out, boxes)


def paragraph_text(paragraph: etree._Element) -> str:
    """The visible text of a paragraph with ``PAGE`` marks; its text boxes follow on new lines."""
    out: list[str] = []
    boxes: list[etree._Element] = []
    _collect(paragraph, out, boxes)
    # A page break inside a floating text box says nothing about the page of the body text.
    texts = ["".join(out), *(story_text(box).replace(PAGE, "") for box in boxes)]
    return "\n".join(text for text in texts if text)


def story_text(container: etree._Element) -> str:
    """The text of a story (cell, header, footnote, text box): paragraphs and tables in order."""
    parts = []
    for block in content(container, BLOCKS):
        if block.tag == _P:
            parts.append(paragraph_text(block))
        else:
            parts.append(rows_to_text(cells for cells, _ in table_rows(block)))
    return "\n".join(parts)


def _continues_merge(cell: etree._Element) -> bool:
    """A cell under a vertically merged one: its text is empty or repeats the first cell."""
    merge = cell.find(f"{qn('w:tcPr')}/{qn('w:vMerge')}")
    return merge is not None and merge.get(_VAL) != "restart"


def table_rows(table: etree._Element) -> list[tuple[list[str], bool]]:
    """Each row's cell texts, and whether a page break falls in the row.

    Cells come from the row's own ``w:tc`` elements, so a cell spanning columns appears once
    (python-docx's ``row.cells`` repeats it per grid column); nested tables are in their cell.
    """
    rows = []
    for row in content(table, _ROWS):
        cells: list[str] = []
        page_break = False
        for cell in content(row, _CELLS):
            if _continues_merge(cell):
                cells.append("")
                continue
            text = story_text(cell)
            page_break = page_break or PAGE in text
            cells.append(text.replace(PAGE, ""))
        rows.append((cells, page_break))
    return rows


def _section_starts(body: etree._Element) -> list[str]:
    """How each section starts (``w:type``, default nextPage), in document order."""
    kinds = []
    for properties in body.iter(_SECTPR):
        parent = properties.getparent()
        if parent is body or (parent.tag == _PPR and parent.getparent().tag == _P):
            kind = properties.find(qn("w:type"))
            kinds.append(kind.get(_VAL, "nextPage") if kind is not None else "nextPage")
    return kinds


class BodyReader:
    """Reads a document body block by block into pages, sections and tables.

    A page ends at an explicit page break, a page-break-before paragraph, a section that starts
    on a new page, or where Word last rendered one. A break with nothing on the page before it
    starts no page, so a break that both Word and the author put in one place counts once.
    """

    def __init__(self, styles: StyleMap, limits: ExtractionLimits) -> None:
        self._styles = styles
        self._limits = limits
        self._done: list[str] = []
        self._current: list[str] = []
        self._chars = 0
        self._builder = SectionBuilder()
        self._section_starts: list[str] = []
        self._section = 0
        self.tables: list[Table] = []

    @property
    def page(self) -> int:
        return len(self._done) + 1

    def read(self, body: etree._Element) -> None:
        self._section_starts = _section_starts(body)
        for block in content(body, BLOCKS):
            if block.tag == _P:
                self._paragraph(block)
            else:
                self._table(block)

    def finish(self, notes: str = "") -> tuple[list[Page], list[Section]]:
        """The pages and sections; ``notes`` (footnotes, endnotes) end the last page."""
        if notes.strip():
            if not self._has_text() and self._done:
                self._current = [self._done.pop()]
            self._add(notes)
        self._new_page()
        pages = [Page(number, text) for number, text in enumerate(self._done, start=1)]
        return pages, self._builder.sections()

    def _has_text(self) -> bool:
        return any(part.strip() for part in self._current)

    def _new_page(self) -> None:
        if self._has_text():
            self._done.append(clean_text("\n".join(self._current)))
            self._current = []
            ensure_pages(len(self._done), self._limits)

    def _add(self, text: str) -> None:
        self._current.append(text)
        self._chars += len(text) + 1
        ensure_chars(self._chars, self._limits)

    def _paragraph(self, paragraph: etree._Element) -> None:
        level, break_before, ends_section = self._properties(paragraph)
        if break_before:
            self._new_page()
        pieces = paragraph_text(paragraph).split(PAGE)
        start = None
        for index, piece in enumerate(pieces):
            if index:
                self._new_page()
            if piece.strip():
                start = start or self.page
                self._add(piece)
        if start is not None:
            if level:
                self._builder.heading("".join(pieces), level, start)
            else:
                self._builder.text("".join(pieces), self.page)
        if ends_section:
            self._end_section()

    def _end_section(self) -> None:
        # A section's own w:type says how it starts, so the next section decides the break.
        self._section += 1
        starts = self._section_starts
        if self._section < len(starts) and starts[self._section] in _NEW_PAGE_SECTIONS:
            self._new_page()

    def _properties(self, paragraph: etree._Element) -> tuple[int, bool, bool]:
        """Heading level (0: body text), page break before, and whether a section ends here."""
        properties = paragraph.find(_PPR)
        if properties is None:
            return self._styles.level(None), self._styles.page_break_before(None), False
        style = properties.find(qn("w:pStyle"))
        style_id = style.get(_VAL) if style is not None else None
        level = _outline(properties)
        if level is None:
            level = self._styles.level(style_id)
        direct_break = properties.find(_BREAK_BEFORE)
        if direct_break is not None:
            break_before = _on(direct_break)
        else:
            break_before = self._styles.page_break_before(style_id)
        return level, break_before, properties.find(_SECTPR) is not None

    def _table(self, table: etree._Element) -> None:
        rows = table_rows(table)
        start: int | None = None
        chunk: list[list[str]] = []
        for cells, page_break in rows:
            if page_break:
                start = self._table_part(chunk, start)
                chunk = []
                self._new_page()
            chunk.append(cells)
        start = self._table_part(chunk, start)
        text = rows_to_text(cells for cells, _ in rows)
        if start is not None:
            self.tables.append(Table(start, text))
            self._builder.text(text, self.page)

    def _table_part(self, rows: list[list[str]], start: int | None) -> int | None:
        """Put the rows on the current page; returns the page the table starts on."""
        text = rows_to_text(rows)
        if not text:
            return start
        self._add(f"\n{text}\n")
        return start or self.page
