"""Fair admission of searches: how many run at once, whose turn is next, and who is refused.

A search takes one of ``total`` slots for as long as it runs. A tenant holds at most
``per_tenant`` of them and an API key at most ``per_key``, so one caller flooding the server
fills its own share and never the others'. Measured before this (issue 33): 48 concurrent
16-phrase searches of one tenant filled the 40 threads anyio shares with every sync route,
and another tenant's 10 ms search took 8.6 s, ``/health`` 2.5 s.

A caller over its share waits its turn for at most ``queue_seconds``, then it is refused with
:class:`~ldims.errors.TooManyRequests` and ``retryAfterSeconds``. At most ``queue_per_tenant``
searches of a tenant wait (each grant and timeout looks at a tenant's waiters under the lock,
so their number is bounded); more are refused without queueing. An awaited search waits on
the event loop, which costs nothing, and so does a client that hammers without pause: told
"no" at once, it came back a thousand times a second and kept the loop busy (measured: A's
search p95 0.6 s); made to wait, it comes back at most once per ``queue_seconds``. So an
awaited search past the waiters' bound is not queued but still told "no" only after
``queue_seconds`` (a sleep on the loop, outside the lock). A search waiting in a thread holds
that thread, so of those at most the caller's share wait; more are refused at once.
When a slot frees, it goes to the waiting tenant running the fewest searches, and among
those to the one served least recently, so a tenant's backlog never goes before another
tenant's single search.

Searches that are awaited (REST ``/api/search``, MCP ``searchDocuments``) hold their slot
on the event loop and hand their work to this module's own thread pool of ``total`` threads
(:meth:`SearchAdmission.admitted`), never to anyio's shared one; those already on a thread
of their caller (qmd's tools, the CLI, guide links) hold a slot in that thread
(:meth:`SearchAdmission.slot`). A slot taken for a thread is given back when the thread's
work ends, not when an impatient caller stops waiting: the search keeps to its own deadline
and still counts until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from ldims.caller import Caller
from ldims.errors import TooManyRequests
from ldims.settings import Settings

T = TypeVar("T")


class _QueueFull(Exception):
    """Raised by ``_enter`` (under no lock by the time it is caught): the tenant has its
    bound of waiters; the caller refuses in its own way (at once, or after a paced wait)."""


@dataclass(eq=False)
class _Waiter:
    tenant: str
    key: str | None
    wake: Callable[[], None]
    threaded: bool
    granted: bool = False


@dataclass(frozen=True)
class AdmissionLimits:
    total: int
    per_tenant: int
    per_key: int
    queue_seconds: float
    queue_per_tenant: int

    @classmethod
    def of(cls, settings: Settings) -> AdmissionLimits:
        return cls(
            total=settings.search_concurrency,
            per_tenant=settings.search_concurrency_per_tenant,  # nested: Settings checks it
            per_key=settings.search_concurrency_per_key,
            queue_seconds=settings.search_queue_seconds,
            queue_per_tenant=settings.search_queue_per_tenant,
        )


# Who counts against a limit: ("tenant", name) or ("key", key id).
_Who = tuple[str, str]


def _bump(table: dict[_Who, int], who: _Who, step: int) -> None:
    value = table.get(who, 0) + step
    if value:
        table[who] = value
    else:
        table.pop(who, None)


def _whom(tenant: str, key: str | None) -> list[_Who]:
    return [("tenant", tenant)] if key is None else [("tenant", tenant), ("key", key)]


class SearchAdmission:
    """The slots of one process's searches (see the module's docstring)."""

    def __init__(self, limits: AdmissionLimits) -> None:
        self.limits = limits
        self._lock = threading.Lock()  # guards everything below; never held over a search
        self._running = 0
        self._running_of: dict[_Who, int] = {}  # searches running, per tenant and per key
        self._threaded: dict[_Who, int] = {}  # waiters holding a thread, likewise
        # Tenants with a search waiting; each tenant's waiters in arrival order.
        self._queue: dict[str, deque[_Waiter]] = {}
        # When each tenant with a search running or waiting last took a slot (a counter).
        self._served: dict[str, int] = {}
        self._turns = 0
        self._pool = ThreadPoolExecutor(max_workers=limits.total, thread_name_prefix="search")

    @property
    def retry_after(self) -> int:
        """Seconds a refused caller is told to wait (whole seconds, as ``Retry-After``)."""
        return max(1, math.ceil(self.limits.queue_seconds))

    @property
    def running(self) -> int:
        return self._running

    # --- awaited searches ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def admitted(
        self, caller: Caller
    ) -> AsyncIterator[Callable[[Callable[[], T]], asyncio.Future[T]]]:
        """A slot for ``caller`` during the block (work on the event loop may use it), and a
        function handing work to the pool: the slot goes back when the block has ended and
        every piece of work handed over has ended too (even if nobody awaits it any more)."""
        await self._acquire_async(caller)
        holders = 1  # the block, and each piece of work on the pool
        holders_lock = threading.Lock()

        def drop() -> None:
            nonlocal holders
            with holders_lock:
                holders -= 1
                last = not holders
            if last:
                self._release(caller)

        def handoff(work: Callable[[], T]) -> asyncio.Future[T]:
            nonlocal holders
            with holders_lock:
                holders += 1
            context = contextvars.copy_context()  # the request's log id and deadline
            future: Future[T] = self._pool.submit(context.run, work)
            future.add_done_callback(lambda _: drop())  # run, failed or cancelled
            return asyncio.wrap_future(future)

        try:
            yield handoff
        finally:
            drop()

    async def _acquire_async(self, caller: Caller) -> None:
        loop = asyncio.get_running_loop()
        woken = loop.create_future()

        def wake() -> None:
            loop.call_soon_threadsafe(lambda: woken.done() or woken.set_result(None))

        try:
            waiter = self._enter(caller, wake, threaded=False)
        except _QueueFull:
            # Not queued, but told "no" only after the wait a queued search would have had:
            # a client refused at once comes straight back (see the module's docstring).
            await asyncio.sleep(self.limits.queue_seconds)
            raise self._refusal() from None
        if waiter is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(woken), self.limits.queue_seconds)
        except TimeoutError:
            if self._leave(waiter):
                raise self._refusal() from None
            # granted just as the wait ran out: the slot is this search's
        except BaseException:  # the caller gave up (cancelled)
            if not self._leave(waiter):
                self._release(caller)  # granted meanwhile: pass it on
            raise

    # --- searches already on a thread ---------------------------------------------------------
    @contextlib.contextmanager
    def slot(self, caller: Caller) -> Iterator[None]:
        """A slot for ``caller`` while the block runs in this thread (waiting its turn)."""
        woken = threading.Event()
        try:
            waiter = self._enter(caller, woken.set, threaded=True)
        except _QueueFull:
            raise self._refusal() from None  # a waiting thread is held: refused at once
        # Past the wait, a waiter granted a slot at that instant keeps it (_leave: False).
        if waiter is not None and not woken.wait(self.limits.queue_seconds) and self._leave(waiter):
            raise self._refusal()
        try:
            yield
        finally:
            self._release(caller)

    # --- the slots -----------------------------------------------------------------------------
    def _enter(self, caller: Caller, wake: Callable[[], None], threaded: bool) -> _Waiter | None:
        """Take a slot now (None), or queue ``caller`` (its waiter), or refuse it
        (:class:`_QueueFull` when its tenant has ``queue_per_tenant`` waiting already); a
        ``threaded`` waiter holds a thread: at most the caller's share of those wait."""
        tenant, key = caller.tenant, caller.key_id
        with self._lock:
            # Every change that frees a slot grants it (_release), so no queued waiter could
            # take a free slot now: one this caller may take is its own, even when others of
            # its tenant wait (they wait for their key's share, or for the tenant's, which
            # _free_for sees too). Queueing it behind them left it waiting with slots free.
            if self._free_for(tenant, key):
                self._take(tenant, key)
                return None
            limits = self.limits
            if limits.queue_seconds <= 0 or (threaded and self._over(self._threaded, tenant, key)):
                raise self._refusal()
            if len(self._queue.get(tenant, ())) >= limits.queue_per_tenant:
                raise _QueueFull
            waiter = _Waiter(tenant, key, wake, threaded)
            self._queue.setdefault(tenant, deque()).append(waiter)
            if threaded:
                for who in _whom(tenant, key):
                    _bump(self._threaded, who, 1)
            return waiter

    def _leave(self, waiter: _Waiter) -> bool:
        """Take ``waiter`` out of the queue: True; False when it was granted a slot already."""
        with self._lock:
            if waiter.granted:
                return False
            waiting = self._queue.get(waiter.tenant)
            if waiting is not None:
                waiting.remove(waiter)
                if not waiting:
                    del self._queue[waiter.tenant]
            self._unqueue(waiter)
            self._forget(waiter.tenant)
            return True

    def _forget(self, tenant: str) -> None:
        """Under the lock: drop a tenant's last turn once it has nothing running or waiting
        (the table stays as small as the tenants searching now)."""
        if tenant not in self._queue and ("tenant", tenant) not in self._running_of:
            self._served.pop(tenant, None)

    def _release(self, caller: Caller) -> None:
        with self._lock:
            self._running -= 1
            for who in _whom(caller.tenant, caller.key_id):
                _bump(self._running_of, who, -1)
            self._grant()
            self._forget(caller.tenant)

    def _grant(self) -> None:
        """Under the lock: hand free slots to waiting searches, fairly between tenants. A
        tenant at its share is passed over at once; another's waiters are looked at (at most
        ``queue_per_tenant`` of them) for one whose key is under its share."""
        per_tenant = self.limits.per_tenant
        while self._running < self.limits.total and self._queue:
            eligible = [
                (running, self._served.get(tenant, -1), tenant)
                for tenant, waiting in self._queue.items()
                if (running := self._running_of.get(("tenant", tenant), 0)) < per_tenant
                and any(self._free_for(tenant, waiter.key) for waiter in waiting)
            ]
            if not eligible:
                return
            tenant = min(eligible)[2]
            waiting = self._queue[tenant]
            waiter = next(w for w in waiting if self._free_for(tenant, w.key))
            waiting.remove(waiter)
            if not waiting:
                del self._queue[tenant]
            self._unqueue(waiter)
            self._take(tenant, waiter.key)
            waiter.granted = True
            waiter.wake()

    def _free_for(self, tenant: str, key: str | None) -> bool:
        return self._running < self.limits.total and not self._over(self._running_of, tenant, key)

    def _over(self, table: dict[_Who, int], tenant: str, key: str | None) -> bool:
        """Whether ``tenant`` or ``key`` has its share in ``table`` already."""
        limits = self.limits
        return table.get(("tenant", tenant), 0) >= limits.per_tenant or (
            key is not None and table.get(("key", key), 0) >= limits.per_key
        )

    def _take(self, tenant: str, key: str | None) -> None:
        self._running += 1
        for who in _whom(tenant, key):
            _bump(self._running_of, who, 1)
        self._turns += 1
        self._served[tenant] = self._turns

    def _unqueue(self, waiter: _Waiter) -> None:
        if waiter.threaded:
            for who in _whom(waiter.tenant, waiter.key):
                _bump(self._threaded, who, -1)

    def _refusal(self) -> TooManyRequests:
        return TooManyRequests(
            f"Too many of your searches are running or waiting; retry after {self.retry_after} s.",
            retryAfterSeconds=self.retry_after,
        )

    def close(self) -> None:
        """Let the pool's threads end once their searches do."""
        self._pool.shutdown(wait=False, cancel_futures=True)
