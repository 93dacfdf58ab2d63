"""The toolset registry: one line per toolset, in the order they are listed to clients.

Adding a toolset = a module here that builds a :class:`~api.mcp.toolset.Toolset`, plus one
line below. Nothing else in the server names a toolset.
"""

from api.mcp.toolset import Toolset
from api.mcp.toolsets import documents, guide, proxy, qmd, sql

REGISTRY: tuple[Toolset, ...] = (
    documents.TOOLSET,
    qmd.TOOLSET,
    sql.TOOLSET,
    guide.TOOLSET,
    proxy.TOOLSET,
)

__all__ = ["REGISTRY"]
