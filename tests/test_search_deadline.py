"""A search keeps to its deadline and to ``wait=False``: it stops with SearchOverdue wherever
it stands (a cold read of postings, columns, a phrase walk, the hits), releases the searcher,
and leaves the caches whole — a search after any stop finds exactly what it found before."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from whoosh import query

from indexer import (
    DocumentIndex,
    SearcherBusy,
    SearchOverdue,
    SearchRequest,
)
from indexer.deadline import check, checked, deadline_in
from tests.test_index_evaluate import _documents

REQUESTS = [
    SearchRequest("acme", "storage drive report", limit=20),
    SearchRequest("acme", '"storage drive"', mode="exact", limit=20),
    SearchRequest("rival", "документ NOT поиск", limit=20),
    SearchRequest("third", "硬盘 系统", document_type="report", date_from=date(2020, 1, 1)),
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two segments of 400 documents each, with deletions in the first."""
    root = tmp_path_factory.mktemp("deadline") / "index"
    index = DocumentIndex(root)
    documents = [
        dataclasses.replace(document, created_at=datetime(2019 + number % 4, 6, 1, tzinfo=UTC))
        for number, document in enumerate(_documents(800, seed=11))
    ]
    for first in (0, 400):
        with index.batch() as batch:
            for document in documents[first : first + 400]:
                batch.replace(document)
    index.delete_documents([f"doc-{n}" for n in range(0, 400, 7)])
    index.close()
    return root


def _found(
    index: DocumentIndex, request: SearchRequest, wait: bool = True
) -> list[tuple[str, float, str]]:
    results = index.search(request, wait=wait)
    return [(hit.document_id, hit.score, hit.snippet) for hit in results.hits] + [
        ("total", float(results.total), "")
    ]


def test_a_search_stopped_anywhere_leaves_the_index_answering_as_before(folder: Path) -> None:
    expected = {request: _found(DocumentIndex(folder), request) for request in REQUESTS}
    assert all(len(found) > 1 for found in expected.values())  # each request finds something
    stopped = finished = 0
    # Budgets from nothing to more than a cold search takes: the stops fall in every stage.
    for step in range(60):
        budget = 1e-6 * 1.2**step
        index = DocumentIndex(folder)
        index.ping()  # reads the table of contents only: the first search opens a searcher
        for request in REQUESTS:
            try:
                index.search(request, within=budget)
                finished += 1
            except SearchOverdue:
                stopped += 1
            # Not waiting: the stopped search must have released the searcher.
            assert _found(index, request, wait=False) == expected[request], (budget, request)
        index.close()
    assert stopped and finished


def test_a_search_that_may_not_wait_gives_way_to_another(folder: Path) -> None:
    # One searcher in all (as before the pool): a search that may wait waits for it.
    index = DocumentIndex(folder, max_searchers=1)
    request = REQUESTS[0]
    index.search(request)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with index.searcher():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(SearcherBusy):
            index.search(request, wait=False)
        # One that may wait (with time enough) gets its turn when the other is done.
        started = time.monotonic()
        threading.Timer(0.2, release.set).start()
        assert index.search(request, within=5).hits
        assert time.monotonic() - started >= 0.15
    finally:
        release.set()
        holder.join()
    index.close()


def test_a_search_that_may_wait_opens_a_searcher_of_its_own(folder: Path) -> None:
    index = DocumentIndex(folder)
    request = REQUESTS[0]
    expected = _found(index, request)
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with index.searcher():
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(10)
        # The only searcher is held: one that may not wait does not open another.
        with pytest.raises(SearcherBusy):
            index.search(request, wait=False)
        # One that may wait opens a searcher of its own: it does not wait for the holder.
        assert _found(index, request) == expected
        assert not release.is_set() and holder.is_alive()
        # That searcher went back to the pool: now one that may not wait finds it.
        assert _found(index, request, wait=False) == expected
    finally:
        release.set()
        holder.join()
    index.close()


def test_a_search_that_may_not_wait_does_not_reopen_the_searcher(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index")
    first, second = _documents(2, seed=3)
    index.replace_document(first)
    mine = SearchRequest(first.tenant, first.chunks[0].text.split()[0])
    index.search(mine)
    index.replace_document(second)  # a commit: the searcher is now out of date
    with pytest.raises(SearcherBusy):
        index.search(mine, wait=False)
    index.search(mine)  # reopens
    request = SearchRequest(second.tenant, second.chunks[0].text.split()[0])
    assert "doc-1" in {hit.document_id for hit in index.search(request, wait=False).hits}
    index.close()


def test_deadlines_nest_and_checked_iterations_stop() -> None:
    # An inner, later deadline does not extend the outer one.
    with deadline_in(0.05), deadline_in(60):
        time.sleep(0.06)
        with pytest.raises(SearchOverdue):
            check()
    check()  # outside every deadline: no limit
    with deadline_in(0.2):
        seen = 0
        with pytest.raises(SearchOverdue):
            for _ in checked(iter(int, 1), every=100):  # endless
                seen += 1
                time.sleep(0.0001)
        assert seen and not seen % 100  # stopped at a look at the clock, every 100 items
    assert sum(checked(range(10))) == 45  # without a deadline, items pass unchanged


def test_whooshs_own_matcher_loops_keep_to_the_deadline(folder: Path) -> None:
    """Phrases, NOT and AND step inside Whoosh's matchers (a phrase looks for adjacent words
    chunk by chunk without returning); those steps look at the deadline too."""
    index = DocumentIndex(folder)
    queries = [
        query.Phrase("exact", ["storage", "drive"]),
        query.AndNot(query.Term("exact", "storage"), query.Term("exact", "drive")),
        query.And([query.Term("exact", "report"), query.Term("exact", "system")]),
    ]
    with index.searcher() as searcher:
        for parsed in queries:
            assert len(searcher.search(parsed, limit=None)) > 50, parsed
            with deadline_in(0), pytest.raises(SearchOverdue):
                searcher.search(parsed, limit=None)
    index.close()
