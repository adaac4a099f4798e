"""Direct mode: scrape the exporters' /metrics and compute every rule from the samples.

Exporters are scraped concurrently, each with its own deadline, each just after it publishes a
new snapshot (``pace.py``; every ``scrape_interval_seconds`` for exporters that do not say when
they sampled), so a published change reaches the cache within a few tens of milliseconds. Only
the lines of the families the rules read are read (``exposition.py``, labels parsed by
prometheus-client once per series), and an unchanged body is not read again.

An exporter that fails keeps its last good samples for ``stale_after_seconds``; after that every
rule fed by a family it used to publish fails (503) instead of silently dropping its series, so
a dead node never reads as an empty queue. Rules with an ``up_family`` (the queues) are finer:
the sources a dead exporter published become stale, so only requests selecting them fail.
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

from rightsizer_core.logs import event

from ..config import DirectSettings
from ..rules import Aggregation, DirectRule, RuleConfig
from ..selfmetrics import AdapterMetrics
from ..vectors import Series, aggregate
from . import STALE, RuleResult
from .exposition import SampleReader
from .pace import STAMP_FAMILY, Pace

log = logging.getLogger("rightsizer.adapter.scrape")
MIN_ROUND_GAP = 0.05  # rounds for exporters due close together are merged


def metrics_url(url: str) -> str:
    parts = urlsplit(url)
    return url if parts.path not in ("", "/") else url.rstrip("/") + "/metrics"


@dataclass
class Exporter:
    url: str
    instance: str
    reader: SampleReader
    pace: Pace
    body: bytes = b""
    read_families: frozenset[str] = frozenset()
    version: int = 0  # bumped whenever ``samples`` is replaced
    samples: dict[str, list[Series]] = field(default_factory=dict)
    last_success: float | None = None
    error: str | None = None


def evaluate(rule: RuleConfig, samples: Sequence[Series], states: bool = False) -> list[Series]:
    """A direct rule's vector: matching samples, scaled, grouped and aggregated (``states``: the
    rule's source states, grouped alike but kept unscaled and combined by max)."""
    d: DirectRule | None = rule.direct
    assert d is not None
    matchers = rule.matchers
    scale: float = 1.0 if states else d.scale
    how: Aggregation = "max" if states else d.aggregation
    groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
    drop = set(d.without)
    for s in samples:
        labels = s.labels
        if not all(m.matches(labels) for m in matchers):
            continue
        value = s.value * scale
        if not math.isfinite(value):
            continue
        if d.by:
            key = tuple((name, labels[name]) for name in d.by if labels.get(name))
        else:
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in drop and v))
        groups.setdefault(key, []).append(value)
    rename = d.rename
    return [
        Series({rename.get(k, k): v for k, v in key}, aggregate(how, values))
        for key, values in groups.items()
    ]


class ScrapeSource:
    name = "direct"

    def __init__(self, cfg: DirectSettings, metrics: AdapterMetrics) -> None:
        self.cfg = cfg
        self.interval = cfg.scrape_interval_seconds
        self.metrics = metrics
        self.exporters = [
            Exporter(
                metrics_url(u), urlsplit(u).netloc, SampleReader(urlsplit(u).netloc), Pace(self.interval)
            )
            for u in cfg.exporters
        ]
        self._session: aiohttp.ClientSession | None = None
        self._last: tuple[object, dict[str, RuleResult]] | None = None  # (what it was computed from, results)

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
            if body != exporter.body or families != exporter.read_families:
                exporter.samples = exporter.reader.read(body.decode("utf-8", "replace"), families)
                exporter.body, exporter.read_families = body, families
                exporter.version += 1
        except ValueError as exc:
            self.metrics.upstream(self.name, time.perf_counter() - started, False)
            exporter.pace.failed(time.monotonic())
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
        stamps = exporter.samples.get(STAMP_FAMILY)
        exporter.pace.scraped(stamps[0].value if stamps else None, exporter.last_success, time.time())

    def next_delay(self, elapsed: float) -> float:
        """Until the next exporter is due (each is scraped just after it publishes), at least 50 ms."""
        now = time.monotonic()
        return max(
            MIN_ROUND_GAP, min((e.pace.due for e in self.exporters), default=now + self.interval) - now
        )

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        families = frozenset(
            {
                STAMP_FAMILY,
                *(r.direct.family for r in rules if r.direct is not None),
                *(r.up_family for r in rules if r.up_family is not None),
            }
        )
        due = math.inf if everything else time.monotonic() + 0.005
        await asyncio.gather(*(self._scrape(e, families) for e in self.exporters if e.pace.due <= due))
        now, stamp = time.monotonic(), time.time()
        fresh = [
            e.last_success is not None
            and (e.error is None or now - e.last_success <= self.cfg.stale_after_seconds)
            for e in self.exporters
        ]
        basis = (
            tuple(rules),
            tuple((e.version, ok, ok or e.error) for e, ok in zip(self.exporters, fresh, strict=True)),
        )
        if self._last is not None and self._last[0] == basis:
            return self._last[1]  # nothing changed: the same results, so answers stay memoized
        by_family: dict[str, list[Series]] = {}
        failed: dict[str, str] = {}  # family → why its rules cannot be answered
        stale: dict[str, tuple[list[Series], list[str]]] = {}  # family → dead exporters' series, why
        for e, ok in zip(self.exporters, fresh, strict=True):
            if ok:
                for family, samples in e.samples.items():
                    by_family.setdefault(family, []).extend(samples)
            elif e.last_success is not None:
                reason = f"exporter {e.url} is not answering: {e.error}"
                for family, samples in e.samples.items():
                    failed.setdefault(family, reason)
                    dead, reasons = stale.setdefault(family, ([], []))
                    dead.extend(Series(s.labels, STALE) for s in samples)
                    reasons.append(reason)
        out = self._evaluate(rules, by_family, failed, stale, stamp, any(fresh))
        self._last = (basis, out)
        return out

    def _evaluate(
        self,
        rules: Sequence[RuleConfig],
        by_family: dict[str, list[Series]],
        failed: dict[str, str],
        stale: dict[str, tuple[list[Series], list[str]]],
        stamp: float,
        anyone: bool,
    ) -> dict[str, RuleResult]:
        if not anyone:
            errors = "; ".join(f"{e.url}: {e.error}" for e in self.exporters if e.error)
            return {r.name: RuleResult(error=f"no exporter answered ({errors})"[:500]) for r in rules}
        out: dict[str, RuleResult] = {}
        for rule in rules:
            assert rule.direct is not None
            values = tuple(evaluate(rule, by_family.get(rule.direct.family, ())))
            if rule.up_family is not None:  # a dead exporter's sources turn stale, the rest answer
                dead, reasons = stale.get(rule.up_family, ([], []))
                sources = evaluate(rule, [*dead, *by_family.get(rule.up_family, ())], states=True)
                stale_reason = "; ".join(reasons)[:500]
                out[rule.name] = RuleResult(values, stamp, sources=tuple(sources), stale_reason=stale_reason)
                continue
            failure = failed.get(rule.direct.family)
            out[rule.name] = RuleResult(error=failure) if failure is not None else RuleResult(values, stamp)
        return out
