"""Logging set-up for every LDIMS process (to stderr: stdout belongs to stdio MCP).

Every line names the request or task it belongs to (``-`` outside one): the API binds a
request id per request with :func:`bound_request_id`, the workers bind the Celery task id
around each task (``workers.celery_app``). The id lives in a :class:`~contextvars.ContextVar`,
so concurrent threads and asyncio tasks each see their own, and a filter on our handler puts
it on every record, third-party ones included.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TextIO

FORMAT = "%(asctime)s %(levelname)s %(processName)s [%(request_id)s] %(name)s: %(message)s"

#: The id of the request or task being served in this context; None outside one.
request_id: ContextVar[str | None] = ContextVar("ldims_request_id", default=None)

# Loggers that write a line per request (or per failed call) at INFO. One session logged
# 13,404 "Terminating session: None" lines out of 14,878: in stateless mode the SDK ends a
# "session" after every request. Their warnings and errors still come through.
QUIET_BELOW_WARNING = (
    "mcp.server.streamable_http",  # "Terminating session: None" after every MCP request
    "mcp.server.streamable_http_manager",  # per-session lines, "Rejected request … session ID"
    "mcp.server.mcpserver.server",  # "Tool 'x' failed: …": the caller already got isError
    "uvicorn.access",  # one line per HTTP request
    "httpx",  # "HTTP Request: …" per call: Tika once a document, webhook fetches, ldims ingest
    "httpx2",  # the same from the MCP SDK's HTTP client
    "alembic",  # announces every plugin at INFO on each start-up
)


class RequestIdFilter(logging.Filter):
    """Puts the current request or task id on every record as ``request_id`` (``-`` if none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):  # a record passes every handler of the chain
            record.request_id = request_id.get() or "-"
        return True


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Our handler on the root logger (its own class, so a second set-up finds it)."""


def new_request_id() -> str:
    """A short random id: unique enough to follow one request through a day's log."""
    return secrets.token_hex(4)


@contextlib.contextmanager
def bound_request_id(value: str | None = None) -> Iterator[str]:
    """Make ``value`` (a new short id when None) the current request id inside the block."""
    value = value or new_request_id()
    token = request_id.set(value)
    try:
        yield value
    finally:
        request_id.reset(token)


def setup_logging(level: str | int) -> None:
    """Log to stderr with the request id on every line; quiet the per-request loggers.

    Safe to call again (the CLI group, a command and Celery's worker each do): the handler
    is installed once, the levels are set anew.
    """
    root = logging.getLogger()
    root.setLevel("WARNING" if level == "WARN" else level)
    if not any(isinstance(handler, _StderrHandler) for handler in root.handlers):
        handler = _StderrHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(RequestIdFilter())
        root.addHandler(handler)
    # Never below the root's level: a logger's own level decides for the records it creates.
    floor = max(logging.WARNING, root.level)
    for name in QUIET_BELOW_WARNING:
        logging.getLogger(name).setLevel(floor)
    # pdfminer (under pdfplumber) quotes document text in its warnings; document text never
    # goes into our logs.
    logging.getLogger("pdfminer").setLevel(logging.ERROR)
