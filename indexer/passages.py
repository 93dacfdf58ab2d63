"""Search inside one document: its chunks ranked by BM25 with the document's own statistics.

The proxy toolset's ``doc_local_search``. The chunks and their terms are the index's (no text
is analysed again at query time: a 3 MB novel answers as fast as a memo): the query's keyword
terms, each term's posting arrays (chunk numbers, frequencies) kept per commit, cut to the
document's live chunks. The statistics — how many of the document's chunks hold a term, their
number, their average length — are the document's alone, so no score depends on any other
document, of this tenant or another's. Each hit is one chunk with its page, lines and a short
snippet around the terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from whoosh.searching import Searcher

from indexer.analysis import index_terms
from indexer.evaluate import Snapshot
from indexer.scoring import K1, B
from indexer.snippets import snippet

FIELD = "text"


@dataclass(frozen=True)
class PassageHit:
    page: int
    line_start: int
    line_end: int
    score: float  # 0..1, relative to the best chunk
    snippet: str


def search_document(
    searcher: Searcher,
    snapshot: Snapshot,
    document_id: str,
    version: int,
    query: str,
    limit: int,
    snippet_chars: int,
) -> tuple[list[PassageHit], int]:
    """The ``limit`` best chunks of ``document_id`` (of ``version``) for ``query``, and how
    many of its chunks match at all."""
    chunks = snapshot.document_chunks(document_id)
    if not chunks.size:
        return [], 0
    terms = list(index_terms(query)[0])
    lengths = snapshot.field_lengths(FIELD)[chunks]
    average = float(lengths.mean()) or 1.0
    scores = np.zeros(chunks.size, dtype=np.float64)
    for term in terms:
        key = snapshot.term_key(FIELD, term)
        if key is None:
            continue
        ids, tfs = snapshot.term_postings(*key)
        where = np.searchsorted(chunks, ids)
        inside = (where < chunks.size) & (chunks[np.minimum(where, chunks.size - 1)] == ids)
        if not inside.any():
            continue
        at, tf = where[inside], tfs[inside].astype(np.float64)
        df = at.size
        idf = math.log(1 + (chunks.size - df + 0.5) / (df + 0.5))
        norm = K1 * ((1 - B) + B * lengths[at] / average)
        scores[at] += idf * tf * (K1 + 1) / (tf + norm)
    matched = np.flatnonzero(scores > 0)
    if not matched.size:
        return [], 0
    order = matched[np.lexsort((matched, -scores[matched]))][:limit]
    best = float(scores[order[0]])
    hits = []
    for position in order:
        stored = searcher.stored_fields(int(chunks[position]))
        if stored.get("version") != version:
            continue  # a chunk of another version (a replace not yet committed everywhere)
        hits.append(
            PassageHit(
                page=int(stored.get("page") or 1),
                line_start=int(stored.get("line_start") or 1),
                line_end=int(stored.get("line_end") or 1),
                score=round(float(scores[position]) / best, 4),
                snippet=snippet(stored.get("text", ""), terms, False, snippet_chars),
            )
        )
    return hits, int(matched.size)
