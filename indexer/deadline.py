"""A time limit that a search checks from inside its long loops, so it stops on its own.

A search in a worker thread cannot be killed; a caller's timeout only abandons it, and the
abandoned search went on holding the searcher lock (and a CPU) to the end. With a deadline
set, the loops that grow with the index — posting blocks, per-chunk columns, every step of
Whoosh's matchers (:class:`CheckedSearcher`), hits — raise :class:`SearchOverdue` soon after
it passes, and the lock is released; the large sorts are not started when their estimated
cost would pass it.

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
from typing import Any, TypeVar

from whoosh.matching import WrappingMatcher
from whoosh.searching import Searcher

T = TypeVar("T")

_deadline: ContextVar[float] = ContextVar("ldims_search_deadline", default=math.inf)
# Items of a column between two looks at the clock (a look costs ~0.1 µs, an item ~1 µs).
_EVERY = 1024
# Steps of a Whoosh matcher between two looks (a step costs ~1 µs).
_MATCHER_STEPS = 256


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


def check(cost: float = 0.0) -> None:
    """Raise :class:`SearchOverdue` if the current deadline has passed, or would pass during
    work estimated to take ``cost`` seconds."""
    if time.monotonic() + cost > _deadline.get():
        raise SearchOverdue


def remaining() -> float | None:
    """Seconds left before the current deadline (never below 0); ``None``: no deadline."""
    deadline = _deadline.get()
    if deadline == math.inf:
        return None
    return max(0.0, deadline - time.monotonic())


def checked(items: Iterable[T], every: int = _EVERY) -> Iterator[T]:
    """``items``, with the deadline checked every ``every`` of them."""
    if _deadline.get() == math.inf:
        yield from items
        return
    for count, item in enumerate(items):
        if not count % every:
            check()
        yield item


class CheckedSearcher(Searcher):
    """A Whoosh searcher whose term matchers look at the deadline as they step, so that the
    loops inside Whoosh (a phrase's search for adjacent words, an AND's or a NOT's skipping)
    stop too. Its per-segment searchers are of this class as well."""

    def postings(self, fieldname: str, text: bytes, weighting: Any = None, qf: int = 1) -> Any:
        return _CheckedMatcher(super().postings(fieldname, text, weighting=weighting, qf=qf))


class _CheckedMatcher(WrappingMatcher):  # type: ignore[misc]
    def __init__(self, child: Any, boost: float = 1.0) -> None:
        super().__init__(child, boost=boost)
        self._steps = 0

    def _step(self) -> None:
        self._steps += 1
        if not self._steps % _MATCHER_STEPS:
            check()

    def next(self) -> Any:
        self._step()
        return self.child.next()

    def skip_to(self, id: int) -> Any:  # noqa: A002 (Whoosh's name)
        self._step()
        return self.child.skip_to(id)

    def skip_to_quality(self, minquality: float) -> Any:
        self._step()
        return super().skip_to_quality(minquality)
