"""The multilingual analyzers, on their own and inside a real Whoosh index in tmp_path."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from whoosh import index
from whoosh.fields import ID, TEXT, Schema
from whoosh.qparser import OrGroup, QueryParser, WildcardPlugin
from whoosh.searching import Searcher

from indexer.analysis import (
    MultilingualTokenizer,
    exact_analyzer,
    index_terms,
    keyword_analyzer,
)

ROOT = Path(__file__).resolve().parents[1]


def texts(analyzer: object, value: str, mode: str = "index") -> list[str]:
    return [t.text for t in analyzer(value, mode=mode)]  # type: ignore[operator]


def schema() -> Schema:
    return Schema(
        id=ID(stored=True, unique=True),
        text=TEXT(analyzer=keyword_analyzer(), stored=True),
        exact=TEXT(analyzer=exact_analyzer(), multitoken_query="phrase"),
    )


DOCS = {
    "zh": "中华人民共和国成立了，首都在北京。",
    "zh-other": "上海是一个国际大都市。",
    "ru": "Система поиска работает с документами на русском языке.",
    "en": "The quick brown fox indexed the documents.",
    "en-other": "Brown bears and quick decisions.",
    "code": "Fixed KWDB-4001 in v2.3.0; see user_profile and file.txt on 192.168.0.1 now.",
    "mixed": "搜索引擎 для поиска documents: LDIMS indexing.",
}


@pytest.fixture(scope="module")
def searcher(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Searcher]:
    path = tmp_path_factory.mktemp("index")
    ix = index.create_in(str(path), schema())
    with ix.writer() as writer:
        for doc_id, text in DOCS.items():
            writer.add_document(id=doc_id, text=text, exact=text)
    # Reopen from disk: the schema, analyzers included, comes back through pickle.
    with index.open_dir(str(path)).searcher() as s:
        yield s


def found(searcher: Searcher, field: str, query: str) -> set[str]:
    group = OrGroup if field == "text" else None
    parser = QueryParser(field, searcher.schema, **({"group": group} if group else {}))
    parser.remove_plugin_class(WildcardPlugin)  # questions end in "?"
    return {hit["id"] for hit in searcher.search(parser.parse(query), limit=None)}


def test_chinese_is_segmented_into_words() -> None:
    tokens = texts(keyword_analyzer(), "中华人民共和国成立了")
    assert "中华人民共和国" in tokens
    assert "共和国" in tokens  # dictionary words inside a long one, as jieba's search mode
    assert "成立" in tokens
    assert "了" not in tokens  # Chinese stop word
    assert "中" not in tokens


@pytest.mark.parametrize(
    ("query", "expected"),
    [("北京", {"zh"}), ("成立", {"zh"}), ("共和国", {"zh"}), ("上海", {"zh-other"})],
)
def test_two_character_chinese_word_finds_the_sentence(
    searcher: Searcher, query: str, expected: set[str]
) -> None:
    assert found(searcher, "text", query) == expected


@pytest.mark.parametrize(
    ("query", "doc"), [("документ", "ru"), ("поиск", "ru"), ("поиска", "mixed")]
)
def test_russian_inflected_forms_match(searcher: Searcher, query: str, doc: str) -> None:
    assert doc in found(searcher, "text", query)


def test_russian_stems() -> None:
    assert texts(keyword_analyzer(), "документами поиска Ёлка") == ["документ", "поиск", "елк"]


def test_english_stems(searcher: Searcher) -> None:
    assert found(searcher, "text", "indexing") == {"en", "mixed"}
    assert texts(keyword_analyzer(), "indexing indexed documents") == ["index", "index", "document"]


@pytest.mark.parametrize(
    "query", ["KWDB-4001", "kwdb", "4001", "v2.3.0", "user_profile", "profile", "file.txt"]
)
@pytest.mark.parametrize("field", ["text", "exact"])
def test_codes_match_whole_and_by_parts(searcher: Searcher, field: str, query: str) -> None:
    assert found(searcher, field, query) == {"code"}


def test_codes_are_not_stemmed_and_exact_queries_keep_them_whole() -> None:
    tokens = texts(keyword_analyzer(), "user_profiles KWDB-4001")
    assert "user_profiles" in tokens and "profil" in tokens
    assert texts(exact_analyzer(), "KWDB-4001 v2.3.0", mode="query") == ["kwdb-4001", "v2.3.0"]


@pytest.mark.parametrize("query", ["KWDB-4002", "v2.3.1", "kwdb-4001x"])
def test_other_codes_do_not_match_exactly(searcher: Searcher, query: str) -> None:
    assert found(searcher, "exact", query) == set()


def test_mixed_script_text_keeps_all_three_scripts(searcher: Searcher) -> None:
    tokens = texts(keyword_analyzer(), "搜索引擎 для поиска documents: LDIMS indexing.")
    assert "搜索引擎" in tokens and "搜索" in tokens
    assert "поиск" in tokens and "для" not in tokens
    assert {"document", "index"} <= set(tokens)
    assert found(searcher, "text", "LDIMS") == {"mixed"}


def test_stop_words_removed_for_ranking_and_kept_for_exact() -> None:
    value = "the state of the art и в 的"
    assert texts(keyword_analyzer(), value) == ["state", "art"]
    assert texts(exact_analyzer(), value) == ["the", "state", "of", "the", "art", "и", "в", "的"]


def test_stop_words_marked_not_removed_when_asked() -> None:
    tokens = [(t.text, t.stopped) for t in keyword_analyzer()("the art", removestops=False)]
    assert tokens == [("the", True), ("art", False)]


def test_full_width_letters_and_bom_are_normalised() -> None:
    assert texts(exact_analyzer(), "\ufeffＡＰＩ Ёж") == ["api", "еж"]


@pytest.mark.parametrize("make", [keyword_analyzer, exact_analyzer])
def test_analyzers_survive_pickle(make: object) -> None:
    analyzer = make()  # type: ignore[operator]
    copy = pickle.loads(pickle.dumps(analyzer))
    assert copy == analyzer
    value = "中华人民共和国 поиска KWDB-4001 indexing"
    assert texts(copy, value) == texts(analyzer, value)


def test_positions_and_offsets_point_at_the_source() -> None:
    value = "Ключ KWDB-4001: 北京大学 quick"
    tokens = [
        (t.text, t.pos, value[t.startchar - 10 : t.endchar - 10])
        for t in exact_analyzer()(value, positions=True, chars=True, start_char=10)
    ]
    assert tokens == [
        ("ключ", 0, "Ключ"),
        ("kwdb-4001", 1, "KWDB-4001"),
        ("kwdb", 1, "KWDB"),
        ("4001", 1, "4001"),
        ("北", 2, "北"),
        ("京", 3, "京"),
        ("大", 4, "大"),
        ("学", 5, "学"),
        ("quick", 6, "quick"),
    ]


def test_stacked_chinese_sub_words_share_the_word_position() -> None:
    tokens = [(t.text, t.pos) for t in keyword_analyzer()("中华人民共和国成立", positions=True)]
    assert ("中华人民共和国", 0) in tokens and ("共和国", 0) in tokens
    assert ("成立", 1) in tokens


@pytest.mark.parametrize(
    ("field", "query", "expected"),
    [
        ("exact", '"quick brown"', {"en"}),
        ("exact", '"brown quick"', set()),
        ("exact", "人民共和", {"zh"}),  # a substring jieba would never cut out
        ("exact", "共和人民", set()),
        ("exact", '"see user_profile and"', {"code"}),
        ("exact", '"fixed kwdb-4001 in"', {"code"}),
        ("text", '"quick brown fox"', {"en"}),
        ("text", '"quick brown the fox"', {"en"}),  # stop words skipped alike on both sides
    ],
)
def test_phrases(searcher: Searcher, field: str, query: str, expected: set[str]) -> None:
    assert found(searcher, field, query) == expected


def test_highlights_mark_the_original_characters(searcher: Searcher) -> None:
    parser = QueryParser("exact", searcher.schema)
    hits = searcher.search(parser.parse('"quick brown"'), terms=True)
    assert [hit["id"] for hit in hits] == ["en"]
    marked = hits[0].highlights("exact", text=hits[0]["text"])
    assert 'The <b class="match term0">quick</b> <b class="match term1">brown</b> fox' in marked

    hits = searcher.search(QueryParser("text", searcher.schema).parse("北京"), terms=True)
    assert '<b class="match term0">北京</b>' in hits[0].highlights("text")


def test_kana_runs_become_pairs() -> None:
    assert texts(keyword_analyzer(), "カタカナ") == ["カタ", "タカ", "カナ"]
    assert texts(MultilingualTokenizer(cjk="chars"), "カナ") == ["カ", "ナ"]


def test_dictionary_loads_cleanly_and_writes_nothing(tmp_path: Path) -> None:
    # A fresh interpreter, warnings as errors, in an empty working directory: the first
    # Chinese text loads the dictionary and must leave no cache file behind.
    script = "from indexer.analysis import keyword_analyzer; list(keyword_analyzer()('中文分词'))"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        cwd=tmp_path,
        env={"PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "text", [*DOCS.values(), "ひらがなとカタカナ ア the-end a-a Ёлка ＡＢＣ１２３"]
)
def test_index_terms_are_what_both_analyzers_index(text: str) -> None:
    frequencies, positions = index_terms(text)
    assert frequencies == Counter(texts(keyword_analyzer(), text))
    expected: dict[str, list[int]] = {}
    for token in exact_analyzer()(text, positions=True, mode="index"):
        expected.setdefault(token.text, []).append(token.pos)
    assert positions == expected
