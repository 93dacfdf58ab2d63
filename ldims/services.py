"""The long-lived objects of one LDIMS process, as the adapters see them.

The composition root (:mod:`runtime.services`) builds a :class:`Services` once per process —
for the API, the stdio MCP server, benchmarks and tests alike — and hands it to the adapters.
"""

from __future__ import annotations

from dataclasses import dataclass

import indexer
from ldims.catalog import Catalog
from ldims.documents import Documents
from ldims.keys import KeyRing
from ldims.proxy import Proxy
from ldims.qmd import Qmd
from ldims.settings import Settings
from workers import Dispatcher


@dataclass
class Services:
    settings: Settings
    catalog: Catalog
    dispatcher: Dispatcher
    documents: Documents
    qmd: Qmd
    proxy: Proxy
    keys: KeyRing

    @property
    def index(self) -> indexer.DocumentIndex:
        """The index, opened on first use (its searchers refresh on their own)."""
        return self.documents.index

    @index.setter
    def index(self, index: indexer.DocumentIndex) -> None:
        # Benchmarks and tests hand in an index of their own (already open, instrumented).
        self.documents.index = index

    def close(self) -> None:
        """Release connections and the search pool's threads (the index's files close with
        the process)."""
        self.documents.search.admission.close()
        self.dispatcher.close()
        self.proxy.audit.flush()
        self.catalog.dispose()
