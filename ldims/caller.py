"""Who is calling: the caller identity every core function takes.

A :class:`Caller` is resolved once per request by the adapter that received it — a REST
dependency, the MCP server from the HTTP headers, or the tenant a stdio session was started
for — and handed to the cores. Nothing below an adapter compares tenant strings of its own
or reads headers: limits, audit and (later) scope checks hook on the caller.

With API keys configured (``ldims keys``, or the ``LDIMS_API_KEYS`` map; see
:mod:`ldims.keys`), the key decides the tenant, user and scopes, and the caller carries the
key's id (never the key); without keys, the ``X-LDIMS-Tenant`` header or the default tenant
does, with every scope.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from ldims.errors import Forbidden, InvalidInput, Unauthorized
from ldims.settings import Settings

TENANT_HEADER = "X-LDIMS-Tenant"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# What a key may do: read (search, read whole documents, and the proxy toolset), proxy (the
# proxy toolset only: a bounded, masked reader, nothing that returns a whole document),
# ingest (upload, delete), admin (collections, reindex), internal (name a user and tenant in
# the proxy envelope), sql and guide (those toolsets).
SCOPES = ("read", "proxy", "ingest", "admin", "internal", "sql", "guide")
# A caller without a key of its own (no keys configured, stdio) may do what its tenant may.
ALL_SCOPES = frozenset(SCOPES)
# Scopes a held scope grants besides itself: whoever may read whole documents may read them
# through the proxy too (keys made before the proxy scope existed keep their proxy tools).
IMPLIED: dict[str, frozenset[str]] = {"read": frozenset({"proxy"})}


@dataclass(frozen=True)
class Caller:
    """The tenant a request acts for, the key it came with (if any) and what it may do."""

    tenant: str
    key_id: str | None = None
    scopes: frozenset[str] = field(default=ALL_SCOPES)
    transport: str = "http"  # http | stdio | webhook | internal: for audit lines
    user: str | None = None  # the end user a trusted service acts for (proxy envelope)

    def __post_init__(self) -> None:
        if not TENANT_PATTERN.match(self.tenant):
            raise InvalidInput("Bad tenant name.", field=TENANT_HEADER)

    def allows(self, scope: str) -> bool:
        """Whether this caller holds ``scope``, itself or through a scope that implies it
        (:data:`IMPLIED`): the one rule every scope check applies (REST, MCP, the proxy)."""
        return scope in self.scopes or any(scope in IMPLIED.get(held, ()) for held in self.scopes)

    def require(self, scope: str) -> None:
        """``Forbidden`` (403 ``FORBIDDEN``) unless this caller :meth:`allows` ``scope``."""
        if not self.allows(scope):
            raise Forbidden(f"The API key lacks the '{scope}' scope.", scope=scope)


class KeyLookup(Protocol):
    """What resolving a caller needs of the keys (``ldims.keys.KeyRing``)."""

    def required(self) -> bool: ...

    def caller(self, token: str) -> Caller | None: ...


def resolve_caller(headers: Mapping[str, str], settings: Settings, keys: KeyLookup) -> Caller:
    """The caller of an HTTP request: from its API key when keys are configured, else from
    the tenant header (or the default tenant).

    ``headers`` must look names up case-insensitively (Starlette's ``Headers`` does), or hold
    them in lower case. A missing, unknown, revoked or expired key is
    :class:`~ldims.errors.Unauthorized`; with keys on, a tenant header is ignored (the key
    decides).
    """
    if keys.required():
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Send 'Authorization: Bearer <API key>'.")
        caller = keys.caller(token.strip())
        if caller is None:
            raise Unauthorized("Unknown, revoked or expired API key.")
        return caller
    return Caller(tenant=headers.get(TENANT_HEADER.lower(), settings.default_tenant))


def stdio_caller(tenant: str) -> Caller:
    """The caller of a stdio session: the tenant it was started for (trusted: same user)."""
    return Caller(tenant=tenant, transport="stdio")


def acting_for(caller: Caller, tenant: str, user: str | None) -> Caller:
    """``caller`` acting for ``user`` of ``tenant`` (the proxy envelope's ``user``): allowed
    to a key with the ``internal`` scope; any other caller may only name itself."""
    if tenant == caller.tenant and (user is None or user == caller.user):
        return caller if user is None else replace(caller, user=user)
    if "internal" not in caller.scopes:
        raise Forbidden(
            "Only a key with the 'internal' scope may act for another user or tenant.",
            scope="internal",
        )
    return replace(caller, tenant=tenant, user=user, transport="internal")
