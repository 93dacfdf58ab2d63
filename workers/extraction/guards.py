"""Refusing hostile containers before a parser touches them: zip bombs and XML entity bombs.

Every member of a ZIP-based document is decompressed once as a stream, counting real bytes:
declared sizes can lie, so the real ones are what count against the limits. XML parts of
office documents never need a DTD; an ``<!ENTITY`` declaration in one is a billion-laughs or
XXE attempt, refused before any XML parser expands it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from ldims.errors import PermanentError
from workers.extraction.result import ExtractionLimits

_XML_SUFFIXES = (".xml", ".rels", ".xhtml", ".htm", ".html", ".opf", ".ncx", ".svg", ".vml")
_CHUNK = 1024 * 1024
_HEAD = 64 * 1024
# Small members compress extremely well when empty-ish; the ratio rule starts above this size.
_RATIO_FLOOR = 1024 * 1024


def _hostile(reason: str) -> PermanentError:
    return PermanentError("HOSTILE_FILE", f"Refused as a hostile file: {reason}.")


def check_zip(path: Path, limits: ExtractionLimits) -> None:
    """Raise HOSTILE_FILE for a zip bomb or an XML entity declaration inside the container."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > limits.max_zip_members:
                raise _hostile(f"{len(members)} members (the limit is {limits.max_zip_members})")
            total = 0
            for member in members:
                total += _check_member(archive, member, limits, total)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise PermanentError(
            "CORRUPT_FILE", f"The ZIP container is damaged and cannot be read: {exc}"
        ) from exc


def _check_member(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, limits: ExtractionLimits, total: int
) -> int:
    if member.is_dir():
        return 0
    declared = member.file_size
    if declared > _RATIO_FLOOR and declared > member.compress_size * limits.max_zip_ratio:
        raise _hostile(
            f"member {member.filename!r} expands {declared // max(member.compress_size, 1)}x "
            f"(the limit is {limits.max_zip_ratio}x)"
        )
    is_xml = member.filename.lower().endswith(_XML_SUFFIXES)
    size = 0
    with archive.open(member) as stream:
        while chunk := stream.read(_CHUNK):
            if is_xml and size < _HEAD and b"<!ENTITY" in chunk[: _HEAD - size + 8]:
                raise _hostile(f"XML entity declarations in {member.filename!r} (entity bomb/XXE)")
            size += len(chunk)
            if size > declared:
                raise _hostile(f"member {member.filename!r} is larger than its header declares")
            if total + size > limits.max_unzipped_bytes:
                raise _hostile(
                    f"it expands beyond {limits.max_unzipped_bytes} bytes (the unzipped limit)"
                )
    return size
