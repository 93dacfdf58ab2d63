"""The catalog: documents, their versions and states, on SQLAlchemy 2 (SQLite or PostgreSQL)."""

from ldims.catalog import repository
from ldims.catalog.database import Catalog, upgrade_schema
from ldims.catalog.models import (
    Document,
    DocumentStatus,
    WebhookEvent,
    document_key,
    public_document_id,
    utcnow,
)
from ldims.catalog.repository import DocumentFilter

__all__ = [
    "Catalog",
    "Document",
    "DocumentFilter",
    "DocumentStatus",
    "WebhookEvent",
    "document_key",
    "public_document_id",
    "repository",
    "upgrade_schema",
    "utcnow",

]
