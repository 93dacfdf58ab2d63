"""What a toolset declares to plug into the MCP server: one :class:`Toolset` value.

A toolset is a module of ``api.mcp.toolsets`` that builds one of these, plus one line in
the registry (``api/mcp/toolsets/__init__.py``). Nothing else in the server names a toolset:
the settings it needs, its tools/resources/prompts, its URI schemes, its errors and their
JSON-RPC codes, the error a timed-out tool answers and its part of the server instructions
all come from here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ldims.caller import Caller
from ldims.errors import LdimsError
from ldims.services import Services
from ldims.settings import Settings

if TYPE_CHECKING:
    from api.mcp.server import LdimsMCP


def _needs_nothing(_settings: Settings) -> str | None:
    return None


@dataclass(frozen=True)
class Toolset:
    """One MCP toolset, as the registry knows it."""

    name: str
    # Adds the tools, resources and prompts to the server (called once per server).
    register: Callable[[LdimsMCP], None]
    # What is missing for it to run, in words (None: nothing): it is then off by default,
    # and asking for it by name is a start-up error.
    requires: Callable[[Settings], str | None] = _needs_nothing
    # URI schemes whose resources it serves (reads of unknown URIs there are INVALID_INPUT).
    uri_schemes: frozenset[str] = frozenset()
    # Every LdimsError class its tools and resources raise beyond the common ones.
    errors: tuple[type[LdimsError], ...] = ()
    # errorCode -> JSON-RPC error code of a failed resource read.
    rpc_codes: Mapping[str, int] = field(default_factory=dict)
    # tool name -> the error a call over the time limit answers (default REQUEST_TIMEOUT).
    timeout_errors: Mapping[str, type[LdimsError]] = field(default_factory=dict)
    # The scope a key needs (ldims.caller.SCOPES; Caller.allows) to call its tools, read and
    # list its resources and templates, list and get its prompts; and exceptions by tool.
    scope: str = "read"
    tool_scopes: Mapping[str, str] = field(default_factory=dict)
    # Its paragraph of the server instructions for this caller (None: nothing to say).
    instructions: Callable[[Services, Caller], str | None] | None = None
