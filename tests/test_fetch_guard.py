"""The SSRF guard of webhook URL fetching: every malformed or non-public URL is refused.

Only literal addresses and numeric host spellings are used (the machine has no network);
the resolver still runs on them, so what is judged is the address getaddrinfo returns.
"""

from __future__ import annotations

import http.server
import ipaddress
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ldims.blobs import BlobStore
from ldims.errors import PermanentError
from ldims.settings import Settings
from workers.fetch import (
    MAX_URL_LENGTH,
    NOT_PUBLIC_NETWORKS,
    check_url,
    fetch_to_store,
    is_public_address,
)

HINT = "LDIMS_FETCH_ALLOW_PRIVATE_ADDRESSES=true"

# (url, a phrase the message must contain): refused whatever the private-address setting.
MALFORMED = [
    ("http://example.com:99999/", "port '99999' is not a number from 1 to 65535"),
    ("http://example.com:65536/", "port '65536' is not a number"),
    ("http://example.com:-1/", "port '-1' is not a number"),
    ("http://example.com:0/", "port '0' is not a number"),
    ("http://example.com:+80/", "port '+80' is not a number"),
    ("http://example.com:8o/", "port '8o' is not a number"),
    ("http://example.com:\u0668\u0660/", "port '\u0668\u0660' is not a number"),  # Arabic 80
    ("http://example.com:1:2/", "port '1:2' is not a number"),
    ("http://[::1]:99999/", "port '99999' is not a number"),
    ("http://[::1]x/", "'x' after its IPv6 address"),
    ("http://[::1/", "cannot be parsed: Invalid IPv6 URL"),
    ("http://::1]/", "cannot be parsed: Invalid IPv6 URL"),
    ("http://[example.com]/", "cannot be parsed"),
    ("http://[127.0.0.1]/", "cannot be parsed: An IPv4 address cannot be in brackets"),
    ("http://[v1.x]/", "cannot be parsed: Invalid IPv6 address"),
    ("http://0177.0.0.1/", "cannot be parsed: Invalid IPv4 address"),
    ("http://\u24dbocalhost/", "cannot be parsed: Invalid IDNA hostname"),  # circled l
    ("http://a..b/", "'a..b' is not a valid host name"),
    ("http://exa%2emple.com/", "is not a valid host name"),
    ("http://exa!mple.com/", "is not a valid host name"),
    ("http://" + "a" * 64 + ".com/", "is not a valid host name"),
    ("http://" + "a." * 127 + "aa/", "is not a valid host name"),  # 255 characters
    ("http://user:pass@93.184.216.34/", "user name or password"),
    ("http://user@93.184.216.34/", "user name or password"),
    ("http://@93.184.216.34/", "user name or password"),
    ("http://evil.example\\@127.0.0.1/", "user name or password"),
    ("http://93.184.216.34/\n", "'\\n' at position 21"),
    ("http://93.184.216.34/a\tb", "'\\t' at position 22"),
    ("http://93.184.216.34/a b", "' ' at position 22"),
    (" http://93.184.216.34/", "' ' at position 0"),
    ("http://93.184.216.34\x00/", "'\\x00' at position 20"),
    ("http://93.184.216.34/\x7f", "'\\x7f' at position 21"),
    ("http://93.184.216.34/\x85", "'\\x85' at position 21"),  # C1 next line
    ("http://93.184.216.34/\u200b", "'\\u200b' at position 21"),  # zero-width space
    ("http://93.184.216.34/\u202e", "'\\u202e' at position 21"),  # right-to-left override
    ("http://93.184.216.34/\u00a0", "'\\xa0' at position 21"),  # no-break space
    ("http://93.184.216.34\u3000/", "'\\u3000' at position 20"),  # ideographic space
    ("http://93.184.216.34/" + "a" * (MAX_URL_LENGTH - 20), "2049 characters long"),
    ("ftp://93.184.216.34/file.txt", "scheme 'ftp' is not allowed"),
    ("file:///etc/passwd", "scheme 'file' is not allowed"),
    ("93.184.216.34/x", "scheme '' is not allowed"),
    ("http:///x", "has no host"),
    ("http://:8080/x", "has no host"),
]

