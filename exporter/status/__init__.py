"""The exporter's status page at ``/`` (server-rendered HTML; see ``page``).

The page's model and HTML writer (and the engine modules they read) load on the first request for
the page: an exporter nobody opens the page of never imports them (bench/imports.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from .assets import CONTENT_SECURITY_POLICY

__all__ = ["CONTENT_SECURITY_POLICY", "StatusPage"]


class StatusPage:
    """Renders the page of a published cycle on the first request for it and keeps the bytes until
    the next cycle is published: any number of viewers cost one render per cycle, and the sampling
    loop never renders it. The content is read on the event loop (the engine's windows live there;
    finished buckets are remembered, so a cycle reads one bucket per chart), the HTML is written in
    a worker thread (bench/status.py prints both costs)."""

    def __init__(self, source: str, interval: float) -> None:
        self.source = source
        self.interval = interval
        self._for: Any = None
        self._body = b""
        self._lock = asyncio.Lock()
        self._memo: Any = None  # a ChartMemo, made with the first render
        self.renders = 0

    async def body(self, published: Any) -> bytes:
        if published is self._for:
            return self._body
        async with self._lock:  # concurrent first requests of a cycle share one render
            if published is not self._for:
                from .model import ChartMemo, build
                from .page import render

                if self._memo is None:
                    self._memo = ChartMemo()
                model = build(published.snapshot, self.source, self.interval, self._memo)
                self._body = await asyncio.to_thread(lambda: render(model).encode())
                self._for = published
                self.renders += 1
        return self._body
