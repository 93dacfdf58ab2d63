"""Full-text index of document chunks (Whoosh). Imports nothing else of LDIMS.

Public surface: :class:`DocumentIndex`, the value types it takes and returns, and the schema
version. Writers go through ``replace_document`` / ``delete_documents`` / ``batch``; readers
through ``search`` (bounded by :class:`SearchLimits`) and the small read helpers.
"""

from indexer.analysis import index_terms, warm_up
from indexer.budget import SearchLimits
from indexer.deadline import SearchOverdue
from indexer.lexicon import LexicalHit, fts_query, qmd_title
from indexer.model import (
    Chunk,
    Explanation,
    IndexBusy,
    IndexedDocument,
    QueryOverBudget,
    QueryUnprocessable,
    SearcherBusy,
    SearchHit,
    SearchMode,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.schema import SCHEMA_VERSION
from indexer.search import MAX_QUERY_CHARS
from indexer.snippets import snippet
from indexer.whoosh_index import Batch, DocumentIndex, replace_folder

__all__ = [
    "MAX_QUERY_CHARS",
    "SCHEMA_VERSION",
    "Batch",
    "Chunk",
    "DocumentIndex",
    "Explanation",
    "IndexBusy",
    "IndexedDocument",
    "QueryOverBudget",
    "QueryUnprocessable",
    "LexicalHit",
    "SearchHit",
    "fts_query",
    "index_terms",
    "qmd_title",
    "SearchLimits",
    "SearchMode",
    "SearchRequest",
    "SearchOverdue",
    "SearchResults",
    "SearcherBusy",
    "day_number",
    "replace_folder",
    "snippet",
    "warm_up",
]
