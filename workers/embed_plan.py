"""What one embed task embeds: slices of documents, taken round-robin between tenants and,
within a tenant, between its documents (the one completed first first).

Why round-robin from the catalog rather than the order of the queue: one tenant's bulk upload
(thousands of chunks) queued ahead of another tenant's single document made that document
wait for all of it. Here every task serves every tenant with work — a slice of
``LDIMS_EMBED_SLICE_CHUNKS`` chunks each in turn, until the task's chunks
(``LDIMS_EMBED_BATCH_MAX_CHUNKS``) or documents (``LDIMS_EMBED_BATCH_MAX_DOCUMENTS``) are
taken — so a new document of any tenant gets its vectors in the next task. Which tenant leads
(is served first, and gets the room when there are more tenants than a task holds) rotates:
the tenant that led least recently leads (a Redis sorted set; lost with Redis, the rotation
simply starts over).

A document whose model call did not end (its worker killed, the call past the time limit)
is suspect: the chunk at fault lies between its progress and the end of that call. It is
embedded alone, when its tenant leads — never in a batch with others again — the first half
of that range at a time: a half that passes is kept and the rest halved again, a half that
is interrupted is the new range. The chunk is found in about log2(n) tries, and given up
after ``LDIMS_EMBED_MAX_ATTEMPTS`` tries alone (see :mod:`workers.embed`).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

import redis

from ldims.lifecycle.vector_work import Candidate
from ldims.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Segment:
    """Chunks ``first…first+count-1`` of a candidate (a turn of its tenant)."""

    candidate: Candidate
    first: int
    count: int


@dataclass(frozen=True)
class Plan:
    """A task's work: segments in the order they are embedded (turn by turn)."""

    segments: list[Segment]
    alone: bool = False  # a suspect document, alone

    @property
    def candidates(self) -> list[Candidate]:
        seen: dict[str, Candidate] = {}
        for segment in self.segments:
            seen.setdefault(segment.candidate.document_id, segment.candidate)
        return list(seen.values())


def suspect_slice(candidate: Candidate) -> int:
    """The chunks of a suspect's next try: the first half of its range (at least one)."""
    return max(1, (candidate.suspect + 1) // 2)


def plan(settings: Settings, work: dict[str, list[Candidate]]) -> Plan:
    """The segments of one task from ``work`` (tenant -> its candidates, oldest first; the
    tenants in the order they are served, the leader first)."""
    tenants = [tenant for tenant, found in work.items() if found]
    if not tenants:
        return Plan([])
    lead = work[tenants[0]][0]
    if lead.suspect:
        return Plan([Segment(lead, lead.done, suspect_slice(lead))], alone=True)
    room = settings.embed_batch_max_chunks
    slots = settings.embed_batch_max_documents
    step = settings.embed_slice_chunks
    lines = {t: deque(c for c in work[t] if not c.suspect) for t in tenants}
    taken: dict[str, Segment] = {}  # a document's last segment
    segments: list[Segment] = []
    while room > 0 and any(lines.values()):
        for tenant in tenants:
            line = lines[tenant]
            if not line or room <= 0:
                continue
            candidate = line.popleft()
            last = taken.get(candidate.document_id)
            if last is None and len(taken) >= slots:
                line.clear()  # no room for another document of it in this task
                continue
            first = candidate.done if last is None else last.first + last.count
            total = candidate.chunks if candidate.chunks is not None else first + step
            count = min(step, room, max(0, total - first))
            if last is not None and last is segments[-1]:
                last.count += count  # the tenant's only line: one segment
            else:
                last = Segment(candidate, first, count)
                segments.append(last)
                taken[candidate.document_id] = last
            room -= count
            if candidate.chunks is not None and first + count < candidate.chunks:
                line.append(candidate)  # more of it in a later turn
    return Plan(segments)


class Rotation:
    """Which tenant leads the next task: the one that led least recently (never: first)."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.key = f"{prefix}ldims:embed:led"

    def order(self, tenants: list[str]) -> list[str]:
        """``tenants`` in the order they are served."""
        try:
            led = self.client.zmscore(self.key, tenants) if tenants else []
        except (redis.RedisError, OSError) as exc:
            log.warning("embed rotation unknown (%s): tenants in name order", type(exc).__name__)
            return sorted(tenants)
        when = {tenant: score or 0.0 for tenant, score in zip(tenants, led, strict=True)}
        return sorted(tenants, key=lambda tenant: (when[tenant], tenant))

    def led(self, tenant: str) -> None:
        try:
            self.client.zadd(self.key, {tenant: time.time()})
        except (redis.RedisError, OSError) as exc:
            log.warning("could not record the embed rotation: %s", type(exc).__name__)
