"""Fetching a document body from a URL named in a webhook, with an SSRF guard.

The guard (:func:`check_url`) refuses, with ``PermanentError('URL_NOT_ALLOWED', why)``, every
URL that is malformed (bad port, unbalanced brackets, control characters or whitespace,
longer than :data:`MAX_URL_LENGTH`, a host that is no valid name), that carries a user name
or password, whose scheme is not allowed, or — unless private addresses are allowed in
settings — whose host resolves to any address :func:`is_public_address` refuses. Malformed
URLs are refused even when private addresses are allowed. Redirects are followed by hand (at
most 3) and each hop is checked again; the body is streamed into the blob store under a size
cap and a total time limit. (Resolution happens again at connect time; a DNS answer that
changes between the check and the connect is the residual risk, in docs/api.md (webhooks).)

One code for every refusal: ``URL_NOT_ALLOWED`` is the code the docs (docs/api.md), the ingestion
troubleshooting guide and the webhook's ``errorDetails.reason`` already name; the message
says which rule refused the URL. A host *name* that resolves to a non-public address is
refused without saying the address or its kind (that would map internal names to internal
addresses for whoever sends webhooks); the operator's log has them. An address written in the
URL is named, with why it is refused: the sender learns nothing it did not send.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
import time
import unicodedata
from urllib.parse import urljoin, urlsplit

import httpx

from ldims.blobs import BlobStore, StoredBlob
from ldims.errors import PayloadTooLarge, PermanentError, TransientError
from ldims.lifecycle.contents import receive_original
from ldims.settings import Settings

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 3
MAX_URL_LENGTH = 2048  # what browsers and most servers handle; a document URL needs no more

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# A host name as it goes to the resolver: ASCII labels of letters, digits, '-' and '_' (non-ASCII
# names arrive here IDNA-encoded by httpx), each at most 63 characters, an optional final dot.
_HOST_NAME = re.compile(r"[a-z0-9_-]{1,63}(?:\.[a-z0-9_-]{1,63})*\.?")
_MAX_HOST_NAME = 253

# Prefixes refused outright. Written out because Python 3.11's ``is_global`` calls several of
# them public (on 3.11.7: ::7f00:1, fec0::1, 64:ff9b:1::1, ff0e::1, 224.1.1.1 all are); the
# ``is_global`` check still runs after this table, so a newer Python only adds refusals.
NOT_PUBLIC_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(prefix), what)
    for prefix, what in (
        ("0.0.0.0/8", "'this network' (RFC 791)"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        ("100.64.0.0/10", "carrier-grade NAT shared space (RFC 6598)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata services live here)"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments (RFC 6890)"),
        ("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated, RFC 7526)"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("198.18.0.0/15", "benchmarking (RFC 2544)"),
        ("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)"),
        ("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved (RFC 1112), with the broadcast address"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible IPv6 (deprecated, RFC 4291)"),
        ("::ffff:0:0:0/96", "IPv4-translated IPv6 (SIIT, RFC 2765)"),
        ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
        ("100::/64", "discard-only (RFC 6666)"),
        # Teredo embeds a relay's IPv4 and the client's, the latter obfuscated: refused whole.
        ("2001::/32", "Teredo (RFC 4380)"),
        ("2001::/23", "IETF protocol assignments (RFC 2928)"),
        ("2001:db8::/32", "documentation (RFC 3849)"),
        ("3fff::/20", "documentation (RFC 9637)"),
        ("5f00::/16", "SRv6 segment identifiers (RFC 9602)"),
        ("fc00::/7", "unique-local (RFC 4193)"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated, RFC 3879)"),
        ("ff00::/8", "multicast"),
    )
)
_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # RFC 4291: the socket talks IPv4
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052 well-known prefix: the last 32 bits
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")  # RFC 3056: bits 16-47


def is_public_address(address: IPAddress) -> bool:
    """True when ``address`` is one a webhook may make a worker connect to."""
    return non_public_reason(address) is None


def non_public_reason(address: IPAddress) -> str | None:
    """Why ``address`` is not public (a phrase for the error message), or None if it is.

    An IPv6 address that reaches an IPv4 one (mapped, NAT64, 6to4) is judged by that IPv4
    address: a NAT64 gateway or 6to4 relay would carry the connection to it.
    """
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        form, ipv4 = embedded
        reason = non_public_reason(ipv4)
        return None if reason is None else f"{form} form of {ipv4}, which is {reason}"
    for network, what in NOT_PUBLIC_NETWORKS:
        if address in network:  # False when the versions differ
            return what
    if not address.is_global:
        return "not globally reachable"
    return None


def _embedded_ipv4(address: IPAddress) -> tuple[str, ipaddress.IPv4Address] | None:
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address in _IPV4_MAPPED:
        return "IPv4-mapped IPv6", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64:
        return "NAT64 (RFC 6052)", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:
        return "6to4", ipaddress.IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
    return None


def check_url(url: str, settings: Settings) -> None:
    """Raise ``PermanentError('URL_NOT_ALLOWED', why)`` unless ``url`` may be fetched."""
    host = _checked_host(url, settings)
    if settings.fetch_allow_private_addresses:
        return
    # The resolved addresses are judged, not the spelling: getaddrinfo reads 2130706433,
    # 0x7f.1 and 127.1 as 127.0.0.1, as the connect will.
    for address in _resolve(host):
        reason = non_public_reason(address)
        if reason is None:
            continue
        hint = "Set LDIMS_FETCH_ALLOW_PRIVATE_ADDRESSES=true to allow it."
        if _is_address(host):
            raise _refused(
                f"The host {host!r} resolves to {address}, which is not a public address: "
                f"{reason}. {hint}"
            )
        logger.info("URL refused: host %r resolves to %s (%s)", host, address, reason)
        raise _refused(f"The URL's host is not allowed (private or reserved address). {hint}")


def _is_address(host: str) -> bool:
    """Whether ``host`` is an address written out (``::1``, ``127.1``, ``0x7f.1``, ``2130706433``:
    every IPv4 spelling the resolver reads as one), not a name the resolver looks up."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        try:
            socket.inet_aton(host)
        except OSError:
            return False
    return True


