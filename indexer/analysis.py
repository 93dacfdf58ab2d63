"""Text analysis for the Whoosh index: one tokenizer for mixed Chinese, Russian and English.

Whoosh pickles analyzers into the index schema, so the classes here are part of the
on-disk format: keep their names, module and attributes stable (bump the schema version
and reindex when their output changes).

Two analyzers share one tokenizer:

* :func:`keyword_analyzer` for ranked (BM25F) search: stop words removed, Russian and
  English words stemmed with Snowball (English is Porter2), Chinese segmented into
  words by jieba (``rjieba``) with the shorter dictionary words inside long ones
  stacked on the same position, as jieba's search mode does.
* :func:`exact_analyzer` for exact terms and phrases: lowercased only, stop words kept,
  every Han and kana character its own token, so a quoted Chinese phrase matches as a
  substring whatever jieba would have made of it.

Identifiers and codes (``KWDB-4001``, ``v2.3.0``, ``user_profile``, ``192.168.0.1``) are
indexed whole *and* by their parts, all on one position, so the whole, each part and a
phrase written the way the document writes it all match. The whole is never stemmed.

Token positions count words; stacked tokens (code parts, Chinese sub-words) share the
position of the token they come from. Character offsets always point into the original
text, so highlighting works on the stored field.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any, Literal

import rjieba
import Stemmer
from whoosh.analysis import Filter, Token, Tokenizer
from whoosh.analysis.analyzers import CompositeAnalyzer
from whoosh.lang.stopwords import stoplists

__all__ = [
    "MultilingualTokenizer",
    "StemStopFilter",
    "exact_analyzer",
    "index_terms",
    "indexed_form",
    "word_form",
    "keyword_analyzer",
    "warm_up",
]

CjkMode = Literal["search", "words", "chars"]
# (text, kind, position, start offset, end offset) of one token.
_Span = tuple[str, str, int, int, int]
_Add = Callable[[_Span], None]

# Token kinds, kept on each token (``token.kind``) for the filter.
LATIN, CYRILLIC, HAN, KANA, CODE, OTHER = "latin", "cyrillic", "han", "kana", "code", "other"

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_KANA = "\u3040-\u30ff\u31f0-\u31ff"
# A letter or digit that is not CJK and not "_" (which joins parts of identifiers).
_ALNUM = rf"[^\W_{_HAN}{_KANA}]"
# Letters and digits with combining accents among them (decomposed "й" stays one word),
# written as runs: a third faster than one optional group per character.
_WORD = rf"{_ALNUM}+(?:[\u0300-\u036f]+{_ALNUM}*)*"
# What joins the parts of a code; a comma only between digits ("1,000").
_JOIN = r"(?:[-_./:@+#'’]|(?<=\d),(?=\d))+"
_TOKEN = re.compile(
    rf"(?P<han>[{_HAN}]+)|(?P<kana>[{_KANA}]+)"
    rf"|(?P<word>{_WORD}(?P<joined>(?:{_JOIN}{_WORD})+)?(?:\+\+|#)?)"
)
_PART = re.compile(_WORD)
# Longer "words" are base64 blobs and the like: not worth a term.
MAX_TOKEN_CHARS = 128

# Function words and question words (the English list drops "what", "who" too).
ZH_STOP_WORDS = frozenset(
    """的 了 是 在 和 有 我 他 她 它 这 那 就 也 都 而 及 与 着 或 之 其 于 以 被 把 对 从 并
    一个 没有 我们 你们 他们 她们 它们 这个 那个 什么 哪 哪个 哪些 谁 吗 呢 吧 啊""".split()  # noqa: SIM905
)
_STOP_WORDS = {
    LATIN: stoplists["en"],
    CYRILLIC: stoplists["ru"],
    HAN: ZH_STOP_WORDS,
}

# Entries of each word cache below: the common words, which make the hits. The caches fill
# with the long tail too (ids, hashes, numbers), and a full cache churns it through pymalloc
# arenas it never gives back: with six caches of 32,768 the index writer's heap still grew
# after 12,000 of bench/ingest.py's documents (+30 MiB in one process; the worker's, +57 %
# over 20,000). At 2,048 they are full after the first batches, the heap stays flat
# (+4 MiB from 2,048 to 8,192 documents), and indexing is as fast as with the large ones;
# without caches it is 4 % slower.
_WORDS_CACHED = 2_048
_STEMMERS = {LATIN: Stemmer.Stemmer("english"), CYRILLIC: Stemmer.Stemmer("russian")}


@lru_cache(maxsize=_WORDS_CACHED)
def _indexed_form(text: str, kind: str) -> str | None:
    """The stem of a word, or None for a stop word (cached: Whoosh asks per token)."""
    stops = _STOP_WORDS.get(kind)
    if stops is not None and text in stops:
        return None
    stemmer = _STEMMERS.get(kind)
    return stemmer.stemWord(text) if stemmer is not None else text


def indexed_form(text: str, kind: str) -> str | None:
    """How the keyword field indexes a token: its stem, or None for a stop word."""
    return _indexed_form(text, kind)


def word_form(word: str) -> tuple[str, str]:
    """A word as the tokenizer emits it (lowercased, folded) and its kind (script)."""
    return _word_form(word)


_jieba: rjieba.Jieba | None = None
_jieba_lock = threading.Lock()


def _segmenter() -> rjieba.Jieba:
    """The process's one jieba; its dictionary (built into rjieba) takes ~0.15 s to load."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                _jieba = rjieba.Jieba()
    return _jieba


