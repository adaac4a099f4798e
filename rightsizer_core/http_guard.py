"""aiohttp's request handler with a header deadline, size limits and one quiet line per bad request.

aiohttp gives every connection an hour before it must send anything, keeps reading header lines
up to 128 x 8 KiB, answers a request line without a version as HTTP/0.9, and logs each malformed
request as an error with its traceback. ``GuardedRequestHandler`` (one per connection, made by
``listener.Guard``) bounds all of that:

- the request line and headers must arrive within ``header_timeout_seconds`` (counted from the
  connection, or from the first byte of a later request on a keep-alive connection);
- a response must be answered and read within ``response_timeout_seconds`` of its request's head
  (a client that stops reading holds it no longer), else the connection is closed;
- a request line over ``max_request_line_bytes`` is answered 414, a line without ``HTTP/1.x``
  400 (no version) or 505 (another version), more than ``max_header_bytes`` of head 431 (counted
  up to the blank line that ends the head, whether the head came in one read or many);
- a request aiohttp's parser rejects is answered 400 (431 for a header line that is too long) and
  logged at debug level in one line, without traceback.

Every such answer is counted in ``ListenerStats.malformed_requests`` and closes the connection;
its body comes from the program (the adapter answers a metav1.Status).

Each handler also tells its listener's guard which state its connection is in, for eviction at
the connection cap: never served a request (``evictable``), idle between requests (``idle``, in the
order they became idle) or stalled writing a response its client does not read (``stalled``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from http import HTTPStatus
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from .limits import ListenerLimits

log = logging.getLogger("rightsizer.http")
_REQUEST_LINE = re.compile(rb"[!-~]+ [!-~]+ HTTP/(\d)\.(\d)")
_NO_VERSION = re.compile(rb"[!-~]+ [!-~]+")


class RefusalCounts(Protocol):
    header_timeouts: int
    response_timeouts: int
    malformed_requests: int


class Guard(Protocol):
    """What a handler needs of its listener's ``listener.Guard`` (described here rather than
    imported: ``listener`` imports this module)."""

    evicting: int

    @property
    def limits(self) -> ListenerLimits: ...
    @property
    def stats(self) -> RefusalCounts: ...
    @property
    def evictable(self) -> dict[GuardedRequestHandler, float]: ...
    @property
    def idle(self) -> dict[GuardedRequestHandler, float]: ...
    @property
    def stalled(self) -> dict[GuardedRequestHandler, float]: ...
    @property
    def error_body(self) -> Callable[[int, str], tuple[bytes, str]]: ...


class GuardedRequestHandler(web.RequestHandler):
    def __init__(self, manager: web.Server, *, loop: asyncio.AbstractEventLoop, guard: Guard, **kw: Any):
        limits = guard.limits
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=limits.idle_timeout_seconds,
            max_line_size=limits.max_request_line_bytes,
            max_field_size=limits.max_header_line_bytes,
            max_headers=limits.max_headers,
            access_log=None,  # type: ignore[arg-type]  # aiohttp's own runners pass None: no access log
            **kw,
        )
        self._guard = guard
        self._head_timer: asyncio.TimerHandle | None = None
        self._response_timer: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._head_tail = b""  # the last bytes of the head so far: its end may span two reads
        self._line = bytearray()  # the request line while it is incomplete
        self._line_checked = False
        self._served = False
        self._evicted = False

    # -- connection ------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._guard.evictable[self] = self._loop.time()
        self._start_head()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_head()
        self._stop_response()
        if self._evicted:
            self._evicted = False
            self._guard.evicting -= 1
        for state in (self._guard.evictable, self._guard.idle, self._guard.stalled):
            state.pop(self, None)
        super().connection_lost(exc)

    def evict(self) -> None:
        """Close to make room for a new connection (the listener is at its cap)."""
        self._stop_head()
        self._stop_response()
        self._evicted = True
        self._abort()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._guard.stalled[self] = self._loop.time()  # the client is not reading what it asked for

    def resume_writing(self) -> None:
        super().resume_writing()
        self._guard.stalled.pop(self, None)

    # -- response --------------------------------------------------------------------------------
    def _start_response(self) -> None:
        if self._response_timer is None:
            deadline = self._guard.limits.response_timeout_seconds
            self._response_timer = self._loop.call_later(deadline, self._response_late)

    def _stop_response(self) -> None:
        if self._response_timer is not None:
            self._response_timer.cancel()
            self._response_timer = None

    def _response_late(self) -> None:
        self._response_timer = None
        self._guard.stats.response_timeouts += 1
        log.debug("closing a connection whose response was not read in time", extra=self._peer())
        self._abort()

    async def finish_response(self, request: Any, resp: Any, start_time: float | None) -> Any:
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            self._stop_response()
            if self.transport is None or self.transport.is_closing() or self._force_close or self._close:
                pass  # closing: neither idle nor in a request
            elif self._messages:  # a pipelined request is already waiting: its deadline starts now
                self._start_response()
            else:
                self._guard.idle.pop(self, None)
                self._guard.idle[self] = self._loop.time()  # idle from now: last in the eviction order
    # -- request head ----------------------------------------------------------------------------
    def _start_head(self) -> None:
        self._head_bytes = 0
        self._head_tail = b""
        self._line.clear()
        self._line_checked = False
        self._head_timer = self._loop.call_later(self._guard.limits.header_timeout_seconds, self._head_late)

    def _stop_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        self._guard.stats.header_timeouts += 1
        log.debug("closing a connection that sent no complete request in time", extra=self._peer())
        self._abort()

    def _abort(self) -> None:
        """Close at once: no TLS close_notify exchange with a client that may never answer it."""
        if self.transport is not None:
            self.transport.abort()
        self.force_close()

    def data_received(self, data: bytes) -> None:
        if self._force_close or self._close or self.transport is None:
            return
        self._guard.idle.pop(self, None)
        if self._head_timer is None and self._waiter is not None and not self._messages:
            self._start_head()  # the first byte of a later request on a keep-alive connection
        if self._head_timer is not None:
            refusal = None if self._line_checked else self._check_request_line(data)
            if refusal is None and self._count_head(data) > self._guard.limits.max_header_bytes:
                refusal = (431, "request headers too large")
            if refusal is not None:
                self._refuse(*refusal)
                return
        before = self._request_count
        super().data_received(data)
        if self._request_count != before:
            self._start_response()
        if self._head_timer is not None and self._request_count != before:  # a complete head
            self._stop_head()
            if not self._served:
                self._served = True
                self._guard.evictable.pop(self, None)

    def _count_head(self, data: bytes) -> int:
        """Bytes of the request head so far, ``data`` included up to the blank line ending the head."""
        window = self._head_tail + data
        ends = [at + len(mark) for mark in (b"\r\n\r\n", b"\n\n") if (at := window.find(mark)) >= 0]
        counted = len(data) if not ends else min(ends) - len(self._head_tail)
        self._head_bytes += counted
        self._head_tail = window[-3:]
        return self._head_bytes

    def _check_request_line(self, data: bytes) -> tuple[int, str] | None:
        limit = self._guard.limits.max_request_line_bytes
        while True:
            end = data.find(b"\n")
            if end < 0:
                self._line += data[: limit + 1]
                return (414, "request line too long") if len(self._line) > limit else None
            line = bytes(self._line + data[:end]).rstrip(b"\r")
            self._line.clear()
            data = data[end + 1 :]
            if line:  # RFC 9112 2.2: empty lines before a request line are ignored
                break
        self._line_checked = True
        if len(line) > limit:
            return 414, "request line too long"
        version = _REQUEST_LINE.fullmatch(line)
        if version is not None:
            return None if version.group(1) == b"1" else (505, "only HTTP/1.0 and HTTP/1.1 are served")
        if _NO_VERSION.fullmatch(line):
            return 400, "request line without HTTP version (HTTP/0.9 is not served)"
        return None  # anything else is the parser's to reject

    def _refuse(self, status: int, reason: str) -> None:
        self._stop_head()
        self._note_malformed(status, reason)
        body, content_type = self._guard.error_body(status, reason)
        head = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        assert self.transport is not None
        self.transport.write(head.encode() + body)
        self.force_close()

    # -- requests aiohttp's parser rejected ------------------------------------------------------
    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or not isinstance(exc, BadHttpMessage):
            return super().handle_error(request, status, exc, message)  # a fault of ours: keep the trace
        if isinstance(exc, LineTooLong):
            status, reason = 431, "a header line is too long"
        elif "Too many headers" in str(exc):
            status, reason = 431, "too many headers"
        else:
            status, reason = 400, f"malformed request ({type(exc).__name__})"
        self._note_malformed(status, reason)
        body, content_type = self._guard.error_body(status, reason)
        response = web.Response(status=status, body=body, headers={"Content-Type": content_type})
        response.force_close()
        return response

    def _note_malformed(self, status: int, reason: str) -> None:
        self._guard.stats.malformed_requests += 1
        log.debug("malformed request refused", extra={"status": status, "reason": reason, **self._peer()})

    def _peer(self) -> dict[str, str]:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return {"peer": f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)}
