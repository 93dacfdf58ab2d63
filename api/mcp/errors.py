"""LDIMS errors in MCP's shapes.

A tool that fails returns an ``isError`` result whose structured content (and text, as a JSON
string, as the seed asks) is the seed's body ``{isError, errorCode, errorMessage,
errorDetails}``. A resource read that fails raises a JSON-RPC error whose ``data`` carries the
same code plus the HTTP status REST would answer, so an agent can tell "wait and retry" (202
``PROCESSING``) from "give up" (404, 403, 409).
"""

from __future__ import annotations

import json
from typing import Any

from mcp import MCPError
from mcp.types import CallToolResult, TextContent

from ldims.errors import LdimsError

# JSON-RPC codes of resource-read failures (-32002 is MCP's "resource not found").
RESOURCE_ERROR_CODES = {
    "RESOURCE_NOT_FOUND": -32002,
    "FORBIDDEN": -32003,
    "PROCESSING": -32004,
    "CONTENT_UNAVAILABLE_OR_FAILED": -32005,
    "INVALID_INPUT": -32602,
    # The sql toolset's schema resources (KWDB seed codes).
    "KWDB-4004": -32002,
    "KWDB-4002": -32003,
    "KWDB-4001": -32602,
}
INTERNAL_ERROR = -32603
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


def resource_error(error: LdimsError) -> MCPError:
    """The JSON-RPC error a failed resource read raises."""
    data: dict[str, Any] = {
        "errorCode": error.code,
        "status": error.http_status,
        "errorMessage": error.message,
        "errorDetails": json.loads(json.dumps(error.details, default=str)),
    }
    if error.code == "PROCESSING":
        data["retryAfterSeconds"] = RETRY_AFTER_SECONDS
    code = RESOURCE_ERROR_CODES.get(error.code, INTERNAL_ERROR)
    return MCPError(code=code, message=error.message, data=data)
