"""The queue extension inside a real Sampler, for in-process tests, and an async polling helper."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def eventually(
    predicate: Callable[[], Any | Awaitable[Any]], timeout: float = 15.0, what: str = "condition"
) -> Any:
    """Async counterpart of servers.wait_for: poll without blocking the event loop."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class QueueHarness:
    """The queue extension inside a real Sampler (no GPUs) rendering every ``interval``: what the
    exporter publishes, read from the rendered exposition and the snapshot's JSON section."""

    def __init__(self, entries: list[dict[str, Any]], interval: float = 0.1) -> None:
        from fakes import FakeSource

        from exporter.config import ExporterConfig
        from exporter.render import Renderer
        from exporter.sampler import Sampler
        from exporter.sources.queues.manager import QueueExtension
        from rightsizer_core.settings import build

        cfg = build(ExporterConfig, {"interval": interval, "queues": entries}, "")
        self.extension = QueueExtension(cfg.queues, cfg.interval)
        self.sampler = Sampler(FakeSource(0), Renderer(), cfg.interval, "node-1", [self.extension])

    async def __aenter__(self) -> QueueHarness:
        await self.sampler.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sampler.stop()

    def series(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        from prometheus_client.parser import text_string_to_metric_families

        published = self.sampler.current
        assert published is not None
        out = {}
        for family in text_string_to_metric_families(published.exposition.text.decode()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def value(self, family: str, queue: str) -> float | None:
        """The value of ``family`` for ``queue`` in the latest rendered exposition (None if absent)."""
        for (name, labels), v in self.series().items():
            if name == family and ("queue", queue) in labels:
                return v
        return None

    def depth(self, queue: str) -> float | None:
        return self.value("rightsizer_queue_depth", queue)

    def up(self, queue: str) -> float | None:
        return self.value("rightsizer_queue_source_up", queue)

    def api(self, queue: str) -> dict[str, Any]:
        published = self.sampler.current
        assert published is not None
        items = published.snapshot.api["queues"]
        assert isinstance(items, list)
        return next(item for item in items if item["name"] == queue)
