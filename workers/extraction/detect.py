"""Type detection from the first bytes of a file (the name only breaks ties for text)."""

from __future__ import annotations

import re

from workers.extraction.wide_text import wide_encoding

_MAGIC: list[tuple[bytes, str]] = [
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage"),
    (b"{\\rtf", "application/rtf"),
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"II*\x00", "image/tiff"),
    (b"MM\x00*", "image/tiff"),
    (b"\x1f\x8b", "application/gzip"),
]
_TEXT_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdown", ".mkd")
_HTML_PREFIXES = (b"<!doctype html", b"<html", b"<head", b"<body")
# A fragment with no <html> root (saved e-mails, CMS exports) still opens with markup.
# A flat OpenDocument file: <office:document ... office:mimetype="...opendocument.KIND">.
_FLAT_ODF = re.compile(
    rb"<office:document\b[^>]*office:mimetype=\"application/vnd\.oasis\.opendocument\."
    rb"(text|spreadsheet|presentation)\""
)
# (Apache Tika's names for them.)
FLAT_ODF_TYPES = {
    "text": "application/vnd.oasis.opendocument.flat.text",
    "spreadsheet": "application/vnd.oasis.opendocument.flat.spreadsheet",
    "presentation": "application/vnd.oasis.opendocument.flat.presentation",
}
_HEADER_LINE = re.compile(rb"([A-Za-z][A-Za-z0-9-]{0,76}):")
_HTML_TAG = re.compile(rb"<(div|p|table|span|style|script|meta|title|h[1-6]|br|a|ul|li)\b")


def _looks_like_text(head: bytes) -> bool:
    if head.startswith(_TEXT_BOMS):
        return True
    # Control characters other than whitespace are rare in text of any narrow encoding.
    controls = sum(1 for byte in head if byte < 32 and byte not in (9, 10, 12, 13, 27))
    if b"\x00" not in head and controls <= len(head) // 100:
        return True
    return wide_encoding(head) is not None  # UTF-16/32 without a byte-order mark


def detect_format(head: bytes, name: str = "") -> str:
    """The MIME type of a file whose first bytes are ``head`` (an empty file is text/plain)."""
    for magic, mime in _MAGIC:
        if head.startswith(magic):
            return mime
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    # "BM", the file size, then four reserved zero bytes: a text beginning "BM" has no NULs.
    if head.startswith(b"BM") and head[6:10] == b"\x00\x00\x00\x00":
        return "image/bmp"
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if stripped.startswith(_HTML_PREFIXES) or (
        stripped.startswith(b"<") and len(_HTML_TAG.findall(stripped[:4096])) >= 2
    ):
        return "text/html"
    if not _looks_like_text(head):
        return "application/octet-stream"
    if _looks_like_email(head):
        return "message/rfc822"
    flat = _FLAT_ODF.search(head[:4096])
    if flat is not None:  # a flat (single XML file) OpenDocument text, sheet or presentation
        return FLAT_ODF_TYPES[flat.group(1).decode()]
    return "text/markdown" if name.lower().endswith(_MARKDOWN_SUFFIXES) else "text/plain"


def _looks_like_email(head: bytes) -> bool:
    """An RFC 5322 header block first: header lines (and their folded continuations) up to
    the first blank line, a From and a Subject, Date or Message-ID among them."""
    block = head.split(b"\r\n\r\n", 1)[0].split(b"\n\n", 1)[0]
    names = []
    for line in block.splitlines():
        if line[:1] in (b" ", b"\t"):
            continue  # a folded header
        match = _HEADER_LINE.match(line)
        if match is None:
            return False
        names.append(match.group(1).lower())
    return b"from" in names and bool({b"subject", b"date", b"message-id"} & set(names))
