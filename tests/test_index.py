"""The chunk index: multilingual search, both modes, filters inside the query, tenant isolation,
atomic updates and deletes, concurrent writers and fresh readers."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
import time
import tracemalloc
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from whoosh import index as whoosh_index
from whoosh.writing import SegmentWriter

from indexer import (
    Chunk,
    DocumentIndex,
    IndexedDocument,
    QueryUnprocessable,
    SearchRequest,
)
from indexer.merging import TieredMerge
from indexer.schema import build_schema
from indexer.whoosh_index import _chunk_fields
from tests.conftest import CORPUS, ROOT


def document(
    doc_id: str,
    text: str,
    tenant: str = "acme",
    version: int = 1,
    **facts: object,
) -> IndexedDocument:
    pages = text.split("\f")
    chunks = [Chunk(page, number, 1, page.count("\n") + 1) for number, page in enumerate(pages, 1)]
    return IndexedDocument(
        doc_id,
        tenant,
        str(facts.pop("collection", "default")),
        f"{doc_id}.txt",
        version,
        chunks,
        **facts,  # type: ignore[arg-type]
    )


def ids(index: DocumentIndex, query: str, tenant: str = "acme", **options: object) -> list[str]:
    request = SearchRequest(tenant=tenant, query=query, **options)  # type: ignore[arg-type]
    return [hit.document_id for hit in index.search(request).hits]


@pytest.fixture
def index(tmp_path: Path) -> DocumentIndex:
    index = DocumentIndex(tmp_path / "index")
    with index.batch() as batch:
        batch.replace(
            document("zh", "本款固态硬盘是一款微型尺寸的产品，无需驱动程序就可支持主流操作系统。")
        )
        batch.replace(document("ru", "Система хранит документы и позволяет быстро искать их."))
        batch.replace(
            document("en", "The indexer indexed thousands of reports. Error KWDB-4001 in v2.3.0.")
        )
        batch.replace(document("other", "Система хранит документы KWDB-4001 硬盘", tenant="rival"))
    return index


def test_chinese_russian_and_english_queries_find_their_documents(index: DocumentIndex) -> None:
    assert ids(index, "硬盘") == ["zh"]  # a 2-character word inside a sentence
    assert ids(index, "驱动") == ["zh"]
    assert ids(index, "документами") == ["ru"]  # another inflection of "документы"
    assert ids(index, "поиском искать") == ["ru"]
    assert ids(index, "indexing report") == ["en"]
    assert ids(index, "KWDB-4001", mode="exact") == ["en"]
    assert ids(index, "v2.3.0", mode="exact") == ["en"]


def test_another_tenants_documents_never_come_back(index: DocumentIndex) -> None:
    for query in ("硬盘", "документы", "KWDB-4001", "система", "*", "KWDB OR 硬盘", "tenant:rival"):
        for mode in ("keyword", "exact"):
            try:
                found = ids(index, query, mode=mode)
            except QueryUnprocessable:
                continue
            assert "other" not in found, (query, mode)
    assert ids(index, "KWDB-4001", tenant="rival", mode="exact") == ["other"]


def test_exact_needs_every_term_and_keeps_phrases(index: DocumentIndex) -> None:
    # No stemming in exact mode: "report" is not "reports"; keyword mode stems both.
    assert ids(index, "indexer report", mode="exact") == []
    assert ids(index, "indexer report") == ["en"]
    assert ids(index, "indexer reports", mode="exact") == ["en"]
    assert ids(index, '"thousands of reports"', mode="exact") == ["en"]
    assert ids(index, '"reports of thousands"', mode="exact") == []
    assert ids(index, "indexer missingword", mode="keyword") == ["en"]  # OR with AND bonus


def test_bad_syntax_never_raises_and_empty_queries_are_unprocessable(index: DocumentIndex) -> None:
    for query in ('"unbalanced', "((( indexer", "indexer AND OR", "title:indexer", "index*"):
        index.search(SearchRequest(tenant="acme", query=query))
    assert ids(index, '"unbalanced indexer') == ["en"]
    for query in ("", "   ", "the of and", "!!! ???", "x" * 3000):
        with pytest.raises(QueryUnprocessable):
            index.search(SearchRequest(tenant="acme", query=query))


def test_filters_run_inside_the_query(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    with index.batch() as batch:
        for number in range(12):
            batch.replace(
                document(
                    f"d{number}",
                    f"quarterly report number {number}",
                    collection="finance" if number % 2 else "legal",
                    document_type="report" if number % 3 else "memo",
                    submitter=f"user{number % 4}",
                    created_at=datetime(2024, 1, 1 + number, 12, tzinfo=UTC),
                )
            )
    everything = index.search(SearchRequest(tenant="acme", query="report", limit=5))
    assert everything.total == 12 and len(everything.hits) == 5
    page_two = index.search(SearchRequest(tenant="acme", query="report", limit=5, offset=10))
    assert len(page_two.hits) == 2
    assert set(ids(index, "report", limit=20, collection="finance")) == {
        f"d{n}" for n in range(12) if n % 2
    }
    assert set(ids(index, "report", limit=20, document_type="memo")) == {"d0", "d3", "d6", "d9"}
    assert set(ids(index, "report", limit=20, submitter="user1")) == {"d1", "d5", "d9"}
    window = ids(index, "report", limit=20, date_from=date(2024, 1, 3), date_to=date(2024, 1, 5))
    assert set(window) == {"d2", "d3", "d4"}
    combined = ids(
        index,
        "report",
        limit=20,
        collection="finance",
        document_type="report",
        date_from=date(2024, 1, 1),
    )
    assert set(combined) == {"d1", "d5", "d7", "d11"}


def test_hits_carry_page_lines_a_bounded_snippet_and_scores(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    filler = "\n".join(f"line {n} of ordinary text" for n in range(5))
    pages = [
        Chunk("intro", 1, 1, 1),
        Chunk(f"{filler}\nthe turbine blade cracked", 2, 3, 8),
        Chunk(filler, 3, 10, 14),
    ]
    index.replace_document(IndexedDocument("long", "acme", "c", "long.txt", 1, pages))
    index.replace_document(document("other", "a blade of grass " * 40))
    results = index.search(SearchRequest(tenant="acme", query="turbine blade", snippet_chars=120))
    best = results.hits[0]
    assert (best.document_id, best.page, best.line_start, best.line_end) == ("long", 2, 3, 8)
    assert "**turbine**" in best.snippet and len(best.snippet) <= 240
    # Calibrated scores: the chunk holding both words is very likely relevant, the one with
    # only the commoner word less so; every matching document is listed when no floor is set.
    assert best.score > 0.8 and len(results.hits) == results.total
    every = index.search(
        SearchRequest(tenant="acme", query="turbine blade", snippet_chars=120, min_score=0.0)
    )
    scores = [hit.score for hit in every.hits]
    assert len(scores) == every.total == 2 and scores[0] == best.score > scores[1] > 0


def test_update_replaces_and_delete_removes_every_chunk(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    index.replace_document(document("doc", "alpha one\fbeta two\fgamma three"))
    assert index.chunk_count("doc") == 3
    index.replace_document(document("doc", "delta four", version=2))
    assert index.chunk_count("doc") == 1 and index.indexed_versions("doc") == {2}
    assert ids(index, "alpha") == [] and ids(index, "delta") == ["doc"]
    index.delete_documents(["doc"])
    assert index.chunk_count("doc") == 0 and ids(index, "delta") == []
    assert index.document_ids() == set()


def test_single_document_commits_do_not_pile_up_segments(tmp_path: Path) -> None:
    """Each index-queue task commits one document; tiny segments are folded together, so
    searches do not slow down with every commit until the scheduled optimize."""
    index = DocumentIndex(tmp_path / "index")
    for number in range(60):
        index.replace_document(document(f"doc{number}", f"storage report {number}\fpage two"))
    index.delete_documents(["doc3"])
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) <= 8
        assert searcher.doc_count() == 59 * 2
    found = index.search(SearchRequest(tenant="acme", query="storage", limit=100))
    assert found.total == 59 and "doc3" not in {hit.document_id for hit in found.hits}
    index.optimize()
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) == 1


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from indexer import Chunk, DocumentIndex, IndexedDocument
    index = DocumentIndex(Path(sys.argv[1]), lock_timeout=60)
    prefix = sys.argv[2]
    for number in range(25):
        text = f"shared words from writer {prefix} number {number}"
        index.replace_document(
            IndexedDocument(f"{prefix}{number}", "acme", "c", "n", 1, [Chunk(text)])
        )
    """
)


