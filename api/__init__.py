"""The LDIMS API: REST (and, later, MCP) over the catalog, the pipeline and the index."""

from api.app import create_app

__all__ = ["create_app"]
