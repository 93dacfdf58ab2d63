"""The LDIMS MCP server: one ``MCPServer`` for Streamable HTTP (``/mcp``) and stdio.

What the SDK leaves to us, done once here for every toolset:

* errors: a tool raising an :class:`~ldims.errors.LdimsError` (or failing input validation)
  returns the seed's ``isError`` body; a crash returns ``BACKEND_API_ERROR`` and is logged
  (without arguments: they may be document text);
* time: every tool call and resource read ends within ``MCP_REQUEST_TIMEOUT_SECONDS``
  (blocking work runs in threads that a timeout abandons);
* the caller: its tenant comes from the HTTP headers (``X-LDIMS-Tenant`` or an API key), or
  is the stdio tenant when there are no headers;
* instructions: written per caller from the live catalog at ``initialize`` /
  ``server/discover``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import anyio
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_PARAMS
from pydantic import ValidationError

from api.deps import Services, tenant_from_headers
from api.mcp.errors import error_result, resource_error
from api.mcp.instructions import instructions
from ldims import __version__
from ldims.errors import (
    BackendError,
    Forbidden,
    InvalidInput,
    LdimsError,
    RequestTimeout,
    SearchTimeout,
    Unauthorized,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
# URI schemes whose resources are all served by readers (never by the SDK's templates).
_OWN_SCHEMES = frozenset({"ldims", "kwdb"})
ResourceReader = Callable[["LdimsMCP", str, dict[str, str]], Iterable[ReadResourceContents]]


class LdimsMCP(MCPServer):
    """MCPServer with LDIMS's error shapes, time limit, tenants and resource readers."""

    def __init__(self, services: Services, stdio_tenant: str | None = None) -> None:
        super().__init__(
            "ldims",
            title="LDIMS document server",
            version=__version__,
            instructions=instructions(services.catalog, stdio_tenant or "default")
            if stdio_tenant
            else None,
            middleware=[self._instructions_middleware],
        )
        self.services = services
        self.stdio_tenant = stdio_tenant or services.settings.default_tenant
        # (compiled URI pattern, reader) of the resource templates, tried in order.
        self._readers: list[tuple[re.Pattern[str], ResourceReader]] = []
        # What toolsets hold open (database pools …), released by close().
        self._closers: list[Callable[[], None]] = []

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` when the server shuts down."""
        self._closers.append(closer)

    def close(self) -> None:
        """Release what the toolsets hold (the app's lifespan and ``ldims mcp`` call this)."""
        while self._closers:
            self._closers.pop()()

    # --- the caller --------------------------------------------------------------------------
    def tenant(self, ctx: Context[Any, Any] | None) -> str:
        """The caller's tenant; a missing or unknown API key is ``FORBIDDEN``."""
        headers = _headers(ctx)
        if headers is None:
            return self.stdio_tenant
        try:
            return tenant_from_headers(headers, self.services.settings)
        except Unauthorized as exc:
            raise Forbidden(
                "You do not have permission to perform this search or access the requested "
                "search scope.",
                reason=exc.message,
            ) from exc

    async def blocking(self, function: Callable[..., T], *args: Any) -> T:
        """Run blocking work in a thread that the request's time limit can abandon (an
        abandoned thread gives its capacity back, so stuck work never starves later calls)."""
        return await anyio.to_thread.run_sync(
            functools.partial(function, *args), abandon_on_cancel=True
        )

    # --- tools -----------------------------------------------------------------------------
    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        timeout = self.services.settings.mcp_request_timeout_seconds
        try:
            with anyio.fail_after(timeout):
                return await super().call_tool(name, arguments, context)
        except TimeoutError:
            error = SearchTimeout if name == "searchDocuments" else RequestTimeout
            return error_result(error(timeoutSeconds=timeout))
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, LdimsError):
                return error_result(cause)
            log.error("MCP tool %s failed", name, exc_info=cause)
            return error_result(BackendError())
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return error_result(_invalid_input(exc.__cause__))
            # An unknown tool is a protocol error in the MCP spec, not a tool result.
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None

    # --- resources -------------------------------------------------------------------------
    def add_resource_reader(self, pattern: str, reader: ResourceReader) -> None:
        """Serve URIs matching ``pattern`` (a regex with named groups) with ``reader``.

        The template itself is registered with :meth:`resource` too, so that clients list it;
        reads go through here, which can attach per-read ``_meta`` and raise the seed's
        errors.
        """
        self._readers.append((re.compile(pattern), reader))

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | Any:
        text = str(uri)
        for pattern, reader in self._readers:
            match = pattern.fullmatch(text)
            if match is None:
                continue
            timeout = self.services.settings.mcp_request_timeout_seconds
            try:
                with anyio.fail_after(timeout):
                    tenant = self.tenant(context)
                    return await self.blocking(reader, self, tenant, match.groupdict())
            except TimeoutError:
                raise resource_error(RequestTimeout(timeoutSeconds=timeout)) from None
            except LdimsError as exc:
                raise resource_error(exc) from None
            except Exception as exc:
                log.error("MCP resource read failed", exc_info=exc)
                raise resource_error(BackendError()) from None
        if text.split("://", 1)[0] in _OWN_SCHEMES:
            # One of our templates, but not a URI its reader accepts (a bad id or name).
            raise resource_error(
                InvalidInput(f"No resource has the URI {text[:200]!r}.", field="uri")
            )
        return await super().read_resource(uri, context)

    # --- instructions ----------------------------------------------------------------------
    async def _instructions_middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: Callable[..., Any]
    ) -> Any:
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            headers = getattr(ctx.request, "headers", None)
            try:
                tenant = (
                    self.stdio_tenant
                    if headers is None
                    else tenant_from_headers(headers, self.services.settings)
                )
                result["instructions"] = await self.blocking(
                    instructions, self.services.catalog, tenant
                )
            except LdimsError:
                pass  # an unknown caller learns nothing about the holdings
            except Exception as exc:  # the catalog is down: connect anyway, without counts
                log.warning("instructions unavailable: %s", type(exc).__name__)
        return result


def transport_security(services: Services) -> TransportSecuritySettings:
    """Host/Origin checks of /mcp, always on, from the allow-lists in the settings."""
    settings = services.settings
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(settings.mcp_allowed_hosts),
        allowed_origins=list(settings.mcp_allowed_origins),
    )


def _headers(ctx: Context[Any, Any] | None) -> Mapping[str, str] | None:
    if ctx is None:
        return None
    try:
        return ctx.headers
    except ValueError:  # no request context: an in-process call
        return None


def _invalid_input(error: ValidationError) -> InvalidInput:
    """INVALID_INPUT naming the fields (never echoing their values: they may be text)."""
    problems = [
        {"field": ".".join(str(part) for part in item["loc"]), "issue": item["msg"]}
        for item in error.errors(include_url=False, include_input=False)
    ]
    first = problems[0] if problems else {"field": "arguments", "issue": "invalid"}
    return InvalidInput(
        f"Invalid input parameters provided: {first['field']}: {first['issue']}.",
        field=first["field"],
        issue=first["issue"],
        errors=problems,
    )
