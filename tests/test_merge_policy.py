"""The index's merge policy (TieredMerge): its decisions on segment sizes, and a real index
that stays correct and small in segments through many batch commits, replaces and deletes."""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from indexer import Chunk, DocumentIndex, IndexedDocument, SearchRequest
from indexer.merging import TieredMerge


@dataclass(eq=False)  # compared by identity, as the policy compares Whoosh's segments
class Segment:
    """What the policy reads of a Whoosh segment: its chunks, stored and live."""

    stored: int
    deleted: int = 0

    def doc_count_all(self) -> int:
        return self.stored

    def doc_count(self) -> int:
        return self.stored - self.deleted


def test_tiers_grow_by_the_factor_and_count_live_chunks() -> None:
    policy = TieredMerge(factor=4, base=10, max_chunks=1000)
    tiers = {n: policy.tier(Segment(n)) for n in (1, 39, 40, 159, 160, 639, 640, 1000, 1001)}
    assert tiers == {1: 0, 39: 0, 40: 1, 159: 1, 160: 2, 639: 2, 640: 3, 1000: 3, 1001: None}
    # A segment that lost most of its chunks sits with segments of its live size...
    assert policy.tier(Segment(900, deleted=870)) == 0
    # ...but the cap counts what a merge would read, deleted chunks included.
    assert policy.tier(Segment(5000, deleted=4990)) is None


def test_the_lowest_full_tier_merges_its_factor_smallest_and_nothing_else() -> None:
    policy = TieredMerge(factor=4, base=10, max_chunks=1000)
    small = [Segment(n) for n in (5, 3, 9, 2, 7)]
    middle = [Segment(n) for n in (50, 60, 70, 80, 90)]
    assert policy.choose(middle + small) == [small[3], small[1], small[0], small[4]]
    # Tier 0 not full: tier 1's turn, still at most `factor` segments.
    assert policy.choose(middle + small[:3]) == middle[:4]
    assert policy.choose(middle[:3] + small[:3]) == []


def test_segments_past_the_cap_or_without_live_chunks_are_never_merged() -> None:
    policy = TieredMerge(factor=3, base=10, max_chunks=500)
    assert policy.choose([Segment(501) for _ in range(10)]) == []
    assert policy.choose([Segment(800, deleted=790) for _ in range(10)]) == []
    # Empty segments are dropped (by __call__), not read by a merge: they do not fill a tier.
    assert policy.choose([Segment(6, deleted=6) for _ in range(3)] + [Segment(5), Segment(5)]) == []


def test_a_merge_reads_at_most_the_cap() -> None:
    policy = TieredMerge(factor=3, base=10, max_chunks=500)
    # Tier 2 is 90-269 chunks: three of them fit in 500, they all go.
    fits = [Segment(250), Segment(200), Segment(120), Segment(100)]
    assert policy.choose(fits) == [fits[3], fits[2], fits[1]]
    # Three do not fit: the two smallest do.
    two = [Segment(260), Segment(210), Segment(200)]
    assert policy.choose(two) == [two[2], two[1]]
    # Tier 3 (270-809): no two fit, so nothing merges; they wait for the optimize.
    assert policy.choose([Segment(300), Segment(280), Segment(400)]) == []


def simulate(
    policy: TieredMerge, commits: int, size: int
) -> Iterator[tuple[list[Segment], list[Segment]]]:
    """Commits of ``size`` chunks as Whoosh makes them: the chosen segments go into the new
    one. Yields the segments after each commit and those that commit merged."""
    segments: list[Segment] = []
    for _ in range(commits):
        chosen = policy.choose(segments)
        segments = [segment for segment in segments if segment not in chosen]
        segments.append(Segment(size + sum(segment.doc_count() for segment in chosen)))
        yield segments, chosen


def tiers_up_to(chunks: int, policy: TieredMerge) -> int:
    """How many tiers segments of at most ``chunks`` chunks fall in."""
    if chunks < policy.base * policy.factor:
        return 1
    return math.floor(math.log(chunks / policy.base, policy.factor)) + 1


def test_without_a_cap_segments_stay_at_most_factor_a_tier() -> None:
    policy = TieredMerge(factor=4, base=10, max_chunks=10**9)
    total = 0
    for segments, _ in simulate(policy, commits=5000, size=3):
        total += 3
        assert len(segments) <= policy.factor * tiers_up_to(total, policy), total
    assert len(segments) <= 4 * 6  # 15,000 chunks: 6 tiers, from 10 * 4**5 = 10,240 up


