"""Word documents (DOCX, and DOCM/DOTX, which differ only in their main part's type).

python-docx opens the package; :mod:`workers.extraction.word_body` reads the body into pages,
heading sections and tables. Running headers and footers go to ``headers_footers``, footnotes
and endnotes end the last page, and core properties become metadata. The module is named
``word`` rather than ``docx`` so it can never shadow the python-docx package.
"""

from __future__ import annotations

import logging
import time
import zipfile
import zlib
from pathlib import Path

import olefile
from docx.exceptions import PythonDocxError
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.exceptions import PackageNotFoundError
from docx.opc.part import Part, XmlPart
from docx.oxml import parse_xml
from docx.oxml.ns import qn
from docx.package import Package
from lxml import etree

from ldims.errors import PermanentError
from ldims.text import ExtractionResult
from workers.extraction.common import clean_text, language_code, parse_count
from workers.extraction.result import ExtractionLimits
from workers.extraction.word_body import PAGE, BodyReader, StyleMap, story_text

log = logging.getLogger(__name__)

FORMAT = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
EXTRACTOR = "python-docx"

_MAIN_TYPES = {
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.template.main+xml",
    "application/vnd.ms-word.document.macroEnabled.main+xml",
    "application/vnd.ms-word.template.macroEnabledTemplate.main+xml",
}
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_APP_PAGES = "{http://schemas.openxmlformats.org/officeDocument/2006/extended-properties}Pages"
_NOTE_SEPARATORS = {"separator", "continuationSeparator", "continuationNotice"}
# What a damaged package makes python-docx, zipfile or lxml raise while opening it.
_OPEN_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    KeyError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    PackageNotFoundError,
    PythonDocxError,
    etree.LxmlError,
)


def extract_docx(path: Path, limits: ExtractionLimits) -> ExtractionResult:
    """Extract a Word document: pages split at page breaks, heading sections, tables."""
    started = time.perf_counter()
    package, main = _open(path)
    document = _xml(main)
    body = document.find(qn("w:body"))
    if body is None:
        raise PermanentError("CORRUPT_FILE", "The Word document has no body (word/document.xml).")
    styles = _related(main, RT.STYLES)
    reader = BodyReader(StyleMap(_xml(styles) if styles is not None else None), limits)
    reader.read(body)
    pages, sections = reader.finish(_notes(main))
    text = "\n\n".join(page.text for page in pages)
    if not text.strip():
        raise PermanentError(
            "EMPTY_FILE", "The Word document contains no text (it may hold only images)."
        )
    metadata = _core_metadata(package)
    metadata["page_count"] = len(pages)
    declared = _declared_pages(package)
    if declared is not None:
        metadata["declared_page_count"] = declared
    log.debug(
        "DOCX: %d pages, %d sections, %d tables in %.2f s",
        len(pages),
        len(sections),
        len(reader.tables),
        time.perf_counter() - started,
    )
    return ExtractionResult(
        format=FORMAT,
        extractor=EXTRACTOR,
        text=text,
        pages=pages,
        sections=sections,
        tables=reader.tables,
        metadata=metadata,
        headers_footers=_headers_footers(main, body),
    )


def _open(path: Path) -> tuple[Package, Part]:
    """The package and its main document part, or the PermanentError that explains why not."""
    with path.open("rb") as handle:
        head = handle.read(len(_OLE2_MAGIC))
    if head == _OLE2_MAGIC:
        raise _ole2_error(path)
    try:
        package = Package.open(str(path))
        main = package.main_document_part
    except _OPEN_ERRORS as exc:
        raise PermanentError(
            "CORRUPT_FILE",
            "The Word document is damaged or truncated and cannot be opened "
            f"({type(exc).__name__}).",
        ) from exc
    if main.content_type not in _MAIN_TYPES:
        raise PermanentError(
            "UNSUPPORTED_FORMAT",
            f"The package's main part is {main.content_type}, not a Word document.",
        )
    return package, main


