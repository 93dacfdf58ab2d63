"""LDIMS errors in MCP's shapes.

A tool that fails returns an ``isError`` result whose structured content (and text, as a JSON
string, as the seed asks) is the seed's body ``{isError, errorCode, errorMessage,
errorDetails}``. A resource read that fails raises a JSON-RPC error whose ``data`` carries the
same code plus the HTTP status REST would answer, so an agent can tell "wait and retry" (202
``PROCESSING``) from "give up" (404, 403, 409). The JSON-RPC codes of the common errors are
here; each toolset declares those of its own (:class:`api.mcp.toolset.Toolset`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.types import CallToolResult, TextContent

from ldims.errors import LdimsError

INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002  # MCP's "resource not found"
# JSON-RPC codes of resource-read failures of the errors every toolset may raise.
COMMON_RPC_CODES: dict[str, int] = {
    "INVALID_INPUT": INVALID_PARAMS,
    "UNAUTHORIZED": -32003,
    "FORBIDDEN": -32003,
    "RESOURCE_NOT_FOUND": RESOURCE_NOT_FOUND,
    "PROCESSING": -32004,
    "CONTENT_UNAVAILABLE_OR_FAILED": -32005,
    "QUERY_UNPROCESSABLE": INVALID_PARAMS,
    "TOO_LARGE": INVALID_PARAMS,
    "SERVER_ERROR": INTERNAL_ERROR,
    "BACKEND_API_ERROR": INTERNAL_ERROR,
    "SEARCH_TIMEOUT": INTERNAL_ERROR,
    "REQUEST_TIMEOUT": INTERNAL_ERROR,
    # Answered by GET /sse before any session exists (429); mapped like the proxy's rate limit.
    "TOO_MANY_SESSIONS": -32006,
    # A caller over its share of concurrent searches (429; retryAfterSeconds in the details).
    "TOO_MANY_REQUESTS": -32006,
}
# How long an agent should wait before reading a document that is still being processed.
RETRY_AFTER_SECONDS = 5


def error_result(error: LdimsError) -> CallToolResult:
    """The ``isError`` tool result for ``error``: structured, and the same as JSON text."""
    body = error.body()
    body.setdefault("errorDetails", {})
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False, default=str))],
        structured_content=body,
        is_error=True,
    )


def resource_error(error: LdimsError, codes: Mapping[str, int] = COMMON_RPC_CODES) -> MCPError:
    """The JSON-RPC error a failed resource read raises (``codes``: errorCode → JSON-RPC)."""
    data: dict[str, Any] = {
        "errorCode": error.code,
        "status": error.http_status,
        "errorMessage": error.message,
        "errorDetails": json.loads(json.dumps(error.details, default=str)),
    }
    if error.code == "PROCESSING":
        data["retryAfterSeconds"] = RETRY_AFTER_SECONDS
    return MCPError(code=codes.get(error.code, INTERNAL_ERROR), message=error.message, data=data)
