"""Extraction in a child process, under a wall-time and a memory limit, recycled after N files.

Parsers of hostile or enormous files can hang, balloon or crash (PDFium, Tika's native image,
lxml are all native code). None of that may take down a Celery worker or make it retry a file
forever, so every extraction runs in a spawned child that the worker watches: past the wall
time it is killed (``TIMEOUT``), above the memory limit it is killed (``TOO_LARGE``), if it dies
on its own the file is reported as ``CORRUPT_FILE``. A SIGKILL is read once more in a fresh
child before the file is blamed: it is the kernel's OOM killer when the file is at fault, but an
operator or a container runtime sends it too, and a healthy file must not fail for that; a
second SIGKILL on the same file is reported as ``TOO_LARGE``. The child is replaced after
``recycle_after`` files read by native parsers, so native leaks (iscc-tika keeps a GraalVM
isolate) cannot accumulate; plain text and Markdown are read by our own Python code and do not
count — a child start costs ~0.8 s of CPU, which every 50 small text files made the largest
cost of extracting them (bench/extract_overhead.py). The memory check after each file replaces
any child that grew.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psutil

from ldims.errors import (
    OcrDeferred,
    PassingTrouble,
    PermanentError,
    ProcessingError,
    TransientError,
)
from ldims.text import ExtractionResult
from workers.extraction.registry import TEXT_TYPES
from workers.extraction.result import ExtractionLimits

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
_STARTUP_SECONDS = 120
_CHILD_MODULE = "workers.extraction.sandbox_child"
_ERRORS: dict[str, type[ProcessingError]] = {
    "OcrDeferred": OcrDeferred,
    "PassingTrouble": PassingTrouble,
    "PermanentError": PermanentError,
    "TransientError": TransientError,
}


class _KilledBySignal(Exception):
    """The child died of SIGKILL while reading a file (the OOM killer, or someone else)."""


class ExtractionSandbox:
    """One watched child process; ``run`` is not thread-safe (a worker runs one task at a time)."""

    def __init__(self, recycle_after: int = 50) -> None:
        self.recycle_after = recycle_after
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._watched: psutil.Process | None = None
        self._idle_rss = 0  # the child's RSS when it answered its last file (it rests since)
        self._jobs = 0
        self.last_peak_rss = 0  # bytes, sampled while the last file was being extracted

    def run(self, path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
        """Extract ``path`` in the child; raise ``ProcessingError`` with a code on failure."""
        try:
            return self._run_once(path, mime, limits)
        except _KilledBySignal:
            log.warning("The extractor child was killed (SIGKILL); reading the file once more.")
        try:
            return self._run_once(path, mime, limits)
        except _KilledBySignal:
            raise PermanentError(
                "TOO_LARGE",
                "The extractor was killed by the system twice while reading this file, most "
                "likely for running out of memory.",
            ) from None

    def _run_once(self, path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
        process, conn, watched = self._child()
        try:
            conn.send((str(path), mime, limits))
            status, payload = self._wait(process, conn, watched, limits)
        except (BrokenPipeError, ConnectionResetError):
            self.close()
            raise TransientError(
                "EXTRACTOR_UNAVAILABLE", "The extractor process went away; retrying."
            ) from None
        except BaseException:
            # Whatever interrupted us (a limit, Celery's soft time limit, Ctrl-C), the child may
            # still be busy with this file: its late answer must never be read as the next
            # file's. Only a fresh child is safe.
            self.close()
            raise
        if mime not in TEXT_TYPES:
            self._jobs += 1
        # A child that grew past the limit while finishing a job (native caches, fragmented
        # heaps) is replaced now rather than carried into the next file.
        rss = self._idle_rss = _rss(watched)
        self.last_peak_rss = max(self.last_peak_rss, rss)
        over_limit = rss > limits.max_memory_mib * 1024 * 1024
        if self._jobs >= self.recycle_after or over_limit:
            self.close()
        if status == "ok":
            return payload
        kind, code, message = payload
        raise _ERRORS.get(kind, PermanentError)(code, message)

    def close(self) -> None:
        """Stop the child (it is started again on the next ``run``)."""
        if self._conn is not None:
            self._conn.close()
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(5)
        self._process, self._conn, self._watched, self._jobs = None, None, None, 0

    def __enter__(self) -> ExtractionSandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A sandbox dropped without close() must not leave a running (or zombie) child.
        if self._process is not None and self._process.poll() is None:
            self.close()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _child(self) -> tuple[subprocess.Popen[bytes], Connection, psutil.Process]:
        if self._process is None or self._process.poll() is not None or self._conn is None:
            self.close()
            # A fresh interpreter, not a fork: the child must not inherit the worker's threads,
            # sockets and Celery state, and native libraries are loaded fresh in it. It is run
            # as a module (not multiprocessing's spawn, which re-imports the parent's __main__).
            parent_end, child_end = socket.socketpair()
            fd = child_end.fileno()
            command = [sys.executable, "-m", _CHILD_MODULE, str(fd), str(os.getpid())]
            process = subprocess.Popen(command, pass_fds=[fd], stdin=subprocess.DEVNULL)
            child_end.close()
            conn = Connection(parent_end.detach())
            self._process, self._conn = process, conn
            self._await_ready(process, conn)
            # One handle for the child's life: creating it reads /proc (0.03-0.06 ms a time).
            self._watched = psutil.Process(process.pid)
            self._idle_rss = _rss(self._watched)
        assert self._process is not None and self._conn is not None and self._watched is not None
        return self._process, self._conn, self._watched

    def _await_ready(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        deadline = time.monotonic() + _STARTUP_SECONDS
        while not conn.poll(_POLL_SECONDS):
            if process.poll() is not None or time.monotonic() > deadline:
                self.close()
                # Not the file's fault: the worker retries later.
                raise TransientError(
                    "EXTRACTOR_UNAVAILABLE", "The extractor process did not start."
                )
        try:
            ready = conn.recv()
        except (EOFError, OSError):
            ready = None
        if ready != "ready":
            self.close()
            raise TransientError("EXTRACTOR_UNAVAILABLE", "The extractor process did not start.")

    def _wait(
        self,
        process: subprocess.Popen[bytes],
        conn: Connection,
        watched: psutil.Process,
        limits: ExtractionLimits,
    ) -> tuple[str, object]:
        deadline = time.monotonic() + limits.timeout_seconds
        max_rss = limits.max_memory_mib * 1024 * 1024
        # The child has rested since it answered the last file: that answer's sample is its
        # RSS now, and sampling again would cost a /proc walk per file for nothing.
        self.last_peak_rss = self._idle_rss
        while True:
            if conn.poll(_POLL_SECONDS):
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    return self._died(process)
            if process.poll() is not None:
                return self._died(process)
            rss = _rss(watched)
            self.last_peak_rss = max(self.last_peak_rss, rss)
            if rss > max_rss:
                raise PermanentError(
                    "TOO_LARGE",
                    f"Extracting this file needed more than {limits.max_memory_mib} MiB of "
                    "memory (the per-file limit); it was stopped.",
                )
            if time.monotonic() > deadline:
                raise PermanentError(
                    "TIMEOUT",
                    f"Extraction took longer than {limits.timeout_seconds:g} s (the per-file "
                    "limit); it was stopped.",
                )

    def _died(self, process: subprocess.Popen[bytes]) -> tuple[str, object]:
        try:
            code = process.wait(5)
        except subprocess.TimeoutExpired:  # closed its end but lingers: treat as a crash
            code = None
        self.close()
        if code == -signal.SIGKILL:
            raise _KilledBySignal
        raise PermanentError(
            "CORRUPT_FILE", f"The extractor crashed while reading this file (exit code {code})."
        )


def _rss(process: psutil.Process) -> int:
    """RSS of the child and of every process it started (0 when it is gone)."""
    try:
        total = process.memory_info().rss
        for pid in _descendants(process):
            with contextlib.suppress(psutil.Error):  # ended meanwhile
                total += psutil.Process(pid).memory_info().rss
        return total
    except psutil.Error:
        return 0


def _descendants(process: psutil.Process) -> list[int]:
    """Children, grandchildren… of ``process``, from the lists the kernel keeps per thread.

    psutil's ``children(recursive=True)`` reads the stat file of every process on the machine:
    2-3 ms with ~100 processes, and more on a busy host, where these lists take 0.06 ms
    (bench/results/extract_overhead.md). Without them (a kernel built without
    CONFIG_PROC_CHILDREN, or a thread or child that ended while we read) psutil's walk serves.
    """
    found: list[int] = []
    pending = [process.pid]
    try:
        while pending:
            pid = pending.pop()
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as file:
                    children = [int(child) for child in file.read().split()]
                found += children
                pending += children
    except OSError:
        return [child.pid for child in process.children(recursive=True)]
    return found
