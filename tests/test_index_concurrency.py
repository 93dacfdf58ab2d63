"""Searches of several threads at once: none waits for another's searcher, ``ping`` waits for
no search, concurrent answers equal serial ones (across commits too), searchers stay bounded,
and a query over the cost limits is refused at once, naming the limit.

The index holds the first chapters of War and Peace (read in place from the shared corpus)
as documents of two tenants, with collections, types and dates to filter on.
"""

from __future__ import annotations

import contextlib
import functools
import random
import re
import shutil
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from whoosh.query import And, Term

from indexer import (
    Chunk,
    DocumentIndex,
    IndexedDocument,
    QueryUnprocessable,
    SearcherBusy,
    SearchLimits,
    SearchOverdue,
    SearchRequest,
    SearchResults,
    replace_folder,
)
from indexer.budget import PHRASE_COST
from indexer.schema import build_schema
from tests.conftest import DOCS

BOOK = DOCS / "unstructured__book-war-and-peace-1225p.txt"
# About 400 chunks: enough for posting lists of many blocks, quick to index.
BOOK_CHARS = 350_000
CHUNKS_PER_DOCUMENT = 8

REQUESTS = [
    SearchRequest("acme", "prince andrew", limit=20),
    SearchRequest("acme", "anna pavlovna reception", limit=5, offset=2),
    SearchRequest("acme", '"old prince" princess', limit=20),
    SearchRequest("acme", '"said the" countess', mode="exact", limit=20),
    SearchRequest("acme", "pierre NOT anna", limit=20),
    SearchRequest("acme", "moscow war", collection="letters", limit=20),
    SearchRequest("acme", "emperor napoleon", document_type="novel", date_from=date(2021, 1, 1)),
    SearchRequest("rival", "prince andrew", limit=20),
    SearchRequest("rival", "natasha OR sonya", limit=20),
    SearchRequest("rival", '"prince vasili"', mode="exact", date_to=date(2022, 6, 1)),
]


def _chunks() -> list[str]:
    text = BOOK.read_text(encoding="utf-8")[:BOOK_CHARS]
    chunks, current = [], ""
    for paragraph in text.split("\n\n"):
        current += paragraph + "\n\n"
        if len(current) > 700:
            chunks.append(current)
            current = ""
    return chunks