def _ole2_error(path: Path) -> PermanentError:
    """An OLE2 file here is a password-protected DOCX, or a legacy file detected wrongly."""
    try:
        with olefile.OleFileIO(str(path)) as ole:
            encrypted = ole.exists("EncryptedPackage")
    except OSError:
        encrypted = False
    if encrypted:
        return PermanentError(
            "ENCRYPTED",
            "The document is password-protected; save it without a password and upload it again.",
        )
    return PermanentError(
        "UNSUPPORTED_FORMAT", "The file is a legacy OLE2 (binary Office) file, not a DOCX package."
    )


def _xml(part: Part) -> etree._Element:
    """A part's XML root; parts python-docx has no class for (DOCM main, notes) are parsed."""
    if isinstance(part, XmlPart):
        return part.element
    try:
        return parse_xml(part.blob)
    except etree.LxmlError as exc:
        raise PermanentError(
            "CORRUPT_FILE", f"The Word document's part {part.partname} is not well-formed XML."
        ) from exc


def _related(source: Part | Package, reltype: str) -> Part | None:
    try:
        return source.part_related_by(reltype)
    except KeyError:
        return None


def _headers_footers(main: Part, body: etree._Element) -> list[str]:
    """The text of every header and footer the sections refer to, once each, in order."""
    texts: list[str] = []
    references = (qn("w:headerReference"), qn("w:footerReference"))
    for properties in body.iter(qn("w:sectPr")):
        for reference in properties:
            if reference.tag not in references:
                continue
            relationship = main.rels.get(reference.get(qn("r:id"), ""))
            if relationship is None or relationship.is_external:
                continue
            text = clean_text(story_text(_xml(relationship.target_part)).replace(PAGE, ""))
            # A footer that is only a page number field ("2") tells a reader nothing.
            if any(char.isalpha() for char in text) and text not in texts:
                texts.append(text)
    return texts


def _notes(main: Part) -> str:
    """Footnote and endnote text (without Word's separator lines), for the last page."""
    texts = []
    for reltype, tag in ((RT.FOOTNOTES, "w:footnote"), (RT.ENDNOTES, "w:endnote")):
        part = _related(main, reltype)
        try:
            notes = _xml(part) if part is not None else None
        except PermanentError:
            # Notes are an extra: a damaged notes part must not cost the document its body.
            log.warning("DOCX: skipped the unreadable notes part %s", part.partname)
            continue
        for note in notes.iterchildren(qn(tag)) if notes is not None else ():
            if note.get(qn("w:type")) not in _NOTE_SEPARATORS:
                text = clean_text(story_text(note).replace(PAGE, ""))
                if text:
                    texts.append(text)
    return "\n".join(texts)


def _core_metadata(package: Package) -> dict[str, object]:
    """Title, author, created and language from docProps/core.xml, when they are set."""
    # package.core_properties would invent a part (title "Word Document") when there is none.
    part = _related(package, RT.CORE_PROPERTIES)
    if part is None or not hasattr(part, "core_properties"):
        return {}
    core = part.core_properties
    metadata: dict[str, object] = {}
    if core.title.strip():
        metadata["title"] = core.title.strip()
    if core.author.strip():
        metadata["author"] = core.author.strip()
    # Keywords, subject and version: what the proxy toolset's read_doc_metadata lists as
    # tags and document version.
    for key, value in (
        ("subject", core.subject),
        ("keywords", core.keywords),
        ("version", core.version),
    ):
        if value and value.strip():
            metadata[key] = value.strip()
    if core.created is not None:
        metadata["created"] = core.created.isoformat()
    language = language_code(core.language)
    if language:
        metadata["language"] = language
    return metadata


def _declared_pages(package: Package) -> int | None:
    """The page count Word saved in docProps/app.xml (as of the last save; may be stale)."""
    part = _related(package, RT.EXTENDED_PROPERTIES)
    if part is None:
        return None
    try:
        pages = parse_xml(part.blob).find(_APP_PAGES)
    except etree.LxmlError:
        return None
    value = (pages.text or "").strip() if pages is not None else ""
    return parse_count(value)
