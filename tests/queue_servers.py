"""Queue sources served over real sockets on loopback, each in its own thread and event loop (so
both in-process tests and exporter subprocesses reach them): an aiohttp server whose answers and
faults are switchable per path, and a raw TCP server for answers no well-behaved server gives."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from queue_fakes import TEXT


@dataclass
class Route:
    """What one path answers. ``body`` may be a function, called per request. ``hang`` holds the
    request until the server stops; ``require`` lists headers that must be present (else 401)."""

    body: bytes | Callable[[], bytes] = b""
    content_type: str = TEXT
    status: int = 200
    hang: bool = False
    require: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    chunks: Callable[[], Iterable[bytes]] | None = None  # streamed as they come (may never end)
    encoding: str = ""  # Content-Encoding header sent with the body
    requests: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    peers: set[tuple[str, int]] = field(default_factory=set)  # client addresses: one per connection


class FakeHttpServer:
    """A real aiohttp server on 127.0.0.1 in its own thread and event loop, listening on ``ports``
    loopback ports (every path answers on every port; ``url(path, i)`` picks the i-th port)."""

    def __init__(self, ports: int = 1, ssl_context: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.port = 0
        self.ports: list[int] = []
        self._port_count = ports
        self._ssl = ssl_context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._release: asyncio.Event | None = None
        self._runner: web.AppRunner | None = None

    def route(self, path: str, **kwargs: Any) -> Route:
        self.routes[path] = Route(**kwargs)
        return self.routes[path]

    def url(self, path: str, index: int = 0) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.ports[index]}{path}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        route = self.routes.get(request.path)
        if route is None:
            return web.Response(status=404, text="404: Not Found")
        route.requests += 1
        route.last_headers = dict(request.headers)
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer:
            route.peers.add((peer[0], peer[1]))
        for name, value in route.require.items():
            if request.headers.get(name) != value:
                return web.Response(status=401, text="unauthorized")
        if route.hang:
            assert self._release is not None
            await self._release.wait()
        if route.chunks is not None:
            headers = {"Content-Type": route.content_type}
            if route.encoding:
                headers["Content-Encoding"] = route.encoding
            stream = web.StreamResponse(status=route.status, headers=headers)
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            with contextlib.suppress(ConnectionError):  # the client gave up: that is the point
                for chunk in route.chunks():
                    await stream.write(chunk)
                await stream.write_eof()
            return stream
        body = route.body() if callable(route.body) else route.body
        if route.chunked:
            stream = web.StreamResponse(status=route.status, headers={"Content-Type": route.content_type})
            stream.enable_chunked_encoding()
            await stream.prepare(request)
            for at in range(0, len(body), 1 << 20):
                await stream.write(body[at : at + (1 << 20)])
            await stream.write_eof()
            return stream
        return web.Response(status=route.status, body=body, headers={"Content-Type": route.content_type})

    async def _start(self) -> None:
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        for _ in range(self._port_count):
            await web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024, ssl_context=self._ssl).start()
        self.ports = [address[1] for address in self._runner.addresses]
        self.port = self.ports[0]

    async def _stop(self) -> None:
        assert self._release is not None and self._runner is not None
        self._release.set()
        await self._runner.cleanup()

    def __enter__(self) -> FakeHttpServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


class RawTcpServer:
    """A loopback TCP server speaking whatever ``handle(reader, writer, connection_number)`` writes:
    for answers no well-behaved HTTP server gives (no framing, early close, not HTTP at all)."""

    def __init__(
        self, handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]
    ) -> None:
        self._handle = handle
        self.connections = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self._handle(reader, writer, self.connections)
        finally:
            writer.close()

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "/metrics") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> RawTcpServer:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    async def _stop(self) -> None:
        assert self._server is not None
        self._server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
