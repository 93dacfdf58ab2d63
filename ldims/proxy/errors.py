"""The proxy toolset's errors beyond the common ones, with the seed's codes (§4.1, §8).

::

    LdimsError
    ├── AccessDenied        403  ACCESS_DENIED        the key lacks the scope a tool needs
    ├── RateLimitExceeded   429  RATE_LIMIT_EXCEEDED  a limit of §8.2 (details: which, retry)
    ├── UnknownTool         404  UNKNOWN_TOOL         the envelope named no proxy tool
    ├── ToolError           500  TOOL_ERROR           stored content damaged (seed §9.3)
    └── StoreUnavailable    503  STORE_UNAVAILABLE    the document store failed twice, or its
                                                      circuit breaker is open

Another tenant's document is not an ``AccessDenied``: it answers ``RESOURCE_NOT_FOUND``
exactly as an unknown id does, so no answer tells a caller that an id exists elsewhere.
"""

from __future__ import annotations

from ldims.errors import Forbidden, LdimsError


class AccessDenied(LdimsError):
    code = "ACCESS_DENIED"
    http_status = 403
    default_message = "The API key does not allow this."


class RateLimitExceeded(LdimsError):
    code = "RATE_LIMIT_EXCEEDED"
    http_status = 429
    default_message = "A limit of the proxy toolset was reached."


class UnknownTool(LdimsError):
    code = "UNKNOWN_TOOL"
    http_status = 404
    default_message = "No such tool."


class ToolError(LdimsError):
    code = "TOOL_ERROR"
    http_status = 500
    default_message = "The tool failed: the stored content of the document is damaged."


class StoreUnavailable(LdimsError):
    code = "STORE_UNAVAILABLE"
    http_status = 503
    default_message = "The document store is unavailable. Try again later."


def envelope_code(exc: LdimsError) -> str:
    """The code a proxy caller sees: the seed's ``ACCESS_DENIED`` for any refusal of rights
    (a missing scope, a forged user), else the error's own."""
    return AccessDenied.code if isinstance(exc, Forbidden | AccessDenied) else exc.code
