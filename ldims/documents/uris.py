"""The ``ldims://`` addresses of a document's views: what search hits and status answers point
to, and what the MCP resources serve."""

from __future__ import annotations

EXTRACTED_URI = "ldims://docs/{document_id}/extracted_content"
PAGES_URI = "ldims://docs/{document_id}/pages/{range}"
LINES_URI = "ldims://docs/{document_id}/lines/{range}"


def extracted_uri(document_id: str) -> str:
    return EXTRACTED_URI.format(document_id=document_id)


def pages_uri(document_id: str, pages: str) -> str:
    return PAGES_URI.format(document_id=document_id, range=pages)


def lines_uri(document_id: str, lines: str) -> str:
    return LINES_URI.format(document_id=document_id, range=lines)
