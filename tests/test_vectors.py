"""The vector store (indexer.vectors) on real files: replaces and deletes, every filter applied
inside the search, fingerprints, readers seeing each commit through merges, the writer's lock
and rollback, the folder's clean-up, and the checks of what a writer is given."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from indexer import model
from indexer.vector_segments import SegmentSize, choose_merge, tier
from indexer.vectors import (
    NO_DAY,
    DenseHit,
    VectorFilter,
    VectorRow,
    VectorStore,
    VectorStoreBusy,
)

DIM = 16
MODEL = "test-model"


def random_vectors(rng: np.random.Generator, count: int, dim: int = DIM) -> np.ndarray:
    return rng.standard_normal((count, dim)).astype(np.float32)


def doc_rows(document_id: str, count: int, version: int = 1, **facts: Any) -> list[VectorRow]:
    facts = {"tenant": "t1", "collection": "c1", **facts}
    return [VectorRow(document_id, chunk, version, **facts) for chunk in range(count)]


def manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / "manifest.json").read_text())


def assert_only_named_files(path: Path) -> None:
    named = {"manifest.json", "write.lock"}
    for segment in manifest(path)["segments"]:
        named |= {f"{segment['name']}.{ext}" for ext in ("vec.npy", "rows.npy", "strings.json")}
        if (path / f"{segment['name']}.usearch").exists():
            named.add(f"{segment['name']}.usearch")
        if segment["deleted"] is not None:
            named.add(segment["deleted"])
    assert set(os.listdir(path)) == named


def test_replace_then_search_finds_the_best_chunk_and_replaces_drop_old_rows(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(1)
    store = VectorStore(tmp_path)
    query = random_vectors(rng, 1)[0]
    a = random_vectors(rng, 3)
    a[1] = 3 * query  # normalised on write: cosine 1
    with store.writer(MODEL, DIM) as writer:
        writer.replace("a", doc_rows("a", 3), a)
        writer.replace("b", doc_rows("b", 2), random_vectors(rng, 2))
    hits, in_scope = store.search(query, VectorFilter("t1"), 10, MODEL)
    assert hits[0] == DenseHit("a", 1, 1, pytest.approx(1.0, abs=1e-5))
    assert [hit.document_id for hit in hits] == ["a", "b"] and in_scope == 2
    assert (store.rows(), store.document_count(), store.document_ids()) == (5, 2, {"a", "b"})

    # A new version of "a": its old chunks (one of them equal to the query) are gone.
    new_a = random_vectors(rng, 2)
    with store.writer(MODEL, DIM) as writer:
        writer.replace("a", doc_rows("a", 2, version=2), new_a)
    expected = new_a @ query / np.linalg.norm(new_a, axis=1) / np.linalg.norm(query)
    (hit,) = [
        hit
        for hit in store.search(query, VectorFilter("t1"), 10, MODEL)[0]
        if hit.document_id == "a"
    ]
    assert (hit.chunk, hit.version) == (int(np.argmax(expected)), 2)
    assert hit.score == pytest.approx(float(expected.max()), abs=1e-5)
    assert store.rows() == 4

    # Replaced again within the block that added it: only the last rows are stored.
    with store.writer(MODEL, DIM) as writer:
        writer.replace("c", doc_rows("c", 3), np.stack([query] * 3))
        writer.replace("c", doc_rows("c", 1, version=2), -query[None, :])
    hits, in_scope = store.search(query, VectorFilter("t1"), 10, MODEL)
    assert hits[-1] == DenseHit("c", 0, 2, pytest.approx(-1.0, abs=1e-5)) and in_scope == 3
    assert store.rows() == 5

    with store.writer(MODEL, DIM) as writer:
        writer.delete("a")
        writer.delete("never-stored")  # no error
    hits, in_scope = store.search(query, VectorFilter("t1"), 10, MODEL)
    assert [hit.document_id for hit in hits] == ["b", "c"] and in_scope == 2
    assert (store.rows(), store.document_count(), store.document_ids()) == (3, 2, {"b", "c"})


def test_equal_scores_rank_by_document_id_and_report_the_lowest_chunk(tmp_path: Path) -> None:
    store = VectorStore(tmp_path)
    same = np.ones((2, DIM), dtype=np.float32)
    with store.writer(MODEL, DIM) as writer:
        for document_id in ("z", "m", "a"):
            writer.replace(document_id, doc_rows(document_id, 2), same)
    hits, _ = store.search(np.ones(DIM), VectorFilter("t1"), 2, MODEL)
    assert [(hit.document_id, hit.chunk) for hit in hits] == [("a", 0), ("m", 0)]


@dataclass(frozen=True)
class Stored:
    rows: list[VectorRow]
    vectors: np.ndarray


def expected_search(
    stored: dict[str, Stored], query: np.ndarray, where: VectorFilter, limit: int
) -> tuple[list[tuple[str, int, int]], int]:
    """What the store must answer, computed row by row in plain Python."""

    def allowed(row: VectorRow) -> bool:
        dated = where.day_from is not None or where.day_to is not None
        return (
            row.tenant == where.tenant
            and where.collection in (None, row.collection)
            and where.document_type in (None, row.document_type)
            and where.submitter in (None, row.submitter)
            and not (dated and row.day == NO_DAY)
            and (where.day_from is None or row.day >= where.day_from)
            and (where.day_to is None or row.day <= where.day_to)
        )

    unit = query / np.linalg.norm(query)
    best: dict[str, tuple[float, int, int]] = {}
    for document_id, doc in stored.items():
        for row, vector in zip(doc.rows, doc.vectors, strict=True):
            if allowed(row):
                score = float(vector @ unit / np.linalg.norm(vector))
                if document_id not in best or score > best[document_id][0]:
                    best[document_id] = (score, row.chunk, row.version)
    order = sorted(best, key=lambda document_id: (-best[document_id][0], document_id))
    return [(d, best[d][1], best[d][2]) for d in order[:limit]], len(best)


def test_every_filter_narrows_the_results_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    store = VectorStore(tmp_path)
    stored: dict[str, Stored] = {}
    days = [NO_DAY, 100, 101, 102, 103]
    for block in range(3):  # three segments, the last replacing documents of the first
        with store.writer(MODEL, DIM) as writer:
            for n in range(25):
                document_id = f"d{(block * 25 + n) % 60}"
                facts = {
                    "tenant": ("t1", "t2")[int(rng.integers(2))],
                    "collection": ("c1", "c2", "c3")[int(rng.integers(3))],
                    "document_type": (None, "pdf", "txt")[int(rng.integers(3))],
                    "submitter": (None, "ann", "bob")[int(rng.integers(3))],
                    "day": days[int(rng.integers(len(days)))],
                }
                rows = doc_rows(document_id, int(rng.integers(1, 4)), version=block + 1, **facts)
                vectors = random_vectors(rng, len(rows))
                writer.replace(document_id, rows, vectors)
                stored[document_id] = Stored(rows, vectors)
    t1_days = {r.day for doc in stored.values() for r in doc.rows if r.tenant == "t1"}
    assert {NO_DAY, 100, 101, 102, 103} <= t1_days  # so the day bounds below are tested
    filters = [
        VectorFilter("t1"),
        VectorFilter("t2"),
        VectorFilter("t1", collection="c2"),
        VectorFilter("t2", document_type="pdf"),
        VectorFilter("t1", submitter="bob"),
        VectorFilter("t1", day_from=101, day_to=102),  # inclusive, both ends
        VectorFilter("t1", day_from=101),  # no upper bound: still no NO_DAY
        VectorFilter("t1", day_to=102),  # NO_DAY is below every day, yet excluded
        VectorFilter("t2", collection="c1", document_type="txt", submitter="ann", day_from=100),
        VectorFilter("t3"),
        VectorFilter("t1", collection="c9"),
    ]
    query = random_vectors(rng, 1)[0]
    everything = expected_search(stored, query, VectorFilter("t1"), 100)
    for where in filters:
        for limit in (5, 100):
            hits, in_scope = store.search(query, where, limit, MODEL)
            expected, expected_scope = expected_search(stored, query, where, limit)
            assert [(h.document_id, h.chunk, h.version) for h in hits] == expected, where
            assert in_scope == expected_scope, where
        if where != VectorFilter("t1") and where.tenant == "t1":
            assert expected_scope < everything[1], where  # the filter did narrow


def test_a_tenant_finds_its_one_document_among_closer_ones_of_another(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    store = VectorStore(tmp_path)
    query = random_vectors(rng, 1, 32)[0]
    # 10,000 rows of "big", every one closer to the query than "small"'s one row.
    close = query + 0.1 * random_vectors(rng, 10_000, 32)
    with store.writer(MODEL, 32) as writer:
        for n in range(2_500):
            writer.replace(
                f"big{n}", doc_rows(f"big{n}", 4, tenant="big"), close[4 * n : 4 * n + 4]
            )
            if n == 1_200:
                writer.replace("lonely", doc_rows("lonely", 1, tenant="small"), -query[None, :])
    hits, in_scope = store.search(query, VectorFilter("small"), 10, MODEL)
    assert hits == [DenseHit("lonely", 0, 1, pytest.approx(-1.0, abs=1e-5))] and in_scope == 1
    hits, in_scope = store.search(query, VectorFilter("big"), 10_000, MODEL)
    assert len(hits) == 2_500 and in_scope == 2_500
    assert "lonely" not in {hit.document_id for hit in hits}
    assert all(hit.score > 0.9 for hit in hits)


def test_vectors_of_another_model_are_never_used_nor_kept(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    store = VectorStore(tmp_path)
    query = random_vectors(rng, 1)[0]
    with store.writer("m1", DIM) as writer:
        writer.replace("old", doc_rows("old", 2), random_vectors(rng, 2))
    assert store.search(query, VectorFilter("t1"), 10, "m2") == ([], 0)
    assert store.document_count("m2") == 0 and store.document_count("m1") == 1

    with store.writer("m2", DIM) as writer:  # another model: the old vectors go
        writer.replace("new", doc_rows("new", 1), random_vectors(rng, 1))
    assert (store.fingerprint(), store.document_ids(), store.rows()) == ("m2", {"new"}, 1)
    assert store.search(query, VectorFilter("t1"), 10, "m1") == ([], 0)
    assert [hit.document_id for hit in store.search(query, VectorFilter("t1"), 10, "m2")[0]] == [
        "new"
    ]
    with store.writer("m2", DIM + 1):  # same name, another dim: also another store
        pass
    assert (store.dim(), store.rows(), store.document_ids()) == (DIM + 1, 0, set())
    assert_only_named_files(tmp_path)


def test_a_reader_sees_every_commit_through_merges(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    writer_store, reader = VectorStore(tmp_path), VectorStore(tmp_path)
    assert reader.fingerprint() is None and reader.search(
        np.ones(DIM), VectorFilter("t1"), 5, MODEL
    ) == ([], 0)
    stored: dict[str, np.ndarray] = {}
    commits = 40
    for commit in range(commits):
        changed: list[str] = []
        deleted: list[str] = []
        with writer_store.writer(MODEL, DIM) as writer:
            for _ in range(3):
                if stored and rng.random() < 0.25:
                    victim = sorted(stored)[int(rng.integers(len(stored)))]
                    writer.delete(victim)
                    deleted.append(victim)
                    del stored[victim]
                else:  # a new document or a new version of one
                    document_id = f"d{int(rng.integers(60))}"
                    vectors = random_vectors(rng, int(rng.integers(1, 4)))
                    writer.replace(
                        document_id, doc_rows(document_id, len(vectors), commit), vectors
                    )
                    stored[document_id] = vectors
                    changed.append(document_id)
        assert reader.document_ids() == set(stored)
        assert reader.rows() == sum(len(v) for v in stored.values())
        assert reader.document_count(MODEL) == len(stored)
        for document_id in changed:
            if document_id in stored:
                hits, _ = reader.search(stored[document_id][0], VectorFilter("t1"), 1, MODEL)
                assert hits[0].document_id == document_id and hits[0].score > 0.9999
                assert hits[0].version == commit
        for document_id in deleted:
            if document_id not in stored:
                hits, _ = reader.search(np.ones(DIM), VectorFilter("t1"), 100, MODEL)
                assert document_id not in {hit.document_id for hit in hits}
        assert_only_named_files(tmp_path)
    segments = manifest(tmp_path)["segments"]
    assert len(segments) < commits / 4  # merges happened (each commit writes a segment)
    assert manifest(tmp_path)["generation"] == commits


def test_a_segment_mostly_deleted_is_rewritten_without_those_rows(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    store = VectorStore(tmp_path)
    with store.writer(MODEL, DIM) as writer:
        for n in range(10):
            writer.replace(f"d{n}", doc_rows(f"d{n}", 2), random_vectors(rng, 2))
    with store.writer(MODEL, DIM) as writer:
        for n in range(5):
            writer.delete(f"d{n}")
    assert manifest(tmp_path)["segments"][0]["deleted"] is not None  # half: kept with a mask
    with store.writer(MODEL, DIM) as writer:
        writer.delete("d5")
    (segment,) = manifest(tmp_path)["segments"]
    assert (segment["rows"], segment["deleted"]) == (8, None)
    assert store.document_ids() == {"d6", "d7", "d8", "d9"}
    assert_only_named_files(tmp_path)


def test_the_merge_policy_merges_the_lowest_full_tier_smallest_first() -> None:
    assert [tier(n, 4) for n in (0, 1, 1023, 1024, 4095, 4096, 16384)] == [0, 0, 0, 1, 1, 2, 3]
    sizes = [SegmentSize(key, rows, rows) for key, rows in enumerate([5, 9, 3, 7, 2, 2000])]
    assert choose_merge(sizes, 4) == [4, 2, 0, 3]
    assert choose_merge(sizes[:3] + sizes[5:], 4) == []
    holed = [SegmentSize("a", 100, 50), SegmentSize("b", 100, 30), SegmentSize("c", 10, 4)]
    assert choose_merge(holed, 4) == ["b"]  # more than half deleted, the most first


def test_an_exception_in_the_writer_block_changes_nothing(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    store = VectorStore(tmp_path)
    query = random_vectors(rng, 1)[0]
    with store.writer(MODEL, DIM) as writer:
        writer.replace("a", doc_rows("a", 2), random_vectors(rng, 2))
    before = ((tmp_path / "manifest.json").read_bytes(), sorted(os.listdir(tmp_path)))
    results = store.search(query, VectorFilter("t1"), 10, MODEL)
    for fingerprint in (MODEL, "another-model"):
        with pytest.raises(RuntimeError, match="boom"), store.writer(fingerprint, DIM) as writer:
            writer.delete("a")
            writer.replace("b", doc_rows("b", 1), random_vectors(rng, 1))
            raise RuntimeError("boom")
    assert ((tmp_path / "manifest.json").read_bytes(), sorted(os.listdir(tmp_path))) == before
    assert store.search(query, VectorFilter("t1"), 10, MODEL) == results
    assert store.document_ids() == {"a"}


def test_a_second_writer_waits_for_the_lock_then_gives_up(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    first, second = VectorStore(tmp_path), VectorStore(tmp_path, lock_timeout=0.3)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with first.writer(MODEL, DIM) as writer:
            writer.replace("first", doc_rows("first", 1), random_vectors(rng, 1))
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        with pytest.raises(VectorStoreBusy), second.writer(MODEL, DIM):
            pass
        assert 0.3 <= time.monotonic() - started < 5
        # A writer waiting longer gets the lock once the first block commits.
        threading.Timer(0.2, release.set).start()
        waiting = VectorStore(tmp_path, lock_timeout=10)
        with waiting.writer(MODEL, DIM) as writer:
            writer.replace("second", doc_rows("second", 1), random_vectors(rng, 1))
    finally:
        release.set()
        thread.join(10)
    assert second.document_ids() == {"first", "second"}


def test_superseded_files_are_removed_after_each_commit(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    store = VectorStore(tmp_path)
    with store.writer(MODEL, DIM) as writer:
        for n in range(8):
            writer.replace(f"d{n}", doc_rows(f"d{n}", 1), random_vectors(rng, 1))
    name = manifest(tmp_path)["segments"][0]["name"]
    for n, generation in ((0, 2), (1, 3)):
        with store.writer(MODEL, DIM) as writer:
            writer.delete(f"d{n}")
        assert manifest(tmp_path)["segments"][0]["deleted"] == f"{name}.del.{generation}.npy"
        assert_only_named_files(tmp_path)  # the mask of the commit before is gone
    assert not (tmp_path / f"{name}.del.2.npy").exists()
    with store.writer(MODEL, DIM) as writer:  # the whole segment deleted: its files go
        for n in range(2, 8):
            writer.delete(f"d{n}")
    assert manifest(tmp_path)["segments"] == []
    assert set(os.listdir(tmp_path)) == {"manifest.json", "write.lock"}


def test_a_writer_rejects_rows_and_vectors_that_do_not_match(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    store = VectorStore(tmp_path)
    with store.writer(MODEL, DIM) as writer:
        with pytest.raises(ValueError):  # 2 rows, 3 vectors
            writer.replace("a", doc_rows("a", 2), random_vectors(rng, 3))
        with pytest.raises(ValueError):  # vectors of another dim
            writer.replace("a", doc_rows("a", 2), random_vectors(rng, 2, DIM + 1))
        with pytest.raises(ValueError):  # one vector, not a matrix
            writer.replace("a", doc_rows("a", 1), random_vectors(rng, 1)[0])
        with pytest.raises(ValueError):  # a row of another document
            writer.replace("a", doc_rows("a", 1) + doc_rows("b", 1), random_vectors(rng, 2))
        with pytest.raises(ValueError):  # a zero vector cannot be normalised
            writer.replace("a", doc_rows("a", 1), np.zeros((1, DIM)))
        writer.replace("empty", [], np.zeros((0, DIM)))  # a document without chunks
    assert store.rows() == 0  # nothing of the rejected calls was kept
    with store.writer(MODEL, DIM) as writer:
        writer.replace("a", doc_rows("a", 1), random_vectors(rng, 1))
    with pytest.raises(ValueError):
        store.search(np.ones(DIM + 1), VectorFilter("t1"), 5, MODEL)


def test_no_day_is_the_indexes_own() -> None:
    assert NO_DAY == model.NO_DAY


def test_large_segments_are_searched_through_their_hnsw_index_inside_the_filters(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(11)
    store = VectorStore(tmp_path, ann_min_rows=2000, exact_max_rows=300)
    exact = VectorStore(tmp_path)  # the same folder, always exact: the reference
    vectors = random_vectors(rng, 3000, 32)
    with store.writer(MODEL, 32) as writer:
        for n in range(1000):  # 3 chunks a document; tenant a: 800 documents, b: 200
            tenant = "a" if n < 800 else "b"
            rows = doc_rows(f"d{n}", 3, tenant=tenant, document_type="odd" if n % 2 else "even")
            writer.replace(f"d{n}", rows, vectors[3 * n : 3 * n + 3])
    assert list(tmp_path.glob("*.usearch")), "a segment of 3,000 rows has an HNSW index"
    queries = random_vectors(rng, 20, 32)
    overlap = []
    for query in queries:
        for where in (VectorFilter("a"), VectorFilter("a", document_type="odd")):
            found, in_scope = store.search(query, where, 10, MODEL)
            truth, truth_scope = exact.search(query, where, 10, MODEL)
            assert in_scope == truth_scope  # every document in scope counted, scored or not
            assert len(found) == 10
            ids = [hit.document_id for hit in found]
            # Inside the filters, and each score the exact cosine of its chunk.
            assert all(int(i[1:]) < 800 for i in ids)
            if where.document_type == "odd":
                assert all(int(i[1:]) % 2 for i in ids)
            assert {(h.document_id, round(h.score, 5)) for h in found} <= {
                (h.document_id, round(h.score, 5))
                for h in exact.search(query, where, 1000, MODEL)[0]
            }
            overlap.append(len(set(ids) & {hit.document_id for hit in truth}) / 10)
        # Tenant b's 600 rows are over the exact bound too; 1 document of type "x" is not.
        small, _ = store.search(query, VectorFilter("b", document_type="odd"), 5, MODEL)
        assert len(small) == 5 and all(int(h.document_id[1:]) >= 800 for h in small)
    assert sum(overlap) / len(overlap) >= 0.9  # the HNSW index finds the true neighbours
    with store.writer(MODEL, 32) as writer:
        writer.replace("d5", doc_rows("d5", 1, tenant="a", document_type="rare"), vectors[:1])
    found, in_scope = store.search(queries[0], VectorFilter("a", document_type="rare"), 10, MODEL)
    assert [hit.document_id for hit in found] == ["d5"] and in_scope == 1
    # A deleted document is never a candidate, whatever the index holds.
    with store.writer(MODEL, 32) as writer:
        for n in range(0, 800, 2):
            writer.delete(f"d{n}")
    found, _ = store.search(queries[1], VectorFilter("a"), 10, MODEL)
    assert len(found) == 10 and all(int(h.document_id[1:]) % 2 for h in found)
    assert_only_named_files(tmp_path)
