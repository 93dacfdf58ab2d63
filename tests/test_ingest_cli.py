"""``ldims ingest`` for real: the CLI process against the API and real workers.

The CLI reaches the API through a small counting proxy (a real HTTP hop in this process):
it records how many uploads were in flight at once and can fail status checks, the two
things the server alone would not show.
"""

from __future__ import annotations

import fcntl
import http.server
import os
import re
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import ROOT, RedisServer, Stack, make_settings, settings_env

LIMIT = 2000  # max_upload_bytes of the stack: a bigger file is rejected with 413
HOLD = 0.3  # seconds the proxy holds each upload, so concurrent ones overlap for sure


class CountingProxy:
    """Forwards every request to ``target``; counts uploads in flight; fails some checks."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.in_flight = 0
        self.max_in_flight = 0
        self.uploads = 0
        self.failing_checks = 0  # the next N status checks get a 502 (an HTML page)
        self.lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                with proxy.lock:
                    fail = proxy.failing_checks > 0
                    proxy.failing_checks -= fail
                if fail:
                    self.reply(502, "text/html", b"<h1>502 Bad Gateway</h1>")
                else:
                    self.reply(*self.forward(b""))

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with proxy.lock:
                    proxy.uploads += 1
                    proxy.in_flight += 1
                    proxy.max_in_flight = max(proxy.max_in_flight, proxy.in_flight)
                try:
                    time.sleep(HOLD)
                    answer = self.forward(body)
                finally:
                    # Before the reply: once it is sent, the CLI may start its next upload.
                    with proxy.lock:
                        proxy.in_flight -= 1
                self.reply(*answer)

            def forward(self, body: bytes) -> tuple[int, str, bytes]:
                skip = {"host", "content-length", "connection"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                response = httpx.request(
                    self.command, proxy.target + self.path, headers=headers, content=body
                )
                return response.status_code, response.headers["content-type"], response.content

            def reply(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@pytest.fixture(scope="module")
def stack(shared_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for the module (starting one per test would cost more than the tests)."""
    redis.Redis.from_url(shared_redis.url).flushdb()
    tmp = tmp_path_factory.mktemp("ingest")
    running = Stack(make_settings(tmp, shared_redis.url, max_upload_bytes=LIMIT), tmp).start()
    yield running
    running.stop()


@pytest.fixture
def proxy(stack: Stack) -> Iterator[CountingProxy]:
    counting = CountingProxy(stack.api.url)
    counting.thread.start()
    yield counting
    counting.server.shutdown()
    counting.server.server_close()


