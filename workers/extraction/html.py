"""HTML pages: decode, strip boilerplate (navigation, banners, scripts), walk the rest as text.

We parse natively with lxml instead of going through Tika because Tika's XHTML drops the
``<nav>``/``<header>`` tags but keeps their text, so menus and footers would be indexed as
content. Headings become sections, data tables become tables; the whole page is one page.
"""

from __future__ import annotations

import codecs
import logging
import re
from pathlib import Path

import lxml.html
from lxml import etree

from ldims.errors import PermanentError
from ldims.text import ExtractionResult, Page, Table
from workers.extraction.common import (
    SectionBuilder,
    clean_text,
    ensure_chars,
    ensure_size,
    language_code,
    rows_to_text,
)
from workers.extraction.result import ExtractionLimits
from workers.extraction.text import BOMS, decode_text

logger = logging.getLogger(__name__)

_SNIFF_BYTES = 4096
# <meta charset=x>, <meta http-equiv=Content-Type content="...; charset=x">, <?xml encoding=x?>
_DECLARED = re.compile(
    rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([a-z0-9_.:-]+)"
    rb"|<\?xml[^>]*?encoding\s*=\s*[\"']([a-z0-9_.:-]+)",
    re.IGNORECASE,
)
# WHATWG: these labels mean windows-1252 in HTML, and cp1252 is a superset of what they mean.
_WHATWG_ALIASES = {"latin-1": "cp1252", "iso8859-1": "cp1252", "ascii": "cp1252"}
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>")
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_SPACES = re.compile(r"\s+")

# Never text: code, embedded objects and interactive widgets.
_DROP_TAGS = {
    "script", "style", "noscript", "template", "iframe", "object", "embed", "svg", "math",
    "canvas", "button", "select", "input", "textarea", "datalist", "dialog",
}  # fmt: skip
# Site chrome, unless inside the main content (an article's own header carries its title).
_CHROME_TAGS = {"header", "footer", "aside"}
_CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "complementary"}
_CHROME_TOKENS = {
    "nav", "navbar", "navigation", "menu", "sidebar", "breadcrumb", "breadcrumbs", "footer",
    "cookie", "cookies", "skip", "share", "social", "navbox", "toc", "catlinks", "printfooter",
}  # fmt: skip
# Whole class/id values for chrome whose tokens are too generic to list (MediaWiki).
_CHROME_NAMES = {"mw-jump-link", "mw-editsection", "mw-hidden-catlinks", "mw-normal-catlinks"}
_CONTAINERS = {"main", "article", "body", "html"}
_TOKEN_SPLIT = re.compile(r"[\s_-]+")
# A <form> holding these is a page-wide wrapper (ASP.NET WebForms), not a search or login box.
_FORM_CONTENT = ".//p | .//h1 | .//h2 | .//h3 | .//h4 | .//h5 | .//h6 | .//article | .//main"

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
    "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "header", "hgroup", "hr",
    "legend", "li", "main", "menu", "nav", "ol", "p", "section", "summary", "table", "tbody",
    "td", "tfoot", "th", "thead", "tr", "ul",
}  # fmt: skip
_SKIP_TAGS = {"head", "img", "picture", "video", "audio", "map", "area"}


def extract_html(path: Path, limits: ExtractionLimits) -> ExtractionResult:
    """Extract the HTML file at ``path``: main content as text, headings as sections."""
    data = _read(path, limits)
    markup, encoding = _decode(data)
    # No check of the markup's length here: inline images and styles make pages far longer
    # than their text. The walk counts the text; the byte and memory limits bound the rest.
    document = _parse(markup)
    metadata = _metadata(document)
    root = _content_root(document)
    _remove_boilerplate(document, root)
    walker, text = _walk(root, limits)
    body = document.find("body")
    if not text and root.tag in ("main", "article") and body is not None:
        # A <main> or <article> that turned out empty (misused markup): read the whole body.
        walker, text = _walk(body, limits)
    if not text:
        raise PermanentError(
            "EMPTY_FILE", "The HTML page holds no readable text once scripts and menus are removed."
        )
    metadata.update(encoding=encoding, page_count=1)
    return ExtractionResult(
        format="text/html",
        extractor="lxml-html",
        text=text,
        pages=[Page(1, text)],
        sections=walker.sections.sections(),
        tables=walker.tables,
        metadata=metadata,
    )


def _walk(root: lxml.html.HtmlElement, limits: ExtractionLimits) -> tuple[_Walker, str]:
    walker = _Walker(limits)
    walker.walk(root)
    return walker, clean_text(walker.text())


