"""Queue depth from Redis: a list (LLEN), stream (XLEN), sorted set (ZCARD) or set (SCARD), the key's
type detected; or a stream consumer group, whose lag is the depth and pending count the in-flight.

Sources on the same server share one small connection pool (``RedisPools``), and the commands
they send in the same event-loop turn (polls fire together, just before a render) go out as one
pipeline: one round trip for all the keys on a server instead of one each. A broken connection is
dropped by redis-py and the next poll opens a new one, so a restarted Redis is picked up without
restarting the exporter. redis-py's own retries are off: the poller's deadline and backoff decide.

Every answer is bounded as it is read (``BoundedParser``): its bytes (``max_body_bytes``, default
16 MiB), its elements and its nesting. A server that announces a gigabyte string, a million-element
array or arrays nested a thousand deep is cut off there, its connection dropped and the source
marked down; nothing larger than the bound is ever held.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio as aioredis
from redis._parsers import _AsyncRESP2Parser  # redis-py's own RESP2 parser (since 5.0), bounded below
from redis.exceptions import ResponseError

from rightsizer_core.files import checked_path, read_secret

from .base import QueueSourceError, QueueValue
from .settings import DEFAULT_MAX_BODY_BYTES, QueueSettings

POOL_CONNECTIONS = 4
LAG_COUNT_LIMIT = 10_000  # when Redis cannot compute a group's lag, count at most this many entries
LAG_COUNT_PAGE = 100  # ... reading this many at a time (entries are read whole: up to the answer bound)
MAX_NESTING = 8  # RESP2 answers of the commands sent nest 3 deep (XINFO STREAM's entries)
ELEMENT_BYTES = 64  # each element is charged at least this many bytes (a Python object costs more)
_LENGTH_COMMAND = {"list": "LLEN", "stream": "XLEN", "zset": "ZCARD", "set": "SCARD"}


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


def _size(n: int) -> str:
    return f"{n / 2**20:g} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


class BoundedParser(_AsyncRESP2Parser):
    """redis-py's RESP2 parser, with a cap on each answer's bytes, elements and nesting.

    A bulk string's length is checked before it is read; every line and element is charged to the
    answer's budget (at least ``ELEMENT_BYTES`` each, so a flood of empty elements is bounded too).
    Going over raises ``QueueSourceError``; redis-py then drops the connection, so the rest of the
    answer is never read.
    """

    limit = DEFAULT_MAX_BODY_BYTES["exposition"]

    def __init__(self, socket_read_size: int) -> None:
        super().__init__(socket_read_size)
        self._taken = 0
        self._depth = 0

    async def read_response(self, disable_decoding: bool = False) -> Any:
        self._taken, self._depth = 0, 0
        return await super().read_response(disable_decoding=disable_decoding)

    async def _read_response(self, disable_decoding: bool = False) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_NESTING:
                raise QueueSourceError(f"Redis answer nested deeper than {MAX_NESTING} levels")
            return await super()._read_response(disable_decoding=disable_decoding)
        finally:
            self._depth -= 1

    async def _read(self, length: int) -> bytes:
        self._charge(length + 2)
        return await super()._read(length)

    async def _readline(self) -> bytes:
        try:
            line = await super()._readline()
        except ValueError:  # asyncio's StreamReader refuses a line over its 64 KiB buffer limit
            raise QueueSourceError("Redis answer has a line longer than 64 KiB") from None
        self._charge(max(len(line) + 2, ELEMENT_BYTES))
        return line

    def _charge(self, n: int) -> None:
        self._taken += n
        if self._taken > self.limit:
            raise QueueSourceError(f"Redis answer larger than {_size(self.limit)} (max_body_bytes)")


_PARSERS: dict[int, type[BoundedParser]] = {}


def bounded_parser(limit: int) -> type[BoundedParser]:
    """The parser class for one bound (redis-py builds a parser per connection from a class)."""
    if limit not in _PARSERS:
        _PARSERS[limit] = type("BoundedParser", (BoundedParser,), {"limit": limit})
    return _PARSERS[limit]


class BatchedClient:
    """Commands issued in the same event-loop turn are sent as one pipeline (no transaction);
    each caller gets its own command's answer or error."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self._pending: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def call(self, *command: Any) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending.append((command, future))
        if len(self._pending) == 1:
            asyncio.get_running_loop().call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _send(self, batch: list[tuple[tuple[Any, ...], asyncio.Future[Any]]]) -> None:
        try:
            try:
                async with self.client.pipeline(transaction=False) as pipe:
                    for command, _ in batch:
                        pipe.execute_command(*command)
                    answers = await pipe.execute(raise_on_error=False)
            except QueueSourceError:
                if len(batch) == 1:
                    raise
                # One answer over a bound ends the pipeline's connection, and every answer with it:
                # send the commands again one at a time, so that only the source that asked fails.
                answers = []
                for command, _ in batch:
                    try:
                        answers.append(await self.client.execute_command(*command))
                    except Exception as exc:  # each caller gets its own error
                        answers.append(exc)
        except BaseException as exc:  # connection lost, timeout, or cancelled at shutdown
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                if isinstance(answer, Exception):
                    future.set_exception(answer)
                else:
                    future.set_result(answer)

    async def close(self) -> None:
        for task in list(self._running):
            task.cancel()
        await self.client.aclose(close_connection_pool=True)


