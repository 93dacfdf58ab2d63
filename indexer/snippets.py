"""Highlighted excerpts of a chunk: the window holding the most query terms, terms in **bold**.

Whoosh's highlighter re-runs the field's analyzer through its token objects and scores every
fragment in Python; on this index that was 4 ms a hit, more than the search itself. Here the
tokenizer's raw spans are read once, each word reduced to its indexed form (the same cached
stemming the index used), and one pass picks the densest window.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

from indexer.analysis import MultilingualTokenizer, indexed_form, word_form

_KEYWORD = MultilingualTokenizer(cjk="search")
_EXACT = MultilingualTokenizer(cjk="chars")
ELLIPSIS = "…"
_SPACES = re.compile(r"\s+")
_WORD_REST = re.compile(r"\w*")
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def snippet(text: str, terms: Iterable[str], exact: bool, max_chars: int) -> str:
    """An excerpt of ``text`` of about ``max_chars`` characters around the query ``terms``
    (their indexed forms), each occurrence in **bold**; the beginning when none occurs.

    A stem is nearly always the beginning of the words it comes from, so the words that
    start with a term are found in the text, and each is kept when its indexed form (the
    same cached stemming the index used) is a term. Only when that finds nothing (a stem
    that is not a prefix, as "fire" of "firing") is text tokenized: the stretch around the
    first word that nearly starts with a term, or nothing when no word does (a hit through
    its title, most often).
    """
    wanted = frozenset(terms)
    matches = _prefix_matches(text, wanted, exact) if wanted else []
    if matches:
        return _around(text, matches, max_chars)
    near = _nearly_starting(text, wanted)
    if near is None:
        return _cut(text, 0, max_chars)
    begin, end = _word_bounds(text, max(0, near - max_chars), min(len(text), near + 2 * max_chars))
    excerpt = _excerpt(text[begin:end], wanted, exact, max_chars)
    if excerpt is None:
        return _cut(text, 0, max_chars)
    prefix = ELLIPSIS if begin > 0 and not excerpt.startswith(ELLIPSIS) else ""
    suffix = ELLIPSIS if end < len(text) and not excerpt.endswith(ELLIPSIS) else ""
    return prefix + excerpt + suffix


def _nearly_starting(text: str, wanted: frozenset[str]) -> int | None:
    """Where the first word of ``text`` starts that begins with a term less its last letter
    (a stem's "e" or "i" is not always in the word), in the text folded as the tokenizer
    folds words ("ё" as "е", full-width as ASCII); None when no word does."""
    folded = unicodedata.normalize("NFKC", text).lower().replace("ё", "е")
    if len(folded) != len(text):
        folded = text.lower()  # offsets must stay those of the text
    first = None
    for term in wanted:
        probe = term[:-1] if len(term) > 3 else term
        at = folded.find(probe)
        while at >= 0 and (first is None or at < first):
            if at == 0 or not _is_word_char(folded[at - 1]) or _CJK.match(probe):
                first = at
                break
            at = folded.find(probe, at + 1)
    return first


def _prefix_matches(text: str, wanted: frozenset[str], exact: bool) -> list[tuple[int, int, str]]:
    """(start, end, term) of the words of ``text`` that start with a term and whose indexed
    form is a term, and of the Han terms anywhere; left to right, never overlapping.

    Each term is looked for with ``str.find`` in the lowercased text (C speed); a regular
    expression alternating over the terms, case-insensitive, cost several times more a hit.
    """
    folded = text.lower()
    if len(folded) != len(text):  # a letter whose lowercase is longer (İ): offsets would move
        return _regex_prefix_matches(text, wanted, exact)
    candidates: list[tuple[int, int, str | None]] = []
    for term in wanted:
        han = _CJK.match(term) is not None
        at = folded.find(term)
        while at >= 0:
            if han:
                candidates.append((at, at + len(term), term))
            elif at == 0 or not _is_word_char(folded[at - 1]):
                end = _WORD_REST.match(folded, at + len(term)).end()  # type: ignore[union-attr]
                candidates.append((at, end, None))
            at = folded.find(term, at + 1)
    # As a scan from the left would take them: the longest at each place, none inside another.
    candidates.sort(key=lambda candidate: (candidate[0], candidate[0] - candidate[1]))
    matches = []
    last_end = -1
    for start, end, han_term in candidates:
        if start < last_end:
            continue
        last_end = end
        form = han_term if han_term is not None else _indexed_word(text[start:end], exact)
        if form in wanted:
            matches.append((start, end, form))
    return matches


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _indexed_word(word: str, exact: bool) -> str | None:
    form, kind = word_form(word)
    return form if exact else indexed_form(form, kind)


def _regex_prefix_matches(
    text: str, wanted: frozenset[str], exact: bool
) -> list[tuple[int, int, str]]:
    matches = []
    for match in _prefixes(wanted).finditer(text):
        found = match.group()
        form = found if _CJK.match(found) else _indexed_word(found, exact)
        if form in wanted:
            matches.append((match.start(), match.end(), form))
    return matches


@functools.lru_cache(maxsize=1024)
def _prefixes(terms: frozenset[str]) -> re.Pattern[str]:
    """Where words starting with one of ``terms`` begin (Han terms anywhere)."""
    cjk = sorted((re.escape(t) for t in terms if _CJK.search(t)), key=len, reverse=True)
    words = sorted((re.escape(t) for t in terms if not _CJK.search(t)), key=len, reverse=True)
    patterns = [rf"(?<!\w)(?:{'|'.join(words)})\w*"] if words else []
    if cjk:
        patterns.append("|".join(cjk))  # Chinese has no spaces: a word starts anywhere
    return re.compile("|".join(patterns), re.IGNORECASE)


def _excerpt(text: str, wanted: frozenset[str], exact: bool, max_chars: int) -> str | None:
    """The marked excerpt of ``text`` around its best stretch of terms, found by tokenizing
    it; None when no term occurs."""
    spans = _EXACT.spans(text) if exact else _KEYWORD.spans(text)
    matches: list[tuple[int, int, str]] = []
    for form, kind, _pos, start, end in spans:
        indexed = form if exact else indexed_form(form, kind)
        if indexed is not None and indexed in wanted:
            matches.append((start, end, indexed))
    return _around(text, matches, max_chars) if matches else None


def _around(text: str, matches: list[tuple[int, int, str]], max_chars: int) -> str:
    """The excerpt of about ``max_chars`` centred on the stretch with the most distinct terms,
    the matches in it marked."""
    first, last = _densest_window(matches, max_chars)
    window_start = matches[first][0]
    window_end = matches[last][1]
    slack = max(0, max_chars - (window_end - window_start))
    begin = max(0, window_start - slack // 2)
    end = min(len(text), max(window_end, begin + max_chars))
    begin = max(0, min(begin, end - max_chars))
    begin, end = _word_bounds(text, begin, end)
    return _marked(text, begin, end, [m for m in matches if begin <= m[0] and m[1] <= end])


def _densest_window(matches: list[tuple[int, int, str]], max_chars: int) -> tuple[int, int]:
    """Indexes of the first and last match of the window with the most distinct terms."""
    best = (0, 0, 0)  # distinct terms, first, last
    counts: dict[str, int] = {}
    left = 0
    for right, (_start, end, term) in enumerate(matches):
        counts[term] = counts.get(term, 0) + 1
        while end - matches[left][0] > max_chars:
            gone = matches[left][2]
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
            left += 1
        if len(counts) > best[0]:
            best = (len(counts), left, right)
    return best[1], best[2]


def _word_bounds(text: str, begin: int, end: int) -> tuple[int, int]:
    """Move the cut points to spaces nearby, so no word is cut in half."""
    if begin > 0:
        space = text.rfind(" ", max(0, begin - 20), begin)
        begin = space + 1 if space >= 0 else begin
    if end < len(text):
        space = text.find(" ", end, end + 20)
        end = space if space >= 0 else end
    return begin, end


def _marked(text: str, begin: int, end: int, matches: list[tuple[int, int, str]]) -> str:
    parts = [ELLIPSIS] if begin > 0 else []
    cursor = begin
    for start, stop, _term in _merged(matches):
        parts.append(text[cursor:start])
        parts.append(f"**{text[start:stop]}**")
        cursor = stop
    parts.append(text[cursor:end])
    if end < len(text):
        parts.append(ELLIPSIS)
    return _SPACES.sub(" ", "".join(parts)).strip()


def _merged(matches: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Touching or overlapping matches as one bold run (a Chinese word's characters, a code
    and its parts)."""
    merged: list[tuple[int, int, str]] = []
    for start, end, term in sorted(matches):
        if merged and start <= merged[-1][1]:
            previous = merged[-1]
            merged[-1] = (previous[0], max(previous[1], end), previous[2])
        else:
            merged.append((start, end, term))
    return merged


def _cut(text: str, begin: int, max_chars: int) -> str:
    end = min(len(text), begin + max_chars)
    begin, end = _word_bounds(text, begin, end)
    excerpt = _SPACES.sub(" ", text[begin:end]).strip()
    return excerpt + (ELLIPSIS if end < len(text) else "")
