"""The sampling loop: source → snapshot → rendered bytes, once per interval, off the scrape path.

Extensions (pod attribution, queues, right-sizing) see each cycle's reading and add their rows;
they must be fast and do no I/O in ``contribute`` (their own I/O runs on their own cadence).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from rightsizer_core import strict_json
from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample, Row, Snapshot

from .lazy import LazyRows, LazySections, merge_rows
from .render import Exposition, Renderer
from .sources.base import GpuSource

log = logging.getLogger("rightsizer.sampler")

# A render that took less than this runs the next one on the event loop: handing a small fleet's
# exposition (8 GPUs: ~0.2 ms) to a worker thread costs more CPU (two thread wake-ups) than rendering
# it. Slower renders (large fleets, and the first one) run in a worker thread, so the event loop
# keeps answering meanwhile.
INLINE_RENDER_SECONDS = 0.002

# A cycle's exposition is rendered only when it is wanted: by the cycle itself when the previous
# cycle's exposition was scraped (scrapers at least as frequent as cycles find the bytes ready), else
# by the first scrape that asks for it. With no scrapes, nothing is rendered; with Prometheus
# scraping every 15 s and sampling at 1 s, 2 renders in 15 cycles instead of 15.


@dataclass(frozen=True)
class Contribution:
    rows: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)
    api: Mapping[str, object] = field(default_factory=dict)
    collectors: tuple[CollectorStatus, ...] = ()
    # When set, replaces the cycle's GPU samples (e.g. with pod labels attached).
    gpus: tuple[GpuSample, ...] | None = None


class Extension(Protocol):
    name: str

    async def start(self) -> None: ...

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution: ...

    async def stop(self) -> None: ...


class Published:
    """One cycle's output: the snapshot, and its exposition, rendered on first use."""

    __slots__ = ("_api_json", "_exposition", "_lock", "_render", "scraped", "snapshot")

    def __init__(self, snapshot: Snapshot, render: Callable[[Snapshot], Exposition]) -> None:
        self.snapshot = snapshot
        self.scraped = False  # /metrics asked for this cycle's bytes
        self._render = render
        self._exposition: Exposition | None = None
        self._lock = threading.Lock()  # one render, whether a worker thread or the loop asks first
        self._api_json: dict[str, bytes] = {}

    @property
    def exposition(self) -> Exposition:
        found = self._exposition
        if found is None:
            with self._lock:
                found = self._exposition
                if found is None:
                    found = self._exposition = self._render(self.snapshot)
        return found

    def ready(self, openmetrics: bool, gzipped: bool) -> bytes | None:
        """The bytes in that format if they are made already (no render, no compression)."""
        return None if self._exposition is None else self._exposition.cached(openmetrics, gzipped)

    def api_json(self, key: str, build: Any) -> bytes:
        cached = self._api_json.get(key)
        if cached is None:
            cached = self._api_json[key] = strict_json.dumps(
                build(self.snapshot), separators=(",", ":")
            ).encode()
        return cached


