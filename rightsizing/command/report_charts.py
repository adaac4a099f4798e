"""Per-GPU charts of the HTML report, over the history found in the report window, from
Prometheus range queries (a week's window holding ten minutes of data is charted over those ten
minutes, not as a dot at the right edge of a week).

One ``query_range`` per signal for the whole fleet (never one per GPU), at most ``POINTS`` points
per chart: each point is the signal's mean over its step (at least a minute, so a short window's
points still hold a scrape), read through a subquery at the report's resolution on long windows,
as the judgement's percentiles are. The charts are the status page's: activity (the signal the
judgement reads: SM active, else GR engine active, else GPU utilization), SM active against
GPU_UTIL, memory used of total, DRAM active.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..html_parts.charts import Chart, Series
from .promapi import PrometheusClient, RangeSeries, ReportError, promql_duration
from .report_shards import ShardedClient

POINTS = 120
MIN_STEP_RANGE = 60.0
# A chart belongs to a report row: (instance, UUID, MIG profile, pod, namespace).
LABELS = ("instance", "UUID", "GPU_I_PROFILE", "pod", "namespace")
BY = ", ".join(LABELS)
ChartKey = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class FleetCharts:
    step_seconds: float
    start: float
    end: float
    by_unit: Mapping[ChartKey, tuple[Chart, ...]] = field(default_factory=dict)
    error: str = ""  # why there are no charts (the report is written without them)

    def of(self, row: Mapping[str, object]) -> tuple[Chart, ...]:
        return self.by_unit.get(row_key(row), ())


def row_key(row: Mapping[str, object]) -> ChartKey:
    """The chart key of a row of ``report_rows.as_rows``."""
    return (
        str(row.get("instance") or ""), str(row.get("uuid") or ""), str(row.get("mig_profile") or ""),
        str(row.get("pod") or ""), str(row.get("namespace") or ""),
    )  # fmt: skip


def _key(labels: Mapping[str, str]) -> ChartKey:
    return (
        labels.get("instance", ""), labels.get("UUID", ""), labels.get("GPU_I_PROFILE", ""),
        labels.get("pod", ""), labels.get("namespace", ""),
    )  # fmt: skip


def collect_charts(
    client: PrometheusClient | ShardedClient,
    at: float,
    window: float,
    resolution: float | None,
    progress: Callable[[int, int, str], None],
    since: float | None = None,
) -> FleetCharts:
    """``since``: the earliest sample found (None: charted over the whole window)."""
    charted = window if since is None else min(window, max(at - since, MIN_STEP_RANGE))
    step = max(1.0, charted / POINTS)
    start = at - charted + step
    span = promql_duration(max(step, MIN_STEP_RANGE))
    rng = f"[{span}:{promql_duration(resolution)}]" if resolution else f"[{span}]"

    def mean(metric: str) -> str:
        return f"max by ({BY}) (avg_over_time({metric}{rng}))"

    queries = {
        "sm_active": mean("DCGM_FI_PROF_SM_ACTIVE"),
        "gr_engine_active": mean("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        "gpu_utilization": f"{mean('DCGM_FI_DEV_GPU_UTIL')} / 100",
        "memory": f"{mean('DCGM_FI_DEV_FB_USED')} * 1048576 / "
        f"max by ({BY}) (max_over_time(rightsizer_gpu_memory_total_bytes{rng}))",
        "dram_active": mean("DCGM_FI_PROF_DRAM_ACTIVE"),
    }
    grid = [start + i * step for i in range(round((at - start) / step) + 1)]
    signals: dict[str, dict[ChartKey, list[float | None]]] = {}
    try:
        for done, (name, expr) in enumerate(queries.items(), start=1):
            progress(done, len(queries) + 1, f"chart {name.replace('_', ' ')}")
            signals[name] = _on_grid(client.query_range(expr, start, at, step), grid, step)
        progress(len(queries) + 1, len(queries) + 1, "chart memory total")
        w = promql_duration(window)
        total_expr = f"max by ({BY}) (max_over_time(rightsizer_gpu_memory_total_bytes[{w}]))"
        totals = {_key(s.labels): s.value for s in client.query(total_expr, at)}
    except ReportError as exc:
        return FleetCharts(step, start, at, error=str(exc))
    units = {k for per_unit in signals.values() for k in per_unit}
    return FleetCharts(step, start, at, {k: _charts(k, signals, totals.get(k), len(grid)) for k in units})


def _on_grid(series: list[RangeSeries], grid: list[float], step: float) -> dict[ChartKey, list[float | None]]:
    out: dict[ChartKey, list[float | None]] = {}
    for s in series:
        values = out.setdefault(_key(s.labels), [None] * len(grid))
        for t, v in s.points:
            i = round((t - grid[0]) / step)
            if 0 <= i < len(grid):
                values[i] = v
    return out


def _charts(
    k: ChartKey, signals: dict[str, dict[ChartKey, list[float | None]]], total: float | None, n: int
) -> tuple[Chart, ...]:
    def values(name: str) -> list[float | None]:
        return signals.get(name, {}).get(k) or [None] * n

    source = next(
        (s for s in ("sm_active", "gr_engine_active") if any(v is not None for v in values(s))),
        "gpu_utilization",
    )
    note = f"of {total / 2**30:.0f} GiB" if total else ""
    return (
        Chart("Activity", (Series(source.replace("_", " "), values(source)),)),
        Chart(
            "SM active vs GPU_UTIL",
            (Series("SM", values("sm_active")), Series("util", values("gpu_utilization"))),
        ),
        Chart("Memory used", (Series("used", values("memory")),), note),
        Chart("DRAM active", (Series("DRAM", values("dram_active")),)),
    )
