"""Search inside one document: its chunks ranked by BM25 with the document's own statistics.

The proxy toolset's ``doc_local_search``. The chunks and their terms are the index's (no text
is analysed again at query time: a 3 MB novel answers as fast as a memo): the query's keyword
terms, each term's posting arrays (chunk numbers, frequencies) kept per commit, cut to the
document's live chunks. The statistics — how many of the document's chunks hold a term, their
number, their average length — are the document's alone, so no score depends on any other
document, of this tenant or another's. Each hit is one chunk with its page, lines and a short
snippet around the terms.

When the document's vectors exist, the chunks are also ranked by the cosine of their vectors
with the query's, and the two rankings fused as hybrid search fuses documents (each list's
scores min-max normalised, weighted and summed): a chunk that says the same thing in other
words (or another language) is found too, a keyword match still counts. A chunk found only by
its vector has a snippet of its opening.
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


# Chunks of the dense ranking fused with the keyword one (the rest are too far to matter).
DENSE_CANDIDATES = 50


@dataclass(frozen=True)
class DenseChunks:
    """The document's chunks ranked by the query's vector: chunk numbers and cosines, and
    the weights of the two lists in the fusion."""

    chunks: np.ndarray
    scores: np.ndarray
    keyword_weight: float = 1.0
    dense_weight: float = 1.0


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
    dense: DenseChunks | None = None,
) -> tuple[list[PassageHit], int]:
    """The ``limit`` best chunks of ``document_id`` (of ``version``) for ``query``, and how
    many of its chunks match its words (``dense``: fused with the vector ranking)."""
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
    total = int(matched.size)
    if dense is not None and dense.chunks.size:
        scores = _fused(snapshot, document_id, chunks, scores, matched, dense)
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
    return hits, total


def _fused(
    snapshot: Snapshot,
    document_id: str,
    chunks: np.ndarray,
    keyword: np.ndarray,
    matched: np.ndarray,
    dense: DenseChunks,
) -> np.ndarray:
    """Per position of ``chunks``: the weighted sum of its min-max normalised keyword score
    and of its normalised cosine among the best :data:`DENSE_CANDIDATES` chunks."""
    fused = np.zeros(chunks.size, dtype=np.float64)
    if matched.size:  # the same floor: the weakest keyword match is still a match
        fused[matched] = dense.keyword_weight * (0.01 + 0.99 * _normalised(keyword[matched]))
    best = np.argsort(-dense.scores, kind="stable")[:DENSE_CANDIDATES]
    positions, cosines = [], []
    for at in best.tolist():
        docnum = snapshot.chunk_number(document_id, int(dense.chunks[at]))
        if docnum is None:
            continue  # not the index's live chunk of that number (a replace under way)
        position = int(np.searchsorted(chunks, docnum))
        if position < chunks.size and chunks[position] == docnum:
            positions.append(position)
            cosines.append(float(dense.scores[at]))
    if positions:
        # A floor above zero: the last candidate still counts (zero means "not found").
        shares = 0.01 + 0.99 * _normalised(np.asarray(cosines, dtype=np.float64))
        fused[np.asarray(positions)] += dense.dense_weight * shares
    return fused


def _normalised(values: np.ndarray) -> np.ndarray:
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.ones_like(values)
    return (values - low) / (high - low)
