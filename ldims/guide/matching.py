"""Which node of which tree a user's words are about, with the index's multilingual analyzer.

Each candidate node is a bag of analyzed terms with a weight per field — keywords 3, title 2,
response 1, option descriptions 0.5 (they describe the children more than the node). A query
scores ``Σ idf(t) · weight(t, node)`` over its distinct terms, divided by the best a node could
score (``Σ idf(t) · 3``), so 1.0 means every query word is a keyword of the node. Chinese is
segmented (jieba), Russian and English stemmed, exactly as documents are; cross-language
matches come from authors' keywords (a Chinese node lists ``AI`` and ``искусственный
интеллект`` among its keywords).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from indexer.analysis import keyword_analyzer
from ldims.guide.trees import Node, Tree

WEIGHTS = {"keywords": 3.0, "title": 2.0, "response": 1.0, "options": 0.5}
# Parts of an identifier keyword (LDIMS_TASK_SOFT_TIME_LIMIT_SECONDS → time, limit …) match
# at this weight: a question about "time" is not about that setting.
PART_WEIGHT = 0.5
# Words of a question that say nothing about its topic (the analyzer keeps them: in documents
# they can matter). Dropped before scoring, so a long polite question is not penalised.
FILLER = frozenset(
    {
        *("想", "想要", "了解", "一下", "怎么样", "怎么", "如何", "请问", "请", "什么", "哪些"),
        *("哪个", "可以", "能否", "能不能", "知道", "告诉", "我们", "你们", "有没有", "关于"),
        *("pleas", "tell", "know", "want", "need", "question", "explain"),
        *("подскаж", "расскаж", "хоч", "хотел", "нужн", "пожалуйст", "узна", "объясн"),
    }
)
_ANALYZER = keyword_analyzer()
_IDENTIFIER = re.compile(r"[_.0-9]")


@dataclass(frozen=True)
class Match:
    tree_id: str
    node_id: str
    score: float


def terms(text: str) -> list[str]:
    return [token.text for token in _ANALYZER(text)]


def _profile(node: Node, tree: Tree | None = None) -> dict[str, float]:
    fields = {
        "keywords": " ".join(node.keywords) + " " + " ".join(tree.keywords if tree else ()),
        "title": node.title,
        "response": node.response,
        "options": " ".join(option.description for option in node.options),
    }
    weights: dict[str, float] = {}
    for name, text in fields.items():
        for word in text.split():
            found = terms(word)
            identifier = len(found) > 1 and word.isascii() and _IDENTIFIER.search(word)
            for position, term in enumerate(found):
                weight = PART_WEIGHT if identifier and position else WEIGHTS[name]
                weights[term] = max(weights.get(term, 0.0), weight)
    return weights


class Matcher:
    """Candidate nodes (of one or many trees) and the document frequencies of their terms."""

    def __init__(self, candidates: Iterable[tuple[Tree, Node, bool]]) -> None:
        # (tree, node, include the tree's own keywords): roots carry their tree's keywords.
        self.entries = [
            (tree.id, node.id, _profile(node, tree if with_tree else None))
            for tree, node, with_tree in candidates
        ]
        count = len(self.entries) or 1
        frequency: dict[str, int] = {}
        for _, _, profile in self.entries:
            for term in profile:
                frequency[term] = frequency.get(term, 0) + 1
        self.idf = {t: math.log(1 + count / f) for t, f in frequency.items()}
        self.unknown_idf = math.log(1 + count)

    def rank(self, query: str) -> list[Match]:
        """Candidates by score, best first (ties: the order they were given in)."""
        query_terms = [t for t in dict.fromkeys(terms(query)) if t not in FILLER]
        if not query_terms:
            return []
        best = sum(self.idf.get(t, self.unknown_idf) for t in query_terms) * WEIGHTS["keywords"]
        scored = []
        for order, (tree_id, node_id, profile) in enumerate(self.entries):
            score = sum(self.idf.get(t, 0.0) * profile.get(t, 0.0) for t in query_terms) / best
            scored.append((-score, order, Match(tree_id, node_id, round(score, 4))))
        scored.sort(key=lambda item: (item[0], item[1]))
        return [match for _, _, match in scored]


def entry_candidates(trees: Sequence[Tree]) -> list[tuple[Tree, Node, bool]]:
    """Where a first question may land: each tree's root (with its keywords), then entries."""
    candidates: list[tuple[Tree, Node, bool]] = []
    for tree in trees:
        candidates.append((tree, tree.nodes[tree.root], True))
        candidates.extend(
            (tree, tree.nodes[node_id], False)
            for node_id in tree.entry_nodes
            if node_id != tree.root
        )
    return candidates


def subtree_candidates(tree: Tree, start: str) -> list[tuple[Tree, Node, bool]]:
    """Nodes below ``start`` (nearest first), for ``provide_more_info``."""
    return [(tree, tree.nodes[node_id], False) for node_id in tree.reachable_from(start)]
