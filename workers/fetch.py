"""Fetching a document body from a URL named in a webhook, with an SSRF guard.

Only allowed schemes; every address the host resolves to must be public unless private
addresses are allowed in settings; redirects are followed by hand (at most 3) and each hop
is checked again; the body is streamed into the blob store under a size cap and a total
time limit. (Resolution happens again at connect time; a DNS answer that changes between
the check and the connect is the residual risk, documented in the README.)
"""

from __future__ import annotations

import ipaddress
import socket
import time
from urllib.parse import urljoin, urlsplit

import httpx

from ldims.blobs import BlobStore, StoredBlob
from ldims.errors import PayloadTooLarge, PermanentError, TransientError
from ldims.settings import Settings

MAX_REDIRECTS = 3


def check_url(url: str, settings: Settings) -> None:
    """Raise ``PermanentError('URL_NOT_ALLOWED')`` unless ``url`` may be fetched."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in {s.lower() for s in settings.fetch_allowed_schemes}:
        raise PermanentError("URL_NOT_ALLOWED", f"URL scheme {parts.scheme!r} is not allowed.")
    if not parts.hostname:
        raise PermanentError("URL_NOT_ALLOWED", "The URL has no host.")
    if settings.fetch_allow_private_addresses:
        return
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise PermanentError(
            "URL_NOT_ALLOWED", f"The host {parts.hostname!r} does not resolve."
        ) from exc
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global:
            raise PermanentError(
                "URL_NOT_ALLOWED",
                f"The host {parts.hostname!r} resolves to a non-public address ({address}); "
                "set LDIMS_FETCH_ALLOW_PRIVATE_ADDRESSES=true to allow it.",
            )


def fetch_to_store(url: str, settings: Settings, blobs: BlobStore) -> tuple[StoredBlob, bytes]:
    """Download ``url`` into ``blobs``; return the stored blob and its first bytes."""
    deadline = time.monotonic() + settings.fetch_timeout_seconds
    timeout = httpx.Timeout(settings.fetch_timeout_seconds)
    with httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            check_url(url, settings)
            try:
                with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = urljoin(url, response.headers["location"])
                        continue
                    return _store_body(response, settings, blobs, deadline)
            except httpx.TimeoutException as exc:
                raise TransientError("TIMEOUT", "Fetching the URL timed out.") from exc
            except httpx.TransportError as exc:
                raise TransientError(
                    "FETCH_FAILED", f"Network error: {type(exc).__name__}"
                ) from exc
    raise PermanentError("FETCH_FAILED", f"More than {MAX_REDIRECTS} redirects.")


def _store_body(
    response: httpx.Response, settings: Settings, blobs: BlobStore, deadline: float
) -> tuple[StoredBlob, bytes]:
    if response.status_code >= 500 or response.status_code == 429:
        raise TransientError("FETCH_FAILED", f"The server answered {response.status_code}.")
    if response.status_code >= 400:
        raise PermanentError("FETCH_FAILED", f"The server answered {response.status_code}.")
    declared = int(response.headers.get("content-length") or 0)
    if declared > settings.fetch_max_bytes:
        raise PermanentError(
            "TOO_LARGE", f"The body has {declared} bytes; the limit is {settings.fetch_max_bytes}."
        )
    writer = blobs.writer(settings.fetch_max_bytes)
    try:
        for chunk in response.iter_bytes(65536):
            if time.monotonic() > deadline:
                raise TransientError("TIMEOUT", "Fetching the URL took longer than allowed.")
            writer.write(chunk)
    except PayloadTooLarge as exc:
        raise PermanentError("TOO_LARGE", exc.message) from exc
    except BaseException:
        writer.abort()
        raise
    return writer.commit(), writer.head
