"""Direct mode: scrape the exporters' /metrics and compute every rule from the samples.

Exporters are scraped concurrently, each with its own deadline, each just after it publishes a
new snapshot (``pace.py``), so a published change reaches the cache within a few tens of
milliseconds. Only the lines of the families the rules read are read (``exposition.py``, labels
parsed by prometheus-client once per series), and an unchanged body is not read again. Every
answer is bounded (``fetch.py``: bytes as received and decompressed, series, time).

An exporter counts only while it is current: it answers with a Rightsizer exposition (junk, an
HTML page or an empty 200 make it down) and its ``rightsizer_last_sample_timestamp_seconds``
moves (an exporter serving the same snapshot over and over is frozen). When it fails or freezes
its last values are served for ``stale_after_seconds`` (plus its own interval, for a stamp that
stands still); after that what it published is missed. Rules with a source family (the queues,
the GPU rules) then fail only for the requests selecting what it published (503 naming it);
others fail whole. An exporter that never answered might hold anything: every request fails
until it does (or is removed from ``direct.exporters``). A value that is not a number refuses the
key it falls into (503 naming its exporter), never leaves it smaller. One that is still starting (connection
refused, or 503 before its first sample) is waited for quietly for ``START_GRACE`` seconds after
the adapter's start: one info line, not a warning per exporter and rule on every clean start.
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

from rightsizer_core.logs import Repeats, event, shape

from ..config import DirectSettings
from ..rules import Aggregation, DirectRule, RuleConfig
from ..selfmetrics import AdapterMetrics
from ..vectors import Series, aggregate
from . import DOWN, STALE, UP, RuleResult, reasons, refuse_non_finite, state
from .exposition import SampleReader
from .fetch import ScrapeError, decode, fetch
from .pace import STAMP_FAMILY, Pace

log = logging.getLogger("rightsizer.adapter.scrape")
MIN_ROUND_GAP = 0.05  # rounds for exporters due close together are merged
START_GRACE = 30.0  # seconds an exporter still starting is waited for without a warning


def metrics_url(url: str) -> str:
    parts = urlsplit(url)
    return url if parts.path not in ("", "/") else url.rstrip("/") + "/metrics"


@dataclass
class Exporter:
    url: str
    instance: str
    reader: SampleReader
    pace: Pace
    digest: int | None = None  # hash of the last body read, so an unchanged one is not read again
    read_families: frozenset[str] = frozenset()
    version: int = 0  # bumped whenever ``samples`` is replaced
    samples: dict[str, list[Series]] = field(default_factory=dict)
    last_success: float | None = None  # monotonic; None: it never gave a usable answer
    error: str | None = None
    stamp: float | None = None  # its last sample time, and when (monotonic) that last changed
    stamp_moved: float = 0.0
    reported: str | None = None  # the failure last warned about (None: none since it answered)
    starting: bool = False  # never answered, and waited for quietly (START_GRACE)

    def verdict(self, now: float, cfg: DirectSettings) -> str:
        """"" while its values count; else why not (one line)."""
        if self.last_success is None:
            return f"exporter {self.url} has not answered since the adapter started" + (
                f": {self.error}" if self.error else ""
            )
        if self.error is not None and now - self.last_success > cfg.stale_after_seconds:
            return f"exporter {self.url} is not answering: {self.error}"
        allowed = cfg.stale_after_seconds + max(self.pace.period or 0.0, self.pace.fallback)
        if now - self.stamp_moved > allowed:
            return (
                f"exporter {self.url} is frozen: its sample time "
                f"(rightsizer_last_sample_timestamp_seconds) has not moved for over {allowed:g}s"
            )
        return ""


def evaluate(
    rule: RuleConfig, samples: Sequence[Series], refused: list[Series] | None = None
) -> list[Series]:
    """A direct rule's vector: matching samples, scaled, grouped and aggregated. A group holding a
    value that is not a number is left out, and (with ``refused``) added there with that value."""
    d: DirectRule | None = rule.direct
    assert d is not None
    matchers = rule.matchers
    how: Aggregation = d.aggregation
    groups: dict[tuple[tuple[str, str], ...], list[float]] = {}
    bad: dict[tuple[tuple[str, str], ...], float] = {}
    drop = set(d.without)
    for s in samples:
        labels = s.labels
        if not all(m.matches(labels) for m in matchers):
            continue
        if d.by:
            key = tuple((name, labels[name]) for name in d.by if labels.get(name))
        else:
            key = tuple(sorted((k, v) for k, v in labels.items() if k not in drop and v))
        value = s.value * d.scale + d.offset
        if math.isfinite(value):
            groups.setdefault(key, []).append(value)
        else:
            bad.setdefault(key, value)
    rename = d.rename
    if refused is not None:
        refused.extend(Series({rename.get(k, k): v for k, v in key}, value) for key, value in bad.items())
    return [
        Series({rename.get(k, k): v for k, v in key}, aggregate(how, values))
        for key, values in groups.items()
        if key not in bad
    ]


def source_states(rule: RuleConfig, exporter: Exporter, why: str) -> list[Series]:
    """The states of what ``exporter`` publishes (or published, when ``why`` says it is not current)."""
    family = rule.states_family
    assert family is not None
    matchers = rule.matchers
    why_down = reasons(rule, exporter.samples.get(rule.why_family or "", ()))  # the rule's why_family
    out = []
    for s in exporter.samples.get(family, ()):
        if not all(m.matches(s.labels) for m in matchers):
            continue
        key = rule.key_of(s.labels)
        if why:
            out.append(state(key, exporter.url, STALE, why))
        elif rule.up_family is not None and s.value != 1:
            reason = why_down.get((frozenset(key.items()), ())) or "the source is down"
            out.append(state(key, exporter.url, DOWN, f"{family} is {s.value:g} ({reason})"))
        else:
            out.append(state(key, exporter.url, UP))
    return out


class ScrapeSource:
    name = "direct"
    repeats_results = True  # collect gives the same results object while nothing changed

    def __init__(self, cfg: DirectSettings, metrics: AdapterMetrics) -> None:
        self.cfg = cfg
        self.interval = cfg.scrape_interval_seconds
        self.metrics = metrics
        self.exporters = [
            Exporter(
                metrics_url(u),
                urlsplit(u).netloc,
                SampleReader(urlsplit(u).netloc, cfg.max_series_per_exporter),
                Pace(self.interval),
            )
            for u in cfg.exporters
        ]
        self._session: aiohttp.ClientSession | None = None
        self._last: tuple[object, dict[str, RuleResult]] | None = None  # (what it was computed from, results)
        self._started = time.monotonic()
        self._repeats = Repeats()  # a failure whose words change every poll (a wrong URL's page size)

    @property
    def waiting(self) -> bool:
        """No exporter has answered yet, and one is still starting: the cache says nothing yet."""
        return any(e.starting for e in self.exporters) and all(e.last_success is None for e in self.exporters)

    async def start(self) -> None:
        self._started = time.monotonic()
        connector = aiohttp.TCPConnector(limit_per_host=2)
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers={"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip"},
            auto_decompress=False,  # fetch() decompresses, counting the bytes against the cap
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _fetch(self, exporter: Exporter) -> bytes:
        assert self._session is not None, "start() first"
        try:
            cfg = self.cfg
            return await fetch(self._session, exporter.url, cfg.timeout_seconds, cfg.max_body_bytes)
        except TimeoutError:
            raise ScrapeError(f"timed out after {self.cfg.timeout_seconds}s") from None
        except aiohttp.ClientConnectorError as exc:
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            why = exc.os_error.strerror or str(exc) if exc.os_error else str(exc)
            raise ScrapeError(why, starting=refused) from None
        except aiohttp.ClientError as exc:
            raise ScrapeError(f"{type(exc).__name__}: {exc}") from None

    def _read(self, exporter: Exporter, body: bytes, families: frozenset[str]) -> None:
        digest = hash(body)
        if digest == exporter.digest and families == exporter.read_families:
            return
        samples = exporter.reader.read(decode(body), families)
        stamps = samples.get(STAMP_FAMILY)
        if not stamps:
            raise ScrapeError(
                f"its answer holds no {STAMP_FAMILY}: not a Rightsizer exporter's /metrics "
                f"({len(body)} bytes, starting {body[:40]!r})"
            )
        if not math.isfinite(stamps[0].value):  # NaN would differ from itself: always "moving"
            raise ScrapeError(f"its {STAMP_FAMILY} is {stamps[0].value}, not a time")
        exporter.samples, exporter.digest, exporter.read_families = samples, digest, families
        exporter.version += 1

    async def _scrape(self, exporter: Exporter, families: frozenset[str]) -> None:
        started = time.perf_counter()
        try:
            self._read(exporter, await self._fetch(exporter), families)
        except ValueError as exc:  # ScrapeError, or a wanted line that does not parse
            self.metrics.upstream(self.name, time.perf_counter() - started, False)
            exporter.pace.failed(time.monotonic())
            reason = str(exc).splitlines()[0][:200] or type(exc).__name__
            starting = exporter.last_success is None and getattr(exc, "starting", False)
            if starting and time.monotonic() - self._started < START_GRACE:
                if not exporter.starting:
                    event(log, logging.INFO, "waiting for the exporter's first sample", exporter=exporter.url,
                          reason=reason)  # fmt: skip
                exporter.starting = True
            elif exporter.reported != reason:
                key, failed = (exporter.url, shape(reason)), "exporter scrape failed"
                self._repeats.warning(key, log, failed, exporter=exporter.url, reason=reason)
                exporter.reported, exporter.starting = reason, False
            exporter.error = reason
            return
        self.metrics.upstream(self.name, time.perf_counter() - started, True)
        if exporter.reported is not None:
            event(log, logging.INFO, "exporter answers again", exporter=exporter.url)
            self._repeats.forget(lambda key: key[0] == exporter.url)
        now = time.monotonic()
        exporter.error = exporter.reported = None
        exporter.starting = False
        exporter.last_success = now
        stamp = exporter.samples[STAMP_FAMILY][0].value
        if stamp != exporter.stamp:
            exporter.stamp, exporter.stamp_moved = stamp, now
        exporter.pace.scraped(stamp, now, time.time())

    def next_delay(self, elapsed: float, age: float = 0.0) -> float:
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
                *(f for r in rules if (f := r.states_family) is not None),
                *(f for r in rules if (f := r.why_family) is not None),
            }
        )
        due = math.inf if everything else time.monotonic() + 0.005
        await asyncio.gather(*(self._scrape(e, families) for e in self.exporters if e.pace.due <= due))
        now = time.monotonic()
        verdicts = [e.verdict(now, self.cfg) for e in self.exporters]
        seen = tuple((e.version, why) for e, why in zip(self.exporters, verdicts, strict=True))
        basis = (tuple(rules), seen)
        if self._last is not None and self._last[0] == basis:
            return self._last[1]  # nothing changed: the same results, so answers stay memoized
        out = self._evaluate(rules, verdicts, time.time())
        self._last = (basis, out)
        return out

    def _evaluate(
        self, rules: Sequence[RuleConfig], verdicts: list[str], stamp: float
    ) -> dict[str, RuleResult]:
        judged = list(zip(self.exporters, verdicts, strict=True))
        current = [e for e, why in judged if not why]
        if not current:
            errors = "; ".join(verdicts)
            return {r.name: RuleResult(error=f"no exporter is current ({errors})"[:500]) for r in rules}
        unknown = "; ".join(w for e, w in judged if e.last_success is None)
        dead = [(e, w) for e, w in judged if w and e.last_success is not None]
        by_family: dict[str, list[Series]] = {}
        for e in current:
            for family, samples in e.samples.items():
                by_family.setdefault(family, []).extend(samples)
        out: dict[str, RuleResult] = {}
        for rule in rules:
            assert rule.direct is not None
            refused: list[Series] = []
            values = tuple(evaluate(rule, by_family.get(rule.direct.family, ()), refused))
            where = _publisher(rule.direct.family, current, refused)
            if rule.states_family is not None:
                states = [s for e in current for s in source_states(rule, e, "")]
                states += [s for e, why in dead for s in source_states(rule, e, why)]
                result = RuleResult(values, stamp, sources=tuple(states), unknown=unknown[:500])
                out[rule.name] = refuse_non_finite(result, refused, where)
                continue
            # Without source states a rule fails whole when a source of its family is not current.
            failure = unknown or next((w for e, w in dead if rule.direct.family in e.samples), "")
            result = RuleResult(error=failure[:500]) if failure else RuleResult(values, stamp)
            out[rule.name] = refuse_non_finite(result, refused, where)
        return out


def _publisher(family: str, current: Sequence[Exporter], refused: Sequence[Series]) -> str:
    """The exporter(s) whose ``family`` holds a value that is not a number (for the 503)."""
    if not refused:
        return ""
    urls = [e.url for e in current if any(not math.isfinite(s.value) for s in e.samples.get(family, ()))]
    return "exporter " + ", ".join(urls[:3]) if urls else "an exporter"
