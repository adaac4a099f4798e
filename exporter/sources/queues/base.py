"""What every queue source returns, how its expected faults are worded, and secret files."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from rightsizer_core.files import read_secret, read_token
from rightsizing.slo.latency import Histogram

REASON_LIMIT = 200


@dataclass(frozen=True, slots=True)
class QueueValue:
    """One successful poll: items waiting and, where the source reports it, items being worked on."""

    depth: float
    in_flight: float | None = None
    # Inference servers' memory pressure, read from the same exposition as the depth (scrape kinds).
    kv_cache_usage: float | None = None  # KV-cache usage 0-1
    preemptions_total: float | None = None  # preempted (vLLM) or retracted (SGLang) requests
    # Throughput counters, read on the same poll (scrape kinds): tokens generated, prompt tokens
    # processed, requests finished. Each as the server counts it, series summed.
    generated_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    requests_total: float | None = None
    # Latency histograms read on the same poll (scrape kinds): kind (ttft, itl, e2e, queue) ->
    # cumulative histogram in seconds; None when the server publishes none.
    latency: Mapping[str, Histogram] | None = None
    # The server's KV-cache pool in bytes, over all of its GPUs, when its cache configuration and
    # model shape say (vLLM: ``kv_pool``); None when unknown.
    kv_cache_bytes: float | None = None
    # Latency kinds whose histogram this poll refused (``histogram_series``) -> why; never used.
    latency_refused: Mapping[str, str] | None = None


class QueueSourceError(Exception):
    """An expected fault of a source (bad answer, missing metric, NaN...). The message is the
    one-line reason; it must not vary from poll to poll for the same fault, so it is logged once."""


class QueueSource(Protocol):
    async def read(self) -> QueueValue:
        """Read the source once. Raises QueueSourceError (or a client library's error) on a fault.
        The caller applies the deadline."""
        ...

    async def close(self) -> None: ...


def finite(value: float, what: str) -> float:
    if math.isnan(value):
        raise QueueSourceError(f"{what} is NaN")
    if math.isinf(value):
        raise QueueSourceError(f"{what} is infinite")
    return value


def how_many(value: float, what: str) -> float:
    """A count of requests (depth, in flight): finite and not negative, else the source is bad."""
    value = finite(value, what)
    if value < 0:
        raise QueueSourceError(f"{what} is negative ({value:g}): not a number of requests")
    return value


def shorten(text: str, limit: int = REASON_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def redact(url: str) -> str:
    """The URL without its password (``redis://:secret@host`` → ``redis://:***@host``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class SecretFile:
    """A token or password kept in a file (e.g. a mounted Kubernetes secret): read on first use and
    again every ``refresh`` seconds, so rotated secrets are picked up without a restart."""

    def __init__(self, path: str, what: str, refresh: float = 60.0, token: bool = False) -> None:
        self.path = path
        self.token = token  # sent as a header value: one line of printable ASCII
        self.what = what
        self.refresh = refresh
        self._value: str | None = None
        self._read_at = 0.0

    def value(self) -> str:
        now = time.monotonic()
        if self._value is None or now - self._read_at >= self.refresh:
            try:
                self._value = read_token(self.path) if self.token else read_secret(self.path)
            except OSError as exc:
                why = exc.strerror or exc
                raise QueueSourceError(f"cannot read {self.what} {self.path}: {why}") from None
            self._read_at = now
        return self._value