def test_two_writer_processes_at_once_lose_nothing(tmp_path: Path) -> None:
    root = tmp_path / "index"
    DocumentIndex(root)  # created once, as a worker does at start
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(root), prefix], cwd=ROOT)
        for prefix in ("a", "b")
    ]
    assert [writer.wait(120) for writer in writers] == [0, 0]
    index = DocumentIndex(root)
    expected = {f"{prefix}{n}" for prefix in "ab" for n in range(25)}
    assert index.document_ids() == expected
    assert index.search(SearchRequest(tenant="acme", query="shared words", limit=100)).total == 50


KILLED_WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from indexer import DocumentIndex
    from tests.test_index import document
    index = DocumentIndex(Path(sys.argv[1]))
    index.replace_document(document("kept", "committed before the kill"))
    with index.batch() as batch:
        for n in range(50):
            batch.replace(document(f"lost{n}", "never committed words " * 200))
        print("holding the lock", flush=True)
        time.sleep(600)
    """
)


def test_a_writer_killed_mid_batch_leaves_no_stale_lock(tmp_path: Path) -> None:
    # kill -9 of the index worker mid-commit: the next writer must neither wait for a lock
    # nobody holds nor see what the dead one had not committed.
    root = tmp_path / "index"
    writer = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(root)], cwd=ROOT, stdout=subprocess.PIPE
    )
    assert writer.stdout is not None and writer.stdout.readline() == b"holding the lock\n"
    writer.kill()
    writer.wait(10)
    writer.stdout.close()
    index = DocumentIndex(root, lock_timeout=5)
    started = time.monotonic()
    index.replace_document(document("after", "written after the kill"))
    assert time.monotonic() - started < 2.0
    assert index.document_ids() == {"kept", "after"}
    assert ids(index, "committed") == ["kept"] and ids(index, "never") == []


def test_a_reader_sees_a_commit_of_another_process_within_a_second(tmp_path: Path) -> None:
    root = tmp_path / "index"
    reader = DocumentIndex(root)
    assert ids(reader, "writer") == []
    writer = subprocess.run(
        [sys.executable, "-c", WRITER, str(root), "z"], cwd=ROOT, timeout=120, check=True
    )
    assert writer.returncode == 0
    committed = time.monotonic()
    while not ids(reader, "writer", limit=50):
        assert time.monotonic() - committed < 1.0
        time.sleep(0.01)
    assert len(ids(reader, "writer", limit=50)) == 25


def test_quoted_phrases_rank_first_in_keyword_mode(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    with index.batch() as batch:
        batch.replace(document("loose", "code error report: KWDB-4001 was the code of the error"))
        batch.replace(document("phrase", "error code KWDB-4001 raised by the loader"))
    assert ids(index, '"error code"') == ["phrase", "loose"]  # both hold the words
    assert ids(index, '"error code"', mode="exact") == ["phrase"]
    assert ids(index, '"固态硬盘"', mode="exact") == []


def test_a_tenant_or_filter_with_no_documents_finds_nothing(index: DocumentIndex) -> None:
    # An empty set of allowed chunks must never read as "no filter".
    for request in (
        SearchRequest(tenant="nobody", query="KWDB-4001"),
        SearchRequest(tenant="acme", query="KWDB-4001", document_type="unknown"),
        SearchRequest(tenant="acme", query="KWDB-4001", date_from=date(2030, 1, 1)),
    ):
        results = index.search(request)
        assert results.hits == [] and results.total == 0


def index_contents(path: Path) -> tuple[object, ...]:
    """Every term's postings (ids, weights, encoded values), field lengths, stored fields."""
    with whoosh_index.open_dir(str(path)).reader() as reader:
        postings = {}
        for field, term in reader.all_terms():
            matcher, found = reader.postings(field, term), []
            while matcher.is_active():
                found.append((matcher.id(), matcher.weight(), matcher.value()))
                matcher.next()
            postings[field, term] = found
        docs = range(reader.doc_count_all())
        lengths = {f: [reader.doc_field_length(d, f) for d in docs] for f in ("text", "exact")}
        return postings, lengths, [reader.stored_fields(d) for d in docs]


