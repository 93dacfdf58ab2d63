"""The API's HTTP edges over real sockets, against the real app under the server configuration
``ldims api`` and ``ldims serve`` use (:mod:`runtime.http_server`): every body is refused while
it streams once past its route's limit (413 in LDIMS's error body, the server's memory flat),
and idle, slow-headed and slow-bodied connections are closed within their time bounds while a
normal request is still answered."""

from __future__ import annotations

import contextlib
import json
import logging
import select
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import psutil
import pytest

from ldims.settings import Settings
from runtime import create_app
from tests.conftest import RedisServer, ThreadedServer

MiB = 1024 * 1024
HUGE = 300 * MiB  # the finding's body: never built, sent a chunk at a time
CHUNK = b"x" * MiB
HEAD_TIMEOUT = BODY_TIMEOUT = 1.0
KEEP_ALIVE = 1
MARGIN = 3.0  # a loaded shared machine: generous, still far below "never"


@dataclass
class Served:
    url: str
    port: int


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Served]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("limits"),
        redis_url=shared_redis.url.rsplit("/", 1)[0] + "/11",
        max_upload_bytes=2 * MiB,
        http_header_timeout_seconds=HEAD_TIMEOUT,
        http_body_timeout_seconds=BODY_TIMEOUT,
        http_body_min_bytes_per_second=1,  # the pause tests dribble 5 bytes/s: only pauses count
        http_keep_alive_seconds=KEEP_ALIVE,
    )
    running = ThreadedServer(create_app(settings), settings).start()
    yield Served(running.url, int(running.url.rsplit(":", 1)[1]))
    running.stop()


MIN_RATE = 1000  # bytes/s over each BODY_TIMEOUT window, on the ``rated`` server


@pytest.fixture(scope="module")
def rated(tmp_path_factory: pytest.TempPathFactory, shared_redis: RedisServer) -> Iterator[Served]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("rated"),
        redis_url=shared_redis.url.rsplit("/", 1)[0] + "/11",
        http_body_timeout_seconds=BODY_TIMEOUT,
        http_body_min_bytes_per_second=MIN_RATE,
    )
    running = ThreadedServer(create_app(settings), settings).start()
    yield Served(running.url, int(running.url.rsplit(":", 1)[1]))
    running.stop()


# --- bodies ------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    body: dict[str, object]
    seconds: float
    sent: int  # body bytes the server took before it answered and closed
    peak_rss_growth: int = 0
    closed: bool = False


def _head(port: int, method: str, path: str, extra: str) -> bytes:
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"{extra}\r\n"
    ).encode()


def send_huge(port: int, path: str, *, chunked: bool, method: str = "POST") -> Answer:
    """``HUGE`` bytes to ``path``, made a chunk at a time and sent as long as the server reads
    them; its answer read as soon as it comes. The process's RSS is sampled on the way (the
    server runs in it)."""
    process = psutil.Process()
    base = peak = process.memory_info().rss
    length = "Transfer-Encoding: chunked\r\n" if chunked else f"Content-Length: {HUGE}\r\n"
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(_head(port, method, path, length))
    sock.setblocking(False)
    started, sent, pending = time.monotonic(), 0, b""
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    try:
        while time.monotonic() - started < 120:
            events = selector.select(1.0)
            if any(mask & selectors.EVENT_READ for _key, mask in events):
                break  # the answer (or the close) came
            if sent >= HUGE and not pending:
                selector.modify(sock, selectors.EVENT_READ)
                continue
            if not pending:
                piece = CHUNK[: HUGE - sent]
                pending = (b"%x\r\n" % len(piece) + piece + b"\r\n") if chunked else piece
                sent += len(piece)
                if chunked and sent >= HUGE:
                    pending += b"0\r\n\r\n"
            try:
                pending = pending[sock.send(pending) :]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break  # closed by the server: its answer is waiting to be read
            peak = max(peak, process.memory_info().rss)
        sock.setblocking(True)
        sock.settimeout(10)
        status, body, closed = _read_answer(sock)
    finally:
        selector.close()
        sock.close()
    seconds = time.monotonic() - started
    peak = max(peak, process.memory_info().rss)
    return Answer(status, body, seconds, sent, peak - base, closed)


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, object], bool]:
    """The status and JSON body of one HTTP answer, and whether the server then closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        piece = sock.recv(65536)
        assert piece, f"closed without an answer: {data[:200]!r}"
        data += piece
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    headers = {k.lower(): v for k, v in headers.items()}
    length = int(headers["content-length"])
    while len(rest) < length:
        piece = sock.recv(65536)
        assert piece, "closed in the middle of the answer"
        rest += piece
    timeout = sock.gettimeout()
    sock.settimeout(0.5)  # a close comes at once after the answer, or not at all
    try:
        closed = sock.recv(1) == b""
    except ConnectionResetError:
        closed = True
    except TimeoutError:
        closed = False
    sock.settimeout(timeout)
    return int(lines[0].split()[1]), json.loads(rest[:length]), closed


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/internal/mcp/execute", 64 * 1024),
        ("/mcp", 4 * MiB),
        ("/api/documents", 2 * MiB),
        ("/api/documents/bulk", 64 * MiB),
    ],
)
def test_a_declared_length_over_the_limit_is_refused_before_the_body(
    served: Served, path: str, limit: int
) -> None:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=10)
    with sock:
        # Only the head is sent: an answer proves nothing of the body was waited for.
        sock.sendall(_head(served.port, "POST", path, f"Content-Length: {HUGE}\r\n"))
        status, body, closed = _read_answer(sock)
    assert status == 413
    assert_too_large(path, body, limit)
    assert closed  # the server does not stay to read the body


def assert_too_large(path: str, body: dict[str, object], limit: int) -> None:
    """The 413 in the route's own error shape: the proxy's envelope, else the seed's body."""
    if path == "/internal/mcp/execute":
        assert body["status"] == "error" and body["trace_id"] is None, body
        assert body["error"] == {
            "code": "TOO_LARGE",
            "message": f"The request body is larger than the limit of {limit} bytes.",
            "details": {"limitBytes": limit},
        }
    else:
        assert body["errorCode"] == "TOO_LARGE" and body["isError"] is True
        assert body["errorDetails"] == {"limitBytes": limit}


