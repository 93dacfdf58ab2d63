"""A search's cost budget: a query too large, or whose words are too common, is refused with
:class:`~indexer.model.QueryUnprocessable` before any of its postings is read.

A search's work grows with the postings it walks. Scored from arrays (terms, plain ORs, ANDs:
see :mod:`indexer.evaluate`) a posting costs 15-50 ns; stepped through by Whoosh's matchers
(phrases, NOT, ranges) 300-1,600 ns (measured on 28k chunks of War and Peace). A query of 200
quoted two-word phrases of common words took 4-6 s over one book, and the searches of a
process share its CPU. :class:`SearchLimits` bounds a query's distinct terms, its phrases and
the postings it would walk. The phrases are counted in the text before it is parsed (the
parser runs once per quoted phrase), the rest on the parsed query, from the document
frequencies of its terms (kept per commit: a warm search pays a dictionary lookup a term).

The estimate counts postings in the whole index, not in the tenant's chunks: it needs no
posting read. The refusal names the limit, never the estimate, which would tell how common a
word is in other tenants' documents.
"""

from __future__ import annotations

from dataclasses import dataclass

from whoosh.query import MultiTerm, Phrase, Query, Term

from indexer.evaluate import Snapshot, scored_by_arrays
from indexer.model import QueryUnprocessable

# A posting that Whoosh's matchers step through costs about this many scored from arrays
# (300-1,600 ns against 15-50 ns, measured).
WALK_COST = 20


@dataclass(frozen=True)
class SearchLimits:
    """What one search may cost; a query over any limit is refused before it runs."""

    # Distinct terms after analysis (stems, stop words dropped; a range's terms as expanded).
    # A question of a dozen words has under 20; a pasted paragraph has over a hundred.
    max_terms: int = 64
    # Quoted phrases, and words the analyser splits into several tokens (Chinese words in
    # exact mode): each is a walk of Whoosh's matchers.
    max_phrases: int = 16
    # Postings the search would walk, those Whoosh steps through counted WALK_COST times: at
    # 20M a search walks for about a second at worst, while ten common words over the 100k
    # chunks of the scale target come to about 2M.
    max_postings: int = 20_000_000


def check_quoted(phrases: int, limits: SearchLimits) -> None:
    """Refuse a text with more quoted phrases than the limit, before parsing it."""
    if phrases > limits.max_phrases:
        raise QueryUnprocessable(_too_many_phrases(phrases, limits))


def check_query(parsed: Query, snapshot: Snapshot, limits: SearchLimits) -> None:
    """Refuse a parsed query over any limit (terms, then phrases, then postings)."""
    cost = _Cost(snapshot, limits)
    cost.add(parsed, walked=not scored_by_arrays(parsed))
    if len(cost.terms) > limits.max_terms:
        counted = f"more than {limits.max_terms}" if cost.truncated else str(len(cost.terms))
        raise QueryUnprocessable(
            f"The query has {counted} distinct search terms (words after stemming, without "
            f"stop words); at most {limits.max_terms} are allowed. Use fewer words."
        )
    if cost.phrases > limits.max_phrases:
        raise QueryUnprocessable(_too_many_phrases(cost.phrases, limits))
    # Arrays read a term once per search; every walk steps through its postings again.
    postings = sum(snapshot.frequency(*key) for key in cost.scored)
    postings += WALK_COST * sum(snapshot.frequency(*key) for key in cost.walks)
    if postings > limits.max_postings:
        raise QueryUnprocessable(
            "The query's words are too common in this index: the search would walk more than "
            f"{limits.max_postings:,} postings (those of a phrase, a NOT or a range count "
            f"{WALK_COST} times). Use fewer or rarer words, or fewer phrases."
        )


def _too_many_phrases(phrases: int, limits: SearchLimits) -> str:
    return (
        f"The query has {phrases} phrases; at most {limits.max_phrases} are allowed (a quoted "
        "phrase, or a Chinese word matched as a phrase, each counts). Use fewer."
    )


class _Cost:
    """The terms and phrases of a query, and the postings its evaluation reads or walks."""

    def __init__(self, snapshot: Snapshot, limits: SearchLimits) -> None:
        self.snapshot = snapshot
        self.limits = limits
        self.terms: set[bytes] = set()
        self.truncated = False  # a range's expansion stopped past the term limit
        self.phrases = 0
        self.scored: set[tuple[str, bytes]] = set()
        self.walks: list[tuple[str, bytes]] = []

    def add(self, node: Query, walked: bool) -> None:
        """Count ``node``; ``walked``: Whoosh's matchers step through it (see evaluate)."""
        if isinstance(node, Phrase):
            self.phrases += 1
            for word in node.words:
                self._term(node.fieldname, word, walked=True)
        elif isinstance(node, MultiTerm):
            reader = self.snapshot.searcher.reader()
            for fieldname, text in node.expanded_terms(reader):
                if len(self.terms) > self.limits.max_terms:  # a range may span the lexicon
                    self.truncated = True
                    break
                self._term(fieldname, text, walked=True)
        elif isinstance(node, Term):
            self._term(node.fieldname, node.text, walked)
        elif node.is_leaf():
            for fieldname, text in node.iter_all_terms():
                self._term(fieldname, text, walked=True)
        else:
            for child in node.children():
                self.add(child, walked or not scored_by_arrays(child))

    def _term(self, fieldname: str, text: str | bytes, walked: bool) -> None:
        key = self.snapshot.term_key(fieldname, text)
        if key is None:
            return
        self.terms.add(key[1])
        if walked:
            self.walks.append(key)
        else:
            self.scored.add(key)