def test_the_writer_indexes_chunks_as_whoosh_itself_would(tmp_path: Path) -> None:
    # The writer analyses each chunk once for `text` and `exact` (index_terms) and writes
    # the postings itself: the segment must hold exactly what Whoosh's add_document makes.
    docs = [
        document("zh", "中华人民共和国成立了，首都在北京。北京北京。\f上海是一个国际大都市。"),
        document("ru", "Ёлка и ёлка: система ищет документы, документы, документы.", language="ru"),
        document("en", "The the THE KWDB-4001 v2.3.0 user_profile a-a 192.168.0.1 c++ and 1,000."),
        document("ja", "ひらがなとカタカナ ア 東京タワー", document_type="memo", submitter="kim"),
        document("stop", "the and of", created_at=datetime(2024, 5, 1, tzinfo=UTC)),
    ]
    ours = DocumentIndex(tmp_path / "ours")
    with ours.batch() as batch:
        for doc in docs:
            batch.replace(doc)
    (tmp_path / "plain").mkdir()
    plain = whoosh_index.create_in(str(tmp_path / "plain"), build_schema())
    with plain.writer() as writer:
        for doc in docs:
            for fields in _chunk_fields(doc):
                writer.add_document(**fields)
    assert index_contents(ours.path) == index_contents(tmp_path / "plain")


