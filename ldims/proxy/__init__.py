"""The ``proxy`` toolset's core (proxy seed ``002_8c9e3925c2dc2367.txt``): a limited,
sandboxed reader of a tenant's documents — sections, pages, metadata and in-document search —
with limits in Redis, PII/secret masking, token trimming and an audit trail.

Public surface: :class:`Proxy` (``call``), :func:`build_proxy`, the tool names, the errors.
"""

from __future__ import annotations

from collections.abc import Callable

from indexer import DocumentIndex
from ldims.catalog import Catalog
from ldims.extracts import ExtractStore
from ldims.proxy.audit import AuditEntry, AuditTrail
from ldims.proxy.core import DOC_TOOLS, TOOLS, Admission, Proxy, ProxyConfig, QueryVector
from ldims.proxy.errors import (
    AccessDenied,
    RateLimitExceeded,
    StoreUnavailable,
    ToolError,
    UnknownTool,
)
from ldims.proxy.limits import Limiter, LimitSettings
from ldims.proxy.store import ProxyStore, circuit_breaker
from ldims.settings import Settings

__all__ = [
    "circuit_breaker",
    "DOC_TOOLS",
    "TOOLS",
    "AccessDenied",
    "AuditEntry",
    "AuditTrail",
    "LimitSettings",
    "Limiter",
    "Proxy",
    "ProxyConfig",
    "ProxyStore",
    "RateLimitExceeded",
    "StoreUnavailable",
    "ToolError",
    "UnknownTool",
    "build_proxy",
]


def limit_settings(settings: Settings) -> LimitSettings:
    return LimitSettings(
        calls_per_minute=settings.mcp_proxy_calls_per_minute,
        calls_per_document=settings.mcp_rate_limit_calls,
        token_output=settings.mcp_rate_limit_token_output,
        output_bytes=settings.mcp_proxy_max_output_bytes,
        generations_per_hour=settings.mcp_proxy_generations_per_hour,
        document_bytes_per_hour=settings.mcp_proxy_doc_bytes_per_hour,
    )


def build_proxy(
    settings: Settings,
    catalog: Catalog,
    index: Callable[[], DocumentIndex],
    admission: Admission,
    query_vector: QueryVector = lambda text: None,
) -> Proxy:
    """The proxy of ``settings``: limits in their Redis, audit in ``catalog``, in-document
    search on ``index()`` (with the vectors of ``query_vector`` when semantic search is on),
    each search in a slot of ``admission`` (the documents' search's: one set of shares)."""
    kinds = settings.mcp_proxy_mask
    mask_kinds = None if kinds is None else frozenset(kinds)
    return Proxy(
        ProxyStore(catalog, ExtractStore(settings.extracts_dir), mask_kinds=mask_kinds),
        Limiter.from_url(
            settings.effective_redis_url, limit_settings(settings), settings.redis_key_prefix
        ),
        AuditTrail(catalog),
        ProxyConfig(
            chunk_limit_tokens=settings.doc_chunk_limit_tokens,
            max_pages=settings.mcp_proxy_max_pages,
            mask_kinds=mask_kinds,
            keyword_weight=settings.hybrid_keyword_weight,
            dense_weight=settings.hybrid_dense_weight,
            search_seconds=settings.search_timeout_seconds,
        ),
        index,
        admission,
        query_vector,
    )
