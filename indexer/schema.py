"""The index schema and its version: a new version means a new index folder and a rebuild.

Per-chunk fields carry the document's filter facts (tenant, collection, type, submitter, day),
so every filter runs inside the query. ``text`` and ``title`` use the stemming analyzer
(keyword mode); ``exact`` indexes the same text unstemmed, with positions, for exact mode.
"""

from __future__ import annotations

from whoosh.fields import ID, NUMERIC, STORED, TEXT, Schema

from indexer.analysis import exact_analyzer, keyword_analyzer

# Bump when fields or analyzers change: the index is rebuilt into a folder of the new version.
# 3: qmd's FTS5 rows beside Whoosh (indexer.lexicon); 4: documents keyed tenant/id.
SCHEMA_VERSION = 4


def build_schema() -> Schema:
    keyword = keyword_analyzer()
    return Schema(
        chunk_id=ID(stored=True, unique=True),
        document_id=ID(stored=True, sortable=True),
        tenant=ID,
        collection=ID(stored=True),
        document_type=ID(stored=True),
        submitter=ID(stored=True),
        format=ID(stored=True),
        language=ID(stored=True),
        # Days since 1970-01-01, as a column: date filters read it for the tenant's chunks.
        created_day=NUMERIC(int, bits=32, signed=True, sortable=True),
        created=STORED,
        version=NUMERIC(stored=True),
        page=NUMERIC(stored=True),
        line_start=STORED,
        line_end=STORED,
        name=STORED,
        title=TEXT(analyzer=keyword, stored=True, phrase=False),
        # No positions: keyword mode needs none (quoted phrases use `exact`), and they would
        # make the index writer do a third more work.
        text=TEXT(analyzer=keyword, stored=True, phrase=False),
        # An unquoted Chinese word in exact mode must match as a phrase of its characters.
        exact=TEXT(analyzer=exact_analyzer(), phrase=True, multitoken_query="phrase"),
    )
