"""The NumPy search path agrees with Whoosh: every score of a query over a tenant's allowed
chunks equals what Whoosh's own matchers compute over an index of that tenant's documents
alone (the statistics are the tenant's), posting arrays read block by block equal the public
matcher API, plain-word queries built directly equal the parser's, and collapsing to
documents equals a brute-force ranking."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import pytest
from whoosh import qparser, query

from indexer import Chunk, DocumentIndex, IndexedDocument, SearchRequest
from indexer.evaluate import Snapshot, _TenantStatistics, best_per_document
from indexer.postings import PostingStore, read_postings, read_postings_one_by_one
from indexer.scoring import TenantBM25F
from indexer.search import _combine, _parse, _parser, analyse_plain_words
from tests.conftest import CORPUS

WORDS = [
    *("storage", "drive", "report", "system", "error", "index", "search", "document"),
    *("tenant", "policy", "budget", "KWDB-4001", "v2.3.0", "user_profile"),
    *("硬盘", "驱动", "系统", "文档", "中华人民共和国"),
    *("документ", "документы", "система", "поиск", "отчёт"),
]


def _documents(count: int, seed: int) -> list[IndexedDocument]:
    rng = random.Random(seed)
    documents = []
    for number in range(count):
        chunks = [
            # Long posting lists (several 128-posting blocks) and varied lengths and counts.
            Chunk(" ".join(rng.choices(WORDS, k=rng.randint(3, 60))), page, 1, 1)
            for page in range(1, rng.randint(1, 4) + 1)
        ]
        documents.append(
            IndexedDocument(
                f"doc-{number}",
                rng.choice(("acme", "rival", "third")),
                "default",
                f"doc-{number}.txt",
                1,
                chunks,
                title=rng.choice(("Storage report", "Системный отчёт", "硬盘 文档", None)),
                document_type=rng.choice(("report", "memo")),
            )
        )
    return documents


DELETED = [f"doc-{n}" for n in range(0, 400, 9)]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> DocumentIndex:
    """Three tenants in three segments (three commits), with deletions in the first two."""
    index = DocumentIndex(tmp_path_factory.mktemp("evaluate") / "index")
    documents = _documents(600, seed=7)
    for first in range(0, 600, 200):
        with index.batch() as batch:
            for document in documents[first : first + 200]:
                batch.replace(document)
    index.delete_documents(DELETED)
    return index


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> DocumentIndex:
    """The live documents of ``acme`` in ``index``, in an index of their own."""
    index = DocumentIndex(tmp_path_factory.mktemp("evaluate") / "alone")
    with index.batch() as batch:
        for document in _documents(600, seed=7):
            if document.tenant == "acme" and document.document_id not in DELETED:
                batch.replace(document)
    return index


def _by_chunk_id(searcher: Any, ids: Any, scores: Any) -> dict[str, float]:
    return {
        searcher.stored_fields(int(docnum))["chunk_id"]: float(score)
        for docnum, score in zip(ids, scores, strict=True)
    }


QUERIES = [
    "storage",
    "硬盘 report",
    "документ поиск",
    "error index budget storage drive system tenant",
    '"storage drive"',
    "KWDB-4001",
    "user_profile v2.3.0",
    "中华人民共和国",
    "storage AND drive",
    "storage NOT drive",
    "storage ANDMAYBE drive",
    "(硬盘 OR система) AND report",
    "отчёт документы",
]


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("mode", ["keyword", "exact"])
@pytest.mark.parametrize("narrow", [False, True])
def test_scores_equal_whoosh_over_the_tenants_documents_alone(
    index: DocumentIndex, alone: DocumentIndex, text: str, mode: str, narrow: bool
) -> None:
    request = SearchRequest(tenant="acme", query=text, mode=mode)  # type: ignore[arg-type]
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) == 3
        parsed, _ = _parse(searcher, request)
        snapshot = Snapshot(searcher, PostingStore())
        allowed = sorted(np.flatnonzero(snapshot.population("acme")).tolist())
        if narrow:  # few allowed chunks: phrases are checked at each of them
            allowed = sorted(random.Random(text).sample(allowed, 40))
        chunk_ids = {searcher.stored_fields(docnum)["chunk_id"] for docnum in allowed}
        mask = np.zeros(searcher.doc_count_all(), dtype=bool)
        mask[allowed] = True
        got = _by_chunk_id(searcher, *snapshot.evaluate(parsed, mask, "acme"))
    with alone.searcher() as searcher:
        parsed, _ = _parse(searcher, request)
        whoosh = searcher.search(parsed, limit=None)
        expected = {hit["chunk_id"]: hit.score for hit in whoosh if hit["chunk_id"] in chunk_ids}
    assert expected or narrow, "the query must match something, or this proves nothing"
    assert sorted(got) == sorted(expected)
    for chunk_id, score in got.items():
        # Whoosh averages exact field lengths; the tenant's average is of the lengths Whoosh
        # stores per chunk (rounded to a byte's precision).
        assert score == pytest.approx(expected[chunk_id], rel=LENGTH_ROUNDING)


# How far the average of stored (byte-rounded) field lengths strays from the exact average.
LENGTH_ROUNDING = 2e-2


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("mode", ["keyword", "exact"])
def test_a_tenants_scores_do_not_depend_on_other_tenants(
    index: DocumentIndex, alone: DocumentIndex, text: str, mode: str
) -> None:
    """The same tenant's documents score exactly alike beside other tenants' or alone."""
    request = SearchRequest(tenant="acme", query=text, mode=mode)  # type: ignore[arg-type]
    scored = []
    for held in (index, alone):
        with held.searcher() as searcher:
            parsed, _ = _parse(searcher, request)
            snapshot = Snapshot(searcher, PostingStore())
            population = snapshot.population("acme")
            scored.append(_by_chunk_id(searcher, *snapshot.evaluate(parsed, population, "acme")))
    assert scored[0], "the query must match something, or this proves nothing"
    assert scored[0] == scored[1]


def test_deleted_chunks_are_never_allowed(index: DocumentIndex) -> None:
    with index.searcher() as searcher:
        snapshot = Snapshot(searcher, PostingStore())
        live = set(searcher.docs_for_query(query.Every()))
        assert len(live) < searcher.doc_count_all()  # the fixture deleted some
        assert set(np.flatnonzero(snapshot.alive()).tolist()) == live


def test_block_reads_equal_the_public_matcher_api(index: DocumentIndex) -> None:
    with index.searcher() as searcher:
        checked = 0
        for subsearcher, _ in searcher.leaf_searchers():
            reader = subsearcher.reader()
            for fieldname in ("text", "title", "exact", "tenant", "document_id"):
                for term in reader.lexicon(fieldname):
                    ids, weights = read_postings(reader, fieldname, term)
                    slow = read_postings_one_by_one(reader.postings(fieldname, term))
                    assert ids.tolist() == slow[0].tolist()
                    assert weights.tolist() == slow[1].tolist()
                    checked += 1
    assert checked > 500


def test_the_posting_cache_stays_within_its_bound(index: DocumentIndex) -> None:
    request = SearchRequest(tenant="acme", query="storage report system drive error budget")
    with index.searcher() as searcher:
        parsed, _ = _parse(searcher, request)
        mask = np.ones(searcher.doc_count_all(), dtype=bool)
        unbounded = PostingStore()
        expected = Snapshot(searcher, unbounded).evaluate(parsed, mask, "acme")
        bounded = PostingStore(max_postings=unbounded.cached_postings // 3)
        got = Snapshot(searcher, bounded).evaluate(parsed, mask, "acme")
    assert 0 < bounded.cached_postings <= bounded.max_postings
    assert got[0].tolist() == expected[0].tolist()
    assert got[1].tolist() == pytest.approx(expected[1].tolist())


def test_search_results_equal_a_whoosh_ranking_collapsed_by_hand(
    index: DocumentIndex, alone: DocumentIndex
) -> None:
    """Through the public API: documents ranked by their best chunk's Whoosh score (Whoosh
    over the tenant's documents alone, with the tenant's statistics as the search computes
    them: how close those are to Whoosh's own, the test above bounds)."""
    request = SearchRequest(
        tenant="acme",
        query="storage report system",
        limit=200,
        candidates=200,
        min_score=0.0,
        explain=True,
    )
    found = index.search(request)
    with alone.searcher() as searcher:
        parsed, _ = _parse(searcher, request)
        statistics = _TenantStatistics(Snapshot(searcher, PostingStore()), "acme")
        kept, searcher.weighting = searcher.weighting, TenantBM25F(statistics)
        try:
            whoosh = searcher.search(parsed, limit=None)
        finally:
            searcher.weighting = kept
        best: dict[str, float] = {}
        for hit in whoosh:
            best.setdefault(hit["document_id"], hit.score)
    assert found.total == len(best) and len(best) <= 200
    # Each document's keyword evidence is its best chunk's Whoosh score, and its keyword
    # rank is that score's (the hits themselves are ordered by the calibrated score).
    got = {hit.document_id: hit.explanation.keyword_score for hit in found.hits}  # type: ignore[union-attr]
    assert got == pytest.approx({doc: round(score, 4) for doc, score in best.items()})
    by_rank = sorted(found.hits, key=lambda hit: hit.explanation.keyword_rank)  # type: ignore[union-attr]
    scores = [hit.explanation.keyword_score for hit in by_rank]  # type: ignore[union-attr]
    assert scores == sorted(scores, reverse=True)


