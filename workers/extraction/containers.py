"""What is inside a ZIP or OLE2 container: the real document type of DOCX/XLSX/PPTX, ODF, EPUB,
legacy Office and password-encrypted Office files.

The first bytes only say "ZIP" or "OLE2"; the members tell the format. Type detection at upload
time sees just the head, so the worker refines the type from the whole file before extracting.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import olefile

from ldims.errors import PermanentError

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
DOC = "application/msword"
XLS = "application/vnd.ms-excel"
PPT = "application/vnd.ms-powerpoint"
MSG = "application/vnd.ms-outlook"
EPUB = "application/epub+zip"
ZIP = "application/zip"
ENCRYPTED_OFFICE = "application/x-encrypted-office"

# What zipfile raises on damaged archives: bad directories, names flagged UTF-8 that are not,
# unknown versions or methods, encrypted members, broken deflate streams.
ZIP_ERRORS = (
    zipfile.BadZipFile,
    OSError,
    EOFError,
    ValueError,
    NotImplementedError,
    RuntimeError,
    zlib.error,
)

_OOXML_PARTS = {"word/document.xml": DOCX, "xl/workbook.xml": XLSX, "ppt/presentation.xml": PPTX}
_ODF_AND_EPUB = ("application/vnd.oasis.opendocument.", EPUB)


def refine_container_format(path: Path, mime: str) -> str:
    """The specific type of a ZIP or OLE2 file; other types are returned unchanged."""
    if mime == "application/zip":
        return _zip_format(path)
    if mime == "application/x-ole-storage":
        return _ole_format(path)
    return mime


def _zip_format(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                declared = archive.read("mimetype")[:100].decode("ascii", "replace").strip()
                if declared.startswith(_ODF_AND_EPUB):
                    return declared
            for part, mime in _OOXML_PARTS.items():
                if part in names:
                    return mime
    except ZIP_ERRORS as exc:
        raise PermanentError(
            "CORRUPT_FILE",
            "The file is a ZIP container (DOCX/XLSX/PPTX/ODF/EPUB) whose directory is damaged "
            f"or truncated ({type(exc).__name__}).",
        ) from exc
    return "application/zip"


def _ole_format(path: Path) -> str:
    try:
        with olefile.OleFileIO(path) as ole:
            streams = {"/".join(entry) for entry in ole.listdir(streams=True, storages=False)}
    except (OSError, ValueError, IndexError, struct.error) as exc:
        raise PermanentError(
            "CORRUPT_FILE",
            f"The OLE2 (legacy Office) container is damaged ({type(exc).__name__}).",
        ) from exc
    # Password-protected DOCX/XLSX/PPTX are stored as an encrypted package inside OLE2.
    if {"EncryptionInfo", "EncryptedPackage"} <= streams:
        return ENCRYPTED_OFFICE
    if "WordDocument" in streams:
        return DOC
    if "Workbook" in streams or "Book" in streams:
        return XLS
    if "PowerPoint Document" in streams:
        return PPT
    if any(name.startswith("__substg1.0_") for name in streams):
        return MSG
    return "application/x-ole-storage"
