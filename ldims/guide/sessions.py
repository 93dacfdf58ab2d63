"""Guided sessions in Redis: shared by every API replica, surviving an API restart.

A session is one JSON value under ``{prefix}ldims:guide:session:{id}``. Its id is an
unguessable handle (192 random bits); the record names the tenant that created it, and a
caller of another tenant gets ``FORBIDDEN``. The record carries its own ``expires_at``
(``LDIMS_GUIDE_SESSION_TTL_SECONDS`` after the last step), while Redis keeps the key a day
longer, so a late caller hears "expired" rather than "never existed".
"""

from __future__ import annotations

import json
import secrets
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from ldims.errors import Forbidden
from ldims.guide.errors import GuideUnavailable, SessionExpired, SessionNotFound

_GRACE_SECONDS = 86_400
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
    def __init__(self, client: redis.Redis, ttl_seconds: int, prefix: str = "") -> None:
        self.client = client
        self.ttl = timedelta(seconds=ttl_seconds)
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, ttl_seconds: int, prefix: str = "") -> SessionStore:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        return cls(client, ttl_seconds, prefix)

    def new_id(self) -> str:
        return "gs_" + secrets.token_urlsafe(24)

    def save(self, record: SessionRecord) -> None:
        stamp = now()
        record.created_at = record.created_at or stamp.isoformat()
        record.expires_at = (stamp + self.ttl).isoformat()
        seconds = int(self.ttl.total_seconds()) + _GRACE_SECONDS
        self._call(self.client.set, self._key(record.id), json.dumps(asdict(record)), ex=seconds)

    def load(self, session_id: str, tenant: str) -> SessionRecord:
        raw = self._call(self.client.get, self._key(session_id))
        if raw is None:
            raise SessionNotFound(sessionId=session_id)
        # Fields this version does not know (a record from another version) are left out.
        data = json.loads(raw)
        record = SessionRecord(**{k: v for k, v in data.items() if k in _FIELDS})
        if record.tenant != tenant:
            raise Forbidden("This session belongs to another tenant.", sessionId=session_id)
        if datetime.fromisoformat(record.expires_at) <= now():
            raise SessionExpired(sessionId=session_id, expiredAt=record.expires_at)
        return record

    def _key(self, session_id: str) -> str:
        return f"{self.prefix}ldims:guide:session:{session_id}"

    def _call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            raise GuideUnavailable(
                "The session store (Redis) is unavailable. Try again later.", component="redis"
            ) from exc
