"""The two ways a filtered search is scored agree: visiting the few allowed chunks
(`search_allowed`) and Whoosh's walk over every posting with a filter. Counting matches from
term postings (`matching_chunks`) agrees with Whoosh's own unscored pass."""

from __future__ import annotations

import random

import pytest
from whoosh import query

from indexer import Chunk, DocumentIndex, IndexedDocument, SearchRequest
from indexer.collect import matching_chunks, prefer_allowed, search_allowed
from indexer.search import _parse

WORDS = [
    *("storage", "drive", "report", "system", "error", "index", "search", "document"),
    *("tenant", "policy", "budget", "硬盘", "驱动", "系统", "文档"),
    *("документ", "система", "поиск", "отчёт"),
]


def _documents(count: int, seed: int) -> list[IndexedDocument]:
    rng = random.Random(seed)
    documents = []
    for number in range(count):
        chunks = [
            Chunk(" ".join(rng.choices(WORDS, k=rng.randint(5, 30))), page, 1, 1)
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
                document_type=rng.choice(("report", "memo")),
            )
        )
    return documents


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> DocumentIndex:
    """Three segments (three commits), one of them with deletions."""
    index = DocumentIndex(tmp_path_factory.mktemp("collect") / "index")
    documents = _documents(300, seed=7)
    for first in range(0, 300, 100):
        with index.batch() as batch:
            for document in documents[first : first + 100]:
                batch.replace(document)
    index.delete_documents([f"doc-{n}" for n in range(0, 300, 9)])
    return index


QUERIES = ["storage", "硬盘 report", "документ поиск", "error index budget", '"storage drive"']


@pytest.mark.parametrize("text", QUERIES)
@pytest.mark.parametrize("mode", ["keyword", "exact"])
def test_visiting_allowed_chunks_scores_like_whoosh_filter(
    index: DocumentIndex, text: str, mode: str
) -> None:
    request = SearchRequest(tenant="acme", query=text, mode=mode)  # type: ignore[arg-type]
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) == 3
        parsed, _ = _parse(searcher, request)
        rng = random.Random(text)
        allowed = set(rng.sample(range(searcher.doc_count_all()), 150))
        allowed &= set(searcher.docs_for_query(query.Term("tenant", "acme")))
        whoosh = searcher.search(parsed, filter=allowed, limit=None)
        expected = [
            (round(whoosh.score(n), 6), whoosh.docnum(n)) for n in range(whoosh.scored_length())
        ]
        ours = search_allowed(searcher, parsed, sorted(allowed))
        got = [(round(ours.score(n), 6), ours.docnum(n)) for n in range(ours.scored_length())]
    assert expected, "the sample must hold matches, or the comparison proves nothing"
    assert sorted(got, key=lambda item: (-item[0], item[1])) == sorted(
        expected, key=lambda item: (-item[0], item[1])
    )


@pytest.mark.parametrize(
    "text", [*QUERIES, "storage AND drive", "storage NOT drive", "(硬盘 OR система) AND report"]
)
def test_matching_chunks_from_postings_equal_whoosh_unscored_pass(
    index: DocumentIndex, text: str
) -> None:
    request = SearchRequest(tenant="acme", query=text)
    with index.searcher() as searcher:
        parsed, _ = _parse(searcher, request)
        live = set(searcher.docs_for_query(query.Every()))
        # Postings (and Whoosh's NOT) may still list deleted chunks; callers intersect with
        # the allowed chunks, which are live.
        expected = set(searcher.docs_for_query(parsed)) & live
        assert expected
        assert matching_chunks(searcher, parsed) & live == expected


def test_narrow_filters_visit_allowed_chunks_and_broad_ones_walk_postings(
    index: DocumentIndex,
) -> None:
    request = SearchRequest(tenant="acme", query="storage report")
    with index.searcher() as searcher:
        parsed, _ = _parse(searcher, request)
        frequencies: dict[tuple[str, bytes], int] = {}
        assert prefer_allowed(searcher, parsed, 3, frequencies)
        assert not prefer_allowed(searcher, parsed, searcher.doc_count_all(), frequencies)
        assert frequencies  # looked up once per searcher


def test_filtered_search_finds_exactly_the_documents_the_filters_allow(
    index: DocumentIndex,
) -> None:
    """Through the public API, a narrow filter (allowed path) and a broad one (postings path)
    return exactly the live documents of the tenant and type that hold the word."""
    documents = {d.document_id: d for d in _documents(300, seed=7)}
    deleted = {f"doc-{n}" for n in range(0, 300, 9)}
    for document_type in (None, "memo"):
        expected = {
            doc_id
            for doc_id, d in documents.items()
            if d.tenant == "acme"
            and doc_id not in deleted
            and document_type in (None, d.document_type)
            and any("storage" in chunk.text.split() for chunk in d.chunks)
        }
        request = SearchRequest(
            tenant="acme", query="storage", document_type=document_type, limit=500
        )
        found = index.search(request)
        assert {hit.document_id for hit in found.hits} == expected
        assert found.total == len(expected)
        scores = [hit.score for hit in found.hits]
        assert scores == sorted(scores, reverse=True) and scores[0] == 1.0