# (url, phrases of the message): refused only while private addresses are not allowed.
NOT_PUBLIC = [
    ("http://127.0.0.1/", ["127.0.0.1", "loopback"]),
    ("http://127.255.255.254:8000/", ["127.255.255.254", "loopback"]),
    ("http://10.1.2.3/", ["10.1.2.3", "private (RFC 1918)"]),
    ("http://172.16.0.1/", ["172.16.0.1", "private"]),
    ("http://172.31.255.255/", ["172.31.255.255", "private"]),
    ("http://192.168.1.1/", ["192.168.1.1", "private"]),
    ("http://169.254.169.254/latest/meta-data/", ["169.254.169.254", "link-local"]),
    ("http://100.64.0.1/", ["100.64.0.1", "carrier-grade NAT"]),
    ("http://100.127.255.254/", ["100.127.255.254", "carrier-grade NAT"]),
    ("http://0.0.0.0/", ["0.0.0.0", "'this network'"]),
    ("http://0.1.2.3/", ["0.1.2.3", "'this network'"]),
    ("http://192.0.0.8/", ["192.0.0.8", "IETF protocol assignments"]),
    ("http://192.0.2.1/", ["192.0.2.1", "documentation"]),
    ("http://192.88.99.1/", ["192.88.99.1", "6to4 relay anycast"]),
    ("http://198.18.0.1/", ["198.18.0.1", "benchmarking"]),
    ("http://198.19.255.254/", ["198.19.255.254", "benchmarking"]),
    ("http://198.51.100.1/", ["198.51.100.1", "documentation"]),
    ("http://203.0.113.1/", ["203.0.113.1", "documentation"]),
    ("http://224.0.0.1/", ["224.0.0.1", "multicast"]),
    ("http://239.255.255.250/", ["239.255.255.250", "multicast"]),
    ("http://240.0.0.1/", ["240.0.0.1", "reserved"]),
    ("http://255.255.255.255/", ["255.255.255.255", "broadcast"]),
    # Numeric spellings: the resolver reads them as the address, and so does the connect.
    ("http://2130706433/", ["'2130706433' resolves to 127.0.0.1", "loopback"]),
    ("http://0x7f.1/", ["'0x7f.1' resolves to 127.0.0.1", "loopback"]),
    ("http://0x7f000001/", ["resolves to 127.0.0.1", "loopback"]),
    ("http://127.1/", ["'127.1' resolves to 127.0.0.1", "loopback"]),
    ("http://0/", ["'0' resolves to 0.0.0.0", "'this network'"]),
    ("http://2852039166/", ["resolves to 169.254.169.254", "link-local"]),
    ("http://0xa9fea9fe/", ["resolves to 169.254.169.254", "link-local"]),
    ("http://3232235777/", ["resolves to 192.168.1.1", "private"]),
    # IPv6.
    ("http://[::1]/", ["::1", "loopback"]),
    ("http://[::]/", ["::", "unspecified"]),
    ("http://[::127.0.0.1]/", ["::7f00:1", "IPv4-compatible"]),
    ("http://[::93.184.216.34]/", ["IPv4-compatible"]),  # refused even when public: deprecated
    ("http://[::ffff:127.0.0.1]/", ["IPv4-mapped IPv6 form of 127.0.0.1, which is loopback"]),
    ("http://[::ffff:10.0.0.1]/", ["IPv4-mapped IPv6 form of 10.0.0.1, which is private"]),
    ("http://[::ffff:a9fe:a9fe]/", ["form of 169.254.169.254, which is link-local"]),
    ("http://[::ffff:0:127.0.0.1]/", ["::ffff:0:7f00:1", "IPv4-translated"]),
    ("http://[64:ff9b::7f00:1]/", ["NAT64 (RFC 6052) form of 127.0.0.1, which is loopback"]),
    ("http://[64:ff9b::192.168.0.1]/", ["NAT64 (RFC 6052) form of 192.168.0.1"]),
    ("http://[64:ff9b::a9fe:a9fe]/", ["NAT64 (RFC 6052) form of 169.254.169.254"]),
    ("http://[64:ff9b:1::5db8:d822]/", ["local-use NAT64 (RFC 8215)"]),
    ("http://[64:ff9b:1:ffff::1]/", ["local-use NAT64"]),
    ("http://[2002:7f00:1::]/", ["6to4 form of 127.0.0.1, which is loopback"]),
    ("http://[2002:c0a8:101::1]/", ["6to4 form of 192.168.1.1, which is private"]),
    ("http://[2002:a00:1::1]/", ["6to4 form of 10.0.0.1"]),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", ["Teredo (RFC 4380)"]),
    ("http://[2001::1]/", ["Teredo"]),
    ("http://[2001:2::1]/", ["IETF protocol assignments"]),
    ("http://[2001:db8::1]/", ["2001:db8::1", "documentation"]),
    ("http://[3fff::1]/", ["documentation (RFC 9637)"]),
    ("http://[5f00::1]/", ["SRv6"]),
    ("http://[100::1]/", ["discard-only"]),
    ("http://[fec0::1]/", ["fec0::1", "site-local"]),
    ("http://[feff::1]/", ["site-local"]),
    ("http://[fc00::1]/", ["unique-local"]),
    ("http://[fd12:3456:789a::1]/", ["unique-local"]),
    ("http://[fe80::1]/", ["fe80::1", "link-local"]),
    ("http://[febf::1]/", ["link-local"]),
    ("http://[ff02::1]/", ["multicast"]),
    ("http://[ff0e::1]/", ["multicast"]),
    ("http://[::ffff:224.0.0.1]/", ["form of 224.0.0.1, which is multicast"]),
]