def _documents(chunks: list[str], version: int = 1) -> list[IndexedDocument]:
    documents = []
    for number, first in enumerate(range(0, len(chunks), CHUNKS_PER_DOCUMENT)):
        part = chunks[first : first + CHUNKS_PER_DOCUMENT]
        documents.append(
            IndexedDocument(
                f"wp-{number}",
                ("acme", "rival")[number % 2],
                ("letters", "chapters")[number % 3 == 0],
                f"wp-{number}.txt",
                version,
                [Chunk(text, page) for page, text in enumerate(part, 1)],
                document_type=("novel", "notes")[number % 4 == 0],
                created_at=datetime(2019 + number % 5, 3, 1, tzinfo=UTC),
            )
        )
    return documents


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The index, in two segments, with some documents deleted."""
    root = tmp_path_factory.mktemp("concurrency") / "index"
    index = DocumentIndex(root)
    documents = _documents(_chunks())
    half = len(documents) // 2
    for part in (documents[:half], documents[half:]):
        with index.batch() as batch:
            for document in part:
                batch.replace(document)
    index.delete_documents(["wp-3", "wp-10"])
    index.close()
    return root


def _copy(folder: Path, tmp_path: Path) -> Path:
    """A copy of the index (the module's own, built above), for a test that commits to it."""
    root = tmp_path / "index"
    shutil.copytree(folder, root)
    return root


def _serially(root: Path) -> list[SearchResults]:
    index = DocumentIndex(root)  # fresh caches
    try:
        return [index.search(request) for request in REQUESTS]
    finally:
        index.close()


@contextlib.contextmanager
def _held(index: DocumentIndex, count: int) -> Iterator[None]:
    """``count`` threads, each holding a searcher until the block ends (not before: a holder
    let go by its time limit fails the test)."""
    release = threading.Event()
    held = threading.Barrier(count + 1, timeout=30)
    let_go_in_time: list[bool] = []

    def hold() -> None:
        with index.searcher():
            held.wait()
            let_go_in_time.append(release.wait(30))

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    try:
        held.wait()  # every thread holds its searcher
        yield
    finally:
        release.set()
        for thread in threads:
            thread.join(30)
    assert let_go_in_time == [True] * count


def test_a_held_searcher_does_not_delay_another_search(folder: Path) -> None:
    index = DocumentIndex(folder)
    expected = index.search(REQUESTS[0])
    with _held(index, 1):
        # Done while the other searcher is held (had they waited for it, they would have
        # waited for the end of the block).
        assert index.search(REQUESTS[0], within=10) == expected
        assert index.search(REQUESTS[7], within=10).hits
    index.close()


def test_a_search_that_may_not_wait_takes_an_idle_searcher_while_others_search(
    folder: Path,
) -> None:
    index = DocumentIndex(folder)
    expected = index.search(REQUESTS[2])
    with _held(index, 2):
        pass  # two searchers were opened; both are idle again
    with _held(index, 1):
        assert index.search(REQUESTS[2], wait=False) == expected
    with _held(index, 2), pytest.raises(SearcherBusy):
        index.search(REQUESTS[2], wait=False)  # none idle: it does not open one
    index.close()


def test_ping_answers_while_every_searcher_is_busy(folder: Path) -> None:
    index = DocumentIndex(folder)
    chunks = index.ping()
    with index.searcher() as searcher:
        assert chunks == searcher.doc_count() > 300
    with _held(index, 3):
        with pytest.raises(SearcherBusy):
            index.search(REQUESTS[0], wait=False)  # every searcher is in use
        started = time.monotonic()
        assert index.ping() == chunks
        assert time.monotonic() - started < 1.0
    index.close()


def test_concurrent_searches_equal_serial_ones(folder: Path) -> None:
    expected = _serially(folder)
    assert all(result.hits for result in expected)
    index = DocumentIndex(folder)  # cold: the threads race to fill the shared caches
    found = _search_in_threads(index, threads=8, rounds=3)
    for position, result in found:
        assert result == expected[position], REQUESTS[position]
    assert index.open_searchers <= 8
    index.close()


@contextlib.contextmanager
def _switching_often() -> Iterator[None]:
    """Threads switch every 10 µs instead of 5 ms: races between searches show far sooner."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _search_in_threads(
    index: DocumentIndex, threads: int, rounds: int, between: threading.Event | None = None
) -> list[tuple[int, SearchResults]]:
    """Every request ``rounds`` times in each thread, in shuffled orders, all starting at
    once; ``between`` is set when half the searches are done."""
    start = threading.Barrier(threads, timeout=30)
    found: list[tuple[int, SearchResults]] = []
    errors: list[BaseException] = []
    done = threading.Semaphore(0)
    half = threads * rounds * len(REQUESTS) // 2

    def run(seed: int) -> None:
        order = [n for _ in range(rounds) for n in range(len(REQUESTS))]
        random.Random(seed).shuffle(order)
        try:
            start.wait()
            for position in order:
                found.append((position, index.search(REQUESTS[position])))
                done.release()
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(seed,)) for seed in range(threads)]
    with _switching_often():
        for worker in workers:
            worker.start()
        if between is not None:
            for _ in range(half):
                assert done.acquire(timeout=30)
            between.set()
        for worker in workers:
            worker.join(60)
    assert not errors, errors
    assert len(found) == threads * rounds * len(REQUESTS)
    return found


def test_concurrent_searches_across_a_commit_see_one_commit_each(
    folder: Path, tmp_path: Path
) -> None:
    root = _copy(folder, tmp_path)
    before = _serially(root)
    index = DocumentIndex(root)
    writer = DocumentIndex(root)
    halfway = threading.Event()

    def commit() -> None:
        halfway.wait(60)
        chunks = _chunks()
        with writer.batch() as batch:
            # New versions of three documents (other text: other scores), one deleted.
            for document in _documents(chunks[::-1])[:3]:
                batch.replace(document)
            batch.delete("wp-4")

    committer = threading.Thread(target=commit)
    committer.start()
    found = _search_in_threads(index, threads=6, rounds=2, between=halfway)
    committer.join(60)
    after = _serially(root)
    assert before != after
    for position, result in found:
        assert result in (before[position], after[position]), REQUESTS[position]
    # Once the commit has landed, every search sees it.
    for position, result in _search_in_threads(index, threads=6, rounds=1):
        assert result == after[position], REQUESTS[position]
    index.close()


def test_searchers_stay_bounded_over_many_searches_and_commits(
    folder: Path, tmp_path: Path
) -> None:
    root = _copy(folder, tmp_path)
    index = DocumentIndex(root, max_idle_searchers=3)
    extra = _documents(_chunks()[:40])
    for number in range(4):
        _search_in_threads(index, threads=8, rounds=1)
        assert index.open_searchers <= 3  # idle ones only, at most max_idle
        index.replace_document(extra[number])  # a commit: those searchers are out of date
    index.search(REQUESTS[0])
    assert index.open_searchers == 1  # the old commit's searchers were closed
    with _held(index, 5):
        assert index.open_searchers == 5
    assert index.open_searchers == 3  # two closed on return
    index.close()
    assert index.open_searchers == 0


def test_past_max_searchers_a_search_waits_for_one_to_come_back(
    folder: Path, tmp_path: Path
) -> None:
    root = _copy(folder, tmp_path)
    index = DocumentIndex(root, max_searchers=2)
    expected = index.search(REQUESTS[1])
    with _held(index, 2):
        with pytest.raises(SearchOverdue):  # waited for one, up to its deadline
            index.search(REQUESTS[1], within=0.2)
        assert index.open_searchers == 2
    assert index.search(REQUESTS[1], within=10) == expected
    # At the bound, the idle searchers of an older commit make way for one of the latest.
    gone = expected.hits[0].document_id
    index.delete_documents([gone])
    after = index.search(REQUESTS[1], within=10)
    assert gone not in {hit.document_id for hit in after.hits}
    assert index.open_searchers == 1
    index.close()


def test_a_swapped_in_folder_is_picked_up(folder: Path, tmp_path: Path) -> None:
    root = _copy(folder, tmp_path)
    index = DocumentIndex(root)
    assert index.search(REQUESTS[0]).hits
    rebuilt = DocumentIndex(root, folder="building")
    rebuilt.replace_document(
        IndexedDocument("fresh", "acme", "c", "fresh.txt", 1, [Chunk("prince andrew anew")])
    )
    rebuilt.close()
    replace_folder(root, root / "building")
    with pytest.raises(SearcherBusy):  # its searcher is of the old folder
        index.search(REQUESTS[0], wait=False)
    assert [hit.document_id for hit in index.search(REQUESTS[0]).hits] == ["fresh"]
    assert index.ping() == 1 and index.open_searchers == 1
    index.close()


# --- the cost limits ----------------------------------------------------------------------------
@functools.cache
def _book_words() -> list[str]:
    return re.findall(r"[a-z]+", BOOK.read_text(encoding="utf-8")[:BOOK_CHARS].lower())


def _common_phrases(count: int) -> str:
    """``count`` quoted two-word phrases of common words of the book, as an attacker wrote."""
    words = _book_words()
    pairs = Counter(f"{a} {b}" for a, b in zip(words, words[1:], strict=False) if len(a + b) <= 6)
    common = [pair for pair, _ in pairs.most_common(20)]
    return " ".join(f'"{common[n % len(common)]}"' for n in range(count))


def test_a_query_of_200_common_phrases_is_refused_at_once(folder: Path) -> None:
    index = DocumentIndex(folder)
    text = _common_phrases(200)
    assert 1600 <= len(text) <= 2000
    for mode in ("keyword", "exact"):
        started = time.monotonic()
        with pytest.raises(QueryUnprocessable, match="200 phrases; at most 16"):
            index.search(SearchRequest("acme", text, mode=mode))  # type: ignore[arg-type]
        assert time.monotonic() - started < 0.1
    index.close()


def test_phrases_up_to_the_limit_run(folder: Path) -> None:
    index = DocumentIndex(folder)
    assert index.search(SearchRequest("acme", _common_phrases(16))).total
    with pytest.raises(QueryUnprocessable, match="17 phrases; at most 16"):
        index.search(SearchRequest("acme", _common_phrases(17)))
    # Words the analyser splits are phrases too: Chinese words in exact mode.
    chinese = " ".join(chr(0x4E00 + 2 * n) + chr(0x4E01 + 2 * n) for n in range(17))
    with pytest.raises(QueryUnprocessable, match="17 phrases; at most 16"):
        index.search(SearchRequest("acme", chinese, mode="exact"))
    index.close()


def _distinct_words(count: int) -> str:
    """``count`` words of the book with distinct stems (one term each in keyword mode)."""
    field = build_schema()["text"]
    words, stems = [], set()
    for word in _book_words():
        tokens = list(field.process_text(word, mode="query"))
        if len(tokens) == 1 and tokens[0] not in stems:
            stems.add(tokens[0])
            words.append(word)
            if len(words) == count:
                return " ".join(words)
    raise AssertionError("not enough words")


def test_terms_up_to_the_limit_run(folder: Path) -> None:
    index = DocumentIndex(folder)
    assert index.search(SearchRequest("acme", _distinct_words(64))).total
    started = time.monotonic()
    with pytest.raises(QueryUnprocessable, match="65 distinct search terms.*at most 64"):
        index.search(SearchRequest("acme", _distinct_words(65)))
    assert time.monotonic() - started < 0.1
    # A range is not parsed (it would expand over every tenant's lexicon): its words are words.
    assert index.search(SearchRequest("acme", "prince [a TO z]")).total
    index.close()


def _frequency(index: DocumentIndex, terms: list[tuple[str, str]], tenant: str = "acme") -> int:
    """The tenant's live chunks holding each term, summed: what its cost budget counts."""
    with index.searcher() as searcher:
        return sum(
            len(searcher.search(And([Term(field, text), Term("tenant", tenant)]), limit=None))
            for field, text in terms
        )


def test_postings_up_to_the_limit_run(folder: Path) -> None:
    index = DocumentIndex(folder)
    # Scored from arrays: each term's postings once (the stem in both fields).
    words = _frequency(index, [(f, s) for f in ("title", "text") for s in ("princ", "andrew")])
    # A phrase compares its words' positions: their postings count PHRASE_COST times.
    phrase = words + PHRASE_COST * _frequency(index, [("exact", "prince"), ("exact", "andrew")])
    assert words > 100
    index.close()
    for text, estimate in (("prince andrew", words), ('"prince andrew"', phrase)):
        limits = SearchLimits(max_postings=estimate)
        with contextlib.closing(DocumentIndex(folder, limits=limits)) as at_limit:
            assert at_limit.search(SearchRequest("acme", text)).total
        limits = SearchLimits(max_postings=estimate - 1)
        refused = pytest.raises(QueryUnprocessable, match=f"more than {estimate - 1:,} postings")
        with contextlib.closing(DocumentIndex(folder, limits=limits)) as over, refused:
            over.search(SearchRequest("acme", text))


def test_each_limit_is_its_own(folder: Path) -> None:
    """A query over one limit is refused for that one alone: it runs when only that limit is
    raised."""
    with contextlib.closing(DocumentIndex(folder)) as index:
        postings = _frequency(index, [("text", "princ")])
    cases = [
        (_common_phrases(17), "phrases", SearchLimits(), SearchLimits(max_phrases=17)),
        (_distinct_words(65), "distinct search terms", SearchLimits(), SearchLimits(max_terms=65)),
        ("prince andrew", "postings", SearchLimits(max_postings=postings), SearchLimits()),
    ]
    for text, limit, refusing, raised in cases:
        refused = pytest.raises(QueryUnprocessable, match=limit)
        with contextlib.closing(DocumentIndex(folder, limits=refusing)) as index, refused:
            index.search(SearchRequest("acme", text))
        with contextlib.closing(DocumentIndex(folder, limits=raised)) as index:
            assert index.search(SearchRequest("acme", text)).total
