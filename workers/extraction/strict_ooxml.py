"""Strict Open XML (ISO/IEC 29500 Strict) DOCX, XLSX and PPTX, read as the Transitional files
the parsers know.

Word, Excel and PowerPoint can save "Strict Open XML": the same package, the same parts and
content types, but every namespace and relationship type under ``http://purl.oclc.org/ooxml/``
instead of ``http://schemas.openxmlformats.org/…/2006/…``. python-docx and Tika's POI find no
main document in such a package (python-docx raises, which read as ``CORRUPT_FILE``). The
vocabulary of the body is the same for text (paragraphs, runs, tables, cells, shared strings,
slides), so a copy of the package with the Strict names rewritten to the Transitional ones
(:func:`transitional_copy`, XML and relationship parts only, every other member copied
unchanged) reads with the text, sections and tables the file holds. What Strict changed beyond
names (dates as ISO values in cells, ``start``/``end`` alignment) does not touch the text.
"""

from __future__ import annotations

import re
import shutil
import zipfile
from pathlib import Path

STRICT_MARK = b"http://purl.oclc.org/ooxml/"
# The main parts that say which kind of package it is (and are read to tell Strict from not).
_MAIN_PARTS = ("word/document.xml", "xl/workbook.xml", "ppt/presentation.xml")
_RELATIONSHIPS = "_rels/.rels"
# purl.oclc.org/ooxml/<area>/<name> -> schemas.openxmlformats.org/<area>/2006/<name>, with the
# names Transitional spells differently.
_STRICT_NAME = re.compile(rb"http://purl\.oclc\.org/ooxml/(\w+)/(\w+)(/\w+)?")
_RENAMED = {
    b"extendedProperties": b"extended-properties",
    b"customProperties": b"custom-properties",
}
# A rewritten part may grow a little (each name by ~10 bytes); members beyond this size are
# copied as they are (images, embedded files), never read into memory.
_REWRITE_MAX_BYTES = 256 * 1024 * 1024


def is_strict(path: Path) -> bool:
    """Whether the OOXML package at ``path`` is Strict (its package relationships or main
    part use the Strict names)."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            for member in (_RELATIONSHIPS, *_MAIN_PARTS):
                if member in names:
                    with archive.open(member) as part:
                        if STRICT_MARK in part.read(4096):
                            return True
    except (zipfile.BadZipFile, OSError, ValueError, KeyError):
        return False  # the extractor reports a damaged package in its own words
    return False


def transitional_name(match: re.Match[bytes]) -> bytes:
    area, name, rest = match.group(1), match.group(2), match.group(3) or b""
    if rest:  # a relationship type: .../officeDocument/relationships/<type>
        rest = b"/" + _RENAMED.get(rest[1:], rest[1:])
    name = _RENAMED.get(name, name)
    return b"http://schemas.openxmlformats.org/" + area + b"/2006/" + name + rest


def to_transitional(xml: bytes) -> bytes:
    """One part's XML with the Strict names rewritten to the Transitional ones."""
    return _STRICT_NAME.sub(transitional_name, xml)


def transitional_copy(path: Path, destination: Path) -> Path:
    """Write the Transitional reading of the Strict package ``path`` to ``destination``."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(destination, "w") as target:
        for info in source.infolist():
            rewritable = info.filename.endswith((".xml", ".rels")) and (
                info.file_size <= _REWRITE_MAX_BYTES
            )
            copied = zipfile.ZipInfo(info.filename, date_time=info.date_time)
            copied.compress_type = zipfile.ZIP_DEFLATED
            if rewritable:
                target.writestr(copied, to_transitional(source.read(info)))
            else:
                with source.open(info) as reader, target.open(copied, "w") as writer:
                    shutil.copyfileobj(reader, writer, 1024 * 1024)
    return destination
