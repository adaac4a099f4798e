"""The exporter's status page at ``/`` (server-rendered HTML; see ``page``)."""

from __future__ import annotations

from typing import Any

from .assets import CONTENT_SECURITY_POLICY
from .model import build
from .page import render

__all__ = ["CONTENT_SECURITY_POLICY", "StatusPage"]


class StatusPage:
    """Renders the page of a published cycle on the first request for it and keeps the bytes until
    the next cycle is published: any number of viewers cost one render per cycle, and the sampling
    loop never renders it."""

    def __init__(self, source: str, interval: float) -> None:
        self.source = source
        self.interval = interval
        self._for: Any = None
        self._body = b""
        self.renders = 0

    def body(self, published: Any) -> bytes:
        if published is not self._for:
            self._body = render(build(published.snapshot, self.source, self.interval)).encode()
            self._for = published
            self.renders += 1
        return self._body
