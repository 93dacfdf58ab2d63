"""A search's cost budget: a query too large, or whose words are too common, is refused with
:class:`~indexer.model.QueryUnprocessable` before any of its postings is read.

A search's work grows with the postings it walks. Scored from arrays (terms, plain ORs, ANDs:
see :mod:`indexer.evaluate`) a posting costs 15-50 ns; stepped through by Whoosh's matchers
(phrases, NOT, ranges) 300-1,600 ns (measured on 28k chunks of War and Peace). A query of 200
quoted two-word phrases of common words took 4-6 s over one book, and the searches of a
process share its CPU. :class:`SearchLimits` bounds a query's distinct terms, its phrases and
the postings it would walk. The phrases are counted in the text before it is parsed (the
parser runs once per quoted phrase), the rest on the parsed query, from the document
frequencies of its terms.

Every count is the searching tenant's own: a term's frequency is the tenant's live chunks
holding it (:meth:`~indexer.evaluate.Snapshot.tenant_frequency`, kept per commit: a warm
search pays a dictionary lookup a term, a cold one reads the arrays scoring reads anyway). An
index-wide count made the refusal an oracle: a query sized to sit at the limit with a word of
one's own was refused exactly when another tenant held the other word. Phrases are walked
over the tenant's chunks only (see :mod:`indexer.evaluate`), so the estimate is also what the
walk costs. The refusal names the limit, never the estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from whoosh.query import MultiTerm, Phrase, Query, Term

from indexer.evaluate import Snapshot, scored_by_arrays
from indexer.model import QueryOverBudget

# A term as a query names it: (field, text or bytes).
_Term = tuple[str, str | bytes]

# A posting that Whoosh's matchers step through costs about this many scored from arrays
# (300-1,600 ns against 15-50 ns, measured).
WALK_COST = 20
# A posting of a phrase's word costs about this many: the phrase reads and compares the word
# positions of every chunk holding all its words. Measured on War and Peace in 1,748 chunks:
# 16 phrases of common words (49,739 word postings) 1.0 s warm, 1.45 s cold, 21-29 µs a word
# posting; "prince andrew" 10 µs. At 50 ns a unit (20M units, about a second) that is 400-600.
# Counted at WALK_COST, such a query passed the budget and, 48 at once, ran to the 10 s
# deadline (issue 33); now it is refused before it runs.
PHRASE_COST = 600


@dataclass(frozen=True)
class SearchLimits:
    """What one search may cost; a query over any limit is refused before it runs."""

    # Distinct terms after analysis (stems, stop words dropped; a range's terms as expanded).
    # A question of a dozen words has under 20; a pasted paragraph has over a hundred.
    max_terms: int = 64
    # Quoted phrases, and words the analyser splits into several tokens (Chinese words in
    # exact mode): each is a walk of Whoosh's matchers.
    max_phrases: int = 16
    # Postings the search would walk, those Whoosh steps through counted WALK_COST times (a
    # phrase's PHRASE_COST times): at 20M a search walks for about a second at worst, while
    # ten common words over the 100k chunks of the scale target come to about 2M.
    max_postings: int = 20_000_000


def check_quoted(phrases: int, limits: SearchLimits) -> None:
    """Refuse a text with more quoted phrases than the limit, before parsing it."""
    if phrases > limits.max_phrases:
        raise QueryOverBudget(_too_many_phrases(phrases, limits))


def check_query(parsed: Query, snapshot: Snapshot, limits: SearchLimits, tenant: str) -> None:
    """Refuse a parsed query over any limit (terms, then phrases, then ``tenant``'s postings)."""
    cost = _Cost()
    cost.add(parsed, walked=not scored_by_arrays(parsed))
    # Terms as the index holds them (a term repeated in the query is converted once).
    scored = _held(snapshot, cost.scored)
    walks = _held(snapshot, cost.walks)
    phrased = _held(snapshot, cost.phrased)
    terms = {text for _field, text in [*scored, *walks, *phrased]}
    if len(terms) > limits.max_terms:
        raise QueryOverBudget(
            f"The query has {len(terms)} distinct search terms (words after stemming, without "
            f"stop words); at most {limits.max_terms} are allowed. Use fewer words."
        )
    if cost.phrases > limits.max_phrases:
        raise QueryOverBudget(_too_many_phrases(cost.phrases, limits))

    # Arrays read a term once per search; every walk steps through its postings again.
    def frequency(key: tuple[str, bytes]) -> int:
        return snapshot.tenant_frequency(tenant, key)

    postings = sum(frequency(key) for key in scored)
    postings += WALK_COST * sum(count * frequency(key) for key, count in walks.items())
    postings += PHRASE_COST * sum(count * frequency(key) for key, count in phrased.items())
    if postings > limits.max_postings:
        raise QueryOverBudget(
            "The query's words are too common in your documents: the search would walk more than "
            f"{limits.max_postings:,} postings (those of a NOT count {WALK_COST} times, those of "
            f"a phrase's words {PHRASE_COST} times). Use fewer or rarer words, or fewer phrases."
        )


def _held(snapshot: Snapshot, terms: dict[_Term, int]) -> dict[tuple[str, bytes], int]:
    """``terms`` with the index's key of each (field, bytes), those it cannot hold left out."""
    held: dict[tuple[str, bytes], int] = {}
    for (fieldname, text), count in terms.items():
        key = snapshot.term_key(fieldname, text)
        if key is not None:
            held[key] = held.get(key, 0) + count
    return held


def _too_many_phrases(phrases: int, limits: SearchLimits) -> str:
    return (
        f"The query has {phrases} phrases; at most {limits.max_phrases} are allowed (a quoted "
        "phrase, or a Chinese word matched as a phrase, each counts). Use fewer."
    )


class _Cost:
    """The terms and phrases of a query: each term with the times it is read from arrays
    (``scored``), stepped through by Whoosh's matchers (``walks``) or by a phrase's, which
    compares positions too (``phrased``)."""

    def __init__(self) -> None:
        self.scored: dict[_Term, int] = {}
        self.walks: dict[_Term, int] = {}
        self.phrased: dict[_Term, int] = {}
        self.phrases = 0

    def add(self, node: Query, walked: bool) -> None:
        """Count ``node``; ``walked``: Whoosh's matchers step through it (see evaluate)."""
        kind = type(node)
        if kind is Term:
            counts = self.walks if walked else self.scored
            term = (node.fieldname, node.text)
            counts[term] = counts.get(term, 0) + 1
        elif isinstance(node, Phrase):
            self.phrases += 1
            for word in node.words:
                term = (node.fieldname, word)
                self.phrased[term] = self.phrased.get(term, 0) + 1
        elif isinstance(node, MultiTerm):
            # Our parsers take no ranges or wildcards: they expand over the whole index's
            # lexicon, other tenants' words included (how many there are would show).
            raise QueryOverBudget("Ranges and wildcards are not supported; search for words.")
        elif node.is_leaf():
            for fieldname, text in node.iter_all_terms():
                self._walk(fieldname, text)
        else:
            for child in node.children():
                self.add(child, walked or not scored_by_arrays(child))

    def _walk(self, fieldname: str, text: str | bytes) -> None:
        self.walks[fieldname, text] = self.walks.get((fieldname, text), 0) + 1
