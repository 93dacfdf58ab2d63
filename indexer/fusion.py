"""The order of a hybrid search: the keyword list and the dense list fused into one.

Each list holds its best ``candidates`` documents. A document gets from each list its score
min-max normalised over that list (relative score fusion: ``fusion="scores"``, the default)
or ``1 / (k + rank)`` (``rrf``: Reciprocal Rank Fusion), weighted (``keyword_weight``,
``dense_weight``) and summed; equal sums go by id, for stable pages. Relative scores are the
default by measurement: RRF keeps only ranks, and on the XQuAD sets it stayed below the
targets at every weight tried, where the score margins lifted hybrid over both lists.

**A document without vectors** (not embedded yet) cannot be in the dense list. Left at that,
it would lose the dense list's half of the sum to any document that has vectors, however
unrelated — while vectors are pending, hybrid search fell far below the keyword search
(issue 34). So its missing dense share is *imputed* as its keyword share: what the dense list
would most likely say of a document the keyword list ranks there. And the dense lists weigh
``covered``: the share of the documents in scope that have vectors, to the power 1.5 (the
caller's). A dense list of a quarter of the documents ranks only among those, and its
min-max shares say more than it knows: with the imputation alone a quarter of the vectors
ranked a little below keyword search on three sets, with the share itself on Cranfield
(0.3882 against 0.3884), with its power 1.5 on none. With no vectors at all a semantic search
is the keyword search (:mod:`indexer.hybrid`); with all of them it is plain fusion; in
between it moves from one to the other (``bench/retrieval.py``, partial vectors).

**Vector feedback** (``feedback_documents``, ``feedback_weight``, ``feedback_share``): the
query's vector is moved towards the mean vector of the best fused documents (Rocchio:
``q + w · mean``, normalised), the dense list is searched again with it and fused anew as a
third list taking ``feedback_share`` of the dense weight. It lifted cranfield's hybrid
nDCG@10 by ~0.01-0.02 and costs the one-answer XQuAD rows next to nothing
(``bench/results/retrieval_feedback.md``, ``retrieval_defaults.md``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from indexer.model import SearchRequest
from indexer.relevance import Candidate
from indexer.vectors import DenseHit

__all__ = ["fuse", "with_feedback"]


def fuse(
    request: SearchRequest,
    candidates: dict[str, Candidate],
    dense: list[DenseHit],
    again: list[DenseHit] | None = None,
    covered: float = 1.0,
) -> list[Candidate]:
    """``candidates`` (both lists' documents, by id) in fused order, each with its ``fused``
    score and ``fused_rank``; ``again``: the feedback search's dense list; ``covered``: the
    share of the documents in scope that have vectors (the dense lists weigh that much)."""
    if request.mode == "dense":
        lists = [(1.0, [(hit.document_id, hit.score) for hit in dense])]
    else:
        keyword = sorted(
            (c for c in candidates.values() if c.keyword_rank is not None),
            key=lambda c: c.keyword_rank or 0,
        )
        lists = [
            (request.keyword_weight, [(c.document_id, c.keyword_score or 0.0) for c in keyword])
        ]
        share = request.feedback_share if again is not None else 0.0
        for weight, found in ((1 - share, dense), (share, again or [])):
            if weight:
                listed = [(hit.document_id, hit.score) for hit in found]
                lists.append((request.dense_weight * covered * weight, listed))
    scores: dict[str, float] = dict.fromkeys(candidates, 0.0)
    keyword_shares: dict[str, float] = {}
    for number, (weight, listed) in enumerate(lists):
        shares = _shares(request, listed)
        if number == 0 and request.mode != "dense":
            keyword_shares = dict(shares)
        for document_id, value in shares:
            scores[document_id] += weight * value
    if dense and request.mode != "dense":
        # A document without vectors: its dense shares as its keyword share (see the module).
        dense_weight = request.dense_weight * covered
        for document_id, candidate in candidates.items():
            if candidate.cosine is None:
                scores[document_id] += dense_weight * keyword_shares.get(document_id, 0.0)
    order = sorted(scores, key=lambda document_id: (-scores[document_id], document_id))
    ranked = []
    for rank, document_id in enumerate(order, 1):
        candidate = candidates[document_id]
        candidate.fused, candidate.fused_rank = scores[document_id], rank
        ranked.append(candidate)
    return ranked


def with_feedback(
    request: SearchRequest,
    order: list[Candidate],
    search: Callable[[np.ndarray], list[DenseHit]],
) -> list[DenseHit] | None:
    """The feedback search's dense list: ``search`` of the query's vector moved towards the
    vectors of the best ``feedback_documents`` of ``order`` that the dense list holds; None
    when none does (documents only the keyword list holds add nothing)."""
    top = [
        c.dense.vector
        for c in order[: request.feedback_documents]
        if c.dense is not None and c.dense.vector is not None
    ]
    if not top:
        return None
    query = np.asarray(request.vector, dtype=np.float32)
    mean = np.mean(np.asarray(top, dtype=np.float32), axis=0)
    moved = query / np.linalg.norm(query) + request.feedback_weight * mean
    norm = float(np.linalg.norm(moved))
    if norm == 0.0:
        return None
    return search(moved / norm)


def _shares(request: SearchRequest, listed: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """What each document of one list (best first) brings to its fused score: ``rrf``,
    ``1 / (k + rank)``; ``scores``, its score min-max normalised over the list."""
    if request.fusion == "rrf":
        return [(d, 1.0 / (request.rrf_k + rank + 1)) for rank, (d, _) in enumerate(listed)]
    if not listed:
        return []
    values = [score for _, score in listed]
    low, high = min(values), max(values)
    if high <= low:
        return [(d, 1.0) for d, _ in listed]
    return [(d, (score - low) / (high - low)) for d, score in listed]