# Public, and accepted. Several sit just outside a refused range, so a range written too
# wide in the table fails here.
PUBLIC = [
    "http://93.184.216.34/",
    "https://93.184.216.34:8443/path?q=1#frag",
    "http://1.1.1.1/",
    "http://8.8.8.8:80/",
    "http://1572395042/",  # 93.184.216.34 spelled as one number: judged as what it resolves to
    "http://9.255.255.255/",
    "http://11.0.0.0/",
    "http://100.63.255.255/",
    "http://100.128.0.0/",
    "http://126.255.255.255/",
    "http://128.0.0.0/",
    "http://169.253.255.255/",
    "http://169.255.0.0/",
    "http://172.15.255.255/",
    "http://172.32.0.0/",
    "http://192.0.1.255/",
    "http://192.0.3.0/",
    "http://192.167.255.255/",
    "http://192.169.0.0/",
    "http://198.17.255.255/",
    "http://198.20.0.0/",
    "http://223.255.255.254/",
    "http://[2606:4700:4700::1111]/",
    "http://[2001:4860:4860::8888]:8080/",
    "http://[2a00:1450:4001:82b::200e]/",
    "http://[::ffff:93.184.216.34]/",  # the socket talks IPv4 to a public address
    "http://[64:ff9b::5db8:d822]/",  # NAT64 of 93.184.216.34
    "http://[2002:5db8:d822::1]/",  # 6to4 of 93.184.216.34
    "http://93.184.216.34/" + "a" * (MAX_URL_LENGTH - 21),  # exactly at the length limit
]


def settings(tmp_path: Path, allow_private: bool) -> Settings:
    return Settings(data_dir=tmp_path, fetch_allow_private_addresses=allow_private)


def refusal(url: str, config: Settings) -> PermanentError:
    with pytest.raises(PermanentError) as raised:
        check_url(url, config)
    assert raised.value.code == "URL_NOT_ALLOWED"
    return raised.value


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize(("url", "phrase"), MALFORMED)
def test_a_malformed_url_is_refused_with_a_reason(
    tmp_path: Path, allow_private: bool, url: str, phrase: str
) -> None:
    message = refusal(url, settings(tmp_path, allow_private)).message
    assert phrase in message
    assert HINT not in message  # allowing private addresses would not help


