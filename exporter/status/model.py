"""What the status page shows, read from one published snapshot (no I/O, nothing computed twice).

The right-sizing conclusions come from the snapshot's ``gpus`` API section (the engine's
assessments and evidence); the charts from the window each GPU's tracker keeps. A GPU the engine
has not judged (right-sizing off, GPU down, a MIG parent judged through its instances) still gets
its row, with its verdict shown as unknown rather than as a healthy zero.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..snapshot import GpuSample, Snapshot
from ..workloads import workload_of
from .charts import Chart, Series


@dataclass(frozen=True, slots=True)
class GpuRow:
    sample: GpuSample
    verdict: str | None  # None: not judged (see ``why_unjudged``)
    reason: str = ""
    summary: str = ""
    bottlenecks: tuple[str, ...] = ()
    recommended: str | None = None
    current: str | None = None
    savings: float | None = None  # $/h; negative for an upgrade
    history_seconds: float = 0.0
    window_seconds: float = 0.0
    why_unjudged: str = ""
    charts: tuple[Chart, ...] = ()

    @property
    def workload(self) -> str | None:
        return None if self.sample.pod is None else workload_of(self.sample.pod.pod)


@dataclass(frozen=True, slots=True)
class PageModel:
    hostname: str
    timestamp: float
    source: str
    interval: float
    rows: tuple[GpuRow, ...]
    verdict_counts: Mapping[str, int] = field(default_factory=dict)
    savings: float | None = None  # None: right-sizing off
    window_seconds: float | None = None
    queues: Sequence[Mapping[str, Any]] = ()
    collectors: Sequence[Any] = ()
    drivers: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()


def _series(tracker: Any, signal: str) -> list[float | None]:
    window = tracker.window
    return [mean for _, mean, _ in window.bucket_series(window.index(signal))]


def charts_of(tracker: Any, memory_total_bytes: float) -> tuple[Chart, ...]:
    """Activity, SM active vs GPU utilization, memory used vs total, DRAM active."""
    gib = memory_total_bytes / 2**30
    source = str(getattr(tracker, "activity_source", "activity")).replace("_", " ")
    return (
        Chart("Activity", (Series(source, _series(tracker, "activity")),)),
        Chart(
            "SM active vs GPU_UTIL",
            (Series("SM", _series(tracker, "sm_active")), Series("util", _series(tracker, "utilization"))),
        ),
        Chart("Memory used", (Series("used", _series(tracker, "memory")),), f"of {gib:.0f} GiB"),
        Chart("DRAM active", (Series("DRAM", _series(tracker, "dram_active")),)),
    )


def _row(g: GpuSample, entries: Any, judged_parents: set[str]) -> GpuRow:
    parts = entries.parts(g.identity.uuid) if hasattr(entries, "parts") else None
    if parts is None:
        if not g.up:
            why = f"GPU down: {g.error}" if g.error else "GPU down"
        elif g.identity.uuid in judged_parents:
            why = "judged through its MIG instances"
        elif entries is None:
            why = "right-sizing is off"
        else:
            why = "no window yet"
        return GpuRow(g, None, why_unjudged=why)
    a, ev, tracker = parts
    return GpuRow(
        g,
        a.verdict,
        a.reason,
        a.summary,
        tuple(a.bottlenecks),
        a.recommended,
        a.current,
        a.hourly_savings_dollars,
        ev.history_seconds,
        ev.window_seconds,
        charts=() if tracker is None else charts_of(tracker, ev.memory_total_bytes),
    )


def build(snapshot: Snapshot, source: str, interval: float) -> PageModel:
    api = snapshot.api
    entries = api.get("gpus")
    parents = {g.identity.parent_uuid for g in snapshot.gpus if g.identity.parent_uuid}
    rows = tuple(_row(g, entries, {p for p in parents if p}) for g in snapshot.gpus)
    summary = api.get("rightsizing")
    counts: dict[str, int] = {}
    savings = window = None
    if isinstance(summary, Mapping):
        counts = dict(summary.get("verdicts", {}))
        savings = summary.get("hourly_savings_dollars")
        window = summary.get("window_seconds")
    queues = api.get("queues")
    return PageModel(
        hostname=snapshot.hostname,
        timestamp=snapshot.timestamp,
        source=source,
        interval=interval,
        rows=rows,
        verdict_counts=counts,
        savings=savings,
        window_seconds=window,
        queues=tuple(q for q in queues if isinstance(q, Mapping)) if isinstance(queues, list) else (),
        collectors=snapshot.collectors,
        drivers=tuple(sorted({g.identity.driver_version for g in snapshot.gpus} - {""})),
        sections=tuple(sorted(api)),
    )
