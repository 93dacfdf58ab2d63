"""Tika's XHTML → pages, sections, tables and running headers/footers.

Both Tika backends (iscc-tika in-process, a Tika server over REST) produce the same XHTML and
this module is the one place that reads it. Tika marks the layout with ``div`` classes:

* ``slide-content`` (PPTX, PPT; for ODP the body's top-level ``div``s): a page and a section per
  slide. Tika writes a slide's notes, layout and master text, charts and SmartArt *after* its
  ``div``; lines there that repeat or look like placeholders (footers, dates, slide numbers,
  ``‹#›``) go to ``headers_footers``, the rest (speaker notes, chart labels) stays on the slide.
* ``sheet`` with an ``h1`` name (XLSX; for ODS the body's top-level tables): a page and a
  section per sheet.
* ``page`` (PDF-like, legacy Excel): a page each.
* anything else (DOC, RTF, ODT, EPUB, MSG): one page; ``h1``–``h6`` become sections.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from lxml import etree

from ldims.errors import PermanentError
from ldims.text import Page, Section, Table
from workers.extraction.common import (
    SectionBuilder,
    clean_text,
    ensure_chars,
    ensure_pages,
    rows_to_text,
)
from workers.extraction.result import ExtractionLimits

EPUB = "application/epub+zip"
ODS = "application/vnd.oasis.opendocument.spreadsheet"
ODP = "application/vnd.oasis.opendocument.presentation"

_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_BLOCKS = frozenset(
    {"address", "article", "aside", "blockquote", "body", "caption", "dd", "div", "dl", "dt",
     "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p",
     "pre", "section", "table", "td", "th", "tr", "ul"}
)  # fmt: skip
_SKIPPED = frozenset({"head", "script", "style", "title", "template", "noscript", "svg"})
# Classes Tika itself writes around running headers/footers and slide masters. EPUB and
# e-mail bodies keep their authors' HTML classes, where "header" may be a chapter heading.
_HF_CLASSES = frozenset({"header", "footer"})
_MASTER_CLASSES = frozenset({"slide-master-content", "slide-notes-master", "slide-handout-master"})
_AUTHORED_HTML = frozenset({EPUB, "application/vnd.ms-outlook", "text/html"})
_PLACEHOLDER = re.compile(r"^(‹#›|<#>|\d{1,4}|\d{1,4}[./-]\d{1,2}[./-]\d{1,4})$")
# Deeper nesting (hostile HTML in an EPUB) is flattened to its text: each level of the walk
# costs about three Python frames, and the interpreter allows 1000.
_MAX_DEPTH = 120
_HUGE_XHTML = 8 * 1024 * 1024  # lxml refuses text nodes over 10 MB unless huge_tree is set
_SLIDE_TITLE_MAX = 100
_SPACES = re.compile(r"\s+")


@dataclass
class _Item:
    kind: str  # "line", "heading", "title" (a sheet's name) or "table"
    text: str
    level: int = 0


@dataclass
class _Unit:
    """One page to be: a slide, a sheet, a page, or the whole document."""

    name: str | None = None
    items: list[_Item] = field(default_factory=list)
    extras: list[_Item] = field(default_factory=list)  # written after a slide's div


@dataclass(frozen=True)
class XhtmlDocument:
    """What the XHTML holds, ready for an ``ExtractionResult``."""

    text: str
    pages: list[Page]
    sections: list[Section]
    tables: list[Table]
    headers_footers: list[str]
    head_metadata: dict[str, list[str]]


def parse_xhtml(xhtml: str, mime: str, limits: ExtractionLimits) -> XhtmlDocument:
    """Read Tika's XHTML for a file of type ``mime``; raise EMPTY_FILE or TOO_LARGE."""
    root = _parse(xhtml)
    body = root.find("{*}body") if root is not None else None
    if body is None:
        body = root if root is not None else etree.Element("body")
    layout, elements = _find_units(body, mime)
    ensure_pages(max(1, len(elements)), limits)
    renderer = _Renderer(layout, elements, mime, limits)
    renderer.render(body)
    pages, sections, tables, masters = _assemble(layout, renderer)
    if not any(page.text for page in pages) or not _has_content(renderer):
        raise PermanentError(
            "EMPTY_FILE",
            "The document holds no text: Tika found only empty pages, sheets or slides.",
        )
    text = "\n\n".join(page.text for page in pages if page.text)
    ensure_chars(len(text), limits)
    return XhtmlDocument(text, pages, sections, tables, masters, _head_metadata(root))