def test_best_per_document_equals_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        count = int(rng.integers(1, 400))
        ids = np.sort(rng.choice(5000, size=count, replace=False)).astype(np.int64)
        scores = rng.integers(1, 8, size=count).astype(np.float64)  # many ties
        documents = rng.integers(0, 60, size=5000).astype(np.int32)
        wanted = int(rng.integers(1, 30))
        best, best_scores, total = best_per_document(ids, scores, documents, wanted)
        order = sorted(range(count), key=lambda i: (-scores[i], ids[i]))
        seen: dict[int, int] = {}
        for i in order:
            seen.setdefault(int(documents[ids[i]]), i)
        expected = list(seen.values())[:wanted]
        assert total == len(seen)
        assert best.tolist() == [int(ids[i]) for i in expected]
        assert best_scores.tolist() == [float(scores[i]) for i in expected]


def _texts() -> list[str]:
    texts = [
        *QUERIES,
        *("KWDB-4001 error", "a+b", "C++ and C#", "foo/bar", "!important", "-minus +plus"),
        *("192.168.0.1", "what? why*", "field:value", "the", "ёлка Ёж", "1,000 items"),
        *("café naïve", "ＡＢＣ１２３", "がっこう", "...", "the the take take"),
        *("中华人民共和国 中华", "中华 中华人民共和国", "x\u3000y", "it's 'quoted'"),
    ]
    for name in ("xquad-en", "xquad-ru", "xquad-zh", "cranfield"):
        lines = (CORPUS / "ir" / name / "queries.jsonl").read_text(encoding="utf-8").splitlines()
        texts += [json.loads(line)["text"] for line in lines[:150]]
    return texts


def test_plain_word_queries_equal_the_parsers(index: DocumentIndex) -> None:
    built = 0
    with index.searcher() as searcher:
        for text in _texts():
            for mode, group in (
                ("exact", qparser.AndGroup),
                ("keyword", qparser.OrGroup),
                ("keyword", qparser.AndGroup),
            ):
                analysed = analyse_plain_words(searcher.schema, mode, text)
                if analysed is None:
                    continue
                built += 1
                parsed = _parser(searcher, mode, group).parse(text).normalize()
                assert _combine(analysed, group.qclass) == parsed, (mode, text)
    assert built > 1500  # the IR questions are plain words (with "?" and ",")


@pytest.mark.parametrize("text", ["x\u3000y", "(a OR b)", 'say "hi"', "it's", "a ANDNOT b"])
def test_text_with_syntax_goes_to_the_parser(index: DocumentIndex, text: str) -> None:
    with index.searcher() as searcher:
        assert analyse_plain_words(searcher.schema, "keyword", text) is None
