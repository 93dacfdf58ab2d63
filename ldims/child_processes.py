"""Child processes that do not outlive the process that started them.

``ldims serve`` starts its workers and the embedded Redis as children, and each Celery worker
forks its pool processes. Killed with SIGKILL (an OOM kill, ``kill -9``, a crashed container
entrypoint) a parent cannot stop its children: the next ``ldims serve`` would run beside the
old workers (two index writers, two reconcilers), and a worker's orphaned pool processes would
idle for good. Linux sends a child a signal when its parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None = None
with contextlib.suppress(OSError, AttributeError):  # not Linux: children outlive a killed parent
    _prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(sig: int, parent: int | None = None) -> None:
    """Have this process get ``sig`` when its parent (pid ``parent``, else the current one) dies."""
    parent = os.getppid() if parent is None else parent
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    # The parent may have died before prctl: then no signal would ever come.
    if os.getppid() != parent:
        os.kill(os.getpid(), sig)


def exit_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess.Popen``: the child gets ``sig`` when this process dies
    (SIGTERM: a Celery worker then shuts down as on ``Ctrl-C``, handing its tasks back)."""
    parent = os.getpid()
    return lambda: die_with_parent(sig, parent)
