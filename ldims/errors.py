"""The error tree of LDIMS: one stable code per error, mapped once per boundary.

::

    LdimsError                       code, message, details, http_status
    ├── InvalidInput        400      INVALID_INPUT     a request field is wrong (details name it)
    ├── Unauthorized        401      UNAUTHORIZED      missing/bad API key or webhook signature
    ├── Forbidden           403      FORBIDDEN         a key without the scope, or no key
    ├── NotFound            404      RESOURCE_NOT_FOUND
    ├── ContentUnavailable  409      CONTENT_UNAVAILABLE_OR_FAILED   the document failed
    ├── StillProcessing     202      PROCESSING        queued/processing: retry later
    ├── QueryUnprocessable  422      QUERY_UNPROCESSABLE   nothing searchable in the query
    ├── PayloadTooLarge     413      TOO_LARGE         upload or fetched body over the limit
    ├── TooManySessions     429      TOO_MANY_SESSIONS the SSE transport's session caps
    ├── TooManyRequests     429      TOO_MANY_REQUESTS a caller over its share of searches
    ├── ServiceUnavailable  503      SERVER_ERROR      broker/catalog down: nothing was queued
    ├── BackendError        500      BACKEND_API_ERROR index/catalog failed under an MCP tool
    ├── SearchTimeout       504      SEARCH_TIMEOUT    a search over MCP_REQUEST_TIMEOUT_SECONDS
    ├── RequestTimeout      504      REQUEST_TIMEOUT   another MCP call over that time
    └── ProcessingError              a document cannot be processed (worker side)
        ├── PermanentError           ends the document ``failed`` with its code
        ├── TransientError           retried with backoff, then ``failed``
        └── OcrDeferred              its pages need OCR: handed to the ``ocr`` queue

Each boundary maps them once: REST turns an ``LdimsError`` into the seed's JSON body and
status in ``api.errors``; the MCP server (``api.mcp.server``) turns one raised by a tool into
an ``isError`` result carrying the same body, and one raised by a resource read into a
JSON-RPC error whose code the toolset declares; workers catch ``ProcessingError`` in
``workers.pipeline``.
"""

from __future__ import annotations

import contextlib
import errno
import sqlite3
from collections.abc import Iterator
from typing import Any, ClassVar

from sqlalchemy.exc import OperationalError as DatabaseOperationalError


class LdimsError(Exception):
    """Base of every error with a stable, machine-readable code."""

    code: ClassVar[str] = "SERVER_ERROR"
    http_status: ClassVar[int] = 500
    default_message: ClassVar[str] = "An unexpected error occurred on the server."

    def __init__(self, message: str | None = None, **details: Any) -> None:
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        """The seed's error body: ``isError``, ``errorCode``, ``errorMessage``, ``errorDetails``."""
        body: dict[str, Any] = {
            "isError": True,
            "errorCode": self.code,
            "errorMessage": self.message,
        }
        if self.details:
            body["errorDetails"] = self.details
        return body


class InvalidInput(LdimsError):
    code = "INVALID_INPUT"
    http_status = 400
    default_message = (
        "Invalid input parameters provided. Please check your query, filters, and other parameters."
    )


class Unauthorized(LdimsError):
    code = "UNAUTHORIZED"
    http_status = 401
    default_message = "Authentication is required."


class Forbidden(LdimsError):
    code = "FORBIDDEN"
    http_status = 403
    default_message = "Access to the requested content is forbidden."


class NotFound(LdimsError):
    code = "RESOURCE_NOT_FOUND"
    http_status = 404
    default_message = "Document or its content not found."


class ContentUnavailable(LdimsError):
    code = "CONTENT_UNAVAILABLE_OR_FAILED"
    http_status = 409
    default_message = "Content extraction failed or content is in an unusable state."


class StillProcessing(LdimsError):
    code = "PROCESSING"
    http_status = 202
    default_message = "Content extraction is in progress. Please try again later."


class PayloadTooLarge(LdimsError):
    code = "TOO_LARGE"
    http_status = 413
    default_message = "The content is larger than the configured limit."