@pytest.mark.parametrize(("url", "phrases"), NOT_PUBLIC)
def test_a_non_public_address_is_refused_by_default(
    tmp_path: Path, url: str, phrases: list[str]
) -> None:
    message = refusal(url, settings(tmp_path, allow_private=False)).message
    assert "which is not a public address" in message
    for phrase in phrases:
        assert phrase in message
    assert HINT in message


@pytest.mark.parametrize(("url", "phrases"), NOT_PUBLIC)
def test_allowing_private_addresses_lets_them_through(
    tmp_path: Path, url: str, phrases: list[str]
) -> None:
    assert check_url(url, settings(tmp_path, allow_private=True)) is None


@pytest.mark.parametrize("url", PUBLIC)
def test_a_public_address_is_accepted(tmp_path: Path, url: str) -> None:
    assert check_url(url, settings(tmp_path, allow_private=False)) is None


def test_a_host_that_does_not_resolve_is_refused_unless_private_is_allowed(
    tmp_path: Path,
) -> None:
    url = "http://no-such-host.invalid/doc"  # .invalid never resolves (RFC 6761)
    message = refusal(url, settings(tmp_path, allow_private=False)).message
    assert message == "The host 'no-such-host.invalid' does not resolve."
    # Allowed private addresses skip resolution: the worker's own fetch reports the failure.
    assert check_url(url, settings(tmp_path, allow_private=True)) is None


def test_a_non_ascii_name_is_resolved_as_httpx_spells_it(tmp_path: Path) -> None:
    # IDNA 2008 (httpx, which connects) keeps the sharp s; Python's IDNA 2003 codec would
    # resolve strasse.invalid instead, a different name than the one fetched.
    message = refusal("http://stra\u00dfe.invalid/", settings(tmp_path, False)).message
    assert message == "The host 'xn--strae-oqa.invalid' does not resolve."


def test_other_schemes_follow_the_setting(tmp_path: Path) -> None:
    config = Settings(data_dir=tmp_path, fetch_allowed_schemes=["https"])
    assert check_url("https://93.184.216.34/", config) is None
    assert "scheme 'http' is not allowed" in refusal("http://93.184.216.34/", config).message


def test_hostile_authorities_raise_only_permanent_errors(tmp_path: Path) -> None:
    """No host/port combination escapes as ValueError, UnicodeError or httpx's InvalidURL."""
    hosts = ["93.184.216.34", "[::1]", "[::1", "::1]", "[", "]", "[]", "", "%", "[v1.x]"]
    hosts += ["a:b", "@", "[::1]]", "[[::1]", "\u0130.example", "xn--", "a" * 300, "-.-"]
    ports = ["", ":", ":0", ":65536", ":-1", ":x", ":1:2", ":\u0668", ":+1", ":" + "9" * 40]
    config = settings(tmp_path, allow_private=True)
    outcomes = {"accepted": 0, "refused": 0}
    for host in hosts:
        for port in ports:
            try:
                check_url(f"http://{host}{port}/x", config)
            except PermanentError as exc:
                assert exc.code == "URL_NOT_ALLOWED"
                outcomes["refused"] += 1
            else:
                outcomes["accepted"] += 1
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0, outcomes


def test_every_listed_range_is_refused_at_both_ends() -> None:
    for network, what in NOT_PUBLIC_NETWORKS:
        for address in (network.network_address, network.broadcast_address):
            assert not is_public_address(address), (network, what)


@pytest.mark.parametrize(
    "text",
    ["93.184.216.34", "2606:4700:4700::1111", "::ffff:93.184.216.34", "64:ff9b::5db8:d822"],
)
def test_is_public_address_accepts_public_ones(text: str) -> None:
    assert is_public_address(ipaddress.ip_address(text))


