"""HTTP(S) listeners for an aiohttp app that no client can exhaust.

``start_listener`` binds HOST:PORT and serves the runner's app with, per listener:

- a cap on open connections (TLS handshakes included), counted on the accepted sockets
  themselves; at the cap a connection is closed to make room, the first found of: the oldest that
  never completed a request head, the one idle longest between requests (a scraper that comes
  back every 15 s is idle for less time than connections parked by a client that never returns),
  the oldest stalled writing a response its client does not read (either for at least
  ``SETTLED_SECONDS``); when none is, the new connection is closed at once (then every open
  connection is handling a request, each bounded by the header and response deadlines);
- the per-connection deadlines and size limits of ``http_guard.GuardedRequestHandler``, and the
  header deadline as TLS handshake deadline;
- out of file descriptors (EMFILE and the like): accepting pauses for a second, as asyncio does,
  but one log line per ``LOG_INTERVAL_SECONDS`` replaces the traceback per accept attempt
  (asyncio 3.11 retries every queued connection, each with its traceback, every second).
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import socket
import ssl
import time
from asyncio import sslproto
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web

from .http_guard import GuardedRequestHandler
from .limits import ListenerLimits

log = logging.getLogger("rightsizer.http")
LOG_INTERVAL_SECONDS = 10.0
SETTLED_SECONDS = 1.0  # an idle or stalled connection is evicted at the cap only once in that state this long
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_ACCEPT_MESSAGE = "socket.accept() out of system resource"
TLS_READ_BUFFER_BYTES = 64 * 1024

# (status, reason) -> (body, content type) of an answer to a request refused before any handler.
ErrorBody = Callable[[int, str], tuple[bytes, str]]


def plain_error(status: int, reason: str) -> tuple[bytes, str]:
    return f"{status} {HTTPStatus(status).phrase}: {reason}\n".encode(), "text/plain; charset=utf-8"


@dataclass
class ListenerStats:
    """Counters of one listener, read by the program's own metrics."""

    malformed_requests: int = 0  # refused before reaching a handler (syntax, sizes, no HTTP/1.x)
    header_timeouts: int = 0  # closed: no complete request head within the deadline
    response_timeouts: int = 0  # closed: a response not answered and read within the deadline
    connections_evicted: int = 0  # closed at the cap to make room for a new connection
    connections_refused: int = 0  # closed at accept: at the cap and nothing to evict
    accept_errors: int = 0  # accept failed for lack of file descriptors or memory
    open_connections: int = 0


class Guard:
    """What one listener's sockets and handlers share: limits, counters, evictable connections."""

    def __init__(self, name: str, limits: ListenerLimits, stats: ListenerStats, error_body: ErrorBody):
        self.name = name
        self.limits = limits
        self.stats = stats
        self.error_body = error_body
        # Connections that may be closed to make room, by state, each with the monotonic time it
        # entered that state; insertion order = how long in it.
        self.evictable: dict[GuardedRequestHandler, float] = {}  # never completed a request head
        self.idle: dict[GuardedRequestHandler, float] = {}  # served, waiting for the next request
        self.stalled: dict[GuardedRequestHandler, float] = {}  # writing to a client that does not read
        self.evicting = 0  # evicted, socket not closed yet (asyncio closes it on the next pass)
        self._logged_at: dict[str, float] = {}
        self._raised_this_tick = False

    def admit(self) -> bool:
        """A connection was accepted: may it stay?"""
        if self.stats.open_connections - self.evicting <= self.limits.max_connections:  # the new one counted
            return True
        now = time.monotonic()
        for state, what, settled in (
            (self.evictable, "connections that sent no request", 0.0),
            (self.idle, "idle keep-alive connections", SETTLED_SECONDS),
            (self.stalled, "connections whose client does not read its response", SETTLED_SECONDS),
        ):
            # Oldest first. A connection idle or stalled only a moment is kept: in a flood, the
            # connections accepted in one pass are not yet candidates, and the keep-alive connection
            # of a scraper that comes back every 100 ms must not pay for that.
            victim = next(iter(state), None)
            if victim is not None and now - state[victim] >= settled:
                del state[victim]
                self.evicting += 1
                victim.evict()
                self.stats.connections_evicted += 1
                self._note(f"connection limit reached: closing {what}")
                return True
        self.stats.connections_refused += 1
        self._note("connection limit reached: refusing new connections")
        return False

    def out_of_resources(self, exc: OSError) -> OSError:
        """The exception ``accept`` raises: the real one once per event-loop pass (asyncio then
        pauses accepting for a second), ConnectionAbortedError for the rest of that pass."""
        if self._raised_this_tick:
            return ConnectionAbortedError()
        self._raised_this_tick = True
        asyncio.get_running_loop().call_soon(self._new_tick)
        self.stats.accept_errors += 1
        self._note(f"cannot accept connections: {exc.strerror or exc}; retrying every second")
        return exc

    def _new_tick(self) -> None:
        self._raised_this_tick = False

    def _note(self, message: str) -> None:
        now = time.monotonic()
        if now - self._logged_at.get(message, -LOG_INTERVAL_SECONDS) >= LOG_INTERVAL_SECONDS:
            self._logged_at[message] = now
            s = self.stats
            log.warning(
                message,
                extra={
                    "listener": self.name,
                    "open": s.open_connections,
                    "max_connections": self.limits.max_connections,
                    "evicted_total": s.connections_evicted,
                    "refused_total": s.connections_refused,
                    "accept_errors_total": s.accept_errors,
                },
            )


