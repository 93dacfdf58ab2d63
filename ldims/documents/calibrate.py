"""``ldims calibrate``: fit the calibrated scores' dense models for the configured embedding
model on the user's own documents — for a model that ships no calibration (a remote
endpoint), whose cosines mean something else than the bundled models'.

Without judgments, the fit makes its own: a *pseudo-query* is a run of words cut from a
random chunk of a tenant's documents, a third of them dropped (so that it is not the chunk's
exact words), and the document it came from is its relevant one; negatives are gibberish and
word runs of the bundled background passages (ordinary text on other subjects). Each query
runs as the server's semantic search of that tenant, with ``explain`` and no floor, and the
hybrid and dense models are fitted on the candidates (:func:`indexer.calibration.fit_models`).
The keyword model is the bundled one (it does not depend on the embedding model). The
background vectors are the model's own embeddings of the bundled background passages.

The result goes to the data folder's ``calibration/`` (``LDIMS_DATA_DIR``), which the server
reads before the bundled calibrations; restart the server to use it. It is an approximation
of a fit on judged queries (pseudo-queries are easier than real questions): the bundled
models were fitted on judged sets (``bench/calibrate.py``).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

import indexer
from indexer.calibration import (
    FEATURES,
    Calibration,
    Calibrations,
    Logistic,
    background_languages,
    background_passages,
    feature_row,
    file_name,
    fit_models,
)
from ldims.catalog import Catalog, Document, DocumentStatus
from ldims.errors import InvalidInput
from ldims.semantic import embedder_for, vector_store
from ldims.settings import Settings

DENSE_KINDS = ("hybrid", "dense")
_DEPTH = 100


@dataclass(frozen=True)
class Fitted:
    path: Path
    models: dict[str, Logistic]
    queries: int
    rows: int


def calibrate(
    settings: Settings,
    per_tenant: int = 200,
    seed: int = 0,
    progress: Callable[[int], None] = lambda _: None,
    tenants: list[str] | None = None,
) -> Fitted:
    """Fit and save the configured model's calibration; ``per_tenant`` pseudo-queries a
    tenant (and half as many negatives) of ``tenants`` (default: every tenant with a
    completed document)."""
    embedder = embedder_for(settings)
    if embedder is None:
        raise InvalidInput(
            "Semantic search is off (LDIMS_EMBEDDING_MODEL=none): nothing to calibrate.",
            field="LDIMS_EMBEDDING_MODEL",
        )
    background = embedder.passages(background_passages())
    flat = {
        name: Logistic(0.0, (0.0,) * len(features), features)
        for name, features in FEATURES.items()
        if name.split(".")[0] in DENSE_KINDS
    }
    languages = background_languages()
    provisional = Calibration(embedder.fingerprint, flat, background, "provisional", languages)
    index = indexer.DocumentIndex(
        settings.index_dir, vectors=vector_store(settings), calibrations=_Only(provisional)
    )
    rng = random.Random(seed)
    rows: list[dict[str, float | str]] = []
    labels: list[bool] = []
    asked_of: list[int] = []  # the search each row is of
    queries = searches = 0
    try:
        for tenant in tenants if tenants is not None else _tenants(settings):
            asked = [
                (query, document_id)
                for document_id, text in index.sample_chunks(tenant, per_tenant, seed)
                if (query := pseudo_query(text, rng))
            ]
            asked += [(negative(rng), None) for _ in range(max(1, len(asked) // 2))]
            for query, relevant in asked:
                for found in _explained(index, settings, embedder, tenant, query):
                    rows += [feature_row(hit.explanation) for hit in found]
                    labels += [hit.document_id == relevant for hit in found]
                    asked_of += [searches] * len(found)
                    searches += 1
                queries += 1
                progress(1)
    finally:
        index.close()
    if not any(row["model"] == "hybrid" for row in rows):
        raise InvalidInput(
            f"No document has vectors of {embedder.fingerprint} yet: run `ldims embed`, and "
            "calibrate once `ldims status` shows none pending.",
            field="documents",
        )
    try:
        models = fit_models(rows, labels, asked_of, DENSE_KINDS)
    except ValueError as exc:
        raise InvalidInput(f"Cannot calibrate: {exc}; index more documents.") from None
    source = f"ldims calibrate: {queries} pseudo-queries of the user's documents (seed {seed})"
    path = settings.calibration_dir / file_name(embedder.fingerprint)
    Calibration(embedder.fingerprint, models, background, source, languages).save(path)
    return Fitted(path, models, queries, len(rows))


def pseudo_query(text: str, rng: random.Random) -> str | None:
    """A run of 6-12 words of ``text`` with a third of them dropped (for text without
    spaces — Chinese, Japanese — a run of 8-16 characters with a quarter dropped); None when
    the text is too short."""
    words = text.split()
    if len(words) >= 8:
        size = rng.randint(6, min(12, len(words)))
        start = rng.randrange(len(words) - size + 1)
        run = words[start : start + size]
        kept = [w for w in run if rng.random() > 1 / 3] or run[:1]
        return " ".join(kept)
    compact = "".join(words)
    if len(compact) >= 12 and len(words) < 4:
        size = rng.randint(8, min(16, len(compact)))
        start = rng.randrange(len(compact) - size + 1)
        return "".join(c for c in compact[start : start + size] if rng.random() > 1 / 4)
    return None


def negative(rng: random.Random) -> str:
    """A query no document should answer: letters at random, or words of a background
    passage (ordinary text on other subjects)."""
    if rng.random() < 0.5:
        return " ".join(
            "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
            for _ in range(rng.randint(1, 3))
        )
    words = rng.choice(background_passages()).split()
    start = rng.randrange(max(1, len(words) - 8))
    return " ".join(words[start : start + 8])


def _explained(
    index: indexer.DocumentIndex, settings: Settings, embedder: Any, tenant: str, query: str
) -> list[list[indexer.SearchHit]]:
    """The hits of the query's hybrid and dense searches, as the server runs them, with
    ``explain`` and no floor."""
    vector = embedder.query(query)
    found = []
    for mode in DENSE_KINDS:
        request = indexer.SearchRequest(
            tenant=tenant,
            query=query,
            mode=mode,  # type: ignore[arg-type]
            limit=settings.hybrid_candidates,
            candidates=settings.hybrid_candidates,
            feedback_documents=settings.hybrid_feedback_documents,
            feedback_weight=settings.hybrid_feedback_weight,
            feedback_share=settings.hybrid_feedback_share,
            vector=vector,
            fingerprint=embedder.fingerprint,
            min_score=0.0,
            explain=True,
        )
        try:
            found.append(index.search(request).hits)
        except indexer.QueryUnprocessable:
            continue
    return found


def _tenants(settings: Settings) -> list[str]:
    catalog = Catalog(settings.catalog_url)
    catalog.upgrade()  # a fresh data folder has no tables yet (as `ldims status`)
    with catalog.session() as session:
        query = (
            select(Document.tenant)
            .where(Document.status == DocumentStatus.COMPLETED.value)
            .distinct()
            .order_by(Document.tenant)
        )
        return list(session.scalars(query))


class _Only(Calibrations):
    """The bundled keyword model and ``model`` for its fingerprint."""

    def __init__(self, model: Calibration) -> None:
        super().__init__()
        self.model = model

    def of(self, fingerprint: str) -> Calibration | None:
        return self.model if fingerprint == self.model.fingerprint else None
