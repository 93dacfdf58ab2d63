"""Server processes of the benchmarks: a free port, a clean environment, the process and its
log (in its own process group, so whatever it starts goes with it)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_env(data_dir: Path) -> dict[str, str]:
    """This environment without LDIMS settings, plus the data dir and a quiet log."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LDIMS_")}
    env.pop("LOG_LEVEL", None)
    env.update(LDIMS_DATA_DIR=str(data_dir), LOG_LEVEL="WARNING")
    return env


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_tail(self, lines: int = 40) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


def launch(
    command: list[str],
    data_dir: Path,
    url: str,
    env: dict[str, str] | None = None,
    log_path: Path | None = None,
) -> Server:
    """Start ``command`` on ``data_dir``, its output appended to ``log_path`` (by default
    ``data_dir/serve.log``; ``env``: more variables, e.g. LDIMS settings of the run)."""
    log_path = log_path or data_dir / "serve.log"
    with open(log_path, "ab") as log_file:
        process = subprocess.Popen(
            command,
            env=server_env(data_dir) | (env or {}),
            cwd=data_dir,  # no stray .env of the caller's folder
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: its children go with it
        )
    return Server(process, url, log_path)


# --- the processes of ``ldims serve`` and their memory ---------------------------------------

ROLES = (
    "api",
    "extract worker",
    "extract pool child",
    "extractor child",
    "index worker",
    "index pool child",
    "embed worker",
    "embed pool child",
    "ocr worker",
    "ocr pool child",
    "ocr extractor child",
    "beat",
    "redis",
    "other",
)


def _queues(cmdline: list[str]) -> str | None:
    """The ``--queues`` of an ``ldims worker`` command line, else None."""
    if "worker" in cmdline and "--queues" in cmdline[:-1]:
        return cmdline[cmdline.index("--queues") + 1]
    return None


class ProcessTree:
    """The process tree of ``ldims serve``, each process named by its role (:data:`ROLES`).

    Roles come from command lines: the root is the API; ``redis-server``; an ``ldims worker
    --queues Q`` child of the root is Q's worker (its Celery main process), one of a worker's
    children its pool child, ``workers.extraction.sandbox_child`` an extractor child (an OCR
    extractor child under the OCR worker's pool). The embedded beat of the worker started with
    ``--beat`` has the same command line as its pool child; it closes the descriptors it
    inherits when it starts, so among that worker's children it is the one with the fewest
    open descriptors (remembered once known).
    """

    def __init__(self, pid: int) -> None:
        self.root = psutil.Process(pid)
        self.beat_pids: set[int] = set()

    def sample(self) -> dict[int, tuple[str, int, float]]:
        """pid -> (role, resident set size in bytes, CPU seconds so far: user + system) of
        every process alive in the tree."""
        found: dict[int, tuple[str, int, float]] = {}
        try:
            processes = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            return found
        self._find_beat(processes)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                cpu = times.user + times.system
                found[process.pid] = (self._role(process), process.memory_info().rss, cpu)
        return found

    def _role(self, process: psutil.Process) -> str:
        if process.pid == self.root.pid:
            return "api"
        if process.pid in self.beat_pids:
            return "beat"
        cmdline = process.cmdline()
        if cmdline and cmdline[0].endswith("redis-server"):
            return "redis"
        if "workers.extraction.sandbox_child" in cmdline:
            parent = process.parent()
            ocr = parent is not None and _queues(parent.cmdline()) == "ocr"
            return "ocr extractor child" if ocr else "extractor child"
        queues = _queues(cmdline)
        if queues not in ("extract", "index", "embed", "ocr"):
            return "other"
        return f"{queues} worker" if process.ppid() == self.root.pid else f"{queues} pool child"

    def _find_beat(self, processes: list[psutil.Process]) -> None:
        if self.beat_pids:
            return
        with contextlib.suppress(psutil.Error):
            for main in processes:
                if main.ppid() == self.root.pid and "--beat" in main.cmdline():
                    children = main.children()
                    if len(children) >= 2:
                        self.beat_pids.add(min(children, key=lambda c: c.num_fds()).pid)
