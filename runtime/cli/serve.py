"""``ldims serve``: everything in one command (API, workers, embedded Redis, optional Flower).

The API runs in this process; each worker pool is a child process started with the same
Python, so ``Ctrl-C`` stops them all, and they stop too when this process is killed. A worker
(or the embedded Redis) that dies is started again (:mod:`runtime.supervisor`). Children get
``LDIMS_REDIS_URL`` pointing at the embedded Redis when no Redis was configured.
"""

from __future__ import annotations

import logging
import os
import signal
import sys

import uvicorn

from indexer import SCHEMA_VERSION
from ldims.catalog import upgrade_schema
from ldims.embedded_redis import EmbeddedRedis
from ldims.settings import Settings, get_settings
from runtime.supervisor import Supervisor

log = logging.getLogger(__name__)


def _ldims(*args: str) -> list[str]:
    return [sys.executable, "-m", "runtime.cli.main", *args]


def worker_commands(settings: Settings, extract_workers: int, flower: bool) -> list[list[str]]:
    commands = [
        _ldims("worker", "--queues", "extract", "--concurrency", str(extract_workers)),
        # One index writer; it also runs the reconciler's schedule (celery beat).
        _ldims("worker", "--queues", "index", "--concurrency", "1", "--beat"),
    ]
    if settings.ocr_queue_enabled:
        # Scans and images, handed on by the extract workers (LDIMS_OCR_WORKER_NICE).
        commands.append(
            _ldims("worker", "--queues", "ocr", "--concurrency", str(settings.ocr_concurrency))
        )
    if settings.semantic_enabled:
        # Vectors: one model, one writer, at a lower CPU priority (LDIMS_EMBED_WORKER_NICE).
        commands.append(_ldims("worker", "--queues", "embed", "--concurrency", "1"))
    if flower:
        commands.append(_ldims("flower"))
    return commands


def serve(host: str, port: int, flower: bool, extract_workers: int | None) -> None:
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    embedded: EmbeddedRedis | None = None
    if settings.redis_url is None:
        embedded = EmbeddedRedis(settings.embedded_redis_dir).start()
        os.environ["LDIMS_REDIS_URL"] = embedded.url
        get_settings.cache_clear()
        settings = get_settings()
    upgrade_schema(settings.catalog_url)
    # A new schema version starts with an empty index folder: fill it before serving.
    from workers.reindex import rebuild_if_needed

    rebuilt = rebuild_if_needed(settings)
    if rebuilt is not None:
        log.info("index rebuilt for schema v%d: %d documents", SCHEMA_VERSION, rebuilt)
    commands = worker_commands(settings, extract_workers or settings.extract_concurrency, flower)
    supervisor = Supervisor(commands, embedded).start()
    # uvicorn re-raises the SIGTERM it handled once it has shut down; with the default
    # handler that would kill this process before the children and Redis are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        from runtime import create_app

        log.info("LDIMS API on http://%s:%d (REST /api, health /health)", host, port)
        uvicorn.run(create_app(settings, migrate=False), host=host, port=port, log_level="warning")
    finally:
        supervisor.stop()
        if embedded:
            embedded.stop()
