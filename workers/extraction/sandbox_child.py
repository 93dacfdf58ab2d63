"""The extractor child process started by :class:`~workers.extraction.sandbox.ExtractionSandbox`.

It reads jobs ``(path, mime, limits)`` from the connection on the inherited file descriptor,
extracts, and answers ``("ok", result)`` or ``("error", (kind, code, message))``. It keeps
running across jobs (parsers and models load once) and exits when the worker goes away.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

import psutil

from ldims.errors import ProcessingError, disk_full
from ldims.logs import setup_logging
from workers.heap import release_free_memory


def _child_main(conn: Connection, parent_pid: int) -> None:
    """The child's loop: receive a job, extract, send ``("ok", result)`` or ``("error", …)``."""
    # The worker owns shutdown; Ctrl-C in a terminal must not kill an extraction half-way.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    setup_logging(os.environ.get("LDIMS_LOG_LEVEL", os.environ.get("LOG_LEVEL", "INFO")).upper())
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    from workers.extraction.registry import extract_path, warm_up

    # Load every parser (and language model) before the first file, so a file's wall time
    # measures its extraction, not our imports; then tell the worker we are ready.
    warm_up()
    # What is loaded now (parsers, the language model: ~100,000 objects) lives as long as the
    # process. Frozen, a full collection after a file walks only what that file left behind:
    # 24 ms → under 0.01 ms, where a small text file takes 0.6 ms to extract
    # (bench/results/extract_overhead.md). Collected first, so warm-up garbage is not kept.
    gc.collect()
    gc.freeze()
    heap = _Heap()
    conn.send("ready")
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
            trouble = disk_full(exc)  # a full temporary folder is no fault of the file
            reply = (
                ("error", ("PassingTrouble", trouble.code, trouble.message))
                if trouble
                else ("error", ("PermanentError", "CORRUPT_FILE", _parser_failure(exc)))
            )
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return
        del reply
        heap.after_file()


class _Heap:
    """Gives freed memory back to the system after a file that grew the child, not after each.

    lxml trees of large DOCX parts (python-docx) leave glibc's heap fragmented: without a
    release the child grew by ~200 MiB for each pass over a 12 MB document.xml. After a small
    text file there is nothing to give back and the release (a full collection and
    ``malloc_trim``) still cost 0.1-0.4 ms, up to half of the extraction: it now follows a file
    that left the RSS ``_GROWTH`` above where the last release left it, and every
    ``_RELEASE_EVERY`` files (reading the RSS costs 0.01 ms).
    """

    _GROWTH = 16 * 1024 * 1024
    _RELEASE_EVERY = 25

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._files = 0
        self._rest = self._rss()

    def after_file(self) -> None:
        self._files += 1
        if self._files >= self._RELEASE_EVERY or self._rss() - self._rest > self._GROWTH:
            release_free_memory(collect=True)
            self._files, self._rest = 0, self._rss()

    def _rss(self) -> int:
        return int(self._process.memory_info().rss)


def _parser_failure(exc: Exception) -> str:
    # Only the exception's type: parsers quote the file's content in their messages, and
    # this reason is stored in the catalog and logged by Celery.
    return f"The parser could not read this file ({type(exc).__name__})."


def _exit_with_parent(parent_pid: int) -> None:
    # A worker killed by its hard time limit must not leave an orphan extracting for minutes.
    while os.getppid() == parent_pid:
        time.sleep(1)
    os._exit(0)


if __name__ == "__main__":
    _child_main(Connection(int(sys.argv[1])), int(sys.argv[2]))
