"""Guided sessions in Redis: shared by every API replica, surviving an API restart.

A session is one JSON value under ``{prefix}ldims:guide:session:{id}``. Its id is an
unguessable handle (192 random bits); the record names the tenant that created it, and a
caller of another tenant gets ``SESSION_NOT_FOUND``, as for an id that never existed. The
record carries its own ``expires_at`` (``LDIMS_GUIDE_SESSION_TTL_SECONDS`` after the last
step), while Redis keeps the key a little longer (a tenth of the TTL, at most five minutes),
so a caller just late hears "expired" rather than "never existed".

Each tenant holds at most ``LDIMS_GUIDE_MAX_SESSIONS_PER_TENANT`` sessions (a sorted set of
its ids by expiry under ``{prefix}ldims:guide:tenant:{tenant}``): a new one beyond it ends
the tenant's session that would expire first, so one tenant's callers cannot fill the shared
Redis, and never end another tenant's sessions.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from ldims.guide.errors import GuideUnavailable, SessionExpired, SessionNotFound

_GRACE_SECONDS = 300
_MAX_STEPS = 200  # history kept per session; older steps are dropped


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class SessionRecord:
    """Where a session stands and how it got there."""

    id: str
    tenant: str
    tree_id: str
    tree_version: str
    node_id: str
    path: list[str] = field(default_factory=list)  # nodes visited before node_id ("back")
    steps: list[dict[str, Any]] = field(default_factory=list)  # every step, for the history
    ended: bool = False  # "end" was chosen (a leaf completes the step, but "back" still works)
    created_at: str = ""
    expires_at: str = ""

    def record_step(self, action: str, **facts: Any) -> None:
        self.steps.append(
            {"action": action, "node": self.node_id, "at": now().isoformat(), **facts}
        )
        del self.steps[:-_MAX_STEPS]


_FIELDS = frozenset(f.name for f in fields(SessionRecord))


class SessionStore:
    def __init__(
        self,
        client: redis.Redis,
        ttl_seconds: int,
        prefix: str = "",
        max_per_tenant: int = 1000,
    ) -> None:
        self.client = client
        self.ttl = timedelta(seconds=ttl_seconds)
        self.prefix = prefix
        self.max_per_tenant = max_per_tenant

    @classmethod
    def from_url(
        cls, url: str, ttl_seconds: int, prefix: str = "", max_per_tenant: int = 1000
    ) -> SessionStore:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return cls(client, ttl_seconds, prefix, max_per_tenant)

    def new_id(self) -> str:
        return "gs_" + secrets.token_urlsafe(24)

    def save(self, record: SessionRecord) -> None:
        stamp = now()
        new = not record.created_at
        record.created_at = record.created_at or stamp.isoformat()
        expires = stamp + self.ttl
        record.expires_at = expires.isoformat()
        ttl = int(self.ttl.total_seconds())
        seconds = ttl + min(_GRACE_SECONDS, max(ttl // 10, 1))
        tenant_key = self._tenant_key(record.tenant)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.set(self._key(record.id), json.dumps(asdict(record)), ex=seconds)
            pipe.zadd(tenant_key, {record.id: expires.timestamp()})
            pipe.zremrangebyscore(tenant_key, "-inf", stamp.timestamp() - seconds + ttl)
            pipe.expire(tenant_key, seconds)
            pipe.zcard(tenant_key)
            answers = self._call(pipe.execute)
        if new and answers[-1] > self.max_per_tenant:
            self._evict(tenant_key, int(answers[-1]) - self.max_per_tenant, record.id)

    def _evict(self, tenant_key: str, count: int, keep: str) -> None:
        """End the ``count`` sessions of a tenant that would expire first (never ``keep``)."""
        oldest = self._call(self.client.zrange, tenant_key, 0, count)
        ids = [raw.decode() for raw in oldest if raw.decode() != keep][:count]
        if ids:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.delete(*(self._key(session_id) for session_id in ids))
                pipe.zrem(tenant_key, *ids)
                self._call(pipe.execute)

    def load(self, session_id: str, tenant: str) -> SessionRecord:
        raw = self._call(self.client.get, self._key(session_id))
        if raw is None:
            raise SessionNotFound(sessionId=session_id)
        # Fields this version does not know (a record from another version) are left out.
        data = json.loads(raw)
        record = SessionRecord(**{k: v for k, v in data.items() if k in _FIELDS})
        if record.tenant != tenant:  # as if it did not exist: no oracle of other tenants' ids
            raise SessionNotFound(sessionId=session_id)
        if datetime.fromisoformat(record.expires_at) <= now():
            raise SessionExpired(sessionId=session_id, expiredAt=record.expires_at)
        return record

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}ldims:guide:session:{session_id}"

    def _tenant_key(self, tenant: str) -> str:
        return f"{self.prefix}ldims:guide:tenant:{tenant}"

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            raise GuideUnavailable(
                "The session store (Redis) is unavailable. Try again later.", component="redis"
            ) from exc
