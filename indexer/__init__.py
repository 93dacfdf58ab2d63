"""Full-text index of document chunks (Whoosh). Imports nothing else of LDIMS.

Public surface: :class:`DocumentIndex` and the value types it takes.
"""

from indexer.whoosh_index import SCHEMA_VERSION, Chunk, DocumentIndex, IndexBusy, IndexedDocument

__all__ = ["SCHEMA_VERSION", "Chunk", "DocumentIndex", "IndexBusy", "IndexedDocument"]