def _parse(xhtml: str) -> etree._Element | None:
    if not xhtml.lstrip().startswith("<"):
        # A server that answered plain text instead of XHTML: keep its lines as paragraphs.
        body = etree.Element("body")
        for line in xhtml.splitlines():
            etree.SubElement(body, "p").text = line
        return body
    parser = etree.XMLParser(
        recover=True,  # EPUB bodies pass through with duplicate attributes and the like
        resolve_entities=False,
        no_network=True,
        remove_comments=True,
        remove_pis=True,
        huge_tree=len(xhtml) > _HUGE_XHTML,
    )
    return etree.fromstring(xhtml.encode("utf-8", errors="replace"), parser)


def _local(element: etree._Element) -> str:
    tag = element.tag
    return tag.rpartition("}")[2].lower() if isinstance(tag, str) else ""


def _classes(element: etree._Element) -> set[str]:
    return set((element.get("class") or "").split())


def _first_child(element: etree._Element) -> etree._Element | None:
    return next((child for child in element if isinstance(child.tag, str)), None)


def _find_units(body: etree._Element, mime: str) -> tuple[str, list[etree._Element]]:
    """The document's layout and its page-like elements (outermost only, in order)."""
    if mime != EPUB:  # an e-book's own HTML may use class="page" for something else
        for layout, name in (("slides", "slide-content"), ("sheets", "sheet"), ("pages", "page")):
            found = [div for div in body.iter("{*}div") if name in _classes(div)]
            if found:
                chosen = set(found)
                return layout, [e for e in found if not any(a in chosen for a in e.iterancestors())]
    if mime == ODP:
        slides = [child for child in body if _local(child) == "div"]
        if slides:
            return "slides", slides
    if mime == ODS:
        sheets = [child for child in body if _local(child) == "table"]
        if sheets:
            return "sheets", sheets
    return "single", []