def test_merges_write_what_whoosh_own_merges_write(tmp_path: Path) -> None:
    # Merged segments' postings are streamed beside the new chunks' (not copied into Whoosh's
    # pool): the merged segments must hold exactly what Whoosh's own merge makes of the same
    # commits, deleted chunks dropped, through the tiered policy and the full optimize.
    policy = TieredMerge(factor=2, base=1)
    commits = [
        [
            document(f"d{n}", f"Документ {n}: 北京 report{n} shared words\fpage two {n}")
            for n in range(4)
        ],
        [document("d1", "Версия 2: 上海 replaced text", version=2), document("d5", "five 五")],
        [document("d6", "six шесть"), document("d0", "zero again ноль", version=2)],
        [document("d7", "seven", language="en")],
    ]
    deletes = [[], ["d2"], [], ["d5"]]
    ours = DocumentIndex(tmp_path / "ours", merge_policy=policy)
    (tmp_path / "plain").mkdir()
    plain = whoosh_index.create_in(str(tmp_path / "plain"), build_schema())
    for docs, gone in zip(commits, deletes, strict=True):
        with ours.batch() as batch:
            for doc in docs:
                batch.replace(doc)
            for doc_id in gone:
                batch.delete(doc_id)
        writer = SegmentWriter(plain)
        for doc in docs:
            writer.delete_by_term("document_id", doc.document_id)
            for fields in _chunk_fields(doc):
                writer.add_document(**fields)
        for doc_id in gone:
            writer.delete_by_term("document_id", doc_id)
        writer.commit(mergetype=policy)
        assert index_contents(ours.path) == index_contents(tmp_path / "plain")
    with ours.searcher() as searcher:
        assert len(searcher.leaf_searchers()) < len(commits)  # the policy did merge
    ours.optimize()
    SegmentWriter(plain).commit(optimize=True)
    assert index_contents(ours.path) == index_contents(tmp_path / "plain")
    assert ids(ours, "上海") == ["d1"] and ids(ours, "report2") == []


