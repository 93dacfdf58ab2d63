"""One place that turns errors into the seed's REST bodies.

``LdimsError`` → its status and ``{isError, errorCode, errorMessage, errorDetails}``;
``StillProcessing`` → 202 ``{"status": "processing", "message": …}`` as the seed asks;
request validation errors → 400 ``INVALID_INPUT`` naming the field; anything else →
500 ``SERVER_ERROR`` without internals.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError as DatabaseUnavailable
from starlette.exceptions import HTTPException as StarletteHTTPException

from ldims.errors import (
    InvalidInput,
    LdimsError,
    NotFound,
    ServiceUnavailable,
    StillProcessing,
    disk_full,
)

log = logging.getLogger(__name__)


def error_response(error: LdimsError) -> JSONResponse:
    if isinstance(error, StillProcessing):
        body = {"status": "processing", "message": error.message, **error.details}
        return JSONResponse(body, status_code=202, headers={"Retry-After": "2"})
    headers = {"WWW-Authenticate": "Bearer"} if error.http_status == 401 else None
    retry = error.details.get("retryAfterSeconds")
    if error.http_status == 429 and isinstance(retry, int):  # when to come back, as HTTP says
        headers = {"Retry-After": str(retry)}
    return JSONResponse(error.body(), status_code=error.http_status, headers=headers)


async def _ldims_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, LdimsError)
    return error_response(exc)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    return error_response(
        InvalidInput(field=".".join(location) or None, issue=first.get("msg", "invalid value"))
    )


async def _http_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return error_response(NotFound("No such endpoint."))
    if exc.status_code == 405:
        error = InvalidInput("Method not allowed on this endpoint.")
        return JSONResponse(error.body(), status_code=405)
    error = LdimsError(str(exc.detail))
    return JSONResponse(error.body(), status_code=exc.status_code)


def _disk_full() -> JSONResponse:
    # Not our bug and not the caller's: the client may try again once there is room.
    log.error("the data folder's disk is full: a request was refused")
    return error_response(
        ServiceUnavailable(
            "The server's disk is full; nothing was stored. Try again later.",
            component="storage",
        )
    )


async def _database_down(_request: Request, exc: Exception) -> JSONResponse:
    if disk_full(exc) is not None:  # an SQLite catalog on the full data folder
        return _disk_full()
    log.error("catalog unavailable: %s", type(exc).__name__)
    return error_response(
        ServiceUnavailable("The catalog database is unavailable.", component="catalog")
    )


async def _unexpected(_request: Request, exc: Exception) -> JSONResponse:
    if disk_full(exc) is not None:
        return _disk_full()
    log.exception("unhandled error", exc_info=exc)
    return error_response(LdimsError())


def without_validation_422(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without the 422 ``HTTPValidationError`` FastAPI declares on every route with
    parameters: a request that fails validation is answered 400 ``INVALID_INPUT`` here."""
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            declared = operation.get("responses", {}).get("422", {})
            if "HTTPValidationError" in str(declared):
                del operation["responses"]["422"]
    for name in ("HTTPValidationError", "ValidationError"):
        schema.get("components", {}).get("schemas", {}).pop(name, None)
    return schema


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(LdimsError, _ldims_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DatabaseUnavailable, _database_down)
    app.add_exception_handler(Exception, _unexpected)
