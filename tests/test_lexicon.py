"""qmd's BM25 beside Whoosh (``indexer.lexicon``): qmd's query syntax, written in the index's
batches, per-tenant tables and statistics, collection filters inside the query, deletes and
replaces, and the time bound."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from indexer import Chunk, DocumentIndex, IndexedDocument, QueryUnprocessable, SearchOverdue
from indexer.lexicon import SEGMENT_CHARS, fts_query, segments, spaced_cjk

# qmd 2.8.3's own buildFTS5Query on each input (run with Node on its dist/store.js).
QMD_QUERIES = {
    "performance -sports": '"performance"* NOT "sports"*',
    '"machine learning"': '"machine learning"',
    "multi-agent memory": '"multi agent" AND "memory"*',
    "DEC-0054": '"dec 0054"',
    "-multi-agent foo": '"foo"* NOT "multi agent"',
    "2026.4.10 release": '"2026"* AND "4"* AND "10"* AND "release"*',
    "数据库 查询": '"数 据 库" AND "查 询"',
    "C++ perf": '"c"* AND "perf"*',
    "a:b": '"ab"*',
    "PostgreSQL, Redis!": '"postgresql"* AND "redis"*',
    '"unclosed phrase': '"unclosed phrase"',
    "x.y -a.b c": '"x"* AND "y"* AND "c"* NOT ("a"* AND "b"*)',
    "слово-дело база": '"слово дело" AND "база"*',
    "中文abc 日本語テスト": '"中 文 abc" AND "日 本 語 テ ス ト"',
    '-"neg phrase" pos': '"pos"* NOT "neg phrase"',
}


@pytest.mark.parametrize(("text", "expected"), QMD_QUERIES.items())
def test_the_query_is_qmds(text: str, expected: str) -> None:
    assert fts_query(text) == expected


def test_a_query_of_only_exclusions_or_punctuation_searches_nothing() -> None:
    assert fts_query("-only") is None
    assert fts_query("!!! ...") is None
    assert spaced_cjk("ab中文cd") == "ab 中 文 cd"


def doc(
    document_id: str, text: str, tenant: str = "acme", collection: str = "kb"
) -> IndexedDocument:
    lines = text.split("\n")
    return IndexedDocument(
        document_id=document_id,
        tenant=tenant,
        collection=collection,
        name=f"{document_id}.md",
        version=1,
        chunks=[Chunk(text, page=1, line_start=1, line_end=len(lines))],
        title=None,
    )


def ids(index: DocumentIndex, query: str, tenant: str = "acme", **options: object) -> list[str]:
    return [hit.document_id for hit in index.lexical_search(tenant, query, 10, **options)]  # type: ignore[arg-type]


def test_rows_follow_the_index_batches_per_tenant(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path)
    with index.batch() as batch:
        batch.replace(doc("a", "zebra stripes in the savanna"))
        batch.replace(doc("b", "zebra crossing downtown", collection="city"))
        batch.replace(doc("r", "zebra zebra zebra rival text", tenant="rival"))
    assert sorted(ids(index, "zebra")) == ["a", "b"]
    assert ids(index, "zebra", tenant="rival") == ["r"]
    assert ids(index, "zebra", tenant="nobody") == []
    assert ids(index, "zebra", collection="city") == ["b"]
    assert ids(index, "zeb") == ids(index, "zebra")  # every word a prefix
    assert ids(index, "zebra -crossing") == ["a"]
    assert ids(index, "zebra savanna") == ["a"]  # every word required
    (hit,) = index.lexical_search("acme", "savanna", 10)
    assert hit.body == "zebra stripes in the savanna" and 0 < hit.score < 1
    with index.batch() as batch:
        batch.replace(doc("a", "a lion now"))
        batch.delete("b")
    assert ids(index, "zebra") == []
    assert ids(index, "lion") == ["a"]
    assert ids(index, "zebra", tenant="rival") == ["r"]


def test_statistics_are_the_tenants_own(tmp_path: Path) -> None:
    """The same document scores the same whatever another tenant holds (idf, lengths)."""
    alone = DocumentIndex(tmp_path / "alone")
    crowded = DocumentIndex(tmp_path / "crowded")
    for index in (alone, crowded):
        with index.batch() as batch:
            batch.replace(doc("a", "rare word gyroscope here"))
            batch.replace(doc("b", "nothing of the kind"))
    with crowded.batch() as batch:
        for number in range(50):
            batch.replace(doc(f"r{number}", "gyroscope " * 20, tenant="rival"))
    (mine,) = alone.lexical_search("acme", "gyroscope", 10)
    (theirs,) = crowded.lexical_search("acme", "gyroscope", 10)
    assert mine.bm25 == pytest.approx(theirs.bm25)


def test_a_search_is_bounded_in_time(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path)
    with index.batch() as batch:
        for number in range(300):
            batch.replace(doc(f"d{number}", f"alpha beta gamma {number} " * 50))
    with pytest.raises(SearchOverdue):
        index.lexical_search("acme", "a", 10, within=0.0)
    with pytest.raises(QueryUnprocessable):
        index.lexical_search("acme", "-only", 10)


def test_a_long_document_is_rows_of_the_bound_each_with_its_first_line(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path)
    lines = [f"line {number} about turbines and blades" for number in range(1, 12_001)]
    lines[11_000] = "line 11001 names the quokka once"
    one_line = "word " * 60_000 + "wombat"  # 300,006 characters, no line break
    with index.batch() as batch:
        batch.replace(doc("lines", "\n".join(lines)))
        batch.replace(doc("line", one_line))
        batch.replace(doc("short", "turbines and the quokka"))
    with sqlite3.connect(index.lexicon.path) as connection:
        rows = dict(
            connection.execute(
                "SELECT document_id, COUNT(*) FROM rows GROUP BY document_id"
            ).fetchall()
        )
        longest = connection.execute("SELECT MAX(LENGTH(body)) FROM rows").fetchone()[0]
    assert longest <= SEGMENT_CHARS
    assert rows == {"lines": 5, "line": 4, "short": 1}
    hits = {hit.document_id: hit for hit in index.lexical_search("acme", "quokka", 10)}
    assert sorted(hits) == ["lines", "short"]  # each document once, by its best row
    found = hits["lines"]
    assert found.line_start > 1
    offset = found.body.split("\n").index("line 11001 names the quokka once")
    assert found.line_start + offset == 11_001  # the row's lines keep their numbers
    (wombat,) = index.lexical_search("acme", "wombat", 10)
    assert wombat.document_id == "line" and wombat.line_start == 1
    assert len(wombat.body) <= SEGMENT_CHARS
    with index.batch() as batch:
        batch.delete("lines")
    assert ids(index, "quokka") == ["short"]
    with sqlite3.connect(index.lexicon.path) as connection:
        assert connection.execute("SELECT COUNT(*) FROM rows").fetchone()[0] == 5


def test_segments_give_the_text_back_with_its_line_numbers() -> None:
    body = "a\n" + "x" * 250 + "\n" + "\n".join(f"l{n}" for n in range(100))
    rows = list(segments(body, 64))
    assert all(len(text) <= 64 for _, text in rows)
    rebuilt, last = "", 1
    for line, text in rows:  # a row on the line the previous one ended on continues it
        rebuilt += ("" if line == last else "\n") + text
        last = line + text.count("\n")
    assert rebuilt == body


def test_a_lexicon_of_whole_document_rows_is_kept_and_migrated(tmp_path: Path) -> None:
    index = DocumentIndex(tmp_path)
    with sqlite3.connect(index.lexicon.path) as connection:  # the layout before rows were bounded
        connection.execute(
            "CREATE TABLE rows (rowid INTEGER PRIMARY KEY, document_id TEXT UNIQUE NOT NULL, "
            "tenant TEXT NOT NULL, collection TEXT NOT NULL, body TEXT NOT NULL)"
        )
        connection.execute(
            "INSERT INTO rows VALUES (1, 'old', 'acme', 'kb', 'an old zebra document')"
        )
        table = "fts_" + hashlib.sha256(b"acme").hexdigest()[:24]
        connection.execute(
            f"CREATE VIRTUAL TABLE {table} USING fts5(filepath, title, body, "
            "tokenize='porter unicode61')"
        )
        connection.execute(
            f"INSERT INTO {table} (rowid, filepath, title, body) "
            "VALUES (1, 'kb/old.md', 'old', 'an old zebra document')"
        )
    assert ids(index, "zebra") == ["old"]  # read before any write: still searchable
    with index.batch() as batch:
        batch.replace(doc("new", "a new zebra"))
    assert sorted(ids(index, "zebra")) == ["new", "old"]
    (hit,) = index.lexical_search("acme", "old", 10)
    assert hit.line_start == 1 and hit.body == "an old zebra document"
