"""Queue depth from Redis: a list (LLEN), stream (XLEN), sorted set (ZCARD) or set (SCARD), the key's
type detected; or a stream consumer group, whose lag is the depth and pending count the in-flight.

Sources on the same server share one small connection pool (``RedisPools``). A broken
connection is dropped by redis-py and the next poll opens a new one, so a restarted Redis is
picked up without restarting the exporter. redis-py's own retries are off: the poller's deadline
and backoff decide.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from .base import QueueSourceError, QueueValue
from .settings import QueueSettings

POOL_CONNECTIONS = 4
LAG_COUNT_LIMIT = 10_000  # when Redis cannot compute a group's lag, count at most this many entries
_LENGTH_COMMAND = {"list": "LLEN", "stream": "XLEN", "zset": "ZCARD", "set": "SCARD"}


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class RedisPools:
    """One client (and connection pool) per server, URL and credentials."""

    def __init__(self) -> None:
        self._clients: dict[tuple[Any, ...], aioredis.Redis] = {}

    def client(self, cfg: QueueSettings, timeout: float) -> aioredis.Redis:
        auth = cfg.basic_auth
        password: str | None = None
        if auth is not None and auth.password_file:
            try:
                with open(auth.password_file) as f:
                    password = f.read().strip()
            except OSError as exc:
                raise QueueSourceError(
                    f"cannot read basic_auth.password_file {auth.password_file}: {exc.strerror or exc}"
                ) from None
        elif auth is not None:
            password = auth.password
        user = auth.username if auth else None
        key = (cfg.url, user, password, cfg.tls_ca_file, cfg.tls_insecure_skip_verify)
        client = self._clients.get(key)
        if client is None:
            options: dict[str, Any] = {
                "max_connections": POOL_CONNECTIONS,
                "timeout": timeout,  # wait for a free pooled connection at most this long
                "socket_timeout": timeout,
                "socket_connect_timeout": timeout,
                "decode_responses": True,
                "client_name": "rightsizer-exporter",
            }
            if auth is not None:
                options.update(username=auth.username or None, password=password)
            if cfg.url.startswith("rediss://"):
                if cfg.tls_insecure_skip_verify:
                    options["ssl_cert_reqs"] = "none"
                elif cfg.tls_ca_file:
                    options["ssl_ca_certs"] = cfg.tls_ca_file
            pool = aioredis.BlockingConnectionPool.from_url(cfg.url, **options)
            client = self._clients[key] = aioredis.Redis(connection_pool=pool)
        return client

    async def close(self) -> None:
        for client in self._clients.values():
            await client.aclose(close_connection_pool=True)
        self._clients.clear()


class RedisSource:
    def __init__(self, pools: RedisPools, cfg: QueueSettings, timeout: float) -> None:
        assert cfg.key is not None  # checked by the configuration schema
        self.client = pools.client(cfg, timeout)
        self.key = cfg.key
        self.group = cfg.group
        self._type: str | None = None  # detected once, re-detected if the key changes type

    async def read(self) -> QueueValue:
        if self.group is not None:
            return await self._group(self.group)
        if self._type is not None:
            try:
                length = await self.client.execute_command(_LENGTH_COMMAND[self._type], self.key)
                return QueueValue(float(length))
            except ResponseError as exc:
                if not str(exc).startswith("WRONGTYPE"):
                    raise
                self._type = None  # the key was re-created with another type
        kind = str(await self.client.type(self.key))
        if kind == "none":  # Redis deletes empty lists, sets and sorted sets
            return QueueValue(0.0)
        if kind not in _LENGTH_COMMAND:
            raise QueueSourceError(f"key {self.key} holds a {kind}, not a list, stream, sorted set or set")
        self._type = kind
        return QueueValue(float(await self.client.execute_command(_LENGTH_COMMAND[kind], self.key)))

    async def _group(self, group: str) -> QueueValue:
        try:
            groups = await self.client.xinfo_groups(self.key)
        except ResponseError as exc:
            if "no such key" in str(exc).lower():
                raise QueueSourceError(f"stream {self.key} does not exist") from None
            if "WRONGTYPE" in str(exc):
                raise QueueSourceError(f"key {self.key} is not a stream") from None
            raise
        for info in groups:
            if info.get("name") == group:
                lag = info.get("lag")
                if lag is None:
                    lag = await self._count_undelivered(str(info.get("last-delivered-id", "0-0")))
                return QueueValue(float(lag), float(info.get("pending") or 0))
        raise QueueSourceError(f"consumer group {group} not found on stream {self.key}")

    async def _count_undelivered(self, last_delivered: str) -> int:
        """Redis reports no lag when entries were deleted after the group's position; count the
        entries after it instead (all of them when the group is behind the oldest entry)."""
        info = await self.client.xinfo_stream(self.key)
        first = info.get("first-entry")
        length = int(info.get("length") or 0)
        if not first or _stream_id(last_delivered) < _stream_id(str(first[0])):
            return length
        entries = await self.client.xrange(self.key, f"({last_delivered}", "+", count=LAG_COUNT_LIMIT)
        return len(entries or ())

    async def close(self) -> None:
        """Pools are shared and closed by the extension."""
