"""``GET /health``: broker, catalog, index and extractor, each checked for real."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import ServicesDep
from api.schemas import ErrorOut
from workers import self_check

router = APIRouter(tags=["health"])


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


def _readable(ping: Callable[[], int]) -> None:
    """Read the index for real, but keep its size out of the answer: /health needs no key, and
    the count would tell anyone how much all the tenants hold."""
    ping()


@router.get(
    "/health",
    responses={503: {"model": ErrorOut, "description": "SERVER_ERROR: the parts not answering."}},
)
def health(services: ServicesDep) -> JSONResponse:
    """200 when every part answers, 503 ``SERVER_ERROR`` naming the parts that do not."""
    checks = {
        "broker": _check(services.dispatcher.ping),
        "catalog": _check(services.catalog.ping),
        "index": _check(lambda: _readable(services.index.ping)),
        "extractor": _check(lambda: self_check(services.settings.tika_url)),
    }
    if all(check["ok"] for check in checks.values()):
        return JSONResponse({"status": "ok", "checks": checks})
    failing = [name for name, check in checks.items() if not check["ok"]]
    body = {
        "isError": True,
        "errorCode": "SERVER_ERROR",
        "errorMessage": f"Unavailable: {', '.join(failing)}.",
        "errorDetails": {"checks": checks},
    }
    return JSONResponse(body, status_code=503)
