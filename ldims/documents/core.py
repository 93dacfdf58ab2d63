"""The documents core: intake, reads, search and webhook events of one process, built once.

Adapters (REST routes, the MCP toolsets, the guide's document links, the CLI) hold a
:class:`Documents` and call it with a :class:`~ldims.caller.Caller`; they hold no logic of
their own about documents.
"""

from __future__ import annotations

import functools
from typing import Any

import indexer
from indexer.calibration import Calibrations
from indexer.embedding import Embedder
from ldims.caller import Caller
from ldims.catalog import Catalog
from ldims.documents.events import WebhookEvents
from ldims.documents.intake import Intake
from ldims.documents.reading import DocumentReader
from ldims.documents.search import DocumentSearch
from ldims.documents.uris import extracted_uri
from ldims.errors import LdimsError
from ldims.semantic import embedder_for, fingerprint_for, reranker_for, vector_store
from ldims.settings import Settings
from workers import Dispatcher, EmbedBacklog


class Documents:
    def __init__(self, settings: Settings, catalog: Catalog, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.catalog = catalog
        self.dispatcher = dispatcher
        self.intake = Intake(settings, catalog, dispatcher)
        self.reader = DocumentReader(settings, catalog, self.intake.extracts)
        self.search = DocumentSearch(settings, lambda: self.index, lambda: self.embedder)
        self.events = WebhookEvents(settings, catalog, self.intake)

    @functools.cached_property
    def index(self) -> indexer.DocumentIndex:
        """The index, opened once per process (its searchers refresh on their own), with the
        vector store when semantic search is on."""
        vectors = vector_store(self.settings) if self.settings.semantic_enabled else None
        return indexer.DocumentIndex(
            self.settings.index_dir,
            limits=search_limits(self.settings),
            vectors=vectors,
            reranker=reranker_for(self.settings) if vectors is not None else None,
            calibrations=Calibrations(self.settings.calibration_dir),
        )

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """The embedding model's fingerprint (None: semantic search is off)."""
        return fingerprint_for(self.settings)

    @functools.cached_property
    def embedder(self) -> Embedder | None:
        """The query embedder, loaded on the first semantic search of the process."""
        return embedder_for(self.settings)

    def embedding_backlog(self, caller: Caller) -> EmbedBacklog | None:
        """The caller's tenant's embedding backlog — its own documents, its own rate (no
        figure of another tenant's) — or None when semantic search is off."""
        fingerprint = self.fingerprint
        if fingerprint is None:
            return None
        with self.catalog.session() as session:
            return self.dispatcher.embedding_backlog(session, fingerprint, caller.tenant)

    def linked(
        self, caller: Caller, query: str | None, ids: list[str], limit: int
    ) -> list[dict[str, Any]]:
        """Documents of the caller a guide step links to: found by ``query``, then named by
        ``ids`` (others' and unknown ids are left out), with snippets."""
        found: list[dict[str, Any]] = []
        if query:
            hits = self.search.search_now(caller, query, max_results=limit).results
            found = [
                {
                    "documentId": hit.documentId,
                    "documentName": hit.documentName,
                    "snippet": hit.matchedContext,
                    "uri": extracted_uri(hit.documentId),
                }
                for hit in hits
            ]
        for document_id in ids:
            if len(found) >= limit or any(d["documentId"] == document_id for d in found):
                continue
            try:
                document = self.reader.get(caller, document_id)
            except LdimsError:
                continue
            found.append(
                {
                    "documentId": document.public_id,
                    "documentName": document.name,
                    "snippet": None,
                    "uri": extracted_uri(document.public_id),
                }
            )
        return found[:limit]


def search_limits(settings: Settings) -> indexer.SearchLimits:
    """The index's cost budget of one search, from the settings."""
    return indexer.SearchLimits(
        max_terms=settings.search_max_terms,
        max_phrases=settings.search_max_phrases,
        max_postings=settings.search_max_postings,
    )
