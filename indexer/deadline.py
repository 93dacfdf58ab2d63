"""A time limit that a search checks from inside its long loops, so it stops on its own.

A search in a worker thread cannot be killed; a caller's timeout only abandons it, and the
abandoned search went on holding the searcher lock (and a CPU) to the end. With a deadline
set, the loops that grow with the index — posting blocks, per-chunk columns, Whoosh matcher
walks, hits — raise :class:`SearchOverdue` soon after it passes, and the lock is released.

It also lets a caller try a search where blocking is costly (on an event loop) for a few
milliseconds and go on elsewhere when that is not enough. Caches are filled only with
complete values, so an overdue search leaves them as they were plus what it finished.

The deadline lives in a :class:`~contextvars.ContextVar`: per thread and per asyncio task,
and the code between never passes it along.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_deadline: ContextVar[float] = ContextVar("ldims_search_deadline", default=math.inf)
# Items of a column between two looks at the clock (a look costs ~0.1 µs, an item ~1 µs).
_EVERY = 1024


class SearchOverdue(Exception):
    """The search passed its deadline and stopped; nothing it started is half-kept."""


@contextlib.contextmanager
def deadline_in(seconds: float | None) -> Iterator[None]:
    """Searches in this block stop ``seconds`` from now (``None``: no limit of its own; an
    enclosing deadline that comes first still holds)."""
    if seconds is None:
        yield
        return
    token = _deadline.set(min(_deadline.get(), time.monotonic() + seconds))
    try:
        yield
    finally:
        _deadline.reset(token)


def check() -> None:
    """Raise :class:`SearchOverdue` if the current deadline has passed."""
    if time.monotonic() > _deadline.get():
        raise SearchOverdue


def checked(items: Iterable[T], every: int = _EVERY) -> Iterator[T]:
    """``items``, with the deadline checked every ``every`` of them."""
    if _deadline.get() == math.inf:
        yield from items
        return
    for count, item in enumerate(items):
        if not count % every:
            check()
        yield item
