"""The documents core: intake (bytes, blobs, URLs, webhook events), reads (record, state,
characters, pages, lines), delete, and the one search entry point.

Everything takes a :class:`~ldims.caller.Caller`; REST routes, MCP toolsets and the CLI are
thin adapters over :class:`Documents`.
"""

from ldims.documents.core import Documents, search_limits
from ldims.documents.events import WebhookEventIn, sign
from ldims.documents.intake import (
    DocumentMeta,
    IngestOutcome,
    content_document_id,
    document_meta,
    parse_datetime,
    validate_document_id,
)
from ldims.documents.reading import DocumentPart, DocumentStatusOut, parse_range, status_of
from ldims.documents.search import search_filters
from ldims.documents.search_schema import (
    Explain,
    Explanation,
    MaxResults,
    MinScore,
    Offset,
    QueryText,
    SearchFilters,
    SearchOutput,
    explained,
)
from ldims.documents.uris import (
    EXTRACTED_URI,
    LINES_URI,
    PAGES_URI,
    extracted_uri,
    lines_uri,
    pages_uri,
)

__all__ = [
    "EXTRACTED_URI",
    "LINES_URI",
    "PAGES_URI",
    "DocumentMeta",
    "DocumentPart",
    "DocumentStatusOut",
    "Documents",
    "Explain",
    "Explanation",
    "IngestOutcome",
    "MaxResults",
    "MinScore",
    "Offset",
    "QueryText",
    "SearchFilters",
    "SearchOutput",
    "WebhookEventIn",
    "content_document_id",
    "document_meta",
    "explained",
    "extracted_uri",
    "lines_uri",
    "pages_uri",
    "parse_datetime",
    "parse_range",
    "search_filters",
    "search_limits",
    "sign",
    "status_of",
    "validate_document_id",
]