# --- the fetch itself: each redirect hop passes the same guard ------------------------------
class RedirectServer:
    """A local HTTP server: ``/doc`` answers a body, ``/go?<location>`` redirects there."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        paths = self.paths

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                paths.append(self.path)
                if self.path.startswith("/go?"):
                    self.send_response(302)
                    self.send_header("Location", self.path.removeprefix("/go?"))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"Fetched.\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture
def redirect_server() -> Iterator[RedirectServer]:
    server = RedirectServer()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_fetch_follows_a_redirect_to_an_allowed_url(
    tmp_path: Path, redirect_server: RedirectServer
) -> None:
    config = settings(tmp_path, allow_private=True)
    url = f"{redirect_server.base}/go?{redirect_server.base}/doc"
    _blob, head = fetch_to_store(url, config, BlobStore(tmp_path / "blobs"))
    assert head == b"Fetched.\n"
    assert redirect_server.paths == [f"/go?{redirect_server.base}/doc", "/doc"]


@pytest.mark.parametrize(
    ("location", "phrase"),
    [
        ("http://[::1/", "The redirect to 'http://[::1/' cannot be parsed: Invalid IPv6 URL"),
        ("http://a]b/", "The redirect to 'http://a]b/' cannot be parsed: Invalid IPv6 URL"),
        ("http://[v1.x]/", "cannot be parsed: Invalid IPv6 address: '[v1.x]'"),
        ("http://127.0.0.1:99999/doc", "port '99999' is not a number"),
        ("http://user:pw@127.0.0.1/doc", "user name or password"),
        ("ftp://127.0.0.1/doc", "scheme 'ftp' is not allowed"),
    ],
)
def test_fetch_refuses_a_malformed_redirect(
    tmp_path: Path, redirect_server: RedirectServer, location: str, phrase: str
) -> None:
    config = settings(tmp_path, allow_private=True)
    with pytest.raises(PermanentError) as raised:
        fetch_to_store(f"{redirect_server.base}/go?{location}", config, BlobStore(tmp_path))
    assert raised.value.code == "URL_NOT_ALLOWED"
    assert phrase in raised.value.message
    assert len(redirect_server.paths) == 1  # the refused hop was never requested


def test_fetch_of_a_private_address_is_refused_before_any_request(
    tmp_path: Path, redirect_server: RedirectServer
) -> None:
    config = settings(tmp_path, allow_private=False)
    with pytest.raises(PermanentError) as raised:
        fetch_to_store(f"{redirect_server.base}/doc", config, BlobStore(tmp_path))
    assert "resolves to 127.0.0.1" in raised.value.message
    assert redirect_server.paths == []


NAME_REFUSED = (
    "The URL's host is not allowed (private or reserved address). "
    "Set LDIMS_FETCH_ALLOW_PRIVATE_ADDRESSES=true to allow it."
)


@pytest.mark.parametrize("url", ["http://localhost/", "http://LOCALHOST:8000/x"])
def test_a_name_that_resolves_to_a_private_address_does_not_reveal_it(
    tmp_path: Path, url: str
) -> None:
    """A host name is judged by what it resolves to, but the refusal does not say what that
    is: otherwise a webhook sender could map internal names to internal addresses."""
    message = refusal(url, settings(tmp_path, allow_private=False)).message
    assert message == NAME_REFUSED
    for address in {info[4][0] for info in socket.getaddrinfo("localhost", None)}:
        assert address not in message
    assert "loopback" not in message


def test_fetching_such_a_name_is_refused_the_same_way_before_any_request(
    tmp_path: Path, redirect_server: RedirectServer
) -> None:
    config = settings(tmp_path, allow_private=False)
    url = redirect_server.base.replace("127.0.0.1", "localhost") + "/doc"
    with pytest.raises(PermanentError) as raised:
        fetch_to_store(url, config, BlobStore(tmp_path))
    assert raised.value.code == "URL_NOT_ALLOWED" and raised.value.message == NAME_REFUSED
    assert redirect_server.paths == []