@pytest.mark.parametrize(
    ("path", "limit"), [("/internal/mcp/execute", 64 * 1024), ("/mcp", 4 * MiB)]
)
def test_a_streamed_body_is_cut_off_at_the_limit_with_flat_memory(
    served: Served, path: str, limit: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        answer = send_huge(served.port, path, chunked=True)
    assert answer.status == 413, answer
    assert_too_large(path, answer.body, limit)
    # Refused before the route saw it: no route (the MCP SDK's POST handler) logs an error.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors, [r.getMessage() for r in errors]
    assert answer.closed
    assert answer.sent < 32 * MiB  # refused early, not after the 300 MB
    assert answer.peak_rss_growth < 50 * MiB, answer
    assert answer.seconds < 30


def test_a_route_without_a_body_answers_and_closes_without_reading_one(served: Served) -> None:
    answer = send_huge(served.port, "/api/documents", chunked=True, method="GET")
    assert answer.status == 200, answer  # its own answer, the body never read
    assert answer.closed and answer.sent < 32 * MiB
    assert answer.peak_rss_growth < 50 * MiB, answer


def test_a_small_unread_body_in_flight_keeps_the_connection(served: Served) -> None:
    """A route that answers before its body has arrived (here 404 for an unknown SSE session)
    must not cost the client its kept-alive connection: the small rest is dropped."""
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    head = _head(
        served.port, "POST", "/messages/?session_id=" + "0" * 32, f"Content-Length: {len(body)}\r\n"
    )
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(head)
        status, _body, closed = _read_answer(sock)  # answered before the body was sent
        assert (status, closed) == (404, False)
        sock.sendall(body)
        sock.sendall(_head(served.port, "GET", "/api/documents", ""))
        status, listing, _closed = _read_answer(sock)
    assert status == 200 and listing["items"] == []


def test_a_request_within_the_limits_is_served(served: Served) -> None:
    envelope = {"tool_name": "list_available_tools", "arguments": {}}
    response = httpx.post(f"{served.url}/internal/mcp/execute", json=envelope, timeout=10)
    assert response.status_code != 413, response.text
    assert response.json()["status"] in ("ok", "error")


# --- time bounds -------------------------------------------------------------------------------


@dataclass
class Watched:
    kind: str
    sock: socket.socket
    opened: float
    closed_at: float | None = None


@dataclass
class Crowd:
    """Connections held open against the server, watched until the server closes each."""

    port: int
    watched: list[Watched] = field(default_factory=list)

    def open(self, kind: str, first: bytes = b"") -> Watched:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        if first:
            sock.sendall(first)
        sock.setblocking(False)
        item = Watched(kind, sock, time.monotonic())
        self.watched.append(item)
        return item

    def watch(self, until: float, dribble: float = 0.2) -> None:
        """Until every connection is closed by the server (or ``until``): slow ones are sent a
        byte every ``dribble`` seconds, kept-alive ones have their answer read."""
        selector = selectors.DefaultSelector()
        for item in self.watched:
            selector.register(item.sock, selectors.EVENT_READ, item)
        last_dribble = 0.0
        try:
            while selector.get_map() and time.monotonic() < until:
                for key, _mask in selector.select(0.05):
                    item = key.data
                    try:
                        if item.sock.recv(65536):
                            continue  # an answer (kept-alive connections): not a close
                    except BlockingIOError:
                        continue
                    except OSError:
                        pass
                    item.closed_at = time.monotonic()
                    selector.unregister(item.sock)
                if time.monotonic() - last_dribble >= dribble:
                    last_dribble = time.monotonic()
                    for item in self.watched:
                        if item.closed_at is None and item.kind in ("slow head", "slow body"):
                            with contextlib.suppress(OSError):
                                item.sock.send(b"a")
        finally:
            selector.close()

    def close(self) -> None:
        for item in self.watched:
            item.sock.close()


def test_idle_and_slow_connections_are_closed_in_time_while_requests_are_served(
    served: Served,
) -> None:
    crowd = Crowd(served.port)
    try:
        for _ in range(300):
            crowd.open("idle")
        for _ in range(30):  # slowloris: a head that never ends, a byte at a time
            crowd.open("slow head", b"GET /api/documents HTTP/1.1\r\nX-Slow: ")
        for _ in range(20):  # a body that stops arriving
            crowd.open(
                "slow body",
                _head(served.port, "POST", "/internal/mcp/execute", "Content-Length: 1000\r\n")
                + b'{"tool_name": ',
            )
        for _ in range(10):  # one request, then nothing
            crowd.open("kept alive", _head(served.port, "GET", "/api/documents", ""))
        answered: list[float] = []

        def meanwhile() -> None:
            time.sleep(0.3)
            started = time.monotonic()
            response = httpx.get(f"{served.url}/api/documents", timeout=10)
            assert response.status_code == 200
            answered.append(time.monotonic() - started)

        normal = threading.Thread(target=meanwhile)
        normal.start()
        # "slow body" connections are sent a byte every 0.2 s for a while, then left silent.
        crowd.watch(time.monotonic() + 2.0)
        for item in crowd.watched:
            if item.kind == "slow body":
                item.kind = "silent body"
        silent_from = time.monotonic()
        crowd.watch(time.monotonic() + HEAD_TIMEOUT + MARGIN + 2)
        normal.join(10)
    finally:
        crowd.close()
    assert answered and answered[0] < 2.0, answered  # served while the crowd was held
    bounds = {
        "idle": HEAD_TIMEOUT,
        "slow head": HEAD_TIMEOUT,
        "kept alive": KEEP_ALIVE,
    }
    for item in crowd.watched:
        assert item.closed_at is not None, f"a {item.kind} connection was never closed"
        if item.kind == "silent body":
            # Kept open while bytes came, closed once they stopped for the body bound.
            assert item.closed_at - silent_from < BODY_TIMEOUT + MARGIN
            assert item.closed_at - item.opened > 2.0
        else:
            held = item.closed_at - item.opened
            assert bounds[item.kind] - 0.2 < held < bounds[item.kind] + MARGIN, (item.kind, held)


def _dribble(
    port: int, length: int, piece: int, every: float, until: float
) -> tuple[int, float, int | None]:
    """A ``length``-byte body to ``/mcp``, ``piece`` bytes every ``every`` seconds, until it is
    sent, the server closes, or ``until``: the bytes sent, the seconds it took, and the
    answer's status (None: closed without one)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(_head(port, "POST", "/mcp", f"Content-Length: {length}\r\n"))
        sent = 0
        while sent < length and time.monotonic() < until:
            readable, _, _ = select.select([sock], [], [], 0)
            if readable:
                break  # answered or closed before the body was whole
            try:
                sock.sendall(b" " * min(piece, length - sent))
            except OSError:
                break  # closed by the server
            sent += min(piece, length - sent)
            time.sleep(every)
        seconds = time.monotonic() - started
        try:
            first = sock.recv(65536)
        except OSError:
            first = b""
    status = int(first.split()[1]) if first.startswith(b"HTTP/1.1 ") else None
    return sent, seconds, status


def test_a_body_dribbled_below_the_rate_is_cut_within_two_windows(rated: Served) -> None:
    # 40 bytes every 0.2 s: bytes well within every pause, but 200 bytes/s against 1,000.
    sent, seconds, status = _dribble(rated.port, 100_000, 40, 0.2, time.monotonic() + 8.0)
    assert sent < 100_000 and status is None  # closed, not answered
    assert seconds < 2 * BODY_TIMEOUT + MARGIN, seconds


def test_a_body_at_a_fine_rate_completes(rated: Served) -> None:
    # 600 bytes every 0.2 s (3,000 bytes/s) for 2.4 s, over several windows: then answered.
    length = 7_200
    sent, seconds, status = _dribble(rated.port, length, 600, 0.2, time.monotonic() + 10.0)
    assert sent == length and seconds > 2 * BODY_TIMEOUT, (sent, seconds)
    assert status is not None and status != 413, status
