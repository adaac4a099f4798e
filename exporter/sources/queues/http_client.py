"""A lean HTTP/1.1 GET client for polling many endpoints every interval.

Each source keeps one keep-alive connection (so connections are bounded by the number of
sources, and polls of one source never overlap); responses are parsed by httptools, the C parser
of llhttp that uvicorn uses. Why not aiohttp's client: measured on a 2-core machine it cost 250 to
450 us of CPU per request, this client about 110 us plus parsing; with 200 sources at 1 s that
difference was most of the 5 % CPU budget and set how long the burst of polls before each render
takes (bench/queues.py measures both). Redirects are not followed; bodies are capped in size
(``max_body_bytes``) and, for expositions, handed to a sink chunk by chunk instead of being held
whole; an encoded body (gzip...) is refused, none being asked for; the poller's deadline bounds
every request (a request cut short closes its connection).
"""

from __future__ import annotations

import asyncio
import base64
import os
import socket
import ssl
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httptools

from rightsizer_core.files import checked_path

from ... import __version__
from .base import QueueSourceError, SecretFile
from .settings import QueueSettings

USER_AGENT = f"rightsizer-exporter/{__version__}"


# Streaming a 200 answer's body: called with its content type once the head is read, then with each
# piece of the body. Either may raise QueueSourceError to refuse the answer.
Sink = tuple[Callable[[str], None], Callable[[bytes], None]]


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % 2**20 == 0 else f"{n} bytes"


class _StaleConnection(Exception):
    """A reused keep-alive connection was closed by the server before it answered."""


