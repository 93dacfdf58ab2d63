"""The calibration and partial-vector parts of ``bench/retrieval.py`` (issue 34).

**Calibration** — the held-out mixed set: ``EVAL_PER_SET`` questions of each XQuAD set that
the fit never saw (a fixed seed: :func:`eval_ids`) and the ``eval`` half of the written
off-topic and gibberish queries of ``bench/calibration/queries.jsonl`` (en, ru, zh), each
searched in its language's XQuAD corpus as the server searches by default (hybrid, the
floor on). Reported: the AUC of the top score between answerable and off-topic queries
(a query with no result scores 0), the share of gibberish and of off-topic queries with no
result, and the expected calibration error of every result returned (10 equal-width bins:
how far the scores are from the share of relevant results at each score).

**Partial vectors** — each IR set with vectors for 0, 25, 50, 75 and 100 % of its documents
(a fixed random choice, the same documents at each step plus more), every query in the
default mode, nDCG@10 beside the keyword search's in the same run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from indexer import DocumentIndex, IndexedDocument, QueryUnprocessable, SearchRequest
from indexer.embedding import Embedder
from ldims.settings import Settings

HERE = Path(__file__).resolve().parent
WRITTEN = HERE / "calibration" / "queries.jsonl"
XQUAD = ("xquad-en", "xquad-ru", "xquad-zh")
EVAL_PER_SET = 60
EVAL_SEED = 34
FRACTIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
_DEFAULTS = {name: field.default for name, field in Settings.model_fields.items()}
# What the server's semantic search sets beyond a SearchRequest's defaults.
SERVER_DEFAULTS: dict[str, Any] = {
    "candidates": _DEFAULTS["hybrid_candidates"],
    "feedback_documents": _DEFAULTS["hybrid_feedback_documents"],
    "feedback_weight": _DEFAULTS["hybrid_feedback_weight"],
    "feedback_share": _DEFAULTS["hybrid_feedback_share"],
    "min_score": _DEFAULTS["search_min_score"],
}


def eval_ids(name: str, query_ids: Sequence[str]) -> set[str]:
    """The held-out questions of an XQuAD set (the same every run; none of Cranfield's)."""
    if name not in XQUAD:
        return set()
    return set(random.Random(f"{EVAL_SEED}-{name}").sample(sorted(query_ids), EVAL_PER_SET))


def written_queries() -> list[dict[str, str]]:
    with WRITTEN.open(encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def auc(positives: Sequence[float], negatives: Sequence[float]) -> float:
    """Probability that a positive outscores a negative (ties count half)."""
    if not positives or not negatives:
        return float("nan")
    p, n = np.asarray(positives), np.asarray(negatives)
    greater = (p[:, None] > n[None, :]).sum() + 0.5 * (p[:, None] == n[None, :]).sum()
    return float(greater / (len(p) * len(n)))


def expected_calibration_error(pairs: Sequence[tuple[float, bool]], bins: int = 10) -> float:
    """ECE of (predicted probability, relevant) pairs over equal-width bins."""
    if not pairs:
        return float("nan")
    predicted = np.array([p for p, _ in pairs])
    actual = np.array([1.0 if r else 0.0 for _, r in pairs])
    which = np.minimum((predicted * bins).astype(int), bins - 1)
    error = 0.0
    for b in range(bins):
        chosen = which == b
        if chosen.any():
            gap = abs(predicted[chosen].mean() - actual[chosen].mean())
            error += chosen.sum() / len(pairs) * gap
    return float(error)


@dataclass
class Calibrated:
    """The held-out mixed set's outcome for one model."""

    model: str
    top: dict[str, list[float]]  # kind -> top score of each query (0: no result)
    pairs: list[tuple[float, bool]]  # every result returned: (score, relevant)

    @property
    def auc(self) -> float:
        return auc(self.top["answerable"], self.top["off-topic"])

    def empty(self, kind: str) -> tuple[int, int]:
        scores = self.top[kind]
        return sum(score == 0.0 for score in scores), len(scores)

    @property
    def ece(self) -> float:
        return expected_calibration_error(self.pairs)


Search = Callable[[str], list[tuple[str, float]]]  # query -> (document, score) best first


def check_calibration(
    model: str, language: str, search: Search, asked: Sequence[tuple[str, str, dict[str, int]]]
) -> Calibrated:
    """One language's part of the mixed set through ``search`` (a default search of that
    language's XQuAD corpus); ``asked``: its held-out (id, text, judgments)."""
    outcome = Calibrated(model, {"answerable": [], "off-topic": [], "gibberish": []}, [])
    items = [("answerable", text, relevant) for _, text, relevant in asked]
    items += [
        (item["kind"], item["text"], {})
        for item in written_queries()
        if item["split"] == "eval" and item["language"] == language
    ]
    for kind, text, relevant in items:
        found = search(text)
        outcome.top[kind].append(found[0][1] if found else 0.0)
        outcome.pairs += [(score, doc in relevant) for doc, score in found]
    return outcome


def merged(parts: Sequence[Calibrated]) -> Calibrated:
    """The languages' parts as one outcome."""
    whole = Calibrated(parts[0].model, {"answerable": [], "off-topic": [], "gibberish": []}, [])
    for part in parts:
        for kind, scores in part.top.items():
            whole.top[kind] += scores
        whole.pairs += part.pairs
    return whole


def calibration_rows(outcomes: Sequence[Calibrated]) -> list[list[str]]:
    rows = []
    for outcome in outcomes:
        gibberish, gibberish_all = outcome.empty("gibberish")
        off, off_all = outcome.empty("off-topic")
        answered, answered_all = outcome.empty("answerable")
        rows.append(
            [
                outcome.model,
                str(sum(len(v) for v in outcome.top.values())),
                f"{outcome.auc:.3f}",
                f"{gibberish}/{gibberish_all} ({gibberish / gibberish_all:.0%})",
                f"{off}/{off_all} ({off / off_all:.0%})",
                f"{answered_all - answered}/{answered_all}",
                f"{outcome.ece:.3f}",
                str(len(outcome.pairs)),
            ]
        )
    return rows


CALIBRATION_HEADER = [
    "model",
    "queries",
    "AUC top score, answerable vs off-topic",
    "gibberish with no result",
    "off-topic with no result",
    "answerable with a result",
    "ECE (results returned)",
    "results",
]


def vector_subsets(documents: Sequence[IndexedDocument]) -> dict[float, list[IndexedDocument]]:
    """The documents that have vectors at each fraction: a fixed shuffle, cut at each step."""
    order = list(documents)
    random.Random(EVAL_SEED).shuffle(order)
    return {f: order[: round(f * len(order))] for f in FRACTIONS}


def default_search(
    index: DocumentIndex, tenant: str, embedder: Embedder | None, limit: int
) -> Search:
    """A search as the server's default one runs (hybrid when ``embedder``, the floor on)."""

    def search(text: str) -> list[tuple[str, float]]:
        request = SearchRequest(
            tenant=tenant,
            query=text,
            mode="hybrid" if embedder is not None else "keyword",
            limit=limit,
            vector=embedder.query(text) if embedder is not None else None,
            fingerprint=embedder.fingerprint if embedder is not None else None,
            **SERVER_DEFAULTS,
        )
        try:
            found = index.search(request)
        except QueryUnprocessable:
            return []
        return [(hit.document_id, hit.score) for hit in found.hits]

    return search
