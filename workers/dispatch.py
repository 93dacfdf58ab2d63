"""Publishing pipeline tasks from the API (or any producer) without importing them.

Tasks are sent by name, so a producer (the documents core in the API, the CLI) never loads
the extractors or the index writer for them. When Redis cannot take a message the caller gets
``ServiceUnavailable`` (REST: 503 ``SERVER_ERROR``); the connection pools reconnect by
themselves once Redis is back.
"""

from __future__ import annotations

import logging

import redis
from kombu.exceptions import OperationalError
from sqlalchemy.orm import Session

from ldims.errors import ServiceUnavailable
from ldims.settings import Settings
from workers.backlog import EmbedBacklog, EmbedRates, embedding_backlog
from workers.celery_app import make_celery

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, settings: Settings) -> None:
        self.app = make_celery(settings)
        self._redis = redis.Redis.from_url(
            settings.effective_redis_url, socket_timeout=1, socket_connect_timeout=1
        )
        self.rates = EmbedRates.of(settings, self._redis)

    def ping(self) -> None:
        """Raise ``ServiceUnavailable`` unless the broker answers now."""
        try:
            self._redis.ping()
        except (redis.RedisError, OSError) as exc:
            raise ServiceUnavailable(
                "The task broker (Redis) is unavailable; nothing was queued. Try again later.",
                component="broker",
            ) from exc

    def _send(self, name: str, *args: object) -> None:
        try:
            self.app.send_task(name, args=args)
        except (OperationalError, redis.RedisError, OSError) as exc:
            log.warning("broker refused %s: %s", name, type(exc).__name__)
            raise ServiceUnavailable(component="broker") from exc

    def extract(self, document_id: str, sha256: str) -> None:
        self._send("ldims.extract", document_id, sha256)

    def extract_many(self, jobs: list[tuple[str, str]]) -> None:
        """One extract message for many ``(document_id, sha256)``: the first, then ``more``."""
        (document_id, sha256), *more = jobs
        if more:
            self._send("ldims.extract", document_id, sha256, [list(job) for job in more])
        else:
            self.extract(document_id, sha256)

    def reindex_documents(self, jobs: list[tuple[str, str]]) -> None:
        """Have the index worker write these completed versions again from their stored
        extractions (``ldims check --repair``, ``ldims reindex``'s catch-up)."""
        if jobs:
            self._send("ldims.reindex_documents", [list(job) for job in jobs])

    def fetch(self, document_id: str, url: str) -> None:
        self._send("ldims.fetch", document_id, url)

    def nudge_embed(self) -> None:
        """Wake the embed stage: it takes what the catalog says needs vectors (under the embed
        workers' own time limits, not this process's)."""
        try:
            self.app.send_task("ldims.embed", time_limit=None, soft_time_limit=None)
        except (OperationalError, redis.RedisError, OSError) as exc:
            log.warning("broker refused ldims.embed: %s", type(exc).__name__)
            raise ServiceUnavailable(component="broker") from exc

    def embedding_backlog(
        self, session: Session, fingerprint: str, tenant: str | None
    ) -> EmbedBacklog:
        """The embedding backlog of ``tenant`` (None: every tenant's), with the recent rate
        the embed tasks recorded in Redis."""
        return embedding_backlog(session, fingerprint, self.rates, tenant)

    def delete_from_index(self, document_ids: list[str]) -> None:
        self._send("ldims.delete_from_index", document_ids)

    def close(self) -> None:
        self._redis.close()
        self.app.close()
