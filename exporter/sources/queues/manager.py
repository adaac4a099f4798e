"""The queue extension: starts one poller per configured source and publishes their latest values.

With discovery on (``dynamic``), ``set_discovered`` adds and removes pollers while it runs: a
server found on the node gets a poller, keeps it while it stays the same, and loses it (and with
it every series) when its pod goes.

The pollers run on their own event loop in their own thread, so a burst of 200 polls (HTTP
requests, parsing) never holds up a scrape or the sampler on the main loop; they share nothing
with it but the immutable ``Outcome`` each poller replaces after each poll.

``contribute`` runs in every sampling cycle and only reads the pollers' latest outcomes (no I/O):
the depth and in-flight of sources whose latest poll succeeded, and for every source whether it
is up, how long its latest poll took and when it last succeeded. A source that is down keeps
its up/duration/last-success series and loses its depth series, so an old value is never
published as if it were fresh. The up series carries the depth's labels (queue, kind and the
static labels), so whoever reads a selection of depths can tell which of them are down.

redis-py (about 6 MiB of RSS, bench/imports.py) is imported when the first Redis source is made:
HTTP and scrape sources alone never load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample, Row

from ...sampler import Contribution
from .base import QueueSource
from .families import (
    DEPTH,
    IN_FLIGHT,
    KV_CACHE,
    KV_CAPACITY,
    LAST_SUCCESS,
    PREEMPTIONS,
    SOURCE_DURATION,
    SOURCE_UP,
    THROUGHPUT,
)
from .http_json import HttpJsonSource
from .poller import Poller
from .schedule import BurstLead, RenderClock
from .scrape import ScrapeSource
from .settings import SCRAPE_KINDS, QueueSettings

if TYPE_CHECKING:
    from .redis import RedisPools

FIRST_ROUND_WAIT = 1.0  # start() waits at most this long for the first polls
STOP_WAIT = 5.0


@dataclass(frozen=True)
class DiscoveredQueue:
    """A source found on the node (``sources/discovery``): its entry and the GPUs of its pod."""

    cfg: QueueSettings
    gpus: tuple[str, ...] = ()


class QueueExtension:
    name = "queues"

    def __init__(self, entries: Sequence[QueueSettings], interval: float, dynamic: bool = False) -> None:
        self.entries = list(entries)
        self.clock = RenderClock(interval)
        self.dynamic = dynamic  # sources may be added and removed while running (discovery)
        # Replaced whole, never changed in place: ``contribute`` on the main loop reads one list
        # while the pollers' thread builds the next.
        self.pollers: list[Poller] = []
        self.static: list[Poller] = []
        self._redis: RedisPools | None = None  # made with the first Redis source
        self._burst = BurstLead(interval)
        self._tasks: dict[Poller, asyncio.Task[None]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        self.static = [self._poller(cfg) for cfg in self.entries]
        self.pollers = list(self.static)
        if not self.pollers and not self.dynamic:
            return
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="queue-pollers", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._start_pollers(), self._loop))

    def _poller(self, cfg: QueueSettings) -> Poller:
        interval = self.clock.interval
        timeout = cfg.effective_timeout(interval)
        make = self._factory(cfg, timeout)
        return Poller(cfg, make, self.clock, cfg.interval_multiple(interval), timeout, self._burst)

    async def _start_pollers(self) -> None:
        """In the pollers' thread: start one task per source, and wait (at most FIRST_ROUND_WAIT) for
        the first polls so that the first snapshot carries the queues."""
        self._tasks = {p: asyncio.create_task(p.run(), name=f"queue {p.name}") for p in self.pollers}
        if not self.pollers:
            return
        waits = [asyncio.create_task(p.first_done.wait()) for p in self.pollers]
        _, pending = await asyncio.wait(waits, timeout=FIRST_ROUND_WAIT)
        for task in pending:
            task.cancel()

    async def set_discovered(
        self, wanted: Sequence[DiscoveredQueue], static_gpus: Mapping[str, tuple[str, ...]]
    ) -> None:
        """Make the discovered sources those of ``wanted`` (started, kept or stopped as they come
        and go) and give static sources the GPUs discovery found them on. From the main loop."""
        if self._loop is None:
            return
        work = asyncio.run_coroutine_threadsafe(self._apply(wanted, static_gpus), self._loop)
        await asyncio.wrap_future(work)

    async def _apply(
        self, wanted: Sequence[DiscoveredQueue], static_gpus: Mapping[str, tuple[str, ...]]
    ) -> None:
        current = {p.name: p for p in self.pollers if p.origin == "discovered"}
        keep: list[Poller] = []
        started: list[Poller] = []
        for item in wanted:
            old = current.pop(item.cfg.name, None)
            if old is not None and old.cfg == item.cfg:
                old.gpus = item.gpus
                keep.append(old)
                continue
            if old is not None:
                await self._retire(old)
            poller = self._poller(item.cfg)
            poller.origin, poller.gpus, poller.exact = "discovered", item.gpus, True
            self._tasks[poller] = asyncio.create_task(poller.run(), name=f"queue {poller.name}")
            keep.append(poller)
            started.append(poller)
        for gone in current.values():
            await self._retire(gone)
        if started:  # as at start: a new server is published with its first poll, not before it
            waits = [asyncio.create_task(p.first_done.wait()) for p in started]
            _, pending = await asyncio.wait(waits, timeout=FIRST_ROUND_WAIT)
            for task in pending:
                task.cancel()
        for p in self.static:  # a static entry found to be a pod's server: linked as the pod
            p.gpus, p.exact = static_gpus.get(p.name, ()), p.name in static_gpus
        self.pollers = [*self.static, *sorted(keep, key=lambda p: p.name)]

    async def _retire(self, poller: Poller) -> None:
        task = self._tasks.pop(poller, None)
        if task is not None:
            task.cancel()
            await asyncio.wait([task], timeout=STOP_WAIT)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_WAIT):
                await poller.close()

    def _factory(self, cfg: QueueSettings, timeout: float) -> Callable[[], QueueSource]:
        if cfg.kind == "redis":
            from .redis import RedisPools, RedisSource

            if self._redis is None:
                self._redis = RedisPools()
            pools = self._redis
            return lambda: RedisSource(pools, cfg, timeout)
        if cfg.kind in SCRAPE_KINDS:
            return lambda: ScrapeSource(cfg)
        return lambda: HttpJsonSource(cfg)

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        self.clock.observe(time.monotonic())
        depth: list[Row] = []
        in_flight: list[Row] = []
        kv_cache: list[Row] = []
        preemptions: list[Row] = []
        kv_capacity: list[Row] = []
        counted: dict[str, list[Row]] = {name: [] for name in THROUGHPUT}
        up: list[Row] = []
        duration: list[Row] = []
        last: list[Row] = []
        api: list[dict[str, Any]] = []
        down: list[str] = []
        slowest = 0.0
        pollers = self.pollers
        for p in pollers:
            out = p.outcome
            queue_labels, series_labels = p.queue_labels, p.series_labels
            item: dict[str, Any] = {
                "name": p.name,
                "kind": p.kind,
                "origin": p.origin,
                "gpus": list(p.gpus),
                "labels": dict(p.cfg.labels),
                "target": p.target,
                "interval_seconds": p.every,
                "up": None if out is None else out.up,
                "depth": None,
                "in_flight": None,
                "duration_seconds": None if out is None else out.duration_seconds,
                "last_success_timestamp_seconds": None if out is None else out.last_success,
                "error": None if out is None else out.error,
            }
            api.append(item)
            if out is None:  # not polled yet
                continue
            up.append(Row(1.0 if out.up else 0.0, series_labels))  # the depth's labels: joined on them
            duration.append(Row(out.duration_seconds, queue_labels))
            slowest = max(slowest, out.duration_seconds)
            if out.last_success is not None:
                last.append(Row(out.last_success, queue_labels))
            if out.value is None:
                down.append(p.name)
                continue
            depth.append(Row(out.value.depth, series_labels))
            item["depth"] = out.value.depth
            if out.value.in_flight is not None:
                in_flight.append(Row(out.value.in_flight, series_labels))
                item["in_flight"] = out.value.in_flight
            if out.value.kv_cache_usage is not None:
                kv_cache.append(Row(out.value.kv_cache_usage, series_labels))
            if out.value.preemptions_total is not None:
                preemptions.append(Row(out.value.preemptions_total, series_labels))
            if out.value.kv_cache_bytes is not None:
                kv_capacity.append(Row(out.value.kv_cache_bytes, series_labels))
                item["kv_cache_capacity_bytes"] = round(out.value.kv_cache_bytes)
            v = out.value
            totals = (v.generated_tokens_total, v.prompt_tokens_total, v.requests_total)
            for name, total in zip(THROUGHPUT, totals, strict=True):
                if total is not None:
                    counted[name].append(Row(total, series_labels))
        error = None
        if down:
            error = f"{len(down)} of {len(pollers)} queue sources down: {', '.join(down[:5])}"
            error += ", ..." if len(down) > 5 else ""
        rows = {
            DEPTH: tuple(depth),
            IN_FLIGHT: tuple(in_flight),
            SOURCE_UP: tuple(up),
            SOURCE_DURATION: tuple(duration),
            LAST_SUCCESS: tuple(last),
            KV_CACHE: tuple(kv_cache),
            PREEMPTIONS: tuple(preemptions),
            KV_CAPACITY: tuple(kv_capacity),
            **{name: tuple(rows) for name, rows in counted.items()},
        }
        status = CollectorStatus(self.name, not down, slowest, error)
        return Contribution(rows=rows, api={"queues": api}, collectors=(status,))

    async def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        stopping = asyncio.run_coroutine_threadsafe(self._stop_pollers(), loop)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.wrap_future(stopping), STOP_WAIT * 2)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, STOP_WAIT)
        if not thread.is_alive():
            loop.close()
        self._loop = self._thread = None

    async def _stop_pollers(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_WAIT)
        self._tasks = {}
        with contextlib.suppress(Exception):
            async with asyncio.timeout(STOP_WAIT):
                for p in self.pollers:
                    await p.close()
                if self._redis is not None:
                    await self._redis.close()
