"""LDIMS over the Model Context Protocol: one server, toolsets switched on by settings.

:func:`build_mcp_server` makes the server with the toolsets of ``LDIMS_TOOLSETS``; the API
mounts its Streamable HTTP app at ``/mcp`` (:func:`mcp_http_app`) and ``ldims mcp`` serves it
over stdio.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.applications import Starlette

from api.deps import Services
from api.mcp import documents, guide, sql
from api.mcp.server import LdimsMCP, transport_security

TOOLSETS: dict[str, Callable[[LdimsMCP], None]] = {
    "documents": documents.register,
    "sql": sql.register,
    "guide": guide.register,
}


def build_mcp_server(services: Services, stdio_tenant: str | None = None) -> LdimsMCP:
    server = LdimsMCP(services, stdio_tenant=stdio_tenant)
    for name in services.settings.toolsets:
        TOOLSETS[name](server)
    return server


def mcp_http_app(server: LdimsMCP) -> Starlette:
    """Streamable HTTP at ``/mcp``: stateless, JSON responses, Host/Origin checks on."""
    return server.streamable_http_app(
        streamable_http_path="/mcp",
        stateless_http=True,
        json_response=True,
        transport_security=transport_security(server.services),
    )


__all__ = ["TOOLSETS", "LdimsMCP", "build_mcp_server", "mcp_http_app"]
