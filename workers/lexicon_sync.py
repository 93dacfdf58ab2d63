"""qmd's FTS5 lexicon follows the qmd toolset.

The lexicon (:mod:`indexer.lexicon`) serves only the qmd toolset's ``search``; with the toolset
off (``LDIMS_TOOLSETS`` without ``"qmd"``) the index worker writes no lexicon rows, and the file
is removed — no document's text stays in a store nothing reads or keeps current. When the
toolset is on and the lexicon is not complete (it was removed, or a writer had to start one
beside a full index), it is rebuilt from the catalog and the stored extractions before the
index worker writes its first batch.

Run by the single index writer only: ``ldims serve`` and ``ldims reindex`` before the workers
start, and the index worker when it first opens the index (``workers.pipeline.Runtime``), so
no other writer changes a document while its rows are rewritten.
"""

from __future__ import annotations

import logging

from indexer import DocumentIndex
from ldims.catalog import Catalog
from ldims.extracts import ExtractStore
from ldims.settings import Settings
from workers.pipeline import completed_versions

log = logging.getLogger(__name__)


def follow_toolset(
    settings: Settings,
    index: DocumentIndex,
    catalog: Catalog,
    extracts: ExtractStore,
    batch_size: int = 200,
) -> int | None:
    """Remove the lexicon (toolset off) or rebuild it (on, and not complete); the documents
    rebuilt, or None when nothing was rebuilt."""
    lexicon = index.lexicon
    if not settings.qmd_lexicon:
        if lexicon.drop():
            log.info("the qmd toolset is off: its lexicon removed")
        return None
    if lexicon.complete:
        return None
    count = 0
    for _, loaded in completed_versions(catalog, extracts, batch_size):
        index.write_lexicon([(document.document_id, document) for document in loaded])
        count += len(loaded)
    lexicon.mark_complete()
    log.info("the qmd toolset's lexicon rebuilt with %d documents", count)
    return count
