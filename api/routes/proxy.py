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


@router.post("/internal/mcp/execute")
async def execute(request: Request, services: ServicesDep) -> JSONResponse:
    """Run one proxy tool (see the module's docstring)."""
    trace_id: str | None = None
    try:
        caller = resolve_caller(request.headers, services.settings, services.keys)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise InvalidInput(f"The envelope is larger than {MAX_BODY_BYTES} bytes.")
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
