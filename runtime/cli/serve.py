"""``ldims serve``: everything in one command (API, workers, embedded Redis, optional Flower).

The API runs in this process; each worker pool is a child process started with the same
Python, so ``Ctrl-C`` stops them all, and they stop too when this process is killed. A worker
(or the embedded Redis) that dies is started again (:mod:`runtime.supervisor`). Children get
``LDIMS_REDIS_URL`` pointing at the embedded Redis when no Redis was configured.

One data folder has one ``ldims serve``: a second one would take the first one's Redis for a
leftover and stop it on its way out. Before touching anything, serve takes an exclusive lock
on ``serve.lock`` in the data folder (it names the holder) and checks that its port is free;
a second serve, or one on a busy port, refuses with a one-line error. The lock dies with its
process, so a ``kill -9``'d serve leaves its Redis to the next one (:mod:`ldims.embedded_redis`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import sys
from pathlib import Path

import click

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


LOCK_FILE = "serve.lock"


def hold_serve_lock(data_dir: Path, host: str, port: int) -> int:
    """Lock ``data_dir`` for this process (the descriptor stays open until it ends).

    ``flock`` rather than a pid file: the kernel drops the lock with its process, however it
    ends, so there is never a stale lock to judge. The descriptor is not inherited (Python's
    default), so workers and the embedded Redis, which may outlive a killed serve, do not hold
    it. Raises :class:`click.ClickException` naming the holder when another serve has it.
    """
    path = data_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise click.ClickException(
            f"another ldims serve ({holder}) is running on the data folder {data_dir}; "
            "stop it first or set another LDIMS_DATA_DIR"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": host, "port": port}).encode(), 0)
    return fd


def _holder(fd: int) -> str:
    """``pid 123, 127.0.0.1:8000`` from the lock file (its holder may still be writing it)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        holder = json.loads(os.pread(fd, 4096, 0))
        return f"pid {int(holder['pid'])}, {holder['host']}:{int(holder['port'])}"
    return "its pid not yet written"


def check_port_free(host: str, port: int) -> None:
    """Fail before Redis and the workers start when ``host:port`` cannot be bound.

    Bound the way uvicorn binds (``SO_REUSEADDR``), then released: uvicorn binds it again
    once the catalog and index are ready. Port 0 means any free port.
    """
    if port == 0:
        return
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
    except OSError as exc:  # socket.gaierror included
        raise click.ClickException(
            f"cannot serve on {host} port {port}: {exc.strerror or exc}"
        ) from None


def serve(host: str, port: int, flower: bool, extract_workers: int | None) -> None:
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    # First of all, before Redis, the catalog or a worker is touched.
    hold_serve_lock(settings.data_dir, host, port)
    check_port_free(host, port)
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
        from runtime.http_server import run_api

        log.info("LDIMS API on http://%s:%d (REST /api, health /health)", host, port)
        run_api(create_app(settings, migrate=False), settings, host, port)
    finally:
        supervisor.stop()
        if embedded:
            embedded.stop()
