"""Who is calling: the caller identity every core function takes.

A :class:`Caller` is resolved once per request by the adapter that received it — a REST
dependency, the MCP server from the HTTP headers, or the tenant a stdio session was started
for — and handed to the cores. Nothing below an adapter compares tenant strings of its own
or reads headers: limits, audit and (later) scope checks hook on the caller.

With API keys configured (``LDIMS_API_KEYS``: sha256 of a key → tenant), the key decides the
tenant and the caller carries the key's id (the first 12 hex digits of its hash, never the
key); without keys, the ``X-LDIMS-Tenant`` header or the default tenant does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ldims.errors import InvalidInput, Unauthorized
from ldims.settings import Settings

TENANT_HEADER = "X-LDIMS-Tenant"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Until keys carry scopes of their own, a caller may do everything its tenant may.
ALL_SCOPES = frozenset({"documents:read", "documents:write", "sql", "guide"})


@dataclass(frozen=True)
class Caller:
    """The tenant a request acts for, the key it came with (if any) and what it may do."""

    tenant: str
    key_id: str | None = None
    scopes: frozenset[str] = field(default=ALL_SCOPES)
    transport: str = "http"  # http | stdio | webhook | internal: for audit lines

    def __post_init__(self) -> None:
        if not TENANT_PATTERN.match(self.tenant):
            raise InvalidInput("Bad tenant name.", field=TENANT_HEADER)


def resolve_caller(headers: Mapping[str, str], settings: Settings) -> Caller:
    """The caller of an HTTP request: from its API key when keys are configured, else from
    the tenant header (or the default tenant).

    ``headers`` must look names up case-insensitively (Starlette's ``Headers`` does), or hold
    them in lower case. A missing or unknown key is :class:`~ldims.errors.Unauthorized`.
    """
    keys = settings.api_keys
    if keys:
        scheme, _, token = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("Send 'Authorization: Bearer <API key>'.")
        digest = hashlib.sha256(token.encode()).hexdigest()
        for known, tenant in keys.items():
            if hmac.compare_digest(known, digest):
                return Caller(tenant=tenant, key_id=digest[:12])
        raise Unauthorized("Unknown API key.")
    return Caller(tenant=headers.get(TENANT_HEADER.lower(), settings.default_tenant))


def stdio_caller(tenant: str) -> Caller:
    """The caller of a stdio session: the tenant it was started for (trusted: same user)."""
    return Caller(tenant=tenant, transport="stdio")