def ingest(
    stack: Stack, *args: str, stderr: int = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    """Run ``ldims ingest`` at LOG_LEVEL=DEBUG, where httpx and httpcore say most per request."""
    return subprocess.run(
        [sys.executable, "-m", "runtime.cli.main", "ingest", *args],
        env=settings_env(stack.settings) | {"LOG_LEVEL": "DEBUG"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        timeout=120,
    )


def inbox(folder: Path, names: list[str]) -> Path:
    folder.mkdir()
    for name in names:
        (folder / name).write_text(f"# {name}\n\nwords of {name}\n")
    return folder


def test_ingest_uploads_concurrently_and_reports_rejected_and_failed(
    stack: Stack, proxy: CountingProxy, tmp_path: Path
) -> None:
    folder = inbox(tmp_path / "inbox", [f"note{i}.md" for i in range(6)])
    (folder / "big.txt").write_text("x" * (LIMIT * 3))
    (folder / "empty.txt").write_bytes(b"")

    result = ingest(
        stack,
        str(folder),
        *("--url", proxy.url, "--concurrency", "3", "--collection", "c1", "--bulk", "1"),
    )

    assert result.returncode == 1, result.stderr  # one rejected, one failed
    assert proxy.uploads == 8
    assert proxy.max_in_flight == 3
    summary = result.stdout.splitlines()
    assert "completed: 6, failed: 1, rejected: 1" in summary
    [rejected] = [line for line in summary if "big.txt" in line]
    assert re.fullmatch(
        r"  rejected +\S+big\.txt  413 TOO_LARGE: .+limit of 2000 bytes\.", rejected
    )
    [failed] = [line for line in summary if "empty.txt" in line]
    assert re.fullmatch(r"  failed +\S+empty\.txt  EMPTY_FILE: .+", failed)
    assert not any("note" in line for line in summary)  # completed files are not listed

    # No line per request on stderr, just one progress line per phase (not a terminal).
    assert "HTTP Request" not in result.stderr and "httpcore" not in result.stderr
    assert "\r" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert re.match(r"uploading: 100% 8/8 \[.*doc/s, queued=7, rejected=1\]", lines[0])
    assert re.match(r"processing: 100% 7/7 \[.*doc/s, completed=6, failed=1\]", lines[1])

    page = stack.client.get("/api/documents", params={"collection": "c1"}).json()
    assert sorted(d["status"] for d in page["items"]) == ["completed"] * 6 + ["failed"]


def test_small_files_go_in_bulk_uploads_and_a_refused_bulk_goes_file_by_file(
    stack: Stack, proxy: CountingProxy, tmp_path: Path
) -> None:
    folder = inbox(tmp_path / "inbox", [f"note{i:02}.md" for i in range(10)])
    (folder / "zz-big.txt").write_text("x" * (LIMIT * 3))  # its bulk gets 413 as a whole
    (folder / "zz-empty.txt").write_bytes(b"")
    # The same (empty) content failed before: the upload answers "failed" at once, and the
    # summary still gives the reason.
    earlier = stack.upload("earlier-empty.txt", b"").json()["documentId"]
    assert stack.wait_final(earlier)["status"] == "failed"

    result = ingest(stack, str(folder), "--url", proxy.url, "--concurrency", "2")

    assert result.returncode == 1, result.stderr
    # 12 files over 2 requests of 6; the second holds the big file: it is refused, and its
    # 6 files go again one by one.
    assert proxy.uploads == 2 + 6
    assert proxy.max_in_flight == 2
    summary = result.stdout.splitlines()
    assert "completed: 10, failed: 1, rejected: 1" in summary
    [rejected] = [line for line in summary if "zz-big.txt" in line]
    assert re.fullmatch(r"  rejected +\S+zz-big\.txt  413 TOO_LARGE: .+", rejected)
    [failed] = [line for line in summary if "zz-empty.txt" in line]
    assert re.fullmatch(r"  failed +\S+zz-empty\.txt  EMPTY_FILE: .+", failed)
    lines = result.stderr.splitlines()
    assert re.match(r"uploading: 100% 12/12 \[.*doc/s, failed=1, queued=10, rejected=1\]", lines[0])


def test_on_a_terminal_one_bar_and_warnings_above_it(
    stack: Stack, proxy: CountingProxy, tmp_path: Path
) -> None:
    folder = inbox(tmp_path / "inbox", ["a.md", "b.md", "c.md"])
    proxy.failing_checks = 1  # the first status check fails: a warning during the bar
    controller, terminal = os.openpty()
    size = struct.pack("HHHH", 24, 120, 0, 0)  # rows, columns: a new pty has 0 x 0
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, size)
    chunks: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(controller, chunks))
    reader.start()  # read as it comes: a full terminal buffer would block the CLI
    try:
        result = ingest(stack, str(folder), "--url", proxy.url, "--parallel", "1", stderr=terminal)
    finally:
        os.close(terminal)
        reader.join(10)
        os.close(controller)
    text = b"".join(chunks).decode().replace("\r\n", "\n")  # the terminal's own \r\n

    assert result.returncode == 0, text
    assert proxy.max_in_flight == 1  # --parallel, the former name, still works
    assert "completed: 3" in result.stdout.splitlines()
    assert "HTTP Request" not in text and "httpcore" not in text
    assert re.search(r"uploading: 100%\|█+\| 3/3 \[[^]]*doc/s, queued=3\]", text)
    assert re.search(r"processing: 100%\|█+\| 3/3 \[[^]]*doc/s, completed=3\]", text)
    # The warning has a line of its own: the bar was cleared before it and drawn after it.
    [warning] = [line for line in text.split("\n") if "status checks failed" in line]
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\d [^\r]* WARNING .*: 1 status checks failed; trying again",
        warning.split("\r")[-1],
    )
    assert re.match(r"\s*$", warning.split("\r")[-2]), warning  # what was before: spaces


def _read_all(fd: int, chunks: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: every writer closed the terminal's other side
            return
        if not chunk:
            return
        chunks.append(chunk)


@pytest.mark.parametrize("option", ["--concurrency", "--parallel"])
def test_concurrency_below_one_is_refused(stack: Stack, tmp_path: Path, option: str) -> None:
    folder = inbox(tmp_path / "inbox", ["a.md"])
    result = ingest(stack, str(folder), "--url", stack.api.url, option, "0")
    assert result.returncode == 2
    assert "Invalid value for '--concurrency' / '--parallel': 0 is not in the range x>=1" in (
        result.stderr
    )
    assert result.stdout == ""  # nothing was uploaded, no summary
