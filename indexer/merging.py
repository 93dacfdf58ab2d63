"""The merge policy of index commits: tiered (log-structured), with a bound on each commit's work.

Whoosh calls a commit's ``mergetype`` with the writer and the index's segments; the policy adds
the segments to merge to the writer (their live chunks go into the segment being written) and
returns the others. See :class:`TieredMerge`; ``bench/index_commits.py`` measures it against
the policy it replaced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from whoosh.reading import SegmentReader
from whoosh.writing import IndexWriter

# Whoosh's ``mergetype``: given the writer and the index's segments (with this commit's
# deletions), add the ones to merge to the writer and return the others.
MergePolicy = Callable[[IndexWriter, list[Any]], list[Any]]

# The merge policy's shape (TieredMerge), measured on the 1-8 KB documents (~2.7 chunks) of
# bench/index_commits.py, on a loaded 2-core VM: 16,000 chunks indexed as 1, 4, 10 or 30
# segments, then optimized. A Whoosh merge rewrites ~700 chunks/s, nearly what indexing them
# costs (~1,000/s), while a search slowed only from 2.3 to 2.6 ms going from 1 to 30 segments:
# merges, not segments, are the cost to keep down. Simulated at those rates,
# factors of 4 to 8 cost the same per document in commits of 200 documents (each chunk
# rewritten ~1.5-1.7 times below the cap; 10 rewrites less but keeps up to 18 segments), and
# 4 keeps the fewest segments (at most 4 a tier). Tier 0 holds segments under 40 chunks, the
# commits of a few documents.
MERGE_FACTOR = 4
TIER_BASE_CHUNKS = 10
# A commit's merge reads at most this many chunks: ~14 s at 700 chunks/s (the bench's slowest
# commit of 200 documents took 7 s), well inside the 30 s other writers wait for the lock;
# 20,000 would come close. Segments that have grown to about this size stay as they are until
# the optimize: one per ~10,000 chunks written (~3,700 documents of the bench).
MAX_MERGE_CHUNKS = 10_000


@dataclass(frozen=True)
class TieredMerge:
    """Merge policy of commits (Whoosh's ``mergetype``): tiered, log-structured.

    A segment's tier is ``floor(log_factor(live chunks / base))`` (0 below ``base * factor``).
    When a tier holds ``factor`` segments, its ``factor`` smallest are merged into the segment
    being written, which lands about one tier up. A chunk is so rewritten about once per tier
    it climbs, and it climbs no higher than ``max_chunks``: a document costs the same however
    much the index holds (folding every tiny segment every few commits, as before, cost more
    the more tiny segments there were), and the index keeps at most ``factor`` segments a
    tier, O(log n), plus one per ``max_chunks`` or so that has reached the top.

    The work of one commit is bounded: at most one merge, the lowest full tier's (the
    cheapest; a higher one gets its turn within ``factor`` commits), reading at most
    ``max_chunks`` chunks, deleted ones included (a merge reads them). When the tier's
    ``factor`` smallest hold more, as many of them as fit are merged (two at least): the
    segments near the top so end at about ``max_chunks`` and then wait, with those past it,
    for the scheduled :meth:`DocumentIndex.optimize`. (Whoosh's own policy has no such bound:
    a 20,000-document bulk build once stalled on rewriting 1.7 GB mid-way.)

    Deleted chunks (a replaced document leaves its old ones behind) are not counted in a
    segment's tier: a segment that lost much of itself drops to a lower tier and is merged,
    and its deleted chunks dropped, sooner, with segments of its live size; the bound on
    what a merge reads keeps that cheap enough. A segment with no live chunk is dropped
    without being read.
    """

    factor: int = MERGE_FACTOR
    base: int = TIER_BASE_CHUNKS
    max_chunks: int = MAX_MERGE_CHUNKS

    def tier(self, segment: Any) -> int | None:
        """The tier of a Whoosh segment, None when it is past the cap (no merge can take it)."""
        if segment.doc_count_all() > self.max_chunks:
            return None
        tier, bound, live = 0, self.base * self.factor, segment.doc_count()
        while live >= bound:
            tier, bound = tier + 1, bound * self.factor
        return tier

    def choose(self, segments: Sequence[Any]) -> list[Any]:
        """The segments this commit merges (none, most of the time).

        The lowest tier holding ``factor`` segments merges its ``factor`` smallest, or as many
        of its smallest (two at least) as a merge of at most ``max_chunks`` chunks reads.
        """
        tiers: dict[int, list[Any]] = {}
        for segment in segments:
            tier = self.tier(segment)
            if tier is not None and segment.doc_count() > 0:
                tiers.setdefault(tier, []).append(segment)
        for tier in sorted(tiers):
            if len(tiers[tier]) < self.factor:
                continue
            chosen, chunks = [], 0
            for segment in sorted(tiers[tier], key=lambda s: s.doc_count_all())[: self.factor]:
                chunks += segment.doc_count_all()
                if chunks > self.max_chunks:
                    break
                chosen.append(segment)
            if len(chosen) > 1:
                return chosen
        return []

    def __call__(self, writer: IndexWriter, segments: list[Any]) -> list[Any]:
        chosen = self.choose(segments)
        for segment in chosen:
            reader = SegmentReader(writer.storage, writer.schema, segment)
            writer.add_reader(reader)  # its live chunks go into the segment being written
            reader.close()
        merged = {id(segment) for segment in chosen}
        return [s for s in segments if id(s) not in merged and s.doc_count() > 0]