class Sampler:
    def __init__(
        self,
        source: GpuSource,
        renderer: Renderer,
        interval: float,
        hostname: str,
        extensions: Sequence[Extension] = (),
    ) -> None:
        self.source = source
        self.renderer = renderer
        self.interval = interval
        self.hostname = hostname
        self.extensions = list(extensions)
        self.current: Published | None = None
        self.ready = asyncio.Event()
        # Formats scrapers asked for: (openmetrics, gzip). Pre-built by a cycle whose previous cycle
        # was scraped, so frequent scrapes only copy bytes.
        self.wanted_formats: set[tuple[bool, bool]] = set()
        self.cycles = 0
        self.renders = 0  # expositions rendered (none for cycles nobody scraped)
        self.render_inline = False  # set by the last render's duration, see INLINE_RENDER_SECONDS
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.source.start()
        for ext in self.extensions:
            await ext.start()
        await self.cycle()
        self._task = asyncio.create_task(self._run(), name="sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for ext in reversed(self.extensions):
            await ext.stop()
        await self.source.stop()

    async def _run(self) -> None:
        next_at = time.monotonic() + self.interval
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            try:
                await self.cycle()
            except Exception:  # an unexpected bug must not stop sampling; the old snapshot stays
                log.exception("sampling cycle failed")
            now = time.monotonic()
            next_at += self.interval
            if next_at < now:  # fell behind (slow source): skip missed ticks instead of bursting
                next_at = now + self.interval

    async def cycle(self) -> Published:
        reading = await self.source.collect()
        gpus = reading.gpus
        parts: list[Mapping[str, tuple[Row, ...]]] = []
        api: dict[str, object] = {}
        lazy = False  # some rows or sections are computed on first read (see ``lazy``)
        collectors = [reading.status]
        for ext in self.extensions:
            started = time.perf_counter()
            try:
                contrib = ext.contribute(reading, gpus)
            except Exception as exc:
                log.exception("extension failed", extra={"extension": ext.name})
                collectors.append(CollectorStatus(ext.name, False, time.perf_counter() - started, str(exc)))
                continue
            if contrib.gpus is not None:
                gpus = contrib.gpus
            parts.append(contrib.rows)
            sections = contrib.api
            if isinstance(sections, LazySections):
                sections, lazy = sections.raw(), True
            lazy = lazy or isinstance(contrib.rows, LazyRows)
            for section, value in sections.items():
                before = api.get(section)
                both_lists = isinstance(before, list) and isinstance(value, list)
                api[section] = before + value if both_lists else value  # type: ignore[operator]
            collectors.extend(contrib.collectors)
        rows: Mapping[str, tuple[Row, ...]]
        api_view: Mapping[str, object]
        if lazy:
            rows, api_view = LazyRows(partial(merge_rows, parts)), LazySections(api)
        else:
            rows, api_view = merge_rows(parts), api
        snapshot = Snapshot(reading.timestamp, self.hostname, gpus, tuple(collectors), rows, api_view)
        published = Published(snapshot, self._render_counted)
        previous = self.current
        # Published before anything awaits: lazy parts read later must find the extensions' state of
        # this cycle, so no reader may see the previous cycle once this one was fed.
        self.current = published
        if previous is not None and previous.scraped:
            await self._build(published, tuple(self.wanted_formats))
        self.cycles += 1
        if not self.ready.is_set():
            self.ready.set()
            event(log, logging.INFO, "first sample taken", gpus=len(gpus), source=self.source.name)
        _log_changes(previous, published)
        return published

    async def body(self, published: Published, openmetrics: bool, gzipped: bool) -> bytes:
        """/metrics bytes of a cycle: rendered (and compressed) on the first scrape that asks, on the
        event loop when the last render was quick, else in a worker thread."""
        published.scraped = True
        if (openmetrics, gzipped) not in self.wanted_formats:
            self.wanted_formats.add((openmetrics, gzipped))
        ready = published.ready(openmetrics, gzipped)
        if ready is None:
            await self._build(published, ((openmetrics, gzipped),))
            ready = published.exposition.body(openmetrics, gzipped)
        return ready

    async def _build(self, published: Published, formats: tuple[tuple[bool, bool], ...]) -> None:
        rows = published.snapshot.rows
        if isinstance(rows, LazyRows):
            rows.resolve()  # on the event loop, where the extensions' state lives, never in the worker
        if self.render_inline:
            took = _build(published, formats)
        else:
            took = await asyncio.to_thread(_build, published, formats)
        self.render_inline = took < INLINE_RENDER_SECONDS

    def _render_counted(self, snapshot: Snapshot) -> Exposition:
        self.renders += 1
        return self.renderer.render(snapshot)


def _build(published: Published, formats: tuple[tuple[bool, bool], ...]) -> float:
    """Render ``published`` in every format asked for; the seconds it took."""
    started = time.perf_counter()
    for om, gz in formats or ((False, False),):
        published.exposition.body(om, gz)
    return time.perf_counter() - started


def _log_changes(previous: Published | None, current: Published) -> None:
    """One log line when a GPU goes down or comes back, not one per cycle."""
    if previous is None:
        return
    before = {g.identity.key: g.up for g in previous.snapshot.gpus}
    for g in current.snapshot.gpus:
        was = before.get(g.identity.key)
        if was is not None and was != g.up:
            if g.up:
                event(log, logging.INFO, "GPU back", uuid=g.identity.uuid, gpu=g.identity.index)
            else:
                event(
                    log,
                    logging.WARNING,
                    "GPU down",
                    uuid=g.identity.uuid,
                    gpu=g.identity.index,
                    error=g.error or "",
                )
