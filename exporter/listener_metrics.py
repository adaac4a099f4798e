"""Publish the HTTP listener's own counters (rightsizer_core.listener.ListenerStats) each cycle."""

from __future__ import annotations

from rightsizer_core.listener import ListenerStats
from rightsizer_core.snapshot import GpuReading, GpuSample, Row

from .metrics import FAMILIES_BY_NAME
from .sampler import Contribution

MALFORMED, DROPPED, ACCEPT_ERRORS, OPEN = (
    FAMILIES_BY_NAME[name].name
    for name in (
        "rightsizer_http_malformed_requests_total",
        "rightsizer_http_connections_dropped_total",
        "rightsizer_http_accept_errors_total",
        "rightsizer_http_open_connections",
    )
)


class ListenerMetrics:
    name = "http_listener"

    def __init__(self, stats: ListenerStats) -> None:
        self.stats = stats

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        s = self.stats
        dropped = (
            Row(float(s.header_timeouts), (("reason", "header_timeout"),)),
            Row(float(s.response_timeouts), (("reason", "response_timeout"),)),
            Row(float(s.connections_evicted), (("reason", "evicted"),)),
            Row(float(s.connections_refused), (("reason", "refused"),)),
        )
        return Contribution(
            rows={
                MALFORMED: (Row(float(s.malformed_requests)),),
                DROPPED: dropped,
                ACCEPT_ERRORS: (Row(float(s.accept_errors)),),
                OPEN: (Row(float(s.open_connections)),),
            }
        )