def _read(path: Path, limits: ExtractionLimits) -> bytes:
    ensure_size(path, limits)
    return path.read_bytes()


def _decode(data: bytes) -> tuple[str, str]:
    """Bytes to text: BOM, then the page's own declaration, then UTF-8, then detection."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace"), encoding
    declared = _declared_encoding(data[:_SNIFF_BYTES])
    if declared is not None and declared != "utf-8" and not data.isascii():
        # Old templates often declare a legacy charset for pages now saved as UTF-8. Text in a
        # legacy charset with non-ASCII bytes is practically never valid UTF-8, so trust UTF-8.
        try:
            return data.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    if declared is not None:
        try:
            return data.decode(declared), declared
        except UnicodeError:
            # A wrong declaration is common on old pages; fall through to detection.
            logger.info("declared charset %s does not fit the bytes; detecting", declared)
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    return decode_text(data)


def _declared_encoding(head: bytes) -> str | None:
    """The charset a ``<meta>`` or XML declaration names, if Python knows it (else None)."""
    match = _DECLARED.search(head)
    if match is None:
        return None
    label = (match.group(1) or match.group(2)).decode("ascii").lower()
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    # base64, rot13 and friends are codecs too, but not text encodings a page can be in.
    if not info._is_text_encoding:
        return None
    name = info.name
    # A page that could be read far enough to find an ASCII declaration is not UTF-16/32:
    # browsers read such a declaration as UTF-8 too.
    if name.startswith(("utf-16", "utf-32")):
        return "utf-8"
    return _WHATWG_ALIASES.get(name, name)


def _parse(markup: str) -> lxml.html.HtmlElement:
    # lxml refuses str input that carries an XML encoding declaration (it is decoded already).
    markup = _CONTROL_CHARS.sub("", _XML_DECLARATION.sub("", markup, count=1))
    if not markup.strip():
        raise PermanentError("EMPTY_FILE", "The HTML file holds only whitespace.")
    # huge_tree lifts libxml2's nesting limit from 256 to 2048 levels: old pages with unclosed
    # <font> tags nest that deep. HTML has no entity expansion, and the size was checked above.
    parser = lxml.html.HTMLParser(
        remove_comments=True, remove_pis=True, no_network=True, huge_tree=True
    )
    try:
        document = lxml.html.document_fromstring(markup, parser=parser)
    except etree.ParserError as error:  # "Document is empty": comments or a bare doctype
        raise PermanentError("EMPTY_FILE", "The HTML file holds no elements or text.") from error
    # At a resource limit libxml2 stops reading and returns what it has: refuse, not truncate.
    if any(entry.level == etree.ErrorLevels.FATAL for entry in parser.error_log):
        raise PermanentError(
            "TOO_LARGE",
            "The HTML nests elements more than 2048 levels deep, so it cannot be read in full.",
        )
    return document


def _metadata(document: lxml.html.HtmlElement) -> dict[str, str]:
    metadata: dict[str, str] = {}
    title = _first_text(document, "//title[not(ancestor::svg)]") or _first_text(document, "//h1")
    title = title or _meta_content(document, "og:title")
    if title:
        metadata["title"] = title
    language = language_code(document.get("lang") or document.get("xml:lang"))
    if language:
        metadata["language"] = language
    for name in ("author", "description"):
        value = _meta_content(document, name)
        if value:
            metadata[name] = value
    return metadata


def _first_text(document: lxml.html.HtmlElement, xpath: str) -> str:
    found = document.xpath(xpath)
    return _SPACES.sub(" ", found[0].text_content()).strip() if found else ""


def _meta_content(document: lxml.html.HtmlElement, name: str) -> str:
    for meta in document.iter("meta"):
        if (meta.get("name") or meta.get("property") or "").strip().lower() == name:
            return _SPACES.sub(" ", meta.get("content") or "").strip()
    return ""


def _content_root(document: lxml.html.HtmlElement) -> lxml.html.HtmlElement:
    """The page's ``<main>``, else its only ``<article>``, else its body."""
    mains = [main for main in document.iter("main") if main.get("hidden") is None]
    if mains:
        return mains[0]
    articles = list(document.iter("article"))
    if len(articles) == 1:
        return articles[0]
    body = document.find("body")
    return body if body is not None else document


