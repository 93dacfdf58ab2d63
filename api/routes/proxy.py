"""``POST /internal/mcp/execute``: one proxy tool call in the proxy seed's envelope (§5.1).

Request ``{tool_name, arguments, user: {user_id, tenant_id}, trace_id}``; answer
``{status: "ok", result, trace_id}`` or ``{status: "error", error: {code, message}, trace_id}``
with the HTTP status of the error (429 with ``Retry-After`` for ``RATE_LIMIT_EXCEEDED``).
The caller is the API key's; only a key with the ``internal`` scope may name another user or
tenant in ``user`` (any other key naming one is ``ACCESS_DENIED``). The call itself is
:meth:`ldims.proxy.Proxy.call`, as over MCP.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from api.deps import ServicesDep
from api.schemas import error_responses
from ldims.caller import TENANT_PATTERN, acting_for, resolve_caller
from ldims.errors import InvalidInput, LdimsError
from ldims.proxy.core import MAX_TRACE_CHARS
from ldims.proxy.errors import envelope_code

router = APIRouter(tags=["proxy"])
MAX_BODY_BYTES = 64 * 1024


class EnvelopeUser(BaseModel):
    model_config = ConfigDict(extra="forbid")
    user_id: Annotated[str | None, Field(max_length=128)] = None
    tenant_id: Annotated[str | None, Field(pattern=TENANT_PATTERN.pattern)] = None


class Envelope(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool_name: Annotated[str, Field(min_length=1, max_length=64)]
    arguments: dict[str, Any] = Field(default_factory=dict)
    user: EnvelopeUser | None = None
    trace_id: Annotated[str | None, Field(max_length=MAX_TRACE_CHARS)] = None


class EnvelopeError(BaseModel):
    code: str
    message: str
    details: dict[str, Any] | None = None


class EnvelopeErrorOut(BaseModel):
    """An error in the proxy seed's envelope, with the HTTP status of the error."""

    status: str
    error: EnvelopeError
    trace_id: str | None


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$defs`` put in place (an OpenAPI body schema has no ``$defs``)."""
    defs = schema.pop("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return walk(defs[node["$ref"].rsplit("/", 1)[1]])
            return {key: walk(value) for key, value in node.items()}
        return [walk(item) for item in node] if isinstance(node, list) else node

    return walk(schema)  # type: ignore[no-any-return]


ENVELOPE_ERRORS = {
    400: "INVALID_INPUT: the envelope or an argument is wrong.",
    401: "UNAUTHORIZED: no, an unknown, revoked or expired API key.",
    403: "ACCESS_DENIED: the key lacks the scope, or names another user or tenant.",
    404: "RESOURCE_NOT_FOUND or UNKNOWN_TOOL.",
    409: "The document failed (CONTENT_UNAVAILABLE_OR_FAILED) or is still processing.",
    422: "QUERY_UNPROCESSABLE: nothing searchable in the query.",
    429: "RATE_LIMIT_EXCEEDED: ask again after Retry-After seconds.",
    500: "TOOL_ERROR or SERVER_ERROR: nothing internal is shown.",
    503: "STORE_UNAVAILABLE or SERVER_ERROR: the store or catalog is unavailable.",
    504: "SEARCH_TIMEOUT or REQUEST_TIMEOUT.",
}
# The body reaches the route already read, within MAX_BODY_BYTES (api.body_limits, whose 413
# has the envelope's shape through envelope_error); the route parses it itself so that its
# errors keep that shape, and the schema still says what it takes.
_ENVELOPE_SCHEMA = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": _inlined(Envelope.model_json_schema())}},
    }
}


@router.post(
    "/internal/mcp/execute",
    responses=error_responses(
        404, 409, 422, 429, 504, model=EnvelopeErrorOut, descriptions=ENVELOPE_ERRORS
    ),
    openapi_extra=_ENVELOPE_SCHEMA,
)
async def execute(request: Request, services: ServicesDep) -> JSONResponse:
    """Run one proxy tool (see the module's docstring)."""
    trace_id: str | None = None
    try:
        caller = resolve_caller(request.headers, services.settings, services.keys)
        body = await request.body()
        try:
            envelope = Envelope.model_validate_json(body)
        except ValidationError as exc:
            fields = [".".join(map(str, e["loc"])) for e in exc.errors(include_input=False)]
            raise InvalidInput(
                "Invalid envelope: " + ", ".join(fields or ["body"]) + ".", fields=fields
            ) from None
        trace_id = envelope.trace_id
        if envelope.user is not None:
            caller = acting_for(
                caller, envelope.user.tenant_id or caller.tenant, envelope.user.user_id
            )
        result = await run_in_threadpool(
            services.proxy.call, caller, envelope.tool_name, envelope.arguments, trace_id
        )
    except LdimsError as exc:
        return _error(exc, trace_id)
    return JSONResponse({"status": "ok", "result": result, "trace_id": trace_id})


def envelope_error(exc: LdimsError) -> JSONResponse:
    """``exc`` in the envelope, for an answer given before the envelope was read (no trace)."""
    return _error(exc, None)


def _error(exc: LdimsError, trace_id: str | None) -> JSONResponse:
    error: dict[str, Any] = {"code": envelope_code(exc), "message": exc.message}
    if exc.details:
        error["details"] = exc.details
    headers = {}
    retry = exc.details.get("retryAfterSeconds")
    if isinstance(retry, int):
        headers["Retry-After"] = str(retry)
    status = exc.http_status if exc.http_status >= 400 else 409
    return JSONResponse(
        {"status": "error", "error": error, "trace_id": trace_id},
        status_code=status,
        headers=headers,
    )