def test_a_batch_reads_the_segments_in_place_without_copying_them(tmp_path: Path) -> None:
    # The writer opens a reader of every segment for a batch's deletes. Whoosh's own storage
    # copied each whole segment file into the heap for it, so the index worker's memory grew
    # with the index (+24 % over a 10,000-document run).
    index = DocumentIndex(tmp_path / "index", merge_policy=TieredMerge(factor=1000))
    rng = random.Random(7)
    vocabulary = [f"term{number}" for number in range(5000)]
    for part in range(4):
        with index.batch() as batch:
            for number in range(150):
                text = " ".join(rng.choices(vocabulary, k=300))
                batch.replace(document(f"d{part}-{number}", text))
    segment_bytes = sum(path.stat().st_size for path in index.path.glob("*.seg"))
    assert segment_bytes > 2 * 2**20
    tracemalloc.start()
    try:
        with index.batch() as batch:
            for number in range(40):
                batch.delete(f"d{number % 4}-{number}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < segment_bytes / 4, (peak, segment_bytes)
    remaining = index.document_ids()
    assert len(remaining) == 600 - 40 and "d1-1" not in remaining and "d1-2" in remaining


def _cranfield(first: int, count: int, tenant: str) -> list[IndexedDocument]:
    lines = (CORPUS / "ir" / "cranfield" / "corpus.jsonl").read_text().splitlines()
    found = []
    for line in lines[first : first + count]:
        record = json.loads(line)
        # Keyed as the catalog keys them: the same id in two tenants is two documents.
        found.append(document(f"{tenant}/cran-{record['id']}", record["text"], tenant=tenant))
    return found


def test_a_tenants_scores_are_the_same_with_or_without_another_tenants_documents(
    tmp_path: Path,
) -> None:
    """The hostile finding: with index-wide statistics, tenant B's scores moved when tenant A
    added documents — enough to learn which words A holds. Every score B sees, in both modes
    and with a phrase, must be the same before and after A indexes (and deletes) documents,
    even documents under the same ids."""
    index = DocumentIndex(tmp_path / "index")
    with index.batch() as batch:
        for held in _cranfield(0, 200, "bravo"):
            batch.replace(held)
    queries = [
        json.loads(line)["text"]
        for line in (CORPUS / "ir" / "cranfield" / "queries.jsonl").read_text().splitlines()[:25]
    ] + ['"boundary layer"', "pressure NOT supersonic"]

    def every_score() -> list[tuple[str, str, tuple[tuple[str, float], ...]]]:
        seen = []
        for text in queries:
            for mode in ("keyword", "exact"):
                request = SearchRequest(tenant="bravo", query=text, mode=mode, limit=100)
                try:
                    hits = index.search(request).hits
                except QueryUnprocessable:
                    continue
                seen.append((text, mode, tuple((hit.document_id, hit.score) for hit in hits)))
        return seen

    before = every_score()
    assert sum(len(hits) for _, _, hits in before) > 500, "too few hits to prove anything"
    with index.batch() as batch:  # tenant A: other documents, and the first 100 again
        for held in _cranfield(150, 600, "alpha"):
            batch.replace(held)
    index.delete_documents([f"alpha/cran-{n}" for n in range(150, 450)])
    assert every_score() == before
    assert ids(index, "slipstream", tenant="alpha") != []
