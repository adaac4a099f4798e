"""Direct mode: scrape the exporters' /metrics and compute every rule from the samples.

All exporters are scraped concurrently, each with its own deadline, on the adapter's cadence
(every 0.5 s by default, so a change the exporter publishes reaches the cache within about one
exporter interval plus half a second). Only the lines of the families the rules read are read
(``exposition.py``, labels parsed by prometheus-client once per series), and an unchanged body is
not read again.

An exporter that fails keeps its last good samples for ``stale_after_seconds``; after that every
rule fed by a family it used to publish fails (503) instead of silently dropping its series, so
a dead node never reads as an empty queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from exporter.logs import event

from ..config import DirectSettings
from ..rules import DirectRule, RuleConfig
from ..selfmetrics import AdapterMetrics
from ..vectors import Series, aggregate
from . import RuleResult
from .exposition import SampleReader

log = logging.getLogger("rightsizer.adapter.scrape")


def metrics_url(url: str) -> str:
    parts = urlsplit(url)
    return url if parts.path not in ("", "/") else url.rstrip("/") + "/metrics"


@dataclass
class Exporter:
    url: str
    instance: str
    reader: SampleReader
    body: bytes = b""
    samples: dict[str, list[Series]] = field(default_factory=dict)
    last_success: float | None = None
    error: str | None = None


def evaluate(rule: RuleConfig, samples: Sequence[Series]) -> list[Series]:
    """A direct rule's vector: matching samples, scaled, grouped and aggregated."""
    d: DirectRule | None = rule.direct
    assert d is not None
    matchers = rule.matchers
    groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
    drop = set(d.without)
    for s in samples:
        labels = s.labels
        if not all(m.matches(labels) for m in matchers):
            continue
        value = s.value * d.scale
        if not math.isfinite(value):
            continue
        if d.by:
            key = tuple((name, labels[name]) for name in d.by if labels.get(name))
        else:
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in drop and v))
        groups.setdefault(key, []).append(value)
    rename = d.rename
    return [
        Series({rename.get(k, k): v for k, v in key}, aggregate(d.aggregation, values))
        for key, values in groups.items()
    ]


class ScrapeSource:
    name = "direct"

    def __init__(self, cfg: DirectSettings, metrics: AdapterMetrics) -> None:
        self.cfg = cfg
        self.interval = cfg.scrape_interval_seconds
        self.metrics = metrics
        self.exporters = [
            Exporter(metrics_url(u), urlsplit(u).netloc, SampleReader(urlsplit(u).netloc))
            for u in cfg.exporters
        ]
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit_per_host=2)
        self._session = aiohttp.ClientSession(
            connector=connector, headers={"Accept": "text/plain;version=0.0.4"}
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _fetch(self, exporter: Exporter) -> bytes:
        assert self._session is not None, "start() first"
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_seconds)
        try:
            async with self._session.get(exporter.url, timeout=timeout) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise ValueError(f"HTTP {resp.status}")
                return body
        except TimeoutError:
            raise ValueError(f"timed out after {self.cfg.timeout_seconds}s") from None
        except aiohttp.ClientConnectorError as exc:
            raise ValueError(exc.os_error.strerror or str(exc) if exc.os_error else str(exc)) from None
        except aiohttp.ClientError as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None

    async def _scrape(self, exporter: Exporter, families: frozenset[str]) -> None:
        started = time.perf_counter()
        try:
            body = await self._fetch(exporter)
            if body != exporter.body or families - exporter.samples.keys():
                exporter.samples = exporter.reader.read(body.decode("utf-8", "replace"), families)
                exporter.body = body
        except ValueError as exc:
            self.metrics.upstream(self.name, time.perf_counter() - started, False)
            reason = str(exc).splitlines()[0][:200] or type(exc).__name__
            if exporter.error != reason:
                event(log, logging.WARNING, "exporter scrape failed", exporter=exporter.url, reason=reason)
            exporter.error = reason
            return
        self.metrics.upstream(self.name, time.perf_counter() - started, True)
        if exporter.error is not None:
            event(log, logging.INFO, "exporter answers again", exporter=exporter.url)
        exporter.error = None
        exporter.last_success = time.monotonic()

    async def collect(self, rules: Sequence[RuleConfig]) -> dict[str, RuleResult]:
        families = frozenset(r.direct.family for r in rules if r.direct is not None)
        await asyncio.gather(*(self._scrape(e, families) for e in self.exporters))
        now, stamp = time.monotonic(), time.time()
        by_family: dict[str, list[Series]] = {}
        failed: dict[str, str] = {}  # family → why its rules cannot be answered
        fresh_count = 0
        for e in self.exporters:
            recent = e.last_success is not None and now - e.last_success <= self.cfg.stale_after_seconds
            if e.last_success is not None and (e.error is None or recent):
                fresh_count += 1
                for family, samples in e.samples.items():
                    by_family.setdefault(family, []).extend(samples)
            elif e.last_success is not None:
                for family in e.samples:
                    failed.setdefault(family, f"exporter {e.url} is not answering: {e.error}")
        if not fresh_count:
            reasons = "; ".join(f"{e.url}: {e.error}" for e in self.exporters if e.error)
            return {r.name: RuleResult(error=f"no exporter answered ({reasons})"[:500]) for r in rules}
        out: dict[str, RuleResult] = {}
        for rule in rules:
            assert rule.direct is not None
            why = failed.get(rule.direct.family)
            if why is not None:
                out[rule.name] = RuleResult(error=why)
            else:
                out[rule.name] = RuleResult(
                    tuple(evaluate(rule, by_family.get(rule.direct.family, ()))), stamp
                )
        return out
