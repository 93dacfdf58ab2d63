"""LDIMS over the Model Context Protocol: one server, toolsets plugged in from the registry.

:func:`build_mcp_server` makes the server with the toolsets that are on (``LDIMS_TOOLSETS``,
or every registered one whose requirements are met); the API mounts its Streamable HTTP
route at ``/mcp`` (:func:`mcp_http_routes`) and ``ldims mcp`` serves it over stdio.
"""

from __future__ import annotations

from api.mcp.build import build_mcp_server, enabled_toolsets, mcp_http_routes
from api.mcp.server import LdimsMCP
from api.mcp.toolset import Toolset
from api.mcp.toolsets import REGISTRY

__all__ = [
    "REGISTRY",
    "LdimsMCP",
    "Toolset",
    "build_mcp_server",
    "enabled_toolsets",
    "mcp_http_routes",
]
