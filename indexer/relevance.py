"""The evidence a search has about each candidate document, and its calibrated score.

Keyword, exact, dense and hybrid searches all end here. The search has put its candidates
(the best documents of the keyword list and of the dense list, by default 100 of each) in
its order — BM25F, or the fusion of :mod:`indexer.fusion` — and :func:`calibrated` gives
each the probability the fitted models of :mod:`indexer.calibration` say: from the query's
evidence (the best share of its words a candidate holds, how far the best cosine stands
above the query's background) and the hit's place and own evidence. Those below the
request's ``min_score`` are not results.

A semantic search with no vectors in scope uses the keyword models; a document without
vectors in a search that has some is placed by the fusion as its keyword share says, and
its dense margin is taken to be what its keyword evidence predicts (``hybrid.impute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from whoosh.query import Term

from indexer.calibration import Calibration, Fallback
from indexer.evaluate import Snapshot
from indexer.model import Explanation
from indexer.scoring import lucene_idf
from indexer.vectors import DenseHit, DenseScope

__all__ = ["Candidate", "calibrated", "coverage", "dense_cosines", "explanation"]

_FALLBACK = Fallback()


@dataclass(slots=True)  # not frozen: made for every document of each list, filled in steps
class Candidate:
    document_id: str
    docnum: int | None  # the chunk that represents the document (a keyword hit's)
    dense: DenseHit | None = None  # else: the chunk whose vector matched, found when shown
    keyword_score: float | None = None
    keyword_rank: int | None = None
    coverage: float = 0.0
    cosine: float | None = None  # None: the document has no vector in scope
    dense_rank: int | None = None
    dense_margin: float | None = None
    fused: float = 0.0
    fused_rank: int = 0
    features: dict[str, float] | None = None
    model: str = "keyword"
    query_probability: float = 0.0
    hit_probability: float = 0.0
    probability: float = 0.0
    rerank: float | None = None


def coverage(
    snapshot: Snapshot, tenant: str, terms: frozenset[str], fields: tuple[str, ...], docnums: Any
) -> np.ndarray:
    """For each chunk of ``docnums``, the idf-weighted share of ``terms`` (the query's indexed
    terms) it holds in any of ``fields``; idf is the tenant's own (a term the tenant does not
    hold weighs most)."""
    chunks = np.asarray(docnums, dtype=np.int64)
    held = np.zeros(len(chunks), dtype=np.float64)
    total = 0.0
    population = snapshot.tenant_field(tenant, fields[0])[0]
    for text in sorted(terms):
        key = snapshot.term_key(fields[0], text)
        frequency = snapshot.tenant_frequency(tenant, key) if key is not None else 0
        weight = lucene_idf(population, frequency)
        total += weight
        if not frequency or not len(chunks):
            continue
        holds = np.zeros(len(chunks), dtype=bool)
        for field in fields:
            ids, _ = snapshot.term_scores(Term(field, text), tenant)
            if len(ids):
                at = np.minimum(np.searchsorted(ids, chunks), len(ids) - 1)
                holds |= ids[at] == chunks
        held += weight * holds
    return held / total if total > 0 else held


def dense_cosines(scope: DenseScope | None, vector: Any, candidates: list[Candidate]) -> None:
    """The cosine of every candidate of the keyword list that has vectors in scope but was
    not among the dense list's best (those have theirs)."""
    if scope is None or vector is None:
        return
    missing = [c for c in candidates if c.cosine is None]
    if not missing:
        return
    found = scope.best_scores(
        np.asarray(vector, dtype=np.float32), [c.document_id for c in missing]
    )
    for candidate in missing:
        candidate.cosine = found.get(candidate.document_id)


def calibrated(
    order: list[Candidate],
    mode: str,
    keyword: Calibration,
    model: Calibration | None,
    vector: Any,
    explain: bool = False,
) -> None:
    """Set the probability of each candidate of ``order`` (best first, ``fused`` set);
    ``explain``: and the features the models weighed."""
    if not order:
        return
    size = len(order)
    with_vector = np.array([c.cosine is not None for c in order])
    dense = mode in ("dense", "hybrid") and bool(with_vector.any())
    top = order[0].fused
    best_keyword = max((c.keyword_score or 0.0 for c in order), default=0.0)
    columns: dict[str, np.ndarray] = {
        "best_coverage": np.full(size, max(c.coverage for c in order)),
        "fused_share": np.array([c.fused / top if top > 0 else 0.0 for c in order]),
        "keyword_share": np.array(
            [(c.keyword_score or 0.0) / best_keyword if best_keyword > 0 else 0.0 for c in order]
        ),
        "log_rank": np.log(np.arange(1, size + 1, dtype=np.float64)),
        "coverage": np.array([c.coverage for c in order]),
    }
    columns["coverage_gap"] = columns["best_coverage"] - columns["coverage"]
    kind, chosen = "keyword", keyword
    fitted = (model or _FALLBACK.get()) if dense else None
    if fitted is not None:
        kind, chosen = ("dense" if mode == "dense" else "hybrid"), fitted
        cosines = np.array([c.cosine if c.cosine is not None else 0.0 for c in order])
        margin = _dense_margin(model, vector, cosines, with_vector)
        imputed = fitted.models.get(f"{kind}.impute")
        if imputed is not None and not with_vector.all():
            margin = np.where(with_vector, margin, imputed.logits(columns, size))
        else:
            margin = np.where(with_vector, margin, 0.0)
        best_margin = float(margin.max())
        columns["dense_margin"] = margin
        columns["best_dense_margin"] = np.full(size, best_margin)
        columns["dense_gap"] = best_margin - margin
        for candidate, value in zip(order, margin.tolist(), strict=True):
            if candidate.cosine is not None:
                candidate.dense_margin = value
    answered, places = chosen.probabilities(kind, columns, size)
    for candidate, place in zip(order, places.tolist(), strict=True):
        candidate.query_probability, candidate.hit_probability = answered, place
        candidate.probability = answered * place
        candidate.model = kind
    if explain:
        names = sorted(columns)
        values = np.column_stack([columns[name] for name in names]).tolist()
        for candidate, row in zip(order, values, strict=True):
            candidate.features = dict(zip(names, row, strict=True))


def _dense_margin(
    model: Calibration | None, vector: Any, cosines: np.ndarray, with_vector: np.ndarray
) -> np.ndarray:
    """Cosines above the query's background (:meth:`Calibration.dense_margin`); a model
    without a calibration (a remote one before ``ldims calibrate``) stands on the median of
    the candidates' own cosines instead: an approximation, said in the search's note."""
    if model is not None and model.background is not None:
        return model.dense_margin(vector, cosines)
    return cosines - float(np.median(cosines[with_vector]))


def explanation(candidate: Candidate, score: float) -> Explanation:
    """Why ``candidate`` ranks where it does (``explain: true``)."""
    return Explanation(
        keyword_score=_rounded(candidate.keyword_score),
        keyword_rank=candidate.keyword_rank,
        coverage=round(candidate.coverage, 4),
        dense_cosine=_rounded(candidate.cosine),
        dense_margin=_rounded(candidate.dense_margin),
        fused=round(candidate.fused, 4),
        fused_rank=candidate.fused_rank,
        features={k: round(v, 4) for k, v in (candidate.features or {}).items()},
        dense_rank=candidate.dense_rank,
        model=candidate.model,
        query_probability=round(candidate.query_probability, 4),
        hit_probability=round(candidate.hit_probability, 4),
        rerank_score=_rounded(candidate.rerank),
        score=score,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