class TooManySessions(LdimsError):
    code = "TOO_MANY_SESSIONS"
    http_status = 429
    default_message = "Too many SSE sessions are open; close one or try again later."


class TooManyRequests(LdimsError):
    """The caller (its tenant or its key) already runs its share of searches: it may retry
    after ``retryAfterSeconds`` (REST also sends ``Retry-After``); other callers are not
    affected."""

    code = "TOO_MANY_REQUESTS"
    http_status = 429
    default_message = "Too many searches of yours are running; try again shortly."


class QueryUnprocessable(LdimsError):
    code = "QUERY_UNPROCESSABLE"
    http_status = 422
    default_message = (
        "The search query is too broad, too complex, or could not be processed by the search "
        "engine."
    )


class ServiceUnavailable(LdimsError):
    code = "SERVER_ERROR"
    http_status = 503
    default_message = "A backend service is unavailable; nothing was queued. Try again later."


class BackendError(LdimsError):
    """The catalog or index failed underneath a tool (the seed's ``BACKEND_API_ERROR``)."""

    code = "BACKEND_API_ERROR"
    http_status = 500
    default_message = "The document search service encountered an internal error."


class SearchTimeout(LdimsError):
    code = "SEARCH_TIMEOUT"
    http_status = 504
    default_message = "The search operation timed out before results could be retrieved."


class RequestTimeout(LdimsError):
    code = "REQUEST_TIMEOUT"
    http_status = 504
    default_message = "The request timed out before it could be completed."


class ProcessingError(Exception):
    """A document could not be processed; ``code`` goes into the document record."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        self.message = message
        # Both constructor arguments in args: Celery pickles exceptions between processes.
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class PermanentError(ProcessingError):
    """Retrying cannot help (bad file, refused URL): the document ends ``failed``."""


class TransientError(ProcessingError):
    """Might work later (network, lock timeout): the task is retried with backoff."""


class PassingTrouble(TransientError):
    """A trouble of the server, not of the document (a full disk, the catalog away): retried
    for as long as it lasts, never counted against the document's retries nor failed for."""


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def _finds_the_disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in _DISK_FULL_ERRNOS
    if isinstance(exc, sqlite3.Error):  # SQLite says so in its own words (the qmd lexicon)
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    # A database driver's error wrapped by SQLAlchemy (an SQLite catalog on the data folder).
    original = getattr(exc, "orig", None)
    return isinstance(original, BaseException) and _finds_the_disk_full(original)


def disk_full(exc: BaseException) -> PassingTrouble | None:
    """The retryable error for a write that found the disk full (or over quota), else None."""
    if _finds_the_disk_full(exc):
        return PassingTrouble(
            "DISK_FULL",
            "The data folder's disk is full (or over its quota); processing resumes once there "
            "is room again.",
        )
    return None


def catalog_unreachable(exc: BaseException) -> PassingTrouble | None:
    """The retryable error for a catalog database that could not be reached (restarting,
    recovering, a dropped connection), else None."""
    if isinstance(exc, DatabaseOperationalError):
        return PassingTrouble(
            "CATALOG_UNAVAILABLE", "The catalog database could not be reached; retrying."
        )
    return None


def passing_trouble(exc: BaseException) -> PassingTrouble | None:
    """The retryable error for a trouble of the server, not of the document: a full disk, the
    catalog database away. None for anything else."""
    return disk_full(exc) or catalog_unreachable(exc)


@contextlib.contextmanager
def passing_trouble_is_transient() -> Iterator[None]:
    """A full disk or an unreachable catalog is no fault of the document: it is retried,
    never failed for it."""
    try:
        yield
    except Exception as exc:
        transient = passing_trouble(exc)
        if transient is None:
            raise
        raise transient from None


class OcrDeferred(ProcessingError):
    """The file needs text recognition, which the ``ocr`` queue's workers do: the extract worker
    hands it on instead of reading it (a scan must never hold up the text documents behind it).
    Not a failure: the document waits for its OCR pass."""

    def __init__(self, code: str = "OCR_DEFERRED", message: str = "Waiting for OCR.") -> None:
        super().__init__(code, message)
