"""The LDIMS adapters over HTTP: REST routes (``api.routes``) and the MCP server
(``api.mcp``, mounted at ``/mcp``; its toolsets in ``api.mcp.toolsets``).

They hold no logic of their own: each resolves the caller and calls the cores
(:mod:`ldims.documents`, :mod:`ldims.sql`, :mod:`ldims.guide`). The composition root
(:mod:`runtime`) builds the services and calls :func:`build_app`.
"""

from api.app import build_app

__all__ = ["build_app"]
