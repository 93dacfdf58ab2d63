"""Building the MCP server from the registry, its Streamable HTTP route, and who calls it."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from starlette.datastructures import Headers
from starlette.routing import BaseRoute, Route

from api.mcp.server import LdimsMCP, transport_security
from api.mcp.toolset import Toolset
from api.mcp.toolsets import REGISTRY
from api.mcp.transport_guard import guard_route
from ldims.caller import Caller, resolve_caller
from ldims.services import Services
from ldims.settings import Settings


def enabled_toolsets(settings: Settings, registry: Sequence[Toolset] = REGISTRY) -> list[Toolset]:
    """The toolsets to serve, in registry order.

    ``LDIMS_TOOLSETS`` unset: every registered toolset whose requirements are met. Set: those
    named; an unknown name, or a named toolset whose requirements are not met, is a
    ``ValueError`` at start-up.
    """
    known = {toolset.name: toolset for toolset in registry}
    if settings.toolsets is None:
        return [toolset for toolset in registry if toolset.requires(settings) is None]
    unknown = sorted(set(settings.toolsets) - set(known))
    if unknown:
        raise ValueError(f"unknown toolsets {unknown}; registered: {list(known)}")
    chosen = [toolset for toolset in registry if toolset.name in settings.toolsets]
    for toolset in chosen:
        missing = toolset.requires(settings)
        if missing is not None:
            raise ValueError(f'the "{toolset.name}" toolset needs {missing}')
    return chosen


def build_mcp_server(
    services: Services, stdio: Caller | None = None, registry: Sequence[Toolset] = REGISTRY
) -> LdimsMCP:
    """The server with the enabled toolsets of ``registry``; ``stdio``: the session's caller."""
    return LdimsMCP(services, enabled_toolsets(services.settings, registry), stdio=stdio)


def mcp_http_routes(server: LdimsMCP) -> list[BaseRoute]:
    """Streamable HTTP at ``/mcp``: stateless, JSON responses, POST only, Host/Origin checked
    strictly (:mod:`api.mcp.transport_guard`) and again by the SDK."""
    settings = server.services.settings
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(settings),
    )
    hosts, origins = settings.mcp_allowed_hosts, settings.mcp_allowed_origins
    authenticate = http_authenticator(server)
    return [
        guard_route(route, hosts, origins, authenticate) if isinstance(route, Route) else route
        for route in app.routes
    ]


def http_authenticator(server: LdimsMCP) -> Callable[[Headers], Caller]:
    """The caller of an HTTP request to the MCP server (Unauthorized: no valid key)."""
    services = server.services

    def authenticate(headers: Headers) -> Caller:
        return resolve_caller(headers, services.settings, services.keys)

    return authenticate