class _Exchange(asyncio.Protocol):
    """One TCP (or TLS) connection; answers one request at a time."""

    def __init__(self, max_body_bytes: int) -> None:
        self.max_body_bytes = max_body_bytes
        self.transport: asyncio.Transport | None = None
        self.open = False
        self._answer: asyncio.Future[tuple[int, str, str, bytes]] | None = None
        self._parser: httptools.HttpResponseParser | None = None
        self._received = False
        self._headers_done = False
        self._framed = False  # Content-Length or chunked: the body's end is known
        self._reason = ""
        self._content_type = ""
        self._encoding = ""
        self._body: list[bytes] = []
        self._size = 0
        self._sink: Sink | None = None
        self._sinking = False  # the sink takes this answer's body

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport, self.open = transport, True

    def data_received(self, data: bytes) -> None:
        if self._parser is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(QueueSourceError(f"not an HTTP answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self._answer is None or self._answer.done():
            return
        if not self._received:
            self._fail(_StaleConnection())
        elif self._headers_done and not self._framed:  # body delimited by the end of the connection
            self.on_message_complete()
        else:
            self._fail(QueueSourceError("server closed the connection in the middle of its answer"))

    # -- httptools callbacks ------------------------------------------------------------------------
    def on_status(self, status: bytes) -> None:
        self._reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-type":
            self._content_type = value.decode("latin-1").split(";", 1)[0].strip().lower()
        elif lowered == b"content-encoding":
            self._encoding = value.decode("latin-1").strip().lower()
        else:
            chunked = lowered == b"transfer-encoding" and b"chunked" in value.lower()
            self._framed = self._framed or chunked or lowered == b"content-length"

    def on_headers_complete(self) -> None:
        self._headers_done = True
        parser = self._parser
        if parser is None or parser.get_status_code() != 200:
            return  # only the status of another answer is used: its body is dropped as it comes
        if self._encoding not in ("", "identity"):
            self._fail(QueueSourceError(f"answer is {self._encoding}-encoded; no encoding was asked for"))
        elif self._sink is not None:
            self._sinking = True
            self._call(self._sink[0], self._content_type)

    def on_body(self, body: bytes) -> None:
        if self._answer is None or self._answer.done():
            return
        self._size += len(body)
        if self._size > self.max_body_bytes:
            self._fail(QueueSourceError(f"answer larger than {_size(self.max_body_bytes)} (max_body_bytes)"))
        elif self._sinking:
            assert self._sink is not None
            self._call(self._sink[1], body)
        elif self._parser is not None and self._parser.get_status_code() == 200:
            self._body.append(body)

    def _call(self, step: Callable[[Any], None], arg: Any) -> None:
        try:
            step(arg)
        except QueueSourceError as exc:
            self._fail(exc)

    def on_message_complete(self) -> None:
        parser, answer = self._parser, self._answer
        if parser is None or answer is None or answer.done():
            return
        status = parser.get_status_code()
        if not parser.should_keep_alive():
            self.close()
        self._parser = None
        body, self._body = b"".join(self._body), []
        answer.set_result((status, self._reason, self._content_type, body))

    # -- use --------------------------------------------------------------------------------------
    async def request(self, head: bytes, sink: Sink | None = None) -> tuple[int, str, str, bytes]:
        assert self.transport is not None
        self._answer = asyncio.get_running_loop().create_future()
        self._parser = httptools.HttpResponseParser(self)
        self._received = self._headers_done = self._framed = self._sinking = False
        self._reason, self._content_type, self._encoding, self._body, self._size = "", "", "", [], 0
        self._sink = sink
        self.transport.write(head)
        try:
            return await self._answer
        except BaseException:
            self.close()  # cut short or broken: never reuse
            raise

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.open = False
        self._parser = None
        if self.transport is not None:
            self.transport.close()


def _why(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return exc.strerror or str(exc)
    return os.strerror(exc.errno)


def _ssl_context(cfg: QueueSettings) -> ssl.SSLContext:
    if cfg.tls_insecure_skip_verify:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    try:
        return ssl.create_default_context(cafile=checked_path(cfg.tls_ca_file) if cfg.tls_ca_file else None)
    except (OSError, ssl.SSLError) as exc:
        raise QueueSourceError(f"cannot load tls_ca_file {cfg.tls_ca_file}: {exc}") from None


class HttpGetter:
    """GETs one URL with the entry's headers, auth and TLS settings over one kept-alive connection."""

    def __init__(self, cfg: QueueSettings, accept: str, max_body_bytes: int) -> None:
        url = urlsplit(cfg.url)
        self.host = url.hostname or ""
        self.tls = url.scheme == "https"
        self.port = url.port or (443 if self.tls else 80)
        default_port = (self.tls and self.port == 443) or (not self.tls and self.port == 80)
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        host_header += "" if default_port else f":{self.port}"
        target = (url.path or "/") + (f"?{url.query}" if url.query else "")
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {host_header}",
            f"User-Agent: {USER_AGENT}",
            f"Accept: {accept}",
            *(f"{k}: {v}" for k, v in cfg.headers.items()),
        ]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        token = cfg.bearer_token_file
        self._bearer = SecretFile(token, "bearer_token_file", token=True) if token else None
        auth = cfg.basic_auth
        self._basic: tuple[str, str | SecretFile] | None = None
        if auth is not None:
            password_file = auth.password_file
            secret = SecretFile(password_file, "basic_auth.password_file") if password_file else None
            self._basic = (auth.username, secret or auth.password or "")
        self._cfg = cfg
        self.max_body_bytes = max_body_bytes
        self._ssl: ssl.SSLContext | None = None
        self._exchange: _Exchange | None = None

    def _request_head(self) -> bytes:
        if self._bearer is not None:
            token = self._bearer.value()  # read_token: one line of printable ASCII, or refused
            return self._head + f"Authorization: Bearer {token}\r\n\r\n".encode("latin-1")
        if self._basic is not None:
            user, password = self._basic
            secret = password.value() if isinstance(password, SecretFile) else password
            pair = base64.b64encode(f"{user}:{secret}".encode()).decode()
            return self._head + f"Authorization: Basic {pair}\r\n\r\n".encode()
        return self._head + b"\r\n"

    async def _connect(self) -> _Exchange:
        if self.tls and self._ssl is None:
            self._ssl = _ssl_context(self._cfg)
        loop = asyncio.get_running_loop()
        try:
            _, exchange = await loop.create_connection(
                lambda: _Exchange(self.max_body_bytes),
                self.host,
                self.port,
                ssl=self._ssl if self.tls else None,
            )
        except OSError as exc:
            raise QueueSourceError(f"cannot connect to {self.host}:{self.port}: {_why(exc)}") from None
        self._exchange = exchange
        return exchange

    async def get(self, sink: Sink | None = None) -> tuple[str, bytes]:
        """(content type, body) of a 200 answer; anything else raises QueueSourceError. With a
        ``sink``, the body goes to it as it arrives and the body returned is empty."""
        head = self._request_head()
        exchange = self._exchange
        reused = exchange is not None and exchange.open
        if exchange is None or not reused:
            exchange = await self._connect()
        try:
            status, reason, content_type, body = await exchange.request(head, sink)
        except _StaleConnection:
            if not reused:
                raise QueueSourceError("server closed the connection without answering") from None
            try:  # the server dropped the idle connection: one new connection, one more try
                status, reason, content_type, body = await (await self._connect()).request(head, sink)
            except _StaleConnection:
                raise QueueSourceError("server closed the connection without answering") from None
        if status != 200:
            raise QueueSourceError(f"HTTP {status} {reason}".rstrip())
        return content_type, body

    def close(self) -> None:
        if self._exchange is not None:
            self._exchange.close()
            self._exchange = None
