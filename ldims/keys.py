"""API keys: created, listed, revoked and rotated (``ldims keys``), and looked up per request.

A key is ``ldims_`` and 43 random URL-safe characters, shown once when created; the catalog
keeps its sha256 (``api_keys``), its tenant, user, scopes, expiry, revocation and last use.
Every request looks its key up in the catalog — no cache — so a revocation holds at once on
every API replica. The JSON map ``LDIMS_API_KEYS`` (sha256 → tenant, or → ``{"tenant",
"scopes", "user"}``) keeps working beside the table; its keys' id is the first 12 hex digits
of their hash.

Once any key exists (in the map or the table, even revoked), requests without a key are
refused: removing the last key never reopens the server silently.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import exists, select, update

from ldims.caller import SCOPES, Caller
from ldims.catalog import Catalog
from ldims.catalog.models import ApiKey
from ldims.errors import InvalidInput, NotFound
from ldims.settings import ApiKeySpec, Settings

KEY_PREFIX = "ldims_"
# Keys of the settings map given as a bare tenant: everything but acting for other users and
# tenants and the sql toolset (its database is shared by all tenants: never by default).
MAP_SCOPES = frozenset(SCOPES) - {"internal", "sql"}
DEFAULT_SCOPES = ("read",)
LAST_USE_EVERY_SECONDS = 60.0


@dataclass(frozen=True)
class NewKey:
    id: str
    key: str  # shown once
    tenant: str
    user: str | None
    scopes: tuple[str, ...]
    expires_at: datetime | None


def digest_of(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def parse_scopes(text: str | Iterable[str]) -> tuple[str, ...]:
    """Scopes from ``"read,ingest"`` or a list; unknown ones are an error."""
    items = text.split(",") if isinstance(text, str) else list(text)
    scopes = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
    unknown = [scope for scope in scopes if scope not in SCOPES]
    if unknown or not scopes:
        raise InvalidInput(
            f"Unknown or no scopes {unknown}; choose from {', '.join(SCOPES)}.", field="scopes"
        )
    return scopes


def parse_expiry(text: str | None, now: datetime | None = None) -> datetime | None:
    """``30d``, ``12h``, ``45m`` from now, or an ISO 8601 time (UTC if no zone)."""
    if not text:
        return None
    now = now or datetime.now(UTC)
    units = {"d": "days", "h": "hours", "m": "minutes"}
    if text[-1:] in units and text[:-1].isdigit():
        return now + timedelta(**{units[text[-1]]: int(text[:-1])})
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput("Expiry: 30d, 12h, 45m or an ISO 8601 time.", field="expires") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class KeyRing:
    """The keys of the settings map and of the catalog."""

    def __init__(self, settings: Settings, catalog: Catalog) -> None:
        self.settings = settings
        self.catalog = catalog
        self._any_key = bool(settings.api_keys)  # only ever goes from False to True
        self._checked_at = 0.0
        self._last_use: dict[str, float] = {}
        self._lock = threading.Lock()

    # --- requests ------------------------------------------------------------------------
    def required(self) -> bool:
        """Whether requests need a key (any key was ever configured)."""
        if self._any_key:
            return True
        now = time.monotonic()
        if now - self._checked_at >= 1.0:  # a key created elsewhere counts within a second
            self._checked_at = now
            with self.catalog.session() as session:
                self._any_key = bool(session.scalar(select(exists().where(ApiKey.id.is_not(None)))))
        return self._any_key

    def caller(self, token: str) -> Caller | None:
        """The caller of a presented key, or None (unknown, revoked or expired)."""
        digest = digest_of(token)
        for known, value in self.settings.api_keys.items():
            if hmac.compare_digest(known, digest):
                return _map_caller(digest, value)
        with self.catalog.session() as session:
            key = session.scalar(select(ApiKey).where(ApiKey.digest == digest))
            if key is None or key.revoked_at is not None:
                return None
            if key.expires_at is not None and key.expires_at <= datetime.now(UTC):
                return None
            caller = Caller(
                tenant=key.tenant,
                key_id=key.id,
                scopes=frozenset(parse_scopes(key.scopes)),
                user=key.user_id,
            )
        self._note_use(caller.key_id or "")
        return caller

    # --- administration (ldims keys) ------------------------------------------------------
    def create(
        self,
        tenant: str,
        scopes: Iterable[str] = DEFAULT_SCOPES,
        user: str | None = None,
        expires_at: datetime | None = None,
        name: str | None = None,
    ) -> NewKey:
        Caller(tenant=tenant)  # validates the tenant's name
        chosen = parse_scopes(list(scopes))
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        key_id = "key_" + secrets.token_hex(6)
        with self.catalog.session() as session:
            session.add(
                ApiKey(
                    id=key_id,
                    digest=digest_of(key),
                    tenant=tenant,
                    user_id=user,
                    scopes=",".join(chosen),
                    name=name,
                    expires_at=expires_at,
                )
            )
        self._any_key = True
        return NewKey(key_id, key, tenant, user, chosen, expires_at)

    def list(self, tenant: str | None = None) -> list[ApiKey]:
        statement = select(ApiKey).order_by(ApiKey.created_at)
        if tenant:
            statement = statement.where(ApiKey.tenant == tenant)
        with self.catalog.session() as session:
            keys = list(session.scalars(statement))
            session.expunge_all()
            return keys

    def revoke(self, key_id: str) -> None:
        with self.catalog.session() as session:
            done = session.execute(
                update(ApiKey)
                .where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                raise NotFound(f"No active key {key_id}.", key_id=key_id)

    def rotate(self, key_id: str, expires_at: datetime | None = None) -> NewKey:
        """A new key with the old one's tenant, user, scopes and name; the old one revoked."""
        with self.catalog.session() as session:
            old = session.get(ApiKey, key_id)
            if old is None or old.revoked_at is not None:
                raise NotFound(f"No active key {key_id}.", key_id=key_id)
            tenant, user, scopes, name = old.tenant, old.user_id, old.scopes, old.name
        new = self.create(tenant, scopes.split(","), user, expires_at, name)
        self.revoke(key_id)
        return new

    def _note_use(self, key_id: str) -> None:
        """Record the key's last use, at most once a minute per key (not a write per call)."""
        now = time.monotonic()
        with self._lock:
            if now - self._last_use.get(key_id, -1e9) < LAST_USE_EVERY_SECONDS:
                return
            self._last_use[key_id] = now
        with self.catalog.session() as session:
            session.execute(
                update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=datetime.now(UTC))
            )


def _map_caller(digest: str, value: object) -> Caller:
    """A key of the settings map: ``"tenant"`` or ``{"tenant", "scopes", "user"}``."""
    if isinstance(value, str):
        return Caller(tenant=value, key_id=digest[:12], scopes=MAP_SCOPES)
    assert isinstance(value, ApiKeySpec)
    return Caller(
        tenant=value.tenant,
        key_id=digest[:12],
        scopes=frozenset(parse_scopes(value.scopes)) if value.scopes else MAP_SCOPES,
        user=value.user,
    )
