"""Index commit benchmark: does a commit cost more the more the index holds?

What it measures
----------------
Documents go straight into a :class:`DocumentIndex` in a temporary folder (no servers, no
queues): the 1-8 KB generated texts of ``bench/ingest.py`` (``make_documents``, Latin,
Cyrillic and Chinese lines, ``random.Random(42)``), cut by ``ldims.text.chunking.chunk_pages``
as the index worker cuts them. A share of the writes (``--replace-share``, 5%) replaces an
earlier document with a new version (other text), so segments carry deleted chunks as they
do in service.

Each run commits through ``DocumentIndex.batch()`` and times every commit (analysis, the
merge policy's merges and the table of contents). The table has one row per tenth of a run:
mean milliseconds per document over that tenth, the slowest commit in it, and, at its end,
the number of segments and of chunks (live / stored, stored counting deleted ones). Runs:

* the old policy (``fold_tiny_segments``, copied here as it was: every 4th tiny segment
  folds all segments under 2,000 chunks) and the tiered one, one document a commit, up to
  ``--single-docs`` (1,500) documents: the index worker's old way of committing. The old
  policy's cost climbs as its tiny segments fill up to 2,000 chunks (~750 documents), drops
  when they fold into a segment past that, and climbs again: 1,500 documents show two rounds
  and take ~5 minutes of the run's ~9 (3,000 would take 10 alone);
* the tiered policy, ``--batch`` (200) documents a commit, up to ``--docs`` (20,000): the
  index worker's new way.

At the end of the batched run, ``DocumentIndex.document_ids()`` (what the reconciler calls
every minute) is timed against the old implementation (one search per term of the
``document_id`` lexicon, copied here), best of 3 each, and the two answers compared; and a
few keyword searches are timed on each run's final index (p50 of 30), since every segment
adds matchers to every search.

How to run (from the project root)::

    .venv/bin/python bench/index_commits.py
    .venv/bin/python bench/index_commits.py --docs 5000 --single-docs 500 --only batch

The Markdown tables are printed and written to ``bench/results/index_commits.md``
(overwritten).
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest import make_documents
from report import machine_line, markdown_table, ms, percentile, publish
from whoosh.query import Term
from whoosh.reading import SegmentReader
from whoosh.writing import IndexWriter

from indexer import DocumentIndex, IndexedDocument, SearchRequest
from indexer.merging import MAX_MERGE_CHUNKS, MERGE_FACTOR, TIER_BASE_CHUNKS, TieredMerge
from ldims.text import Page
from ldims.text.chunking import chunk_pages

RESULTS = Path(__file__).resolve().parent / "results" / "index_commits.md"
QUERIES = ["invoice audit", "retention policy", "Документ", "合同", "latency replica shard"]

# --- the old policy and the old document_ids(), as they were -----------------------------------

_TINY_SEGMENT_CHUNKS = 2000
_TINY_SEGMENTS_BEFORE_FOLD = 4


def fold_tiny_segments(writer: IndexWriter, segments: list[Any]) -> list[Any]:
    """The merge policy before issue 15: fold every segment under 2,000 chunks into the one
    being written once there are 4 of them; larger ones wait for the optimize."""
    tiny = [segment for segment in segments if segment.doc_count_all() < _TINY_SEGMENT_CHUNKS]
    if len(tiny) < _TINY_SEGMENTS_BEFORE_FOLD:
        return segments
    for segment in tiny:
        reader = SegmentReader(writer.storage, writer.schema, segment)
        writer.add_reader(reader)
        reader.close()
    return [segment for segment in segments if segment not in tiny]


def document_ids_by_search(index: DocumentIndex) -> set[str]:
    """``document_ids()`` before issue 15: one search per term of the lexicon."""
    with index.searcher() as searcher:
        terms = (term.decode() for term in searcher.lexicon("document_id"))
        return {
            term
            for term in terms
            if not searcher.search(Term("document_id", term), limit=1).is_empty()
        }


# --- the runs ---------------------------------------------------------------------------------


def indexed_documents(count: int) -> list[IndexedDocument]:
    return [
        IndexedDocument(
            f"doc-{number:05d}",
            "bench",
            "default",
            doc.name,
            1,
            chunk_pages([Page(1, doc.data.decode())]),
        )
        for number, doc in enumerate(make_documents(count))
    ]


@dataclass
class Tenth:
    docs: int  # documents written so far
    seconds: list[float] = field(default_factory=list)  # of each commit in the tenth
    written: int = 0  # documents written in the tenth
    segments: int = 0
    live: int = 0
    stored: int = 0


@dataclass
class Run:
    name: str
    tenths: list[Tenth]
    wall: float
    search_p50: float | None
    index: DocumentIndex


def writes(docs: list[IndexedDocument], replace_share: float) -> list[IndexedDocument]:
    """Every document once, and a new version of an earlier one after ``replace_share`` of
    them (another document's chunks)."""
    rng = random.Random(7)
    out: list[IndexedDocument] = []
    for number, doc in enumerate(docs):
        out.append(doc)
        if number and rng.random() < replace_share:
            old = docs[rng.randrange(number)]
            chunks = docs[rng.randrange(len(docs))].chunks
            out.append(IndexedDocument(old.document_id, "bench", "default", old.name, 2, chunks))
    return out


def run(
    name: str,
    root: Path,
    docs: list[IndexedDocument],
    batch: int,
    policy: Callable[[IndexWriter, list[Any]], list[Any]],
    replace_share: float,
) -> Run:
    index = DocumentIndex(root, merge_policy=policy)
    todo = writes(docs, replace_share)
    tenth_size = -(-len(todo) // 10)
    tenths: list[Tenth] = []
    started = time.perf_counter()
    for first in range(0, len(todo), batch):
        group = todo[first : first + batch]
        commit_started = time.perf_counter()
        with index.batch() as writer:
            for doc in group:
                writer.replace(doc)
        seconds = time.perf_counter() - commit_started
        if not tenths or tenths[-1].written >= tenth_size:
            tenths.append(Tenth(0))
        tenth = tenths[-1]
        tenth.seconds.append(seconds)
        tenth.written += len(group)
        tenth.docs = first + len(group)
        if tenth.written >= tenth_size or tenth.docs == len(todo):
            with index.searcher() as searcher:
                tenth.segments = len(searcher.leaf_searchers())
                tenth.live, tenth.stored = searcher.doc_count(), searcher.doc_count_all()
        print(f"\r{name}: {first + len(group)}/{len(todo)}", end="", flush=True)
    wall = time.perf_counter() - started
    print()
    return Run(name, tenths, wall, search_p50(index), index)


def search_p50(index: DocumentIndex) -> float | None:
    timings = []
    for _ in range(6):
        for query in QUERIES:
            started = time.perf_counter()
            index.search(SearchRequest(tenant="bench", query=query))
            timings.append(time.perf_counter() - started)
    return percentile(timings, 50)


def best_of(function: Callable[[], Any], times: int = 3) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(times):
        started = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - started)
    return best, result


# --- report ----------------------------------------------------------------------------------

HEADER = [
    "run",
    "writes so far",
    "ms / document",
    "slowest commit ms",
    "segments",
    "chunks live / stored",
]


def rows(result: Run) -> list[list[str]]:
    out = []
    for tenth in result.tenths:
        out.append(
            [
                result.name,
                f"{tenth.docs:,}",
                f"{sum(tenth.seconds) * 1000 / tenth.written:.1f}",
                ms(max(tenth.seconds)),
                str(tenth.segments),
                f"{tenth.live:,} / {tenth.stored:,}",
            ]
        )
    return out


def summary(results: list[Run]) -> list[list[str]]:
    return [
        [
            result.name,
            f"{result.tenths[-1].docs:,}",
            f"{result.wall:.1f}",
            f"{result.tenths[-1].docs / result.wall:.1f}",
            str(result.tenths[-1].segments),
            ms(result.search_p50),
        ]
        for result in results
    ]


def report(args: argparse.Namespace, results: list[Run], ids_lines: list[str]) -> str:
    policy = tiered(args)
    parts = [
        "# Index commit benchmark",
        "",
        f"Tiered policy: factor {policy.factor}, base {policy.base} chunks, cap "
        f"{policy.max_chunks:,} chunks; {args.replace_share:.0%} of the writes replace an "
        "earlier document.",
        "",
        markdown_table(
            ["run", "writes", "seconds", "writes/s", "segments at end", "search p50 ms"],
            summary(results),
        ),
        "",
        "Per tenth of each run (ms / document: that tenth's commit time over its documents):",
        "",
        markdown_table(HEADER, [row for result in results for row in rows(result)]),
        "",
        *ids_lines,
        "",
        machine_line(),
        "",
        f"Command: `.venv/bin/python bench/index_commits.py --docs {args.docs} --single-docs "
        f"{args.single_docs} --batch {args.batch} --replace-share {args.replace_share:g} "
        f"--factor {args.factor} --base {args.base} --cap {args.cap}`",
    ]
    return "\n".join(parts) + "\n"


def document_ids_lines(index: DocumentIndex) -> list[str]:
    old_seconds, old = best_of(lambda: document_ids_by_search(index))
    new_seconds, new = best_of(index.document_ids)
    assert old == new, "document_ids() disagrees with the search per term"
    with index.searcher() as searcher:
        segments = len(searcher.leaf_searchers())
        deleted = searcher.doc_count_all() - searcher.doc_count()
    return [
        f"`document_ids()` at the end of the batched run ({len(new):,} documents, {segments} "
        f"segments, {deleted:,} deleted chunks), best of 3:",
        "",
        markdown_table(
            ["implementation", "ms"],
            [
                ["one search per lexicon term (before)", ms(old_seconds)],
                ["lexicon per segment, postings of deleted ids (after)", ms(new_seconds)],
            ],
        ),
    ]


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--docs", type=int, default=20_000, help="documents, batched run")
    parser.add_argument("--single-docs", type=int, default=1_500, help="documents, 1 a commit")
    parser.add_argument("--batch", type=int, default=200, help="documents a batched commit")
    parser.add_argument("--replace-share", type=float, default=0.05, help="replaced share")
    parser.add_argument("--factor", type=int, default=MERGE_FACTOR, help="tiered: factor")
    parser.add_argument("--base", type=int, default=TIER_BASE_CHUNKS, help="tiered: base")
    parser.add_argument("--cap", type=int, default=MAX_MERGE_CHUNKS, help="tiered: cap")
    parser.add_argument(
        "--only", choices=["old", "single", "batch"], action="append", help="runs to make"
    )
    return parser.parse_args(argv)


def tiered(args: argparse.Namespace) -> TieredMerge:
    return TieredMerge(args.factor, args.base, args.cap)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    only = set(args.only or ["old", "single", "batch"])
    docs = indexed_documents(max(args.docs, args.single_docs))
    print(f"{len(docs)} documents, {sum(len(d.chunks) for d in docs):,} chunks", flush=True)
    work = Path(tempfile.mkdtemp(prefix="ldims-bench-commits-"))
    results: list[Run] = []
    ids_lines: list[str] = []
    try:
        single = docs[: args.single_docs]
        plans = [
            ("old", "old policy, 1 a commit", single, 1, fold_tiny_segments),
            ("single", "tiered, 1 a commit", single, 1, tiered(args)),
            (
                "batch",
                f"tiered, {args.batch} a commit",
                docs[: args.docs],
                args.batch,
                tiered(args),
            ),
        ]
        for key, name, chosen, batch, policy in plans:
            if key in only:
                result = run(name, work / key, chosen, batch, policy, args.replace_share)
                results.append(result)
        if "batch" in only:
            ids_lines = document_ids_lines(results[-1].index)
        for result in results:
            result.index.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = report(args, results, ids_lines)
    publish(text, RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
