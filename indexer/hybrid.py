"""Dense and hybrid search: the vector store's documents, alone or fused with the keyword list.

``dense``: the documents whose best chunk's vector is nearest the query's, inside the
tenant and every filter (the vector store scores only the rows the filters allow).
``hybrid``: the keyword list and the dense list, each already collapsed to documents (the
best ``candidates`` of each), every document of either scored by the calibrated model of
what is known about it (:mod:`indexer.relevance`): the probability that it is relevant.
Hits below the request's ``min_score`` are not results, nor counted.

Each hit is one chunk of Whoosh's, so it carries the page, lines and snippet of a keyword hit:
the keyword list's best chunk when the document matched the words, else the chunk whose vector
matched. A vector whose chunk is gone from Whoosh, or is of another version of its document
(re-embedding pending), is skipped: the vector store never answers for text the index no
longer holds.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from whoosh.searching import Searcher

from indexer.budget import SearchLimits
from indexer.calibration import Calibrations
from indexer.deadline import check
from indexer.evaluate import Snapshot
from indexer.fusion import fuse, with_feedback
from indexer.model import (
    QueryOverBudget,
    QueryUnprocessable,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.relevance import Candidate, calibrated, dense_cosines, explanation
from indexer.rerank import Reranker
from indexer.search import (
    BUNDLED_CALIBRATIONS,
    KeywordRanking,
    allowed_chunks,
    hit_of,
    keyword_candidates,
    rank_keyword,
    run_search,
)
from indexer.vector_segments import Scored
from indexer.vectors import DenseHit, DenseScope, VectorFilter, VectorStore


def run_hybrid(
    searcher: Searcher,
    request: SearchRequest,
    snapshot: Snapshot,
    limits: SearchLimits,
    vectors: VectorStore | None,
    reranker: Reranker | None = None,
    calibrations: Calibrations | None = None,
) -> SearchResults:
    """A ``dense`` or ``hybrid`` search of ``request`` (whose ``vector`` is the query's)."""
    calibrations = calibrations or BUNDLED_CALIBRATIONS
    scope = _scope(request, vectors)
    if request.mode == "hybrid" and (scope is None or not scope.in_scope):
        # No vector in scope: the keyword search, its order and its scores exactly.
        found = run_search(
            searcher, replace(request, mode="keyword"), snapshot, limits, calibrations
        )
        missing = documents_in_scope(snapshot, request) if request.vector is not None else 0
        return replace(found, mode="hybrid", without_vectors=missing)
    wanted = request.offset + request.limit
    depth = max(request.candidates, wanted)
    keyword: KeywordRanking | None = None
    unprocessable: QueryUnprocessable | None = None
    if request.mode == "hybrid":
        try:  # first: a query over the budget is refused before any vector is scored
            keyword = rank_keyword(
                searcher, replace(request, mode="keyword"), snapshot, depth, limits
            )
        except QueryOverBudget:
            raise
        except QueryUnprocessable as exc:  # nothing for the keyword list: the dense one runs
            unprocessable = exc
    dense, scored = _dense(scope, request.vector, depth)
    with_vectors = scope.in_scope if scope is not None else 0
    if unprocessable is not None and not dense:
        raise unprocessable  # nothing to search with at all: say why, as keyword search would
    in_scope = documents_in_scope(snapshot, request)
    without_vectors = max(0, in_scope - with_vectors)
    covered = min(1.0, with_vectors / in_scope) ** 1.5 if in_scope else 1.0
    candidates = _candidates(snapshot, request, keyword, dense)
    dense_cosines(scope, request.vector, list(candidates.values()), scored)
    order = fuse(request, candidates, dense, covered=covered)
    if request.mode == "hybrid" and request.feedback_documents > 0 and dense:
        again = with_feedback(request, order, lambda moved: _dense(scope, moved, depth)[0])
        if again is not None:
            for hit in again:  # a document only the feedback search found
                if hit.document_id not in candidates:
                    candidates[hit.document_id] = Candidate(hit.document_id, None, dense=hit)
            dense_cosines(scope, request.vector, list(candidates.values()), scored)
            order = fuse(request, candidates, dense, again, covered)
    model = calibrations.of(request.fingerprint) if request.fingerprint else None
    calibrated(order, request.mode, calibrations.keyword(), model, request.vector, request.explain)
    ranked_by = tuple(
        name
        for name, found in (("keyword", keyword and keyword.docnums), ("dense", dense))
        if found
    )
    if reranker is not None and request.rerank_top > 0 and len(order) > 1:
        order = _rerank(snapshot, request, reranker, order)
        ranked_by += ("rerank",)
    # As shown (rounded): a hit that says 0.002 passes minScore 0.002.
    kept = [c for c in order if round(c.probability, 4) >= request.min_score]
    total = len(kept)
    if keyword is not None and keyword.total > len(keyword.docnums) and kept:
        # The keyword list was cut at its depth: when its last candidate still passes, the
        # documents past it are counted as passing too (an estimate, never below the truth
        # by more than those past the depth that fall short).
        last = keyword.docnums[-1] if keyword.docnums else None
        if any(c.docnum == last and c.keyword_score is not None for c in kept):
            total += keyword.total - len(keyword.docnums)
    terms = keyword.terms if keyword is not None else frozenset()
    hits = []
    read: dict[int, dict[str, Any]] = {}
    for candidate in kept[request.offset :]:
        if len(hits) >= request.limit:
            break
        check()
        docnum = _resolve(candidate, snapshot, read)
        if docnum is None:
            continue  # a stale vector: its document's current text is not what matched
        score = round(candidate.probability, 4)
        stored = read.get(docnum)
        hit = hit_of(
            searcher, docnum, score, terms, False, request.snippet_chars, stored, candidate.fused
        )
        if request.explain:
            hit = replace(hit, explanation=explanation(candidate, score))
        hits.append(hit)
    return SearchResults(
        hits=hits,
        total=total,
        mode=request.mode,
        fallback=bool(keyword and keyword.fallback),
        ranked_by=ranked_by,
        without_vectors=without_vectors,
        calibrated=model is not None or not with_vectors,
    )


def _candidates(
    snapshot: Snapshot,
    request: SearchRequest,
    keyword: KeywordRanking | None,
    dense: list[DenseHit],
) -> dict[str, Candidate]:
    """The documents of both lists, each once, with what each list says of it."""
    chosen: dict[str, Candidate] = {}
    if keyword is not None:
        chosen = keyword_candidates(snapshot, request.tenant, keyword)
    for rank, hit in enumerate(dense, 1):
        candidate = chosen.get(hit.document_id)
        if candidate is None:
            candidate = chosen[hit.document_id] = Candidate(hit.document_id, None)
        candidate.dense = hit
        candidate.cosine = hit.score
        candidate.dense_rank = rank
    return chosen


def _resolve(
    candidate: Candidate, snapshot: Snapshot, read: dict[int, dict[str, Any]]
) -> int | None:
    """The Whoosh chunk to show; None when a dense hit's chunk is gone or of another version
    (checked only for the hits shown: a check reads the chunk's stored fields, and most
    candidates are never shown). The fields it read go into ``read``."""
    if candidate.docnum is not None:
        return candidate.docnum
    assert candidate.dense is not None
    return _chunk_docnum(snapshot, candidate.dense, read)


def _scope(request: SearchRequest, vectors: VectorStore | None) -> DenseScope | None:
    """The vector store's rows in the request's tenant and filters; None when it has none of
    the query vector's model (or the request no vector)."""
    if vectors is None or request.vector is None or request.fingerprint is None:
        return None
    return vectors.scope(_vector_filter(request), request.fingerprint)


def _dense(
    scope: DenseScope | None, vector: Any, depth: int
) -> tuple[list[DenseHit], list[Scored] | None]:
    """The dense list of ``vector`` in ``scope``, best first, and the rows' scores."""
    if scope is None or vector is None:
        return [], None
    return scope.search_scored(np.asarray(vector, dtype=np.float32), depth)


def _rerank(
    snapshot: Snapshot,
    request: SearchRequest,
    reranker: Reranker,
    order: list[Candidate],
) -> list[Candidate]:
    """The best ``request.rerank_top`` documents reordered by the cross-encoder's score of
    the query against each one's passage. They keep the probabilities they had among them,
    handed out in the new order: the reranker decides which is first, the calibration how
    likely the first is relevant."""
    top, rest = [], order[request.rerank_top :]
    passages = []
    for candidate in order[: request.rerank_top]:
        check()
        docnum = _resolve(candidate, snapshot, {})
        if docnum is not None:  # a stale vector's document is left out
            candidate.docnum = docnum
            top.append(candidate)
            passages.append(snapshot.searcher.stored_fields(docnum)["text"])
    if not top:
        return rest
    logits = np.asarray(reranker.scores(request.query, passages), dtype=np.float64)
    relevance = 1.0 / (1.0 + np.exp(-logits))
    if request.rerank_blend == "position":
        relevance = np.array([_blend(rank, float(r)) for rank, r in enumerate(relevance, 1)])
    probabilities = sorted((c.probability for c in top), reverse=True)
    reordered = sorted(range(len(top)), key=lambda i: (-relevance[i], top[i].document_id))
    for probability, i in zip(probabilities, reordered, strict=True):
        top[i].rerank = float(relevance[i])
        top[i].probability = probability
    return [top[i] for i in reordered] + rest


def _blend(rank: int, relevance: float) -> float:
    """qmd's position-aware blend: the fused list's rank weighs more near the top (0.75 for
    ranks 1-3, 0.6 to 10, 0.4 beyond), the cross-encoder's relevance the rest."""
    weight = 0.75 if rank <= 3 else 0.60 if rank <= 10 else 0.40
    return weight / rank + (1 - weight) * relevance


def _chunk_docnum(snapshot: Snapshot, hit: DenseHit, read: dict[int, dict[str, Any]]) -> int | None:
    """Whoosh's live chunk for ``hit``, when it is of the same document version."""
    searcher = snapshot.searcher
    chunk_id = f"{hit.document_id}:{hit.chunk}"
    # The lookup by the chunk's id reads a term in every segment: the guess by position
    # first, checked against the stored id (read anyway for the version).
    docnum = snapshot.chunk_number(hit.document_id, hit.chunk)
    stored = searcher.stored_fields(docnum) if docnum is not None else None
    if stored is None or stored.get("chunk_id") != chunk_id:
        docnum = searcher.document_number(chunk_id=chunk_id)
        stored = searcher.stored_fields(docnum) if docnum is not None else None
    if docnum is None or stored is None or stored.get("version") != hit.version:
        return None
    read[int(docnum)] = stored
    return int(docnum)


def _vector_filter(request: SearchRequest) -> VectorFilter:
    return VectorFilter(
        tenant=request.tenant,
        collection=request.collection,
        document_type=request.document_type,
        submitter=request.submitter,
        day_from=day_number(request.date_from) if request.date_from else None,
        day_to=day_number(request.date_to) if request.date_to else None,
    )


def documents_in_scope(snapshot: Snapshot, request: SearchRequest) -> int:
    """Documents with a chunk the request's tenant and filters allow (cached per commit)."""
    key = (
        "documents in scope",
        request.tenant,
        request.collection,
        request.document_type,
        request.submitter,
        request.date_from,
        request.date_to,
    )

    def count() -> np.ndarray:
        allowed = allowed_chunks(snapshot, request)
        ordinals = snapshot.documents()[allowed]
        return np.array([np.count_nonzero(np.bincount(ordinals))] if len(ordinals) else [0])

    return int(snapshot.mask(key, count)[0])