def _checked_host(url: str, settings: Settings) -> str:
    """The host the fetch would connect to, once ``url`` passed every syntax rule."""
    if len(url) > MAX_URL_LENGTH:
        raise _refused(f"The URL is {len(url)} characters long; the limit is {MAX_URL_LENGTH}.")
    # urllib silently drops tabs and newlines and strips leading controls and spaces; httpx
    # percent-encodes a space inside a host name: the URL fetched would not be the URL given.
    for position, char in enumerate(url):
        if unicodedata.category(char)[0] in "CZ":  # control, format, unassigned; separators
            raise _refused(
                f"The URL contains {char!r} at position {position}; "
                "control characters and whitespace are not allowed."
            )
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # unbalanced '[' or ']', brackets around a non-IPv6 host
        raise _refused(f"The URL cannot be parsed: {exc}.") from exc
    if parts.scheme.lower() not in {s.lower() for s in settings.fetch_allowed_schemes}:
        raise _refused(f"URL scheme {parts.scheme!r} is not allowed.")
    if "@" in parts.netloc:
        # Credentials would be stored with the document and show in logs and error messages.
        raise _refused("The URL carries a user name or password; credentials are not allowed.")
    _check_port(parts.netloc)
    if not parts.hostname:
        raise _refused("The URL has no host.")
    # Judge the host as httpx, which does the fetch, reads it: a non-ASCII name is resolved in
    # httpx's IDNA 2008 spelling (straße.de is xn--strae-oqa.de), not Python's IDNA 2003 one
    # (strasse.de), and any character httpx would percent-encode fails the name rule below.
    try:
        host = httpx.URL(url).raw_host.decode("ascii")
    except httpx.InvalidURL as exc:  # e.g. 0177.0.0.1, [v1.x], a name IDNA refuses
        raise _refused(f"The URL cannot be parsed: {exc}.") from exc
    if parts.netloc.startswith("["):
        return host  # an IPv6 literal both parsers validated
    if len(host.rstrip(".")) > _MAX_HOST_NAME or not _HOST_NAME.fullmatch(host):
        raise _refused(f"The host {parts.hostname!r} is not a valid host name.")
    return host


def _check_port(netloc: str) -> None:
    """Refuse a port that is not 1-65535 in ASCII digits (urllib's ``.port`` would raise)."""
    if netloc.startswith("["):
        after = netloc.rpartition("]")[2]  # the colons inside an IPv6 literal are not the port's
        if after and not after.startswith(":"):
            raise _refused(f"The URL has {after!r} after its IPv6 address.")
        port = after[1:]
    else:
        port = netloc.partition(":")[2]
    if port and not (port.isascii() and port.isdigit() and 0 < int(port) <= 65535):
        raise _refused(f"The URL's port {port!r} is not a number from 1 to 65535.")


def _resolve(host: str) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise _refused(f"The host {host!r} does not resolve.") from exc
    return [ipaddress.ip_address(info[4][0]) for info in infos]


def _refused(message: str) -> PermanentError:
    return PermanentError("URL_NOT_ALLOWED", message)


def fetch_to_store(url: str, settings: Settings, blobs: BlobStore) -> tuple[StoredBlob, bytes]:
    """Download ``url`` into ``blobs``; return the stored blob and its first bytes."""
    deadline = time.monotonic() + settings.fetch_timeout_seconds
    timeout = httpx.Timeout(settings.fetch_timeout_seconds)
    hooks = {"response": [_check_location]}
    with httpx.Client(
        timeout=timeout, follow_redirects=False, trust_env=False, event_hooks=hooks
    ) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            check_url(url, settings)
            try:
                with client.stream("GET", url) as response:
                    if response.is_redirect and "location" in response.headers:
                        url = _redirect_target(url, response.headers["location"])
                        continue
                    return _store_body(response, settings, blobs, deadline)
            except httpx.TimeoutException as exc:
                raise TransientError("TIMEOUT", "Fetching the URL timed out.") from exc
            except httpx.TransportError as exc:
                raise TransientError(
                    "FETCH_FAILED", f"Network error: {type(exc).__name__}"
                ) from exc
    raise PermanentError("FETCH_FAILED", f"More than {MAX_REDIRECTS} redirects.")


def _redirect_target(url: str, location: str) -> str:
    """The next hop; a Location that urllib or httpx cannot parse is refused like a bad URL."""
    try:
        target = urljoin(url, location)  # "http://a]b/" raises here
        httpx.URL(location)  # "http://[::1/" raises here
    except (ValueError, httpx.InvalidURL) as exc:
        raise _refused(f"The redirect to {location!r} cannot be parsed: {exc}") from exc
    return target


def _check_location(response: httpx.Response) -> None:
    """Response hook: refuse an unparsable Location before httpx reads it.

    Even with redirects off, httpx parses a redirect's Location right after its response
    hooks and reports one it cannot parse as ``RemoteProtocolError``, which would pass for a
    network error and be retried.
    """
    if response.has_redirect_location:
        _redirect_target(str(response.request.url), response.headers["location"])


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
    writer = receive_original(blobs, settings.fetch_max_bytes)
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