def warm_up() -> None:
    """Load the Chinese dictionary now (at worker start) rather than on the first text."""
    _segmenter().cut("中文")


@lru_cache(maxsize=_WORDS_CACHED)
def _subwords(word: str) -> tuple[tuple[str, int], ...]:
    """Dictionary words of 2 and 3 characters inside ``word``, with their offsets.

    This is what jieba's search mode adds for long words, so "共和国" is found inside
    "中华人民共和国".
    """
    if len(word) <= 2:
        return ()
    jieba = _segmenter()
    found: dict[str, int] = {}
    for size in (2, 3):
        if len(word) <= size:
            break
        for start in range(len(word) - size + 1):
            gram = word[start : start + size]
            if gram not in found and jieba.has_word(gram):
                found[gram] = start
    return tuple(found.items())


@lru_cache(maxsize=_WORDS_CACHED)
def _word_form(word: str) -> tuple[str, str]:
    """A word as indexed (lowercased, full-width folded, "ё" read as "е") and its kind."""
    if word.isascii():
        text = word.lower()
    else:
        text = unicodedata.normalize("NFKC", word).lower().replace("ё", "е")
    if not text.isalpha():
        return text, CODE  # numbers and letter-digit mixes: never stemmed
    first = ord(text[0])
    if first < 0x250:
        return text, LATIN
    if 0x400 <= first <= 0x52F:
        return text, CYRILLIC
    return text, OTHER


@lru_cache(maxsize=_WORDS_CACHED)
def _code_parts(code: str) -> tuple[tuple[str, str, int, int], ...]:
    """The parts of a code as indexed: (text, kind, start, end), offsets inside the code."""
    parts = []
    for part in _PART.finditer(code):
        text, kind = _word_form(part.group())
        if len(text) <= MAX_TOKEN_CHARS:
            parts.append((text, kind, part.start(), part.end()))
    return tuple(parts)


