"""Ranking: BM25F with Lucene's idf, tuned on the IR sets of ``../shared/corpus/ir``.

K1=0.9 (term frequency saturates early: chunks are short passages) and the idf of Lucene and
bm25s, ``log(1 + (N - df + 0.5) / (df + 0.5))``, which never goes negative for common terms.
Measured with ``bench/retrieval.py``; Whoosh's defaults (K1=1.2, its own idf) were 0.002-0.003
nDCG@10 lower on every set.

Searches score with the statistics of the searching tenant's live chunks only (chunk count,
document frequencies, average field lengths): an index-wide idf let one tenant's documents
move another's scores, enough to tell which words the other tenant holds.
"""

from __future__ import annotations

import math
from typing import Protocol

from whoosh import scoring
from whoosh.searching import Searcher

K1 = 0.9
B = 0.75


class LuceneIdfBM25F(scoring.BM25F):
    """BM25F whose idf is Lucene's."""

    def idf(self, searcher: Searcher, fieldname: str, text: bytes) -> float:
        return lucene_idf(searcher.doc_count_all(), searcher.doc_frequency(fieldname, text))


def weighting() -> scoring.WeightingModel:
    return LuceneIdfBM25F(B=B, K1=K1)


def lucene_idf(chunks: int, frequency: int) -> float:
    """Lucene's idf of a term held by ``frequency`` of ``chunks`` chunks."""
    return math.log(1 + (chunks - frequency + 0.5) / (frequency + 0.5))


class TenantStatistics(Protocol):
    """A tenant's own term statistics (what :class:`TenantBM25F` scores with)."""

    def idf(self, fieldname: str, text: bytes) -> float: ...

    def average_length(self, fieldname: str) -> float: ...


class TenantBM25F(LuceneIdfBM25F):
    """BM25F whose idf and average field lengths are one tenant's, for the queries Whoosh's
    matchers score (phrases, NOT): no score depends on another tenant's documents."""

    def __init__(self, statistics: TenantStatistics) -> None:
        super().__init__(B=B, K1=K1)
        self.statistics = statistics

    def scorer(
        self, searcher: Searcher, fieldname: str, text: bytes, qf: int = 1
    ) -> scoring.BaseScorer:
        if not searcher.schema[fieldname].scorable:
            return scoring.WeightScorer.for_(searcher, fieldname, text)
        return _TenantScorer(
            searcher,
            fieldname,
            text,
            self.statistics.idf(fieldname, text),
            self.statistics.average_length(fieldname),
            qf,
        )


class _TenantScorer(scoring.BM25FScorer):
    def __init__(  # BM25FScorer's own reads the index-wide statistics: not called on purpose
        self, searcher: Searcher, fieldname: str, text: bytes, idf: float, average: float, qf: int
    ) -> None:
        self.idf = idf
        self.avgfl = average or 1
        self.B = B
        self.K1 = K1
        self.qf = qf
        self.setup(searcher, fieldname, text)
