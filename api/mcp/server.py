"""The LDIMS MCP server: one ``MCPServer`` for Streamable HTTP (``/mcp``) and stdio.

What the SDK leaves to us, done once here for every toolset:

* errors: a tool raising an :class:`~ldims.errors.LdimsError` (or failing input validation)
  returns the seed's ``isError`` body; a crash returns ``BACKEND_API_ERROR`` and is logged
  (without arguments: they may be document text);
* time: every tool call and resource read ends within ``MCP_REQUEST_TIMEOUT_SECONDS``
  (blocking work runs in threads that a timeout abandons);
* the caller: resolved once per request (:func:`ldims.caller.resolve_caller` on the HTTP
  headers, or the stdio session's caller) and handed to tools as :meth:`LdimsMCP.caller`
  and to resource readers as an argument;
* scopes: a toolset's scope (:attr:`Toolset.scope`, checked by :meth:`Caller.allows`) covers
  everything it registers — a tool call, a resource read, a prompt get without it is
  ``FORBIDDEN``; resource, template and prompt lists leave out what the caller may not use;
* toolsets: what each declares (:class:`~api.mcp.toolset.Toolset`) — URI schemes, JSON-RPC
  codes of its errors, the error of a timed-out tool, its part of the instructions — is
  read here, so the server itself names no toolset;
* instructions: written per caller at ``initialize`` / ``server/discover`` from the toolsets
  that are on.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
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

from api.mcp.errors import COMMON_RPC_CODES, error_result, resource_error
from api.mcp.toolset import Toolset
from api.mcp.transport_guard import CALLER_STATE
from ldims import __version__
from ldims.caller import Caller, resolve_caller
from ldims.errors import (
    BackendError,
    Forbidden,
    InvalidInput,
    LdimsError,
    RequestTimeout,
    Unauthorized,
)
from ldims.services import Services
from ldims.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")
ResourceReader = Callable[[Caller, dict[str, str]], Iterable[ReadResourceContents]]
# The list requests filtered by scope: method -> (the result's list field, an entry's key).
_LISTS = {
    "tools/list": ("tools", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
    "prompts/list": ("prompts", "name"),
}
# The caller of the request being served (set once per tool call or resource read).
_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar(
    "ldims_mcp_caller", default=None
)


class LdimsMCP(MCPServer):
    """MCPServer with LDIMS's error shapes, time limit, callers, toolsets and resource readers."""

    def __init__(
        self, services: Services, toolsets: Sequence[Toolset], stdio: Caller | None = None
    ) -> None:
        super().__init__(
            "ldims",
            title="LDIMS document server",
            version=__version__,
            middleware=[self._instructions_middleware, self._scope_middleware],
        )
        self.services = services
        self.toolsets = tuple(toolsets)
        # The caller of requests without HTTP headers: the stdio session's, or in-process
        # clients' (tests, benchmarks), who act for the default tenant.
        self.stdio = stdio or Caller(services.settings.default_tenant, transport="internal")
        # URI schemes whose resources are all served by readers (never by SDK templates).
        self._own_schemes = frozenset(s for t in self.toolsets for s in t.uri_schemes)
        self.rpc_codes = dict(COMMON_RPC_CODES)
        self._timeout_errors: dict[str, type[LdimsError]] = {}
        for toolset in self.toolsets:
            self.rpc_codes.update(toolset.rpc_codes)
            self._timeout_errors.update(toolset.timeout_errors)
        # (compiled URI pattern, reader, scope) of the resource templates, tried in order.
        self._readers: list[tuple[re.Pattern[str], ResourceReader, str]] = []
        # What toolsets hold open (database pools …), released by close().
        self._closers: list[Callable[[], None]] = []
        # tool name -> the scope a caller needs (its toolset's), filled as tools are added;
        # the same for resource URIs and templates, URI schemes and prompt names.
        self.tool_scopes: dict[str, str] = {}
        self.resource_scopes: dict[str, str] = {}
        self.scheme_scopes: dict[str, str] = {}
        self.prompt_scopes: dict[str, str] = {}
        self._registering: Toolset | None = None
        for toolset in self.toolsets:
            self._registering = toolset
            toolset.register(self)
        self._registering = None

    def add_tool(self, fn: Any, name: str | None = None, **options: Any) -> None:
        super().add_tool(fn, name=name, **options)
        toolset = self._registering
        tool = name or fn.__name__
        if toolset is not None:
            self.tool_scopes[tool] = toolset.tool_scopes.get(tool, toolset.scope)

    def resource(self, uri: str, *args: Any, **options: Any) -> Any:
        """The SDK's decorator; the resource (or template) is its toolset's, in its scope."""
        if self._registering is not None:
            self.resource_scopes[uri] = self._registering.scope
            self.scheme_scopes[uri.split("://", 1)[0]] = self._registering.scope
        return super().resource(uri, *args, **options)

    def add_prompt(self, prompt: Any) -> None:
        super().add_prompt(prompt)
        if self._registering is not None:
            self.prompt_scopes[prompt.name] = self._registering.scope

    def _scope_of(self, kind: str, name: str) -> str | None:
        """The scope a caller needs for a resource URI / template or a prompt (None: not
        one a toolset registered)."""
        if kind == "prompts/list":
            return self.prompt_scopes.get(name)
        if kind == "tools/list":
            return self.tool_scopes.get(name)
        return self.resource_scopes.get(name) or self.scheme_scopes.get(name.split("://", 1)[0])

    def on_close(self, closer: Callable[[], None]) -> None:
        """Call ``closer`` when the server shuts down."""
        self._closers.append(closer)

    def close(self) -> None:
        """Release what the toolsets hold (the app's lifespan and ``ldims mcp`` call this)."""
        while self._closers:
            self._closers.pop()()

    # --- the caller --------------------------------------------------------------------------
    def caller(self, ctx: Context[Any, Any] | None = None) -> Caller:
        """The caller of the request being served; a missing or unknown API key is
        ``FORBIDDEN``."""
        known = _caller.get()
        if known is not None:
            return known
        return self._caller_of(ctx)

    def _caller_of(self, ctx: Context[Any, Any] | None) -> Caller:
        """The caller the HTTP guard authenticated for this request, else from its headers
        (or the stdio session's)."""
        found = _request_state(ctx).get(CALLER_STATE)
        return found if isinstance(found, Caller) else self._resolve(_headers(ctx))

    def _resolve(self, headers: Mapping[str, str] | None) -> Caller:
        if headers is None:
            return self.stdio
        try:
            return resolve_caller(headers, self.services.settings, self.services.keys)
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
            caller = self._caller_of(context)
            caller.require(self.tool_scopes.get(name, "read"))
            token = _caller.set(caller)
        except LdimsError as exc:
            return error_result(exc)
        try:
            with anyio.fail_after(timeout):
                return await super().call_tool(name, arguments, context)
        except TimeoutError:
            error = self._timeout_errors.get(name, RequestTimeout)
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
        finally:
            _caller.reset(token)

    # --- resources -------------------------------------------------------------------------
    def add_resource_reader(self, pattern: str, reader: ResourceReader) -> None:
        """Serve URIs matching ``pattern`` (a regex with named groups) with ``reader``.

        The template itself is registered with :meth:`resource` too, so that clients list it;
        reads go through here, which can attach per-read ``_meta`` and raise the seed's
        errors.
        """
        scope = self._registering.scope if self._registering is not None else "read"
        self._readers.append((re.compile(pattern), reader, scope))

    async def read_resource(
        self, uri: Any, context: Context[Any, Any] | None = None
    ) -> Iterable[ReadResourceContents] | Any:
        text = str(uri)
        for pattern, reader, scope in self._readers:
            match = pattern.fullmatch(text)
            if match is None:
                continue
            timeout = self.services.settings.mcp_request_timeout_seconds
            try:
                with anyio.fail_after(timeout):
                    caller = self._caller_of(context)
                    caller.require(scope)
                    return await self.blocking(reader, caller, match.groupdict())
            except TimeoutError:
                raise self._resource_error(RequestTimeout(timeoutSeconds=timeout)) from None
            except LdimsError as exc:
                raise self._resource_error(exc) from None
            except Exception as exc:
                log.error("MCP resource read failed", exc_info=exc)
                raise self._resource_error(BackendError()) from None
        scope = self._scope_of("resources/read", text)
        try:
            if scope is not None:
                self._caller_of(context).require(scope)
            if text.split("://", 1)[0] in self._own_schemes:
                # One of our templates, but not a URI its reader accepts (a bad id or name).
                raise InvalidInput(f"No resource has the URI {text[:200]!r}.", field="uri")
        except LdimsError as exc:
            raise self._resource_error(exc) from None
        return await super().read_resource(uri, context)

    def _resource_error(self, error: LdimsError) -> MCPError:
        return resource_error(error, self.rpc_codes)

    # --- instructions ----------------------------------------------------------------------
    def instructions_for(self, caller: Caller) -> str:
        """The server instructions for ``caller``: the paragraph of each enabled toolset it
        may use."""
        names = ", ".join(toolset.name for toolset in self.toolsets) or "none"
        parts = [f"LDIMS document server. Toolsets on: {names}."]
        for toolset in self.toolsets:
            # A toolset the key may not use is not described to it (a proxy-only key is
            # not pointed at tools it cannot call, nor told the tenant's document counts).
            if toolset.instructions is not None and caller.allows(toolset.scope):
                part = toolset.instructions(self.services, caller)
                if part:
                    parts.append(part)
        return "\n\n".join(parts)

    async def _instructions_middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: Callable[..., Any]
    ) -> Any:
        result = await call_next(ctx)
        if ctx.method in ("initialize", "server/discover") and isinstance(result, dict):
            headers = getattr(ctx.request, "headers", None)
            try:
                caller = self._resolve(headers)
                result["instructions"] = await self.blocking(self.instructions_for, caller)
            except LdimsError:
                pass  # an unknown caller learns nothing about the holdings
            except Exception as exc:  # the catalog is down: connect anyway, without counts
                log.warning("instructions unavailable: %s", type(exc).__name__)
        return result


    # --- scopes of resources and prompts -----------------------------------------------------
    async def _scope_middleware(
        self, ctx: ServerRequestContext[Any, Any], call_next: Callable[..., Any]
    ) -> Any:
        """Lists without what the caller's scopes do not reach; a prompt of a toolset whose
        scope the caller lacks is FORBIDDEN (as a tool call or a resource read is)."""
        if ctx.method not in _LISTS and ctx.method != "prompts/get":
            return await call_next(ctx)
        try:
            caller = self._middleware_caller(ctx)
        except LdimsError as exc:
            raise self._resource_error(exc) from None
        if ctx.method == "prompts/get":
            name = ctx.params.get("name") if isinstance(ctx.params, Mapping) else None
            scope = self.prompt_scopes.get(name) if isinstance(name, str) else None
            if scope is not None and not caller.allows(scope):
                raise self._resource_error(
                    Forbidden(f"The API key lacks the '{scope}' scope.", scope=scope)
                )
            return await call_next(ctx)
        result = await call_next(ctx)
        field, key = _LISTS[ctx.method]
        if hasattr(result, "model_dump"):  # the SDK's result model: filtered as its JSON
            result = result.model_dump(by_alias=True, exclude_none=True, mode="json")
        if isinstance(result, dict) and isinstance(result.get(field), list):
            result[field] = [
                entry
                for entry in result[field]
                if (scope := self._scope_of(ctx.method, str(entry.get(key, "")))) is None
                or caller.allows(scope)
            ]
        return result

    def _middleware_caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """The caller of a request seen by middleware: the HTTP guard's, else from its headers
        (none: the stdio session's)."""
        request = ctx.request
        scope = getattr(request, "scope", None)
        state = scope.get("state", {}) if isinstance(scope, dict) else {}
        found = state.get(CALLER_STATE) if isinstance(state, Mapping) else None
        if isinstance(found, Caller):
            return found
        return self._resolve(getattr(request, "headers", None))


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The SDK's own Host/Origin checks of /mcp, always on, from the settings' allow-lists
    (behind the stricter :mod:`api.mcp.transport_guard`)."""
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(settings.mcp_allowed_hosts),
        allowed_origins=list(settings.mcp_allowed_origins),
    )


def _request_state(ctx: Context[Any, Any] | None) -> Mapping[str, Any]:
    """The HTTP request's state (empty: stdio, in-process)."""
    try:
        request = ctx.request_context.request if ctx is not None else None
    except ValueError:  # no request context: an in-process call
        return {}
    scope = getattr(request, "scope", None)
    return scope.get("state", {}) if isinstance(scope, dict) else {}


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