def test_merge_work_per_chunk_does_not_grow_with_the_index() -> None:
    policy = TieredMerge(factor=4, base=10, max_chunks=2000)
    merged = [0, 0]  # chunks merged in the first and the second half of the commits
    for number, step in enumerate(simulate(policy, commits=4000, size=25)):
        segments, chosen = step
        assert all(segment.doc_count_all() <= policy.max_chunks for segment in chosen)
        assert len(chosen) <= policy.factor
        assert sum(segment.doc_count_all() for segment in chosen) <= policy.max_chunks
        merged[number >= 2000] += sum(segment.doc_count() for segment in chosen)
    # Same chunks written in each half, same merging: none of it grows with the index.
    assert merged[0] > 2000 * 25 and abs(merged[1] - merged[0]) <= 0.05 * merged[0]
    # A tier none of whose pairs fit in the cap has all but its smallest over half the cap:
    # the segments that wait for the optimize come to one per half-cap of chunks at most.
    top = tiers_up_to(policy.max_chunks, policy)
    assert len(segments) <= 4000 * 25 // (policy.max_chunks // 2) + policy.factor * top


def document(doc_id: str, version: int, parts: int) -> IndexedDocument:
    word = word_of(doc_id)
    chunks = [
        Chunk(f"{word} version{version} part {part} of the text", part) for part in range(parts)
    ]
    return IndexedDocument(doc_id, "acme", "c", f"{doc_id}.txt", version, chunks)


def word_of(doc_id: str) -> str:
    """A word only this document holds (letters: digits would split it)."""
    number = int(doc_id[1:])
    return "qz" + "".join(chr(ord("a") + int(digit)) for digit in f"{number:03d}")


def found(index: DocumentIndex, word: str) -> list[str]:
    request = SearchRequest(tenant="acme", query=word, mode="exact", limit=100)
    return [hit.document_id for hit in index.search(request).hits]


def test_many_batch_commits_with_replaces_and_deletes_keep_every_answer_right(
    tmp_path: Path,
) -> None:
    # A small policy, so that a few hundred chunks climb several tiers and reach the cap.
    policy = TieredMerge(factor=3, base=4, max_chunks=150)
    index = DocumentIndex(tmp_path / "index", merge_policy=policy)
    rng = random.Random(15)
    expected: dict[str, IndexedDocument] = {}
    for _ in range(60):
        with index.batch() as batch:
            # Each document at most once a batch, as the index worker writes them (a second
            # write of an id in the same commit would not see the first one's chunks).
            for doc_id in rng.sample([f"d{n}" for n in range(80)], rng.randint(1, 8)):
                if doc_id in expected and rng.random() < 0.25:
                    batch.delete(doc_id)
                    del expected[doc_id]
                    continue
                version = expected[doc_id].version + 1 if doc_id in expected else 1
                expected[doc_id] = document(doc_id, version, rng.randint(1, 4))
                batch.replace(expected[doc_id])
        with index.searcher() as searcher:
            assert searcher.doc_count() == sum(len(d.chunks) for d in expected.values())
            # At most `factor` a tier below the cap, and those too big to merge further
            # (over half the cap each, as in the simulation above): 60 without merging.
            bound = 3 * tiers_up_to(150, policy) + searcher.doc_count_all() // 75
            assert len(searcher.leaf_searchers()) <= bound
    assert index.document_ids() == set(expected)
    for number in range(80):
        doc_id = f"d{number}"
        doc = expected.get(doc_id)
        assert index.chunk_count(doc_id) == (len(doc.chunks) if doc else 0)
        assert index.indexed_versions(doc_id) == ({doc.version} if doc else set())
        assert found(index, word_of(doc_id)) == ([doc_id] if doc else [])
    for doc in expected.values():
        assert found(index, f"{word_of(doc.document_id)} version{doc.version}") == [doc.document_id]


def test_document_ids_skip_documents_whose_chunks_are_all_deleted(tmp_path: Path) -> None:
    # No merging: the deleted chunks stay in their segments, as they do until a merge.
    index = DocumentIndex(tmp_path / "index", merge_policy=TieredMerge(factor=1000))
    with index.batch() as batch:
        for number in range(6):
            batch.replace(document(f"d{number}", 1, 3))
    index.replace_document(document("d1", 2, 2))  # old chunks deleted, new ones elsewhere
    index.delete_documents(["d2", "d4"])
    with index.searcher() as searcher:
        assert searcher.doc_count_all() - searcher.doc_count() == 9
    assert index.document_ids() == {"d0", "d1", "d3", "d5"}
    index.delete_documents(["d0", "d1", "d3", "d5"])
    assert index.document_ids() == set()


def test_a_segment_left_without_live_chunks_is_dropped(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path / "index", merge_policy=TieredMerge(factor=1000))
    index.replace_document(document("d1", 1, 2))
    index.replace_document(document("d2", 1, 2))
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) == 2
    index.delete_documents(["d1"])
    with index.searcher() as searcher:
        assert len(searcher.leaf_searchers()) == 1 and searcher.doc_count_all() == 2
    assert index.document_ids() == {"d2"}
