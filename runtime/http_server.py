"""The HTTP server of ``ldims api`` and ``ldims serve``: one uvicorn configuration, with the
time bounds uvicorn lacks.

uvicorn (h11) closes a kept-alive connection idle for ``timeout_keep_alive`` after a response,
and h11 caps a request head at 16 KiB, but nothing bounds the *time* a request takes to arrive:
a connection that never sends a byte, or that dribbles its head a byte at a time (slowloris),
or whose body stops half-way, is held for ever (1,500 idle connections were all still open
after 75 s). :class:`TimedH11Protocol` adds, per connection, one timer at a time:

* the head deadline: a request's head must be complete within
  ``LDIMS_HTTP_HEADER_TIMEOUT_SECONDS`` of the connection opening (or, on a kept-alive
  connection, of the request's first byte); the deadline is fixed, more bytes do not move it;
* the body rate: while a body is arriving, the client must send at least
  ``LDIMS_HTTP_BODY_MIN_BYTES_PER_SECOND`` × ``LDIMS_HTTP_BODY_TIMEOUT_SECONDS`` bytes in each
  window of ``LDIMS_HTTP_BODY_TIMEOUT_SECONDS``: the timer is re-armed only once that many
  arrived since it was armed (re-arming at every byte let a client sending one byte every 29 s
  hold a connection for ever); when the server is the one not reading (the route is slow to
  take the body: flow control paused reading, or the client still waits for its
  ``100 Continue``) the client is not to blame and the timer waits again, a new window;
* idle keep-alive: uvicorn's own, ``LDIMS_HTTP_KEEP_ALIVE_SECONDS``.

A connection past its bound is closed (logged at DEBUG: an attacker may open thousands). So is
one answered before its body was read in full (a route that takes no body, a 413) once more
than :data:`DRAIN_LIMIT` bytes of the rest are due: uvicorn would otherwise read and drop the
rest, however long it is (a smaller rest, often just still in flight, is dropped and the
connection kept for the next request).

And one repair: uvicorn stops reading a connection whose client sends a request behind one
still being answered (pipelining), so it cannot see that client leave: a stream such as
``GET /sse`` then lives, with its session's place, until a write fails (15-30 s, at the next
ping). Here reading goes on while at most :data:`PIPELINE_LIMIT` bytes wait, so a closed
connection is seen at once; past that, reading pauses as before.

The protocol is h11's whatever is installed (``http="auto"`` would pick httptools when
present), so the bounds hold in every deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from typing import Any

import h11
import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.h11_impl import H11Protocol

from ldims.settings import Settings

log = logging.getLogger(__name__)

PIPELINE_LIMIT = HIGH_WATER_LIMIT  # bytes of a pipelined request read ahead (uvicorn's mark)
DRAIN_LIMIT = HIGH_WATER_LIMIT  # bytes of an unread body dropped after the answer, not closed


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the head deadline and body pause bound described above
    (``header_timeout`` and ``body_timeout`` are set on a subclass by :func:`protocol_for`)."""

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    body_min_rate: float = 1024.0  # bytes per second, over each body_timeout window

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None
        self._head_deadline: float | None = None
        self._drained: int | None = None  # bytes of an unread body received after the answer
        self._body_window: int | None = None  # bytes received since the body timer was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        if self._drained is not None:
            self._drained += len(data)
            if self._drained > DRAIN_LIMIT:
                self._close()
                return
        if self._body_window is not None:
            self._body_window += len(data)
        super().data_received(data)
        self._read_on_behind_pipelined_request()
        self._watch()

    def on_response_complete(self) -> None:
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            # Answered before its body was read in full (a route that takes none, a refusal):
            # uvicorn would read and drop the rest however long it is. A small rest (often
            # just still in flight) is dropped and the connection kept; a long one closes it.
            declared = dict(self.headers).get(b"content-length", b"")
            if declared.isdigit() and int(declared) > DRAIN_LIMIT:
                self.transport.close()
            self._drained = 0
        super().on_response_complete()  # may start a pipelined request at once
        self._read_on_behind_pipelined_request()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        super().connection_lost(exc)

    def _read_on_behind_pipelined_request(self) -> None:
        # h11 pauses once the request is whole (their DONE) and more bytes follow it; the body
        # high-water pause (their SEND_BODY) is left alone.
        if (
            self.flow.read_paused
            and self.conn.their_state is h11.DONE
            and len(self.conn.trailing_data[0]) < PIPELINE_LIMIT
        ):
            self.flow.resume_reading()

    def _cancel_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _watch(self) -> None:
        """Arm the one timer the connection's state calls for."""
        state = self.conn.their_state
        if (
            state is h11.SEND_BODY
            and self._body_window is not None
            and self._body_window < self.body_min_rate * self.body_timeout
            and not self.transport.is_closing()
        ):
            return  # too few bytes yet in this window: its timer runs on, not moved
        self._cancel_timer()
        self._body_window = None
        if self.transport.is_closing():
            return
        if state is not h11.SEND_BODY:
            self._drained = None  # the unread body, if any, is over
        if state is h11.IDLE and self.timeout_keep_alive_task is None:
            # Waiting for a head: a new connection, or bytes after a kept-alive pause.
            if self._head_deadline is None:
                self._head_deadline = self.loop.time() + self.header_timeout
            self._read_timer = self.loop.call_at(self._head_deadline, self._head_timed_out)
            return
        self._head_deadline = None
        if state is h11.SEND_BODY:
            self._arm_body_window()

    def _arm_body_window(self) -> None:
        self._body_window = 0
        self._read_timer = self.loop.call_later(self.body_timeout, self._body_timed_out)

    def _head_timed_out(self) -> None:
        log.debug("closed a connection whose request head took over %ss", self.header_timeout)
        self._close()

    def _body_timed_out(self) -> None:
        waiting = self.cycle is not None and self.cycle.waiting_for_100_continue
        if self.flow.read_paused or waiting:  # the server is not reading: not the client's pause
            self._arm_body_window()
            return
        log.debug(
            "closed a connection whose request body sent under %s bytes/s for %ss",
            self.body_min_rate,
            self.body_timeout,
        )
        self._close()

    def _close(self) -> None:
        self._read_timer = None
        self._body_window = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol_for(settings: Settings) -> type[TimedH11Protocol]:
    """:class:`TimedH11Protocol` with the bounds of ``settings``."""
    return type(
        "TimedH11Protocol",
        (TimedH11Protocol,),
        {
            "header_timeout": settings.http_header_timeout_seconds,
            "body_timeout": settings.http_body_timeout_seconds,
            "body_min_rate": settings.http_body_min_bytes_per_second,
        },
    )


def uvicorn_config(
    app: Any, settings: Settings, host: str, port: int, **options: Any
) -> uvicorn.Config:
    """The one uvicorn configuration of the API (``ldims api``, ``ldims serve``, the tests'
    servers): the bounded protocol and the keep-alive of ``settings``."""
    options.setdefault("log_level", "warning")
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_for(settings),
        timeout_keep_alive=settings.http_keep_alive_seconds,
        **options,
    )


def run_api(app: Any, settings: Settings, host: str, port: int) -> None:
    """Serve ``app`` until stopped (Ctrl-C or SIGTERM), as ``uvicorn.run`` would: exit status
    3 when the server could not start (a busy port)."""
    server = uvicorn.Server(uvicorn_config(app, settings, host, port))
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        sys.exit(STARTUP_FAILURE)


__all__ = [
    "DRAIN_LIMIT",
    "PIPELINE_LIMIT",
    "TimedH11Protocol",
    "protocol_for",
    "run_api",
    "uvicorn_config",
]