class MultilingualTokenizer(Tokenizer):
    """Splits text into runs by script and each run into lowercased words.

    :param cjk: how Han text becomes tokens: ``"search"`` (jieba words plus the
        dictionary words inside long ones, stacked), ``"words"`` (jieba words only) or
        ``"chars"`` (one token per character, for exact phrase matching). Kana is cut
        into overlapping character pairs, or single characters with ``"chars"``.
    :param query_parts: in ``mode="query"``, also emit the parts of a code (a bag of
        words for ranked search). Without it a query gets the whole code only, which
        keeps phrase queries aligned with the document's positions.
    """

    def __init__(self, cjk: CjkMode = "search", query_parts: bool = False) -> None:
        self.cjk = cjk
        self.query_parts = query_parts

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __call__(
        self,
        value: str,
        positions: bool = False,
        chars: bool = False,
        keeporiginal: bool = False,
        removestops: bool = True,
        start_pos: int = 0,
        start_char: int = 0,
        tokenize: bool = True,
        mode: str = "",
        **kwargs: Any,
    ) -> Iterator[Token]:
        assert isinstance(value, str), f"{value!r} is not unicode"
        # Whoosh's protocol: one Token, reused; every attribute a consumer reads is set.
        t = Token(positions, chars, removestops=removestops, mode=mode, **kwargs)
        if tokenize:
            spans = self._spans(value, start_pos, mode == "query")
        else:
            # Wildcard and range terms: normalise, do not split.
            spans = [(_word_form(value)[0], CODE, start_pos, 0, len(value))]
        for text, kind, pos, start, end in spans:
            t.text = text
            t.kind = kind
            t.boost = 1.0
            t.stopped = False
            if keeporiginal:
                t.original = value[start:end]
            if positions:
                t.pos = pos
            if chars:
                t.startchar = start_char + start
                t.endchar = start_char + end
            yield t

    def spans(self, text: str) -> list[_Span]:
        """(text, kind, position, start, end) of each token of a document ``text``."""
        return self._spans(text, 0, False)

    def _spans(self, value: str, pos: int, in_query: bool) -> list[_Span]:
        # One list per value: cheaper than nested generators, and chunks are small.
        spans: list[_Span] = []
        add = spans.append
        for match in _TOKEN.finditer(value):
            group = match.lastgroup
            start, end = match.span()
            if group == "word":
                if match.start("joined") < 0:
                    text, kind = _word_form(match.group())
                    if len(text) <= MAX_TOKEN_CHARS:
                        add((text, kind, pos, start, end))
                else:
                    self._code(add, match.group(), start, pos, in_query)
                pos += 1
            elif group == "han":
                pos = self._han(add, match.group(), start, pos)
            else:
                pos = self._kana(add, match.group(), start, pos)
        return spans

    def _code(self, add: _Add, code: str, start: int, pos: int, in_query: bool) -> None:
        """A code goes in whole and by parts, all on one position."""
        whole = _word_form(code)[0]
        if len(whole) <= MAX_TOKEN_CHARS:
            add((whole, CODE, pos, start, start + len(code)))
            if in_query and not self.query_parts:
                return
        for text, kind, part_start, part_end in _code_parts(code):
            add((text, kind, pos, start + part_start, start + part_end))

    def _han(self, add: _Add, run: str, start: int, pos: int) -> int:
        if self.cjk == "chars":
            for offset, char in enumerate(run, start):
                add((char, HAN, pos, offset, offset + 1))
                pos += 1
            return pos
        search = self.cjk == "search"
        offset = start
        for word in _segmenter().cut(run):
            end = offset + len(word)
            add((word, HAN, pos, offset, end))
            if search:
                for sub, sub_offset in _subwords(word):
                    sub_start = offset + sub_offset
                    add((sub, HAN, pos, sub_start, sub_start + len(sub)))
            offset = end
            pos += 1
        return pos

    def _kana(self, add: _Add, run: str, start: int, pos: int) -> int:
        # No Japanese dictionary here: overlapping pairs find kana words of any length.
        size = 1 if self.cjk == "chars" or len(run) == 1 else 2
        for offset in range(start, start + len(run) - size + 1):
            text = _word_form(run[offset - start : offset - start + size])[0]
            add((text, KANA, pos, offset, offset + size))
            pos += 1
        return pos


class StemStopFilter(Filter):
    """Removes stop words and stems, each by the token's script (``token.kind``).

    Latin words get the English stop list and Snowball (Porter2) stemmer, Cyrillic ones
    the Russian list and stemmer, Han words a short Chinese list. Codes, numbers and other
    scripts pass unchanged. Positions are renumbered over removed stop words (as
    Whoosh's ``StopFilter`` does) so phrases skip them the same way in documents and
    queries; stacked tokens keep sharing a position.
    """

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __call__(self, tokens: Iterable[Token]) -> Iterator[Token]:
        indexed_form = _indexed_form
        last_in: int | None = None
        last_out = 0
        for t in tokens:
            form = indexed_form(t.text, t.kind)
            if form is None and t.removestops:
                continue
            if t.positions:
                if last_in is None:
                    last_out = t.pos
                elif t.pos != last_in:
                    last_out += 1
                last_in = t.pos
                t.pos = last_out
            if form is None:
                t.stopped = True
            else:
                t.text = form
            yield t


