"""The proxy toolset's view of a document: its record and its extracted content, read with
one retry and a circuit breaker (seed §9.3), parsed once and kept in a small cache.

A :class:`DocumentView` holds what the reading tools read: the pages (running headers and
footers are already out of them: extraction keeps them apart) and the sections with stable
ids. Views are cached by content hash, so a model reading a document page by page parses its
extraction once; the cache is bounded by characters.

Ids are the caller's tenant's own: another tenant's document of an id is never found.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

import pybreaker
from sqlalchemy.exc import DBAPIError

from ldims.caller import Caller
from ldims.catalog import Catalog, Document, DocumentStatus, document_key, repository
from ldims.errors import ContentUnavailable, NotFound, StillProcessing
from ldims.extracts import ExtractStore
from ldims.proxy.errors import StoreUnavailable, ToolError
from ldims.proxy.sections import SectionView, sections_of
from ldims.text import ExtractionResult

T = TypeVar("T")


@dataclass(frozen=True)
class DocumentView:
    document: Document
    pages: tuple[str, ...]  # page n is pages[n - 1]
    sections: tuple[SectionView, ...]
    language: str | None
    tags: tuple[str, ...]
    product_version: str | None
    document_version: str | None

    @property
    def size(self) -> int:
        return sum(map(len, self.pages)) + sum(len(section.text) for section in self.sections)


def circuit_breaker(threshold: int = 5, cooldown: float = 30.0) -> pybreaker.CircuitBreaker:
    """Open after ``threshold`` failures in a row: calls fail at once for ``cooldown`` seconds,
    then one trial call decides (half-open). pybreaker's; the call that trips it raises its own
    error (the store's), the calls after it ``CircuitBreakerError``."""
    return pybreaker.CircuitBreaker(
        fail_max=threshold,
        reset_timeout=cooldown,
        throw_new_error_on_trip=False,
        # Only the store being away counts (damaged content, say, is the document's error).
        exclude=[lambda exc: not isinstance(exc, StoreUnavailable)],
    )


class ProxyStore:
    """Documents of a caller, as views, from the catalog and the extraction store."""

    def __init__(
        self,
        catalog: Catalog,
        extracts: ExtractStore,
        cache_chars: int = 64_000_000,
        breaker: pybreaker.CircuitBreaker | None = None,
        mask_kinds: frozenset[str] | None = None,
    ) -> None:
        self.catalog = catalog
        self.mask_kinds = mask_kinds  # the proxy's: section ids are made of masked headings
        self.extracts = extracts
        # One breaker per store: the catalog answering must not close the document store's.
        self.breaker = breaker or circuit_breaker()
        self.catalog_breaker = circuit_breaker()
        self._cache: OrderedDict[tuple[str, str], DocumentView] = OrderedDict()
        self._cached_chars = 0
        self._cache_chars = cache_chars
        self._lock = threading.Lock()

    def record(self, caller: Caller, doc_id: str) -> Document:
        """The caller's document record; ``NotFound`` for an unknown id or another tenant's."""
        key = document_key(caller.tenant, doc_id)
        document = self._guarded(lambda: self._record(key), self.catalog_breaker)
        if document is None or document.tenant != caller.tenant:
            raise NotFound(f"Document {doc_id} not found.", doc_id=doc_id)
        return document

    def completed(self, caller: Caller, doc_id: str) -> Document:
        """The caller's document record when it is completed; the seed's errors otherwise."""
        document = self.record(caller, doc_id)
        if document.status in (DocumentStatus.QUEUED.value, DocumentStatus.PROCESSING.value):
            raise StillProcessing(doc_id=doc_id, documentStatus=document.status)
        if document.status == DocumentStatus.FAILED.value:
            raise ContentUnavailable(
                doc_id=doc_id, failureCode=document.error_code, reason=document.error_message
            )
        return document

    def view(self, caller: Caller, doc_id: str) -> DocumentView:
        """The caller's completed document, parsed; the seed's errors for other states."""
        document = self.completed(caller, doc_id)
        key = (document.sha256 or "", document.format or "")
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                # The record may have changed (title, tags) though the content did not.
                return replace(cached, document=document)
        loaded = self._guarded(lambda: self._load(document), self.breaker)
        view = _view_of(document, loaded, self.mask_kinds)
        self._keep(key, view)
        return view

    # --- store access: one retry, then the breaker counts a failure ---------------------------
    def _guarded(self, read: Callable[[], T], breaker: pybreaker.CircuitBreaker) -> T:
        component = "catalog" if breaker is self.catalog_breaker else "document store"
        try:
            return breaker.call(_retried_once, read, component)  # type: ignore[no-any-return]
        except pybreaker.CircuitBreakerError:
            raise StoreUnavailable(component=component, circuit="open") from None

    def _record(self, key: str) -> Document | None:
        try:
            with self.catalog.session() as session:
                return repository.get_document(session, key)
        except DBAPIError as exc:  # every backend's driver errors, wrapped by SQLAlchemy
            raise _CatalogDown from exc

    def _load(self, document: Document) -> ExtractionResult:
        sha, fmt = document.sha256 or "", document.format or ""
        if not sha or not self.extracts.exists(sha, fmt):
            raise ContentUnavailable(
                "The extracted content is missing; re-upload the document.",
                doc_id=document.public_id,
                failureCode="CONTENT_MISSING",
            )
        try:
            return self.extracts.load(sha, fmt)
        except (ValueError, KeyError, TypeError) as exc:  # JSON damaged: never garbage
            raise ToolError(doc_id=document.public_id, reason="damaged extraction") from exc

    def _keep(self, key: tuple[str, str], view: DocumentView) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = view
            self._cached_chars += view.size
            while self._cached_chars > self._cache_chars and len(self._cache) > 1:
                _, dropped = self._cache.popitem(last=False)
                self._cached_chars -= dropped.size


class _CatalogDown(Exception):
    pass


def _view_of(
    document: Document, result: ExtractionResult, mask_kinds: frozenset[str] | None
) -> DocumentView:
    pages = tuple(page.text for page in sorted(result.pages, key=lambda page: page.number))
    if not pages:
        pages = (result.text,)
    for number, text in enumerate(pages, start=1):
        if not isinstance(text, str):
            raise ToolError(doc_id=document.public_id, reason=f"damaged page {number}")
    metadata = result.metadata if isinstance(result.metadata, dict) else {}
    return DocumentView(
        document=document,
        pages=pages,
        sections=tuple(sections_of(result.sections, len(pages), mask_kinds)),
        language=document.language or _text(metadata.get("language")),
        tags=_tags(metadata),
        product_version=_text(metadata.get("product_version") or metadata.get("productVersion")),
        document_version=_text(metadata.get("version") or metadata.get("document_version")),
    )


def _text(value: object) -> str | None:
    return str(value)[:200] if value not in (None, "") else None


def _tags(metadata: dict[str, object]) -> tuple[str, ...]:
    raw = metadata.get("keywords") or metadata.get("tags") or ()
    if isinstance(raw, str):
        raw = [part for chunk in raw.split(";") for part in chunk.split(",")]
    if not isinstance(raw, list | tuple):
        return ()
    return tuple(dict.fromkeys(str(tag).strip()[:64] for tag in raw if str(tag).strip()))[:32]


__all__ = ["DocumentView", "ProxyStore", "circuit_breaker"]


def _retried_once(read: Callable[[], T], component: str) -> T:
    """``read()``, tried again once when the store fails; then ``StoreUnavailable`` (which the
    breaker counts)."""
    try:
        return read()
    except (OSError, ConnectionError, TimeoutError, _CatalogDown):
        pass
    try:
        return read()
    except (OSError, ConnectionError, TimeoutError, _CatalogDown) as exc:
        raise StoreUnavailable(component=component) from exc