class _Renderer:
    """Walks the body once, writing lines, headings and tables into the current unit."""

    def __init__(
        self, layout: str, elements: list[etree._Element], mime: str, limits: ExtractionLimits
    ) -> None:
        self.layout = layout
        self.front = _Unit()  # whatever precedes the first unit
        self.units: list[_Unit] = []
        self.masters: list[_Item] = []  # running headers/footers and slide masters
        self._unit_elements = set(elements)
        self._hf_classes = _MASTER_CLASSES | (_HF_CLASSES if mime not in _AUTHORED_HTML else set())
        self._limits = limits
        self._sink: list[_Item] = self.front.items
        self._line: list[str] = []
        self._skip: etree._Element | None = None
        self._capturing = 0
        self._pre = 0
        self._chars = 0

    def render(self, body: etree._Element) -> None:
        self._children(body, 0)
        self._break()

    def _children(self, element: etree._Element, depth: int) -> None:
        self._text(element.text)
        for child in element:
            if child is not self._skip:
                self._element(child, depth + 1)
            self._text(child.tail)

    def _element(self, element: etree._Element, depth: int) -> None:
        tag = _local(element)
        if not tag or tag in _SKIPPED:
            return
        if depth > _MAX_DEPTH:
            self._text(" ".join(element.itertext()))
            return
        classes = _classes(element)
        if element in self._unit_elements:
            self._unit(element, tag, depth)
        elif classes & self._hf_classes:
            self._redirect(element, depth, self.masters)
        elif "package-entry" in classes:
            self._package_entry(element, depth)
        elif tag == "table":
            self._table(element, depth)
        elif tag in _HEADINGS and self.layout in ("single", "pages"):
            self._heading(element, depth, _HEADINGS[tag])
        elif tag == "br":
            self._break()
        else:
            self._block(element, tag, depth)

    def _block(self, element: etree._Element, tag: str, depth: int) -> None:
        block = tag in _BLOCKS or tag in _HEADINGS
        self._pre += tag == "pre"
        if block:
            self._break()
        self._children(element, depth)
        if block:
            self._break()
        self._pre -= tag == "pre"

    def _text(self, text: str | None) -> None:
        if not text:
            return
        if not self._pre:  # HTML whitespace rules: EPUB source lines are hard-wrapped
            self._line.append(_SPACES.sub(" ", text))
            return
        for number, part in enumerate(text.split("\n")):
            if number:
                self._break()
            self._line.append(part)

    def _break(self) -> None:
        line = "".join(self._line)
        self._line = []
        line = line.rstrip() if self._pre else _SPACES.sub(" ", line).strip()
        if line.strip():
            self._add(_Item("line", line))

    def _add(self, item: _Item) -> None:
        self._sink.append(item)
        if not self._capturing:  # captured text is counted once, where it lands
            self._chars += len(item.text)
            ensure_chars(self._chars, self._limits)

    def _capture(self, element: etree._Element, depth: int) -> list[str]:
        """The lines of ``element``'s content, written nowhere (for cells and headings)."""
        saved = self._sink, self._line
        self._sink, self._line = [], []
        self._capturing += 1
        try:
            self._children(element, depth)
            self._break()
            return [line for item in self._sink for line in item.text.split("\n")]
        finally:
            self._capturing -= 1
            self._sink, self._line = saved

    def _unit(self, element: etree._Element, tag: str, depth: int) -> None:
        self._break()
        unit = _Unit()
        self.units.append(unit)
        self._sink = unit.items
        if self.layout == "sheets":
            unit.name = self._sheet_name(element, len(self.units), depth)
            self._add(_Item("title", unit.name))
        if tag == "table":  # an ODS sheet is a bare table
            self._table(element, depth)
        else:
            self._children(element, depth)
        self._break()
        self._skip = None
        # What follows a slide belongs to it (notes, charts) until the next slide starts.
        self._sink = unit.extras if self.layout == "slides" else unit.items

    def _sheet_name(self, element: etree._Element, number: int, depth: int) -> str:
        first = _first_child(element)
        if first is not None and _local(first) == "h1":
            self._skip = first
            name = " ".join(self._capture(first, depth + 1)).strip()
            if name:
                return name
        return f"Sheet {number}"

    def _redirect(self, element: etree._Element, depth: int, target: list[_Item]) -> None:
        self._break()
        saved = self._sink
        self._sink = target
        self._children(element, depth)
        self._break()
        self._sink = saved

    def _package_entry(self, element: etree._Element, depth: int) -> None:
        # An embedded file: its h1 is the file name ("image1.png"), not a heading of ours.
        self._break()
        first = _first_child(element)
        saved = self._skip
        self._skip = first if first is not None and _local(first) == "h1" else None
        self._children(element, depth)
        self._skip = saved
        self._break()

    def _heading(self, element: etree._Element, depth: int, level: int) -> None:
        self._break()
        text = " ".join(self._capture(element, depth)).strip()
        if text:
            self._add(_Item("heading", text, level))

    def _table(self, element: etree._Element, depth: int) -> None:
        self._break()
        rows: list[list[str]] = []
        for child in element:
            tag = _local(child)
            if tag == "caption":
                self._add(_Item("line", " ".join(self._capture(child, depth + 1))))
            elif tag == "tr":
                rows.append(self._cells(child, depth + 1))
            elif tag in ("thead", "tbody", "tfoot"):
                rows.extend(self._cells(tr, depth + 2) for tr in child if _local(tr) == "tr")
        text = rows_to_text(rows)
        if text:
            self._add(_Item("table", text))

    def _cells(self, row: etree._Element, depth: int) -> list[str]:
        cells = [cell for cell in row if _local(cell) in ("td", "th")]
        return [" ".join(self._capture(cell, depth + 1)) for cell in cells]


