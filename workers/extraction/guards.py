"""Refusing hostile containers before a parser touches them: zip bombs and XML entity bombs.

Every member of a ZIP-based document is decompressed once as a stream, counting real bytes:
declared sizes can lie, so the real ones are what count against the limits. XML parts of
office documents never need a DTD; an ``<!ENTITY`` declaration in one is a billion-laughs or
XXE attempt, refused before any XML parser expands it.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from ldims.errors import PermanentError
from workers.extraction.containers import ZIP_ERRORS
from workers.extraction.result import ExtractionLimits

_XML_SUFFIXES = (".xml", ".rels", ".xhtml", ".htm", ".html", ".opf", ".ncx", ".svg", ".vml")
_CHUNK = 1024 * 1024
_HEAD = 64 * 1024
# Small members compress extremely well when empty-ish; the ratio rule starts above this size.
_RATIO_FLOOR = 1024 * 1024


def hostile(reason: str) -> PermanentError:
    """``HOSTILE_FILE`` with ``reason`` (a phrase: "it expands beyond …")."""
    return PermanentError("HOSTILE_FILE", f"Refused as a hostile file: {reason}.")


def check_zip(path: Path, limits: ExtractionLimits) -> None:
    """Raise HOSTILE_FILE for a zip bomb or an XML entity declaration inside the container."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > limits.max_zip_members:
                raise hostile(f"{len(members)} members (the limit is {limits.max_zip_members})")
            total = 0
            for member in members:
                total += _check_member(archive, member, limits, total)
    except ZIP_ERRORS as exc:
        raise PermanentError(
            "CORRUPT_FILE",
            f"The ZIP container is damaged and cannot be read ({type(exc).__name__}).",
        ) from exc


def _check_member(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, limits: ExtractionLimits, total: int
) -> int:
    if member.is_dir():
        return 0
    declared = member.file_size
    if declared > _RATIO_FLOOR and declared > member.compress_size * limits.max_zip_ratio:
        raise hostile(
            f"member {member.filename!r} expands {declared // max(member.compress_size, 1)}x "
            f"(the limit is {limits.max_zip_ratio}x)"
        )
    is_xml = member.filename.lower().endswith(_XML_SUFFIXES)
    head = b""
    size = 0
    for chunk in _real_content(archive, member):
        if is_xml and len(head) < _HEAD:
            head += chunk[: _HEAD - len(head)]
            if _declares_entities(head):
                raise hostile(f"XML entity declarations in {member.filename!r} (entity bomb/XXE)")
        size += len(chunk)
        if size > max(declared, member.compress_size) * 1.01 + 1024:
            # zipfile itself stops at the declared size, but other readers (Tika) do not.
            raise hostile(f"member {member.filename!r} is larger than its header declares")
        if total + size > limits.max_unzipped_bytes:
            raise hostile(
                f"it expands beyond {limits.max_unzipped_bytes} bytes (the unzipped limit)"
            )
        if size > member.compress_size * limits.max_zip_ratio and size > _RATIO_FLOOR:
            raise hostile(f"member {member.filename!r} expands more than {limits.max_zip_ratio}x")
    return size


def check_xml(path: Path, limits: ExtractionLimits) -> None:
    """Raise HOSTILE_FILE for an XML file (a flat OpenDocument file) that declares entities."""
    with path.open("rb") as handle:
        head = handle.read(64 * 1024)
    if _declares_entities(head):
        raise hostile("XML entity declarations (entity bomb/XXE)")


def _declares_entities(head: bytes) -> bool:
    """An entity declaration or a DTD internal subset, in UTF-8 or UTF-16 (NULs dropped)."""
    text = head.replace(b"\x00", b"")
    if b"<!ENTITY" in text:
        return True
    doctype = text.find(b"<!DOCTYPE")
    if doctype == -1:
        return False
    end = text.find(b">", doctype)
    declaration = text[doctype : end if end != -1 else len(text)]
    return b"[" in declaration


def _real_content(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's bytes as the compressed data really holds them, ignoring declared sizes.

    Deflate (what Office and EPUB use) is inflated here from the raw stream; other methods go
    through zipfile, which stops at the declared size.
    """
    if member.compress_type != zipfile.ZIP_DEFLATED or archive.filename is None:
        with archive.open(member) as stream:
            while chunk := stream.read(_CHUNK):
                yield chunk
        return
    with open(archive.filename, "rb") as raw:
        raw.seek(member.header_offset)
        header = raw.read(30)
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {member.filename!r}")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        raw.seek(name_length + extra_length, 1)
        inflater = zlib.decompressobj(-15)
        remaining = member.compress_size
        while remaining > 0 and not inflater.eof:
            data = raw.read(min(_CHUNK, remaining))
            if not data:
                break
            remaining -= len(data)
            while data:
                chunk = inflater.decompress(data, _CHUNK)
                if chunk:
                    yield chunk
                data = inflater.unconsumed_tail
