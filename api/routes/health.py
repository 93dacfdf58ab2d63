"""``GET /health``: broker, catalog, index and extractor, each checked for real.

On a path of its own: the route is async and reads the services off the app (a sync route
or dependency waits for a thread of anyio's shared pool, which busy sync routes fill), and
its probes run at once on a few threads of their own, each within
``LDIMS_HEALTH_PROBE_TIMEOUT_SECONDS``; a probe past it is reported failing (``timeout``).
Measured before (issue 33): 48 concurrent searches of one tenant took ``/health`` from 4 ms
to 2.5 s.

Single flight: ``/health`` needs no key, so anyone may flood it. Callers arriving while the
probes run await that one run, and its answer serves every caller for :data:`FRESH_SECONDS`;
a flood costs one probe set a second, never four probes a call.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.schemas import ErrorOut
from ldims.services import Services
from workers import self_check

router = APIRouter(tags=["health"])
# Four probes a check; a few checks at once. A probe stuck past its timeout keeps its thread
# until it returns (threads cannot be stopped), so there is room for several.
_PROBES = ThreadPoolExecutor(max_workers=16, thread_name_prefix="health")
# How long one probe run answers every /health call: short next to any monitor's polling
# interval (seconds to minutes), so none sees a stale answer, yet a flood probes once a second.
FRESH_SECONDS = 1.0


# An answer: its body and status (a response object is built per call: middleware may add to
# a response's headers as it is sent).
_Answer = tuple[dict[str, Any], int]


class HealthChecks:
    """The probe run in flight and the last answer of one app (kept on ``app.state``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.runs = 0  # probe runs started (observable in tests and when debugging)
        self._running: asyncio.Future[_Answer] | None = None
        self._answer: _Answer | None = None
        self._at = -math.inf

    async def answer(self, run: Callable[[], Awaitable[_Answer]]) -> _Answer:
        """The fresh answer, or the one run in flight, or a new run of ``run()``."""
        if self._answer is not None and self.clock() - self._at < FRESH_SECONDS:
            return self._answer
        if self._running is None:
            self.runs += 1
            self._running = asyncio.ensure_future(self._run(run))
        # shielded: a caller that goes away does not cancel the run the others await
        return await asyncio.shield(self._running)

    async def _run(self, run: Callable[[], Awaitable[_Answer]]) -> _Answer:
        try:
            answer = await run()
            self._answer, self._at = answer, self.clock()
            return answer
        finally:
            self._running = None


def _checks_of(request: Request) -> HealthChecks:
    state = request.app.state
    checks = getattr(state, "health_checks", None)
    if checks is None:  # no await since the look-up: one per app
        checks = state.health_checks = HealthChecks()
    return checks


def _check(probe: Callable[[], Any]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        detail = probe()
    except Exception as exc:  # a health check reports every failure, it never raises
        return {"ok": False, "error": type(exc).__name__}
    result: dict[str, Any] = {"ok": True, "ms": round((time.perf_counter() - started) * 1000, 1)}
    if detail is not None:
        result["detail"] = detail
    return result


async def _probe(
    loop: asyncio.AbstractEventLoop, probe: Callable[[], Any], timeout: float
) -> dict[str, Any]:
    """``probe`` checked on the probes' own threads, failing past ``timeout`` seconds."""
    try:
        return await asyncio.wait_for(
            loop.run_in_executor(_PROBES, functools.partial(_check, probe)), timeout
        )
    except TimeoutError:
        return {"ok": False, "error": "timeout"}


def _readable(ping: Callable[[], int]) -> None:
    """Read the index for real, but keep its size out of the answer: /health needs no key, and
    the count would tell anyone how much all the tenants hold."""
    ping()


@router.get(
    "/health",
    responses={503: {"model": ErrorOut, "description": "SERVER_ERROR: the parts not answering."}},
)
async def health(request: Request) -> JSONResponse:
    """200 when every part answers, 503 ``SERVER_ERROR`` naming the parts that do not."""
    services: Services = request.app.state.services
    body, status = await _checks_of(request).answer(functools.partial(_probe_all, services))
    return JSONResponse(body, status_code=status)


async def _probe_all(services: Services) -> _Answer:
    """One run of every probe, at once, and the answer it makes."""
    probes: dict[str, Callable[[], Any]] = {
        "broker": services.dispatcher.ping,
        "catalog": services.catalog.ping,
        "index": lambda: _readable(services.index.ping),
        "extractor": lambda: self_check(services.settings.tika_url),
    }
    timeout = services.settings.health_probe_timeout_seconds
    loop = asyncio.get_running_loop()
    answers = await asyncio.gather(
        *(_probe(loop, probe, timeout) for probe in probes.values())
    )
    checks = dict(zip(probes, answers, strict=True))
    if all(check["ok"] for check in checks.values()):
        return {"status": "ok", "checks": checks}, 200
    failing = [name for name, check in checks.items() if not check["ok"]]
    body = {
        "isError": True,
        "errorCode": "SERVER_ERROR",
        "errorMessage": f"Unavailable: {', '.join(failing)}.",
        "errorDetails": {"checks": checks},
    }
    return body, 503