def _remove_boilerplate(document: lxml.html.HtmlElement, root: lxml.html.HtmlElement) -> None:
    """Drop code, hidden elements and site chrome; keep containers of the content itself."""
    # A set of the elements themselves (not id()s): holding them keeps lxml's proxies alive.
    keep = {root, *root.iterancestors()}
    headings = document.xpath("//h1")
    if headings:
        keep |= {headings[0], *headings[0].iterancestors()}
    doomed = []
    for element in document.iter():
        if not isinstance(element.tag, str) or element in keep:
            continue
        if _is_boilerplate(element):
            doomed.append(element)
    for element in doomed:
        # drop_tree keeps the tail text, which belongs to the parent. An element inside an
        # already-dropped one is detached with it; dropping it again is harmless.
        element.drop_tree()


def _is_boilerplate(element: lxml.html.HtmlElement) -> bool:
    tag = element.tag.lower()
    if tag == "form":
        return not element.xpath(_FORM_CONTENT)
    if tag in _DROP_TAGS or tag == "nav":
        return True
    if tag in _CONTAINERS:
        return False
    if tag in _CHROME_TAGS and not any(
        ancestor.tag in ("main", "article") for ancestor in element.iterancestors()
    ):
        return True
    if element.get("hidden") is not None or element.get("aria-hidden", "").lower() == "true":
        return True
    if set((element.get("role") or "").lower().split()) & _CHROME_ROLES:
        return True
    names = f"{element.get('id') or ''} {element.get('class') or ''}".lower()
    if set(names.split()) & _CHROME_NAMES:
        return True
    return bool(set(_TOKEN_SPLIT.split(names)) & _CHROME_TOKENS)


class _Walker:
    """Walks the cleaned tree in document order, building lines, sections and tables.

    Inline text gathers into the current block; a block element starts and ends a line.
    The walk uses an explicit stack so deeply nested markup cannot exhaust Python's stack.
    """

    def __init__(self, limits: ExtractionLimits) -> None:
        self.sections = SectionBuilder()
        self.tables: list[Table] = []
        self._limits = limits
        self._lines: list[str] = []
        self._inline: list[str] = []
        self._length = 0

    def walk(self, root: lxml.html.HtmlElement) -> None:
        stack: list[tuple[bool, lxml.html.HtmlElement]] = [(False, root)]
        while stack:
            closing, element = stack.pop()
            if closing:
                if element.tag in _BLOCKS:
                    self._flush()
                self._tail(element, root)
                continue
            if self._handle_whole(element):
                self._tail(element, root)
                continue
            if element.tag in _BLOCKS:
                self._flush()
            self._inline.append(element.text or "")
            stack.append((True, element))
            stack.extend((False, child) for child in reversed(element))
        self._flush()

    def text(self) -> str:
        return "\n".join(self._lines)

    def _handle_whole(self, element: lxml.html.HtmlElement) -> bool:
        """Handle elements read in one go (headings, tables, pre, skipped); False otherwise."""
        tag = element.tag
        if not isinstance(tag, str) or tag in _SKIP_TAGS:
            return True
        if tag == "br":
            self._flush()
        elif tag in _HEADINGS:
            self._flush()
            heading = _SPACES.sub(" ", element.text_content()).strip()
            if heading:
                self.sections.heading(heading, _HEADINGS[tag], 1)
                self._emit(heading, section_text=False)
        elif tag == "pre":
            self._flush()
            for line in element.text_content().splitlines():
                self._emit(line.rstrip())
        elif tag == "table" and _is_data_table(element):
            self._flush()
            rows = rows_to_text(_table_rows(element))
            if rows:
                self.tables.append(Table(1, rows))
                self._emit(rows)
        else:
            return False
        return True

    def _tail(self, element: lxml.html.HtmlElement, root: lxml.html.HtmlElement) -> None:
        if element is not root:  # the root's tail lies outside the content
            self._inline.append(element.tail or "")

    def _flush(self) -> None:
        line = _SPACES.sub(" ", "".join(self._inline)).strip()
        self._inline = []
        if line:
            self._emit(line)

    def _emit(self, line: str, section_text: bool = True) -> None:
        self._length += len(line) + 1
        ensure_chars(self._length, self._limits)
        self._lines.append(line)
        if section_text:
            self.sections.text(line, 1)


def _is_data_table(table: lxml.html.HtmlElement) -> bool:
    """A table of data, not layout: no nested tables or headings, and more than one cell."""
    if table.xpath(".//table | .//h1 | .//h2 | .//h3 | .//h4 | .//h5 | .//h6 | .//pre"):
        return False
    return len(table.xpath(".//td | .//th")) > 1


def _table_rows(table: lxml.html.HtmlElement) -> list[list[str]]:
    rows = []
    for row in table.iter("tr"):
        cells = [cell.text_content() for cell in row if cell.tag in ("td", "th")]
        rows.append(cells)
    caption = table.find("caption")
    if caption is not None:
        rows.insert(0, [caption.text_content()])
    return rows
