"""Server instructions written from the live catalog, per caller's tenant.

An agent reads them once when it connects (``initialize`` / ``server/discover``): what the
server holds (collections and document counts), what is still being processed or failed, and
how the tools and resources fit together.
"""

from __future__ import annotations

from ldims.catalog import Catalog, repository

USAGE = (
    "Use searchDocuments to find documents (each hit names the document, its id, the page and "
    "lines of the match and an excerpt), then read one with the resource "
    "ldims://docs/{documentId}/extracted_content, or a range of its pages with "
    "ldims://docs/{documentId}/pages/{range} (e.g. 3 or 3-7). getDocumentStatus tells whether "
    "a document is ready; a read of a document still processing fails with errorCode "
    "PROCESSING (retry later), one that failed with CONTENT_UNAVAILABLE_OR_FAILED (give up)."
)


def describe_holdings(catalog: Catalog, tenant: str) -> str:
    """One paragraph on the tenant's documents, from the catalog as it is now."""
    with catalog.session() as session:
        states = repository.count_by_status(session, tenant)
        collections = repository.count_by_collection(session, tenant)
    total = sum(states.values())
    if not total:
        return "LDIMS holds no documents for you yet."
    parts = [
        f"{name} ({sum(counts.values())})"
        for name, counts in sorted(collections.items(), key=lambda item: -sum(item[1].values()))
    ]
    lines = [
        f"LDIMS holds {total} documents for you in {len(collections)} collection(s): "
        + ", ".join(parts)
        + "."
    ]
    waiting = states.get("queued", 0) + states.get("processing", 0)
    if waiting:
        lines.append(f"{waiting} are still being processed and cannot be searched or read yet.")
    if states.get("failed"):
        lines.append(f"{states['failed']} failed to process (their content is unavailable).")
    return " ".join(lines)


def instructions(catalog: Catalog, tenant: str) -> str:
    return f"{describe_holdings(catalog, tenant)}\n\n{USAGE}"