class _Connection(socket.socket):
    """An accepted socket that gives its slot back when closed."""

    __slots__ = ("guard",)
    guard: Guard | None

    def close(self) -> None:
        guard, self.guard = getattr(self, "guard", None), None
        if guard is not None:
            guard.stats.open_connections -= 1
        super().close()


class _ListeningSocket(socket.socket):
    """The listening socket: counts what it accepts and closes what the cap does not admit."""

    __slots__ = ("guard",)
    guard: Guard

    def accept(self) -> tuple[socket.socket, Any]:
        try:
            fd, addr = self._accept()  # type: ignore[attr-defined]
        except OSError as exc:
            if exc.errno in _OUT_OF_RESOURCES:
                raise self.guard.out_of_resources(exc) from None
            raise
        conn = _Connection(self.family, self.type, self.proto, fileno=fd)
        conn.guard = self.guard
        self.guard.stats.open_connections += 1
        if not self.guard.admit():
            conn.close()
            raise ConnectionAbortedError()  # asyncio: nothing accepted this pass
        return conn, addr


def _bind(host: str | None, port: int) -> list[_ListeningSocket]:
    """Bind every address of ``host`` (all interfaces when None) as asyncio's create_server does;
    with port 0, every address gets the port the first one was given."""
    infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    sockets: list[_ListeningSocket] = []
    seen = set()
    try:
        for family, type_, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            try:
                sock = _ListeningSocket(family, type_, proto)
            except OSError:
                continue  # no such family here (e.g. IPv6 disabled)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _GuardedSite(web.BaseSite):
    __slots__ = ("_guard", "_sock")

    def __init__(
        self,
        runner: web.BaseRunner,
        sock: _ListeningSocket,
        guard: Guard,
        ssl_context: ssl.SSLContext | None,
        backlog: int,
    ) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        self._sock = sock
        self._guard = guard

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"{'https' if self._ssl_context else 'http'}://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        loop = asyncio.get_running_loop()
        server = self._runner.server
        assert server is not None
        self._sock.guard = self._guard
        factory = functools.partial(GuardedRequestHandler, server, loop=loop, guard=self._guard)
        deadline = self._guard.limits.header_timeout_seconds
        self._server = await loop.create_server(
            factory,
            sock=self._sock,
            ssl=self._ssl_context,
            backlog=self._backlog,
            ssl_handshake_timeout=deadline if self._ssl_context else None,
            ssl_shutdown_timeout=deadline if self._ssl_context else None,
        )


def _quiet_accept_errors(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    if context.get("message") == _ACCEPT_MESSAGE:
        return  # the guard has logged it, once per interval
    loop.default_exception_handler(context)


async def start_listener(
    runner: web.BaseRunner,
    host: str | None,
    port: int,
    limits: ListenerLimits,
    stats: ListenerStats,
    *,
    name: str = "http",
    ssl_context: ssl.SSLContext | None = None,
    error_body: ErrorBody = plain_error,
    backlog: int = 128,
) -> list[web.BaseSite]:
    """Serve ``runner``'s app on every address of HOST:PORT. Raises OSError when it cannot bind.

    ``backlog`` is also how many connections asyncio accepts in one event-loop pass: 1,024 let a
    flood of connections hold the loop for 100 ms and more (bench/hostile.py), 128 keeps passes short.
    """
    loop = asyncio.get_running_loop()
    if loop.get_exception_handler() is None:
        loop.set_exception_handler(_quiet_accept_errors)
    guard = Guard(name, limits, stats, error_body)
    if ssl_context is not None:
        # asyncio gives every TLS connection a 256 KiB read buffer (SSLProtocol.max_size, zeroed, so
        # resident): 1,000 hostile TLS connections peaked at 188-197 MiB, with 64 KiB at 120 MiB
        # (bench/hostile.py). TLS records are at most 16 KiB, so reads still take 4 records at once.
        sslproto.SSLProtocol.max_size = TLS_READ_BUFFER_BYTES
    sockets = _bind(host, port)
    sites: list[web.BaseSite] = []
    try:
        for sock in sockets:
            site = _GuardedSite(runner, sock, guard, ssl_context, backlog)
            await site.start()
            sites.append(site)
    except BaseException:
        for started in sites:
            await started.stop()
        for sock in sockets:
            sock.close()
        raise
    return sites
