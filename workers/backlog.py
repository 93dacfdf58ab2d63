"""The embedding backlog: what still needs vectors, how fast vectors are made, when it ends.

The documents and chunks still to embed come from the catalog (:mod:`ldims.lifecycle.vector_work`).
The rate is the embed tasks' own account: after each batch a task adds, per tenant and for all
of them, an entry "these chunks were embedded between these times" to a Redis sorted set kept
for ``LDIMS_EMBED_RATE_WINDOW_SECONDS``; the rate is the chunks of the window's entries over
the time since the first of them began. Lost with Redis, it is only "unknown" for a while.

A tenant is told its own backlog and its own rate only — nothing it sees depends on another
tenant's documents (the project's rule); the whole server's figures are for the operator's
``ldims status``.
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session

from ldims.lifecycle import vector_work
from ldims.settings import Settings

log = logging.getLogger(__name__)

# Tenant names hold no "*" (ldims.caller.TENANT_PATTERN): this key is every tenant's.
EVERYONE = "*"


def _client(settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(
        settings.effective_redis_url, socket_timeout=1, socket_connect_timeout=1
    )


class EmbedRates:
    """The embed stage's recent output, in Redis."""

    def __init__(self, client: redis.Redis, prefix: str, window: float) -> None:
        self.client = client
        self.prefix = prefix
        self.window = window

    @classmethod
    def of(cls, settings: Settings, client: redis.Redis | None = None) -> EmbedRates:
        return cls(
            client or _client(settings),
            settings.redis_key_prefix,
            settings.embed_rate_window_seconds,
        )

    def _key(self, tenant: str) -> str:
        return f"{self.prefix}ldims:embed:done:{tenant}"

    def record(self, chunks: dict[str, int], started: float, ended: float) -> None:
        """``chunks[tenant]`` chunks were embedded between ``started`` and ``ended`` (wall
        clock, seconds). Never raises: the rate is a report, not the work."""
        chunks = {tenant: n for tenant, n in chunks.items() if n > 0}
        if not chunks:
            return
        chunks[EVERYONE] = sum(chunks.values())
        try:
            pipe = self.client.pipeline(transaction=False)
            for tenant, count in chunks.items():
                key = self._key(tenant)
                member = f"{started:.3f}:{count}:{secrets.token_hex(4)}"
                pipe.zadd(key, {member: ended})
                pipe.zremrangebyscore(key, "-inf", ended - self.window)
                pipe.expire(key, math.ceil(self.window) + 60)
            pipe.execute()
        except (redis.RedisError, OSError) as exc:
            log.warning("could not record the embedding rate: %s", type(exc).__name__)

    def rate(self, tenant: str | None = None) -> float | None:
        """Chunks a second embedded for ``tenant`` (None: everyone) over the recent window;
        None when none were (or Redis does not answer)."""
        now = time.time()
        try:
            entries = self.client.zrangebyscore(
                self._key(tenant or EVERYONE), now - self.window, "+inf"
            )
        except (redis.RedisError, OSError) as exc:
            log.warning("could not read the embedding rate: %s", type(exc).__name__)
            return None
        chunks, first = 0, now
        for entry in entries:
            started, count, _ = entry.decode().split(":")
            chunks += int(count)
            first = min(first, float(started))
        if not chunks:
            return None
        return chunks / max(now - first, 1.0)


@dataclass(frozen=True)
class EmbedBacklog:
    """What the embed stage still has to do, for one tenant or all."""

    documents: int  # completed documents still without (all) their vectors
    chunks: int  # their chunks still to embed
    failed: int  # documents some of whose chunks could not be embedded (no retry)
    chunks_per_second: float | None  # recent rate; None: nothing embedded lately
    eta_seconds: float | None  # to embed the backlog at that rate; None: unknown

    def describe(self) -> str:
        """One line for people: the backlog, the rate and the time to done."""
        rate = (
            f"{self.chunks_per_second:.1f} chunks/s"
            if self.chunks_per_second is not None
            else "no recent rate"
        )
        if self.eta_seconds is None:
            eta = "unknown"
        elif self.eta_seconds == 0:
            eta = "nothing to do"
        else:
            eta = f"about {_duration(self.eta_seconds)}"
        return (
            f"{self.documents} documents ({self.chunks} chunks) to embed; {rate}; "
            f"done in: {eta}; {self.failed} documents with failed chunks"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def embedding_backlog(
    session: Session, fingerprint: str, rates: EmbedRates, tenant: str | None = None
) -> EmbedBacklog:
    """The backlog of ``tenant`` (None: every tenant's) with the model ``fingerprint``."""
    documents, chunks, failed = vector_work.backlog(session, fingerprint, tenant)
    rate = rates.rate(tenant)
    if not documents:
        eta: float | None = 0.0
    elif rate is None:
        eta = None
    else:
        eta = round(chunks / rate, 1)
    return EmbedBacklog(
        documents, chunks, failed, round(rate, 2) if rate is not None else None, eta
    )
