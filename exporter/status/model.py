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

from rightsizer_core.snapshot import GpuSample, Snapshot
from rightsizer_core.workloads import workload_of
from rightsizing.balance import findings
from rightsizing.html_parts.charts import Chart, Series
from rightsizing.words import duration


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
    mig_parent: bool = False  # judged through its MIG instances, which have rows of their own
    charts: tuple[Chart, ...] = ()
    findings: tuple[tuple[str, str], ...] = ()  # system-balance findings: (name, evidence)

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
    price_set: tuple[str, str] | None = None  # (name, description) of catalog.price_set; None: not said
    queues: Sequence[Mapping[str, Any]] = ()
    slos: Sequence[Mapping[str, Any]] = ()  # /api/v1/rightsizing's workloads with latency SLOs
    slos_unmatched: tuple[str, ...] = ()  # declared SLOs that no queue matches, one line each
    collectors: Sequence[Any] = ()
    drivers: tuple[str, ...] = ()
    sections: tuple[str, ...] = ()


class ChartMemo:
    """Per GPU window, the figures of its finished buckets, kept across renders (see
    ``Window.bucket_series``); forgets the GPUs that are gone and windows that were replaced."""

    def __init__(self) -> None:
        self._by_gpu: dict[str, tuple[Any, dict[str, dict[int, Any]]]] = {}

    def series(self, uuid: str, window: Any, signal: str) -> list[float | None]:
        kept = self._by_gpu.get(uuid)
        if kept is None or kept[0] is not window:
            kept = self._by_gpu[uuid] = (window, {})
        memo = kept[1].setdefault(signal, {})
        return [mean for _, mean, _ in window.bucket_series(window.index(signal), memo)]

    def keep_only(self, uuids: set[str]) -> None:
        for uuid in [u for u in self._by_gpu if u not in uuids]:
            del self._by_gpu[uuid]


def charts_of(
    uuid: str, tracker: Any, memory_total_bytes: float, memo: ChartMemo, window_seconds: float = 0.0
) -> tuple[Chart, ...]:
    """Activity, SM active vs GPU utilization, memory used vs total, DRAM active; the x axis from
    ``window_seconds`` ago to now."""
    gib = memory_total_bytes / 2**30
    start, end = (f"{duration(window_seconds)} ago", "now") if window_seconds > 0 else ("window start", "now")
    source = str(getattr(tracker, "activity_source", "activity")).replace("_", " ")
    w = tracker.window
    return (
        Chart("Activity", (Series(source, memo.series(uuid, w, "activity")),), start=start, end=end),
        Chart(
            "SM active vs GPU_UTIL",
            (
                Series("SM", memo.series(uuid, w, "sm_active")),
                Series("util", memo.series(uuid, w, "utilization")),
            ),
            start=start,
            end=end,
        ),
        Chart(
            "Memory used",
            (Series("used", memo.series(uuid, w, "memory")),),
            f"of {gib:.0f} GiB",
            start=start,
            end=end,
        ),
        Chart("DRAM active", (Series("DRAM", memo.series(uuid, w, "dram_active")),), start=start, end=end),
    )


def _row(g: GpuSample, entries: Any, judged_parents: set[str], memo: ChartMemo) -> GpuRow:
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
        return GpuRow(g, None, why_unjudged=why, mig_parent=g.identity.uuid in judged_parents)
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
        charts=()
        if tracker is None
        else charts_of(g.identity.uuid, tracker, ev.memory_total_bytes, memo, ev.window_seconds),
        findings=tuple((f.name, f.evidence) for f in findings(ev)),
    )


def build(snapshot: Snapshot, source: str, interval: float, memo: ChartMemo | None = None) -> PageModel:
    """The page's content. Reads the engine's live windows: call it on the event loop thread (where
    the sampler feeds them), never from a worker thread."""
    memo = memo or ChartMemo()
    api = snapshot.api
    entries = api.get("gpus")
    parents = {g.identity.parent_uuid for g in snapshot.gpus if g.identity.parent_uuid}
    rows = tuple(_row(g, entries, {p for p in parents if p}, memo) for g in snapshot.gpus)
    memo.keep_only({g.identity.uuid for g in snapshot.gpus})
    summary = api.get("rightsizing")
    counts: dict[str, int] = {}
    savings = window = None
    price_set: tuple[str, str] | None = None
    slos: tuple[Mapping[str, Any], ...] = ()
    unmatched: tuple[str, ...] = ()
    if isinstance(summary, Mapping):
        lost = summary.get("slos_unmatched")
        lost = lost if isinstance(lost, list) else []
        unmatched = tuple(str(u["message"]) for u in lost if isinstance(u, Mapping) and "message" in u)
        found = summary.get("slos")
        slos = tuple(x for x in found if isinstance(x, Mapping)) if isinstance(found, list) else ()
        counts = dict(summary.get("verdicts", {}))
        savings = summary.get("hourly_savings_dollars")
        window = summary.get("window_seconds")
        named = summary.get("price_set")
        if isinstance(named, Mapping) and isinstance(named.get("name"), str):
            price_set = (str(named["name"]), str(named.get("description", "")))
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
        price_set=price_set,
        queues=tuple(q for q in queues if isinstance(q, Mapping)) if isinstance(queues, list) else (),
        slos=slos,
        slos_unmatched=unmatched,
        collectors=snapshot.collectors,
        drivers=tuple(sorted({g.identity.driver_version for g in snapshot.gpus} - {""})),
        sections=tuple(sorted(api)),
    )
