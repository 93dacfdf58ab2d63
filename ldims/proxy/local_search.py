"""``doc_local_search``: BM25 over the passages of one document, with short snippets.

The passages are the document's pages cut at line ends into pieces of about
``PASSAGE_CHARS`` (the index's chunking, smaller), their terms those the index makes
(:func:`indexer.index_terms`: stemmed, stop words out, Chinese segmented). The statistics
(idf, average length) are the document's own: no score depends on any other document, of
this tenant or another. A document's passages are built once per content and kept.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from indexer import Chunk, index_terms, snippet
from workers.chunking import chunk_pages
from workers.extraction import Page

PASSAGE_CHARS = 800
K1, B = 1.2, 0.75


@dataclass(frozen=True)
class Passage:
    chunk: Chunk
    terms: dict[str, int]
    length: int


@dataclass(frozen=True)
class LocalHit:
    page: int
    line_start: int
    line_end: int
    score: float  # 0..1, relative to the best passage
    snippet: str


class PassageIndex:
    """The passages of a document and their document-local BM25 statistics."""

    def __init__(self, pages: tuple[str, ...]) -> None:
        chunks = chunk_pages(
            [Page(number, text) for number, text in enumerate(pages, start=1)], PASSAGE_CHARS
        )
        self.passages: list[Passage] = []
        frequency: dict[str, int] = {}
        for chunk in chunks:
            terms = index_terms(chunk.text)[0]
            self.passages.append(Passage(chunk, terms, sum(terms.values())))
            for term in terms:
                frequency[term] = frequency.get(term, 0) + 1
        count = max(len(self.passages), 1)
        self.average = sum(passage.length for passage in self.passages) / count or 1.0
        self.idf = {
            term: math.log(1 + (count - seen + 0.5) / (seen + 0.5))
            for term, seen in frequency.items()
        }

    def search(self, query: str, limit: int, snippet_chars: int) -> tuple[list[LocalHit], int]:
        """The best ``limit`` passages for ``query``, and how many passages match at all."""
        wanted = [term for term in index_terms(query)[0] if term in self.idf]
        scored: list[tuple[float, Passage]] = []
        for passage in self.passages:
            score = 0.0
            norm = K1 * (1 - B + B * passage.length / self.average)
            for term in wanted:
                tf = passage.terms.get(term)
                if tf:
                    score += self.idf[term] * tf * (K1 + 1) / (tf + norm)
            if score > 0:
                scored.append((score, passage))
        scored.sort(key=lambda pair: (-pair[0], pair[1].chunk.line_start))
        best = scored[0][0] if scored else 1.0
        hits = [
            LocalHit(
                page=passage.chunk.page,
                line_start=passage.chunk.line_start,
                line_end=passage.chunk.line_end,
                score=round(score / best, 4),
                snippet=snippet(passage.chunk.text, wanted, False, snippet_chars),
            )
            for score, passage in scored[:limit]
        ]
        return hits, len(scored)


class PassageCache:
    """Passage indexes by content hash, the most recently used ``size`` of them."""

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._items: OrderedDict[str, PassageIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, pages: tuple[str, ...]) -> PassageIndex:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        built = PassageIndex(pages)
        with self._lock:
            self._items[key] = built
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return built