class RedisPools:
    """One client (and connection pool) per server, URL and credentials."""

    def __init__(self) -> None:
        self._clients: dict[tuple[Any, ...], BatchedClient] = {}

    def client(self, cfg: QueueSettings, timeout: float) -> BatchedClient:
        auth = cfg.basic_auth
        password: str | None = None
        if auth is not None and auth.password_file:
            try:
                password = read_secret(auth.password_file)
            except OSError as exc:
                raise QueueSourceError(
                    f"cannot read basic_auth.password_file {auth.password_file}: {exc.strerror or exc}"
                ) from None
        elif auth is not None:
            password = auth.password
        user = auth.username if auth else None
        limit = cfg.body_limit
        key = (cfg.url, user, password, cfg.tls_ca_file, cfg.tls_insecure_skip_verify, limit)
        client = self._clients.get(key)
        if client is None:
            options: dict[str, Any] = {
                "max_connections": POOL_CONNECTIONS,
                "timeout": timeout,  # wait for a free pooled connection at most this long
                "socket_timeout": timeout,
                "socket_connect_timeout": timeout,
                "decode_responses": True,
                "client_name": "rightsizer-exporter",
                "protocol": 2,  # the bounded parser reads RESP2, which every Redis since 1.2 speaks
                "parser_class": bounded_parser(limit),
            }
            if auth is not None:
                options.update(username=auth.username or None, password=password)
            if cfg.url.startswith("rediss://"):
                if cfg.tls_insecure_skip_verify:
                    options["ssl_cert_reqs"] = "none"
                elif cfg.tls_ca_file:
                    try:  # redis-py loads it on connecting, on the event loop: no FIFO may stall it
                        options["ssl_ca_certs"] = checked_path(cfg.tls_ca_file)
                    except OSError as exc:
                        raise QueueSourceError(
                            f"cannot load tls_ca_file {cfg.tls_ca_file}: {exc.strerror or exc}"
                        ) from None
            pool = aioredis.BlockingConnectionPool.from_url(cfg.url, **options)
            client = self._clients[key] = BatchedClient(aioredis.Redis(connection_pool=pool))
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()


class RedisSource:
    def __init__(self, pools: RedisPools, cfg: QueueSettings, timeout: float) -> None:
        assert cfg.key is not None  # checked by the configuration schema
        self.batch = pools.client(cfg, timeout)
        self.client = self.batch.client
        self.key = cfg.key
        self.group = cfg.group
        self.max_groups = cfg.groups_limit
        self._type: str | None = None  # detected once, re-detected if the key changes type

    async def read(self) -> QueueValue:
        if self.group is not None:
            return await self._group(self.group)
        if self._type is not None:
            try:
                length = await self.batch.call(_LENGTH_COMMAND[self._type], self.key)
                return QueueValue(float(length))
            except ResponseError as exc:
                if not str(exc).startswith("WRONGTYPE"):
                    raise
                self._type = None  # the key was re-created with another type
        kind = str(await self.batch.call("TYPE", self.key))
        if kind == "none":  # Redis deletes empty lists, sets and sorted sets
            return QueueValue(0.0)
        if kind not in _LENGTH_COMMAND:
            raise QueueSourceError(f"key {self.key} holds a {kind}, not a list, stream, sorted set or set")
        self._type = kind
        return QueueValue(float(await self.batch.call(_LENGTH_COMMAND[kind], self.key)))

    async def _group(self, group: str) -> QueueValue:
        # XINFO GROUPS answers every group of the stream at once (150,000 groups took the exporter
        # past 370 MiB): count them first (XINFO STREAM), and read them only when under the cap.
        try:
            stream = await self.batch.call("XINFO STREAM", self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                raise QueueSourceError(f"stream {self.key} does not exist") from None
            if "WRONGTYPE" in str(exc):
                raise QueueSourceError(f"key {self.key} is not a stream") from None
            raise
        count = int(stream.get("groups") or 0)
        if count > self.max_groups:
            raise QueueSourceError(
                f"stream {self.key} has {count} consumer groups, more than the {self.max_groups} "
                "that are read (max_groups)"
            )
        for info in await self.batch.call("XINFO GROUPS", self.key):
            if info.get("name") == group:
                lag = info.get("lag")
                if lag is None:
                    lag = await self._count_undelivered(str(info.get("last-delivered-id", "0-0")), stream)
                return QueueValue(float(lag), float(info.get("pending") or 0))
        raise QueueSourceError(f"consumer group {group} not found on stream {self.key}")

    async def _count_undelivered(self, last_delivered: str, stream: dict[str, Any]) -> int:
        """Redis reports no lag when entries were deleted after the group's position; count the
        entries after it instead (all of them when the group is behind the oldest entry)."""
        first = stream.get("first-entry")
        length = int(stream.get("length") or 0)
        if not first or _stream_id(last_delivered) < _stream_id(str(first[0])):
            return length
        counted, after = 0, last_delivered
        while counted < LAG_COUNT_LIMIT:  # a page at a time: entries may be large, only their number is used
            page = await self.client.xrange(self.key, f"({after}", "+", count=LAG_COUNT_PAGE) or []
            counted += len(page)
            if len(page) < LAG_COUNT_PAGE:
                break
            after = str(page[-1][0])
        return min(counted, LAG_COUNT_LIMIT)

    async def close(self) -> None:
        """Pools are shared and closed by the extension."""
