"""Rebuilding the index of the current schema version from the catalog and stored extractions.

``ldims reindex`` builds a fresh folder next to the live one (searches keep working on the old
index meanwhile), swaps it in, then catches up with documents that changed during the build
(the index worker kept writing to the old folder): through the index worker's queue when a
server runs, so that the index keeps its one writer. ``--if-needed`` does this only when this
schema version's index has not been built yet (a new install marks it ready at once).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from datetime import datetime

from indexer import SCHEMA_VERSION, DocumentIndex, replace_folder
from ldims.catalog import Catalog, DocumentStatus, repository, utcnow
from ldims.errors import LdimsError
from ldims.extracts import ExtractStore
from ldims.lifecycle import index as index_life
from ldims.settings import Settings
from workers.dispatch import Dispatcher

log = logging.getLogger(__name__)


def rebuild_if_needed(settings: Settings) -> int | None:
    """Rebuild when this version's index is not ready; the number of documents, or None.
    The qmd lexicon is made to follow the qmd toolset either way
    (:func:`ldims.lifecycle.index.follow_toolset`)."""
    index = DocumentIndex(settings.index_dir, lexical=settings.qmd_lexicon)
    catalog = Catalog(settings.catalog_url)
    try:
        if not index.ready:
            with catalog.session() as session:
                if repository.completed_documents(session, limit=1):
                    index.close()
                    return rebuild(settings)
            index_life.mark_new_index_ready(index)
        index_life.follow_toolset(settings, index, catalog, ExtractStore(settings.extracts_dir))
        return None
    finally:
        catalog.dispose()


def rebuild(
    settings: Settings, batch_size: int = 200, progress: Callable[[int], None] | None = None
) -> int:
    """Index every completed document into a new folder and swap it in; return the count."""
    catalog = Catalog(settings.catalog_url)
    extracts = ExtractStore(settings.extracts_dir)
    started = utcnow()
    name = f"v{SCHEMA_VERSION}.building"
    shutil.rmtree(settings.index_dir / name, ignore_errors=True)
    building = DocumentIndex(settings.index_dir, folder=name, lexical=settings.qmd_lexicon)
    count = index_life.build(building, catalog, extracts, batch_size, progress)
    building.close()
    replace_folder(settings.index_dir, building.path)
    _catch_up(settings, catalog, extracts, started)
    log.info("index v%d rebuilt with %d documents", SCHEMA_VERSION, count)
    return count


def _catch_up(
    settings: Settings, catalog: Catalog, extracts: ExtractStore, since: datetime
) -> None:
    """Re-apply what the index worker wrote to the old folder while the new one was built.

    When the broker answers, the index worker may be writing the swapped-in index now: the
    documents go to it through its queue (it is the index's one writer, and it indexes a
    version only while it is the current one). Without a broker no worker runs, and they are
    written here."""
    with catalog.session() as session:
        changed = repository.changed_since(session, since)
    if not changed:
        return
    dispatcher = Dispatcher(settings)
    try:
        dispatcher.ping()
        dispatcher.reindex_documents(
            [
                (document.id, document.sha256)
                for document in changed
                if document.status == DocumentStatus.COMPLETED.value and document.sha256
            ]
        )
        log.info("%d documents changed during the rebuild sent to the index worker", len(changed))
        return
    except LdimsError:
        pass  # no broker: no worker writes the index now
    finally:
        dispatcher.close()
    index = DocumentIndex(settings.index_dir, lexical=settings.qmd_lexicon)
    index_life.write_changed(index, changed, extracts)