def _has_content(renderer: _Renderer) -> bool:
    """Any text beyond sheet names (an empty workbook still names its sheets)."""
    units = [renderer.front, *renderer.units]
    return any(
        item.kind != "title" and item.text.strip()
        for unit in units
        for item in (*unit.items, *unit.extras)
    )


def _assemble(
    layout: str, renderer: _Renderer
) -> tuple[list[Page], list[Section], list[Table], list[str]]:
    masters = _lines(renderer.masters)
    units = renderer.units or [renderer.front]
    if renderer.units and layout == "slides":
        masters = _lines(renderer.front.items) + masters
    elif renderer.units:
        units[0].items[:0] = renderer.front.items
    notes = _split_slide_extras(units, masters) if layout == "slides" else {}
    builder = SectionBuilder()
    pages: list[Page] = []
    tables: list[Table] = []
    for number, unit in enumerate(units, start=1):
        titled = False  # whether the first line became the section heading
        if layout == "sheets":
            builder.heading(unit.name or f"Sheet {number}", 1, number)
        elif layout == "slides":
            title, titled = _slide_title(unit, number)
            builder.heading(title, 1, number)
        lines = _unit_lines(unit, number, builder, tables, titled)
        for line in notes.get(number, []):
            lines.append(line)
            builder.text(line, number)
        pages.append(Page(number, clean_text("\n".join(lines))))
    return pages, builder.sections(), tables, list(dict.fromkeys(masters))


def _unit_lines(
    unit: _Unit, number: int, builder: SectionBuilder, tables: list[Table], titled: bool
) -> list[str]:
    lines = []
    for index, item in enumerate(unit.items):
        lines.append(item.text)
        if item.kind == "heading":
            builder.heading(item.text, item.level, number)
        elif item.kind == "table":
            tables.append(Table(number, item.text))
            builder.text(item.text, number)
        elif item.kind == "line" and not (titled and index == 0):
            builder.text(item.text, number)
    return lines


def _slide_title(unit: _Unit, number: int) -> tuple[str, bool]:
    """A slide's section heading: its first line when short, else "Slide N"."""
    first = unit.items[0] if unit.items else None
    if first is not None and first.kind == "line" and len(first.text) <= _SLIDE_TITLE_MAX:
        return first.text, True
    return f"Slide {number}", False


def _split_slide_extras(units: list[_Unit], masters: list[str]) -> dict[int, list[str]]:
    """Per slide, the lines after it that are its own; boilerplate is added to ``masters``."""
    counts = Counter(line for unit in units for line in _lines(unit.extras))
    notes: dict[int, list[str]] = {}
    for number, unit in enumerate(units, start=1):
        for line in _lines(unit.extras):
            if counts[line] > 1 or _PLACEHOLDER.match(line):
                masters.append(line)
            else:
                notes.setdefault(number, []).append(line)
    return notes


def _lines(items: list[_Item]) -> list[str]:
    return [line.strip() for item in items for line in item.text.split("\n") if line.strip()]


def _head_metadata(root: etree._Element | None) -> dict[str, list[str]]:
    metadata: dict[str, list[str]] = {}
    if root is None:
        return metadata
    for meta in root.iterfind("{*}head/{*}meta"):
        name, content = meta.get("name"), meta.get("content")
        if name and content is not None:
            metadata.setdefault(name, []).append(content)
    return metadata