def keyword_analyzer() -> CompositeAnalyzer:
    """For ranked search fields (``text``, ``title``): stemmed, stop words removed."""
    return MultilingualTokenizer(cjk="search", query_parts=True) | StemStopFilter()


def exact_analyzer() -> MultilingualTokenizer:
    """For the exact field: lowercased words, stop words kept, CJK one character a token.

    Give the field ``multitoken_query="phrase"`` so a Chinese word or code typed without
    quotes is still matched as written.
    """
    return MultilingualTokenizer(cjk="chars", query_parts=False)


def index_terms(text: str) -> tuple[dict[str, int], dict[str, list[int]]]:
    """What the two analyzers index for a document ``text``, from one pass over it.

    Returns the terms of :func:`keyword_analyzer` with their frequencies and the terms of
    :func:`exact_analyzer` with their positions, as indexing ``text`` through each of them
    would (a test keeps them equal). The index writer calls this once per chunk instead of
    running both analyzers: they split text the same way and differ only in Chinese and kana
    runs, and the analyzers' token stream costs as much again as the splitting.
    """
    counts: dict[str, int] = {}
    positions: dict[str, list[int]] = {}
    count, where = counts.get, positions.get
    pos = 0
    for match in _TOKEN.finditer(text):
        group = match.lastgroup
        if group == "word":
            if match.start("joined") < 0:
                # Most tokens: one plain word (inlined, this loop is the indexing hot path).
                term, form = _word_terms(match.group())
                if form is not None:
                    counts[form] = count(form, 0) + 1
                if term is not None:
                    seen = where(term)
                    if seen is None:
                        positions[term] = [pos]
                    else:
                        seen.append(pos)
            else:
                _code_terms(match.group(), pos, counts, positions)
            pos += 1
        elif group == "han":
            pos = _han_terms(match.group(), pos, counts, positions)
        else:
            pos = _kana_terms(match.group(), pos, counts, positions)
    return counts, positions


@lru_cache(maxsize=_WORDS_CACHED)
def _word_terms(word: str) -> tuple[str | None, str | None]:
    """A plain word's exact term and keyword term (None: too long, or a stop word)."""
    term, kind = _word_form(word)
    if len(term) > MAX_TOKEN_CHARS:
        return None, None
    return term, _indexed_form(term, kind)


def _code_terms(
    code: str, pos: int, counts: dict[str, int], positions: dict[str, list[int]]
) -> None:
    """A code, whole and by parts, all on one position."""
    whole = _word_form(code)[0]
    terms = [(part, kind) for part, kind, _, _ in _code_parts(code)]
    if len(whole) <= MAX_TOKEN_CHARS:
        terms.insert(0, (whole, CODE))
    for term, kind in terms:
        form = _indexed_form(term, kind)
        if form is not None:
            counts[form] = counts.get(form, 0) + 1
        positions.setdefault(term, []).append(pos)


def _han_terms(run: str, pos: int, counts: dict[str, int], positions: dict[str, list[int]]) -> int:
    """A Han run: jieba words and their sub-words for keyword, one character a position exact."""
    count, where = counts.get, positions.get
    for word in _segmenter().cut(run):
        for form in _han_forms(word):
            counts[form] = count(form, 0) + 1
    for at, char in enumerate(run, pos):
        seen = where(char)
        if seen is None:
            positions[char] = [at]
        else:
            seen.append(at)
    return pos + len(run)


@lru_cache(maxsize=_WORDS_CACHED)
def _han_forms(word: str) -> tuple[str, ...]:
    """The keyword terms of a jieba word: itself and its sub-words, stop words left out."""
    terms = (word, *(sub for sub, _ in _subwords(word)))
    return tuple(form for form in map(_indexed_form, terms, [HAN] * len(terms)) if form)


def _kana_terms(run: str, pos: int, counts: dict[str, int], positions: dict[str, list[int]]) -> int:
    """A kana run: overlapping pairs for keyword, one character a position for exact."""
    size = 1 if len(run) == 1 else 2
    for start in range(len(run) - size + 1):
        form = _indexed_form(_word_form(run[start : start + size])[0], KANA)
        if form is not None:
            counts[form] = counts.get(form, 0) + 1
    for char in run:
        term = _word_form(char)[0]
        seen = positions.get(term)
        if seen is None:
            positions[term] = [pos]
        else:
            seen.append(pos)
        pos += 1
    return pos
