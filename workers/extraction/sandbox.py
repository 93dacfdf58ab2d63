"""Extraction in a child process, under a wall-time and a memory limit, recycled after N files.

Parsers of hostile or enormous files can hang, balloon or crash (PDFium, Tika's native image,
lxml are all native code). None of that may take down a Celery worker or make it retry a file
forever, so every extraction runs in a spawned child that the worker watches: past the wall
time it is killed (``TIMEOUT``), above the memory limit it is killed (``TOO_LARGE``), if it dies
on its own the file is reported as ``CORRUPT_FILE`` (or ``TOO_LARGE`` after a SIGKILL that was
most likely the kernel's OOM killer). The child is replaced after ``recycle_after`` files so
native leaks (iscc-tika keeps a GraalVM isolate) cannot accumulate.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path

import psutil

from ldims.errors import PermanentError, ProcessingError, TransientError
from workers.extraction.result import ExtractionLimits, ExtractionResult

log = logging.getLogger(__name__)

_POLL_SECONDS = 0.05
_ERRORS: dict[str, type[ProcessingError]] = {
    "PermanentError": PermanentError,
    "TransientError": TransientError,
}


class ExtractionSandbox:
    """One watched child process; ``run`` is not thread-safe (a worker runs one task at a time)."""

    def __init__(self, recycle_after: int = 50) -> None:
        self.recycle_after = recycle_after
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._jobs = 0

    def run(self, path: Path, mime: str, limits: ExtractionLimits) -> ExtractionResult:
        """Extract ``path`` in the child; raise ``ProcessingError`` with a code on failure."""
        process, conn = self._child()
        conn.send((str(path), mime, limits))
        try:
            status, payload = self._wait(process, conn, limits)
        except ProcessingError:
            self.close()
            raise
        self._jobs += 1
        if self._jobs >= self.recycle_after:
            self.close()
        if status == "ok":
            return payload
        kind, code, message = payload
        raise _ERRORS.get(kind, PermanentError)(code, message)

    def close(self) -> None:
        """Stop the child (it is started again on the next ``run``)."""
        if self._conn is not None:
            self._conn.close()
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        self._process, self._conn, self._jobs = None, None, 0

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _child(self) -> tuple[BaseProcess, Connection]:
        if self._process is None or not self._process.is_alive() or self._conn is None:
            self.close()
            # spawn, not fork: the child must not inherit the worker's threads, sockets and
            # Celery state, and native libraries are loaded fresh in it.
            context = multiprocessing.get_context("spawn")
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=_child_main, args=(child_end, os.getpid()), name="ldims-extract"
            )
            process.daemon = False
            process.start()
            child_end.close()
            self._process, self._conn = process, parent_end
        assert self._process is not None and self._conn is not None
        return self._process, self._conn

    def _wait(
        self, process: BaseProcess, conn: Connection, limits: ExtractionLimits
    ) -> tuple[str, object]:
        deadline = time.monotonic() + limits.timeout_seconds
        max_rss = limits.max_memory_mib * 1024 * 1024
        watched = psutil.Process(process.pid)
        while True:
            if conn.poll(_POLL_SECONDS):
                try:
                    return conn.recv()
                except (EOFError, OSError):
                    return self._died(process)
            if not process.is_alive():
                return self._died(process)
            if _rss(watched) > max_rss:
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

    def _died(self, process: BaseProcess) -> tuple[str, object]:
        process.join(5)
        code = process.exitcode
        self.close()
        if code == -signal.SIGKILL:
            raise PermanentError(
                "TOO_LARGE",
                "The extractor was killed by the system while reading this file, most likely "
                "for running out of memory.",
            )
        raise PermanentError(
            "CORRUPT_FILE", f"The extractor crashed while reading this file (exit code {code})."
        )


def _rss(process: psutil.Process) -> int:
    try:
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            total += child.memory_info().rss
        return total
    except psutil.Error:
        return 0


def _child_main(conn: Connection, parent_pid: int) -> None:
    """The child's loop: receive a job, extract, send ``("ok", result)`` or ``("error", …)``."""
    # The worker owns shutdown; Ctrl-C in a terminal must not kill an extraction half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    from workers.extraction.registry import extract_path

    while True:
        try:
            path, mime, limits = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, object] = ("ok", extract_path(Path(path), mime, limits))
        except ProcessingError as exc:
            reply = ("error", (type(exc).__name__, exc.code, exc.message))
        except MemoryError:
            reply = ("error", ("PermanentError", "TOO_LARGE", "The file needs too much memory."))
        except Exception as exc:  # a parser bug on a strange file: report it, stay alive
            reply = ("error", ("PermanentError", "CORRUPT_FILE", _parser_failure(exc)))
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return


def _parser_failure(exc: Exception) -> str:
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"The parser could not read this file ({type(exc).__name__}{': ' if detail else ''}{detail})."


def _exit_with_parent(parent_pid: int) -> None:
    # A worker killed by its hard time limit must not leave an orphan extracting for minutes.
    while os.getppid() == parent_pid:
        time.sleep(1)
    os._exit(0)
