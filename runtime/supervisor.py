"""Keeps the processes of ``ldims serve`` running: its workers and the embedded Redis.

One command is the whole server, so nobody is there to restart a worker that died (a crash,
``kill -9``, the OOM killer on the Celery main process) or the embedded redis-server: the
supervisor does, from a thread of ``ldims serve``. A process that keeps dying right after its
start is started again after a pause that doubles (up to a minute), so a broken setup does not
spin. Tasks the dead process held come back by themselves: the broker redelivers unacknowledged
messages, and the reconciler re-drives documents that stayed unfinished.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from dataclasses import dataclass, field

from ldims.child_processes import exit_with_parent
from ldims.embedded_redis import EmbeddedRedis

log = logging.getLogger(__name__)

_POLL_SECONDS = 1.0
_STABLE_SECONDS = 30.0  # alive this long after a start: the next death is not a crash loop
_MAX_PAUSE_SECONDS = 60.0


@dataclass
class _Child:
    command: list[str]
    process: subprocess.Popen[bytes]
    started: float = field(default_factory=time.monotonic)
    pause: float = 0.5  # before the next start, doubled while it keeps dying young
    due: float | None = None  # when it is to be started again


class Supervisor:
    """Starts ``commands`` as children that die with this process, and keeps them running."""

    def __init__(self, commands: list[list[str]], redis: EmbeddedRedis | None = None) -> None:
        self._redis = redis
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._children = [_Child(command, self._start(command)) for command in commands]
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        """Stop watching, then stop every child (SIGTERM, SIGKILL after ``timeout`` s)."""
        self._stopping.set()
        self._thread.join(_POLL_SECONDS * 5)
        with self._lock:
            processes = [child.process for child in self._children]
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()

    @staticmethod
    def _start(command: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, preexec_fn=exit_with_parent())  # noqa: PLW1509

    def _watch(self) -> None:
        while not self._stopping.wait(_POLL_SECONDS):
            try:
                self._check_redis()
                for child in self._children:
                    self._check(child)
            except Exception:  # the watch must go on whatever one check met
                log.exception("supervisor: a check failed")

    def _check_redis(self) -> None:
        if self._redis is None or self._redis.running():
            return
        log.warning("supervisor: the embedded Redis exited; starting it again")
        self._redis.start()

    def _check(self, child: _Child) -> None:
        code = child.process.poll()
        if code is None:
            return
        now = time.monotonic()
        if child.due is None:
            young = now - child.started < _STABLE_SECONDS
            child.pause = min(child.pause * 2, _MAX_PAUSE_SECONDS) if young else 1.0
            child.due = now + child.pause
            log.warning(
                "supervisor: %s exited (code %s); starting it again in %.0f s",
                _name(child.command),
                code,
                child.pause,
            )
        if now < child.due or self._stopping.is_set():
            return
        with self._lock:
            child.process, child.started, child.due = self._start(child.command), now, None


def _name(command: list[str]) -> str:
    """``worker --queues index`` from the full command line (never secrets: none are in it)."""
    return " ".join(command[3:6]) if len(command) > 3 else " ".join(command)
