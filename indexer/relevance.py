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
from indexer.vector_segments import Scored
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
    fused: float = 0.0
    fused_rank: int = 0
    probability: float = 0.0
    rerank: float | None = None
    looked_up: bool = False  # its cosine was looked for (None after: no vector in scope)
    seen: tuple[Any, int] | None = None  # explain: what the models saw, and its row


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


def dense_cosines(
    scope: DenseScope | None,
    vector: Any,
    candidates: list[Candidate],
    scored: list[Scored] | None = None,
) -> None:
    """The cosine of every candidate that has vectors in scope but was not among the dense
    list's best (those have theirs); ``scored``: the dense search's scores to read them
    from."""
    if scope is None or vector is None:
        return
    missing = [c for c in candidates if c.cosine is None and not c.looked_up]
    if not missing:
        return
    query = np.asarray(vector, dtype=np.float32)
    found = scope.best_scores(query, [c.document_id for c in missing], scored)
    for candidate in missing:
        candidate.cosine = found.get(candidate.document_id)
        candidate.looked_up = True


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
    # One pass over the candidates: coverage, fused, keyword score, cosine (NaN: no vector).
    facts = np.array(
        [
            (
                c.coverage,
                c.fused,
                c.keyword_score or 0.0,
                np.nan if c.cosine is None else c.cosine,
            )
            for c in order
        ],
        dtype=np.float64,
    )
    covered, fused, keyword_scores, cosines = facts.T
    with_vector = ~np.isnan(cosines)
    dense = mode in ("dense", "hybrid") and bool(with_vector.any())
    top, best_keyword = fused[0], keyword_scores.max()
    columns: dict[str, np.ndarray] = {
        "best_coverage": np.full(size, covered.max()),
        "fused_share": fused / top if top > 0 else np.zeros(size),
        "keyword_share": keyword_scores / best_keyword if best_keyword > 0 else np.zeros(size),
        "log_rank": np.log(np.arange(1, size + 1, dtype=np.float64)),
        "coverage": covered,
    }
    columns["coverage_gap"] = columns["best_coverage"] - covered
    kind, chosen = "keyword", keyword
    fitted = (model or _FALLBACK.get()) if dense else None
    if fitted is not None:
        kind, chosen = ("dense" if mode == "dense" else "hybrid"), fitted
        cosines = np.where(with_vector, cosines, 0.0)
        vectors = [c.dense.vector if c.dense is not None else None for c in order]
        margin = _dense_margin(model, vector, cosines, with_vector, vectors)
        imputed = fitted.models.get(f"{kind}.impute")
        if imputed is not None and not with_vector.all():
            margin = np.where(with_vector, margin, imputed.logits(columns, size))
        else:
            margin = np.where(with_vector, margin, 0.0)
        best_margin = float(margin.max())
        columns["dense_margin"] = margin
        columns["best_dense_margin"] = np.full(size, best_margin)
        columns["dense_gap"] = best_margin - margin
    answered, places = chosen.probabilities(kind, columns, size)
    scores = answered * places
    if kind == "hybrid" and not with_vector.all():
        # A document without vectors yet scores at least what the keyword search would
        # give it: its missing vectors are not evidence against it.
        as_keyword = _as_keyword(keyword, order, columns)
        scores = np.where(with_vector, scores, np.maximum(scores, as_keyword))
        # The order stays the fusion's: ordering by these scores measured worse.
    for candidate, place in zip(order, scores.tolist(), strict=True):
        candidate.probability = place
    if explain:  # what explanation() reads, for the few hits shown (read then, not now)
        margins = columns.get("dense_margin")
        seen = _Seen(columns, places, answered, kind, margins)
        for number, candidate in enumerate(order):
            candidate.seen = (seen, number)


def _as_keyword(
    keyword: Calibration, order: list[Candidate], columns: dict[str, np.ndarray]
) -> np.ndarray:
    """Each candidate's score by the keyword models, placed as the keyword search places it
    (by its keyword rank; 0 for one the keyword list does not hold)."""
    ranks = np.array([c.keyword_rank or 0 for c in order])
    listed = np.flatnonzero(ranks > 0)
    scores = np.zeros(len(order))
    if not len(listed):
        return scores
    listed = listed[np.argsort(ranks[listed], kind="stable")]
    names = {"best_coverage", "keyword_share", "coverage", "coverage_gap"}
    placed = {name: columns[name][listed] for name in names}
    placed["log_rank"] = np.log(np.arange(1, len(listed) + 1, dtype=np.float64))
    answered, places = keyword.probabilities("keyword", placed, len(listed))
    scores[listed] = answered * places
    return scores


def _dense_margin(
    model: Calibration | None,
    vector: Any,
    cosines: np.ndarray,
    with_vector: np.ndarray,
    vectors: list[np.ndarray | None],
) -> np.ndarray:
    """Cosines above the query's background (:meth:`Calibration.dense_margin`); a model
    without a calibration (a remote one before ``ldims calibrate``) stands on the median of
    the candidates' own cosines instead: an approximation, said in the search's note."""
    if model is not None and model.background is not None:
        return model.dense_margin(vector, cosines, vectors)
    return cosines - float(np.median(cosines[with_vector]))


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the models saw of one search's candidates (``explain``)."""

    columns: dict[str, np.ndarray]
    places: np.ndarray
    answered: float
    kind: str
    margins: np.ndarray | None


def explanation(candidate: Candidate, score: float) -> Explanation:
    """Why ``candidate`` ranks where it does (``explain: true``)."""
    assert candidate.seen is not None, "calibrated() ran without explain"
    seen, number = candidate.seen
    margin = None
    if seen.margins is not None and candidate.cosine is not None:
        margin = float(seen.margins[number])
    return Explanation(
        keyword_score=_rounded(candidate.keyword_score),
        keyword_rank=candidate.keyword_rank,
        coverage=round(candidate.coverage, 4),
        dense_cosine=_rounded(candidate.cosine),
        dense_margin=_rounded(margin),
        fused=round(candidate.fused, 4),
        fused_rank=candidate.fused_rank,
        features={name: round(float(v[number]), 4) for name, v in sorted(seen.columns.items())},
        dense_rank=candidate.dense_rank,
        model=seen.kind,
        query_probability=round(seen.answered, 4),
        hit_probability=round(float(seen.places[number]), 4),
        rerank_score=_rounded(candidate.rerank),
        score=score,
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
