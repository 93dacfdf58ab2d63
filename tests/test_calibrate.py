"""``ldims calibrate``: a calibration fitted on the user's own documents for a model that ships
none, used by the next search; and its one-line refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from indexer import DocumentIndex, SearchRequest
from indexer.calibration import Calibrations, file_name
from ldims.documents.calibrate import calibrate, pseudo_query
from ldims.semantic import embedder_for, vector_store
from ldims.settings import Settings
from tests.conftest import ROOT
from tests.test_semantic_search import document, write

XQUAD = (
    Path(__file__).resolve().parents[2] / "shared" / "corpus" / "ir" / "xquad-en" / "corpus.jsonl"
)


def paragraphs(count: int) -> list[str]:
    with XQUAD.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(count), strict=False)]


def test_a_calibration_fitted_on_own_documents_is_used_by_the_next_search(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, embedding_model="use")
    embedder = embedder_for(settings)
    assert embedder is not None
    index = DocumentIndex(settings.index_dir, vectors=vector_store(settings))
    documents = [document(f"x-{n}", text) for n, text in enumerate(paragraphs(60))]
    write(index, embedder, documents)
    index.close()

    fitted = calibrate(settings, per_tenant=60, tenants=["acme"])
    assert fitted.path == settings.calibration_dir / file_name(embedder.fingerprint)
    assert fitted.queries >= 60
    assert set(fitted.models) == {
        "hybrid.query",
        "hybrid.hit",
        "hybrid.impute",
        "dense.query",
        "dense.hit",
    }
    # More evidence is more likely relevant: the fitted weights say so.
    query = fitted.models["hybrid.query"]
    weights = dict(zip(query.features, query.weights, strict=True))
    assert weights["best_coverage"] > 0 and weights["best_dense_margin"] > 0

    # The data folder's calibration is read before a bundled one of the same model.
    found = Calibrations(settings.calibration_dir).of(embedder.fingerprint)
    assert found is not None and found.source.startswith("ldims calibrate")
    assert found.background is not None and found.background.shape[1] == 512
    index = DocumentIndex(
        settings.index_dir,
        vectors=vector_store(settings),
        calibrations=Calibrations(settings.calibration_dir),
    )
    first = documents[7].chunks[0].text
    query = " ".join(first.split()[:12])
    hits = index.search(
        SearchRequest(
            tenant="acme",
            query=query,
            mode="hybrid",
            vector=embedder.query(query),
            fingerprint=embedder.fingerprint,
        )
    ).hits
    assert hits and hits[0].document_id == "x-7" and hits[0].score > 0.5
    # Gibberish is very unlikely (pseudo-queries are easier than real questions, so this fit
    # is less sharp than the bundled ones: a low bar, far below the real match).
    gibberish = "qwxzv plokm"
    nonsense = index.search(
        SearchRequest(
            tenant="acme",
            query=gibberish,
            mode="hybrid",
            vector=embedder.query(gibberish),
            fingerprint=embedder.fingerprint,
            min_score=0.0,
        )
    ).hits
    assert nonsense and nonsense[0].score < 0.02 < hits[0].score


def test_pseudo_queries_are_runs_of_the_text_with_words_dropped() -> None:
    import random

    rng = random.Random(1)
    text = "one two three four five six seven eight nine ten eleven twelve thirteen"
    query = pseudo_query(text, rng)
    assert query is not None and 2 <= len(query.split()) <= 12
    assert all(word in text.split() for word in query.split())
    assert pseudo_query("too short", rng) is None
    chinese = pseudo_query("长城是中国古代的军事防御工程全长两万多公里", rng)
    assert chinese is not None and 4 <= len(chinese) <= 16


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LDIMS_EMBEDDING_MODEL": "none"}, "Semantic search is off"),
        ({"LDIMS_EMBEDDING_MODEL": "use"}, "No document has vectors"),
    ],
)
def test_calibrate_refuses_in_one_line(tmp_path: Path, env: dict[str, str], message: str) -> None:
    environment = {**os.environ, "LDIMS_DATA_DIR": str(tmp_path), **env}
    command = [sys.executable, "-m", "runtime.cli.main", "calibrate", "--per-tenant", "5"]
    done = subprocess.run(command, env=environment, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and message in lines[0], done.stderr
    assert "Traceback" not in done.stderr
