"""Rows of the right-sizing families and the right-sizing part of ``/api/v1/gpus``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..snapshot import GpuSample, Row
from .bottlenecks import BOTTLENECKS
from .evidence import Evidence
from .settings import RightsizingSettings
from .verdicts import VERDICTS, Assessment

VERDICT = "rightsizer_gpu_verdict"
FIT_SCORE = "rightsizer_gpu_fit_score"
BOTTLENECK = "rightsizer_gpu_bottleneck"
MEMORY_PEAK = "rightsizer_gpu_memory_peak_bytes"
ACTIVITY_P95 = "rightsizer_gpu_activity_p95_ratio"
RECOMMENDATION = "rightsizer_gpu_recommendation_info"
SAVINGS = "rightsizer_gpu_hourly_savings_dollars"
WINDOW_SAMPLES = "rightsizer_gpu_window_samples"
HOST_CPU = "rightsizer_host_cpu_busy_ratio"
FAMILY_NAMES = (
    VERDICT, FIT_SCORE, BOTTLENECK, MEMORY_PEAK, ACTIVITY_P95, RECOMMENDATION, SAVINGS, WINDOW_SAMPLES,
    HOST_CPU,
)  # fmt: skip

_VERDICT_LABELS = {v: (("verdict", v),) for v in VERDICTS}
_BOTTLENECK_LABELS = {b: (("bottleneck", b),) for b in BOTTLENECKS}


class RowMaker:
    """Builds each cycle's rows. A GPU's verdict, bottleneck and recommendation rows are kept and
    reused while its labels and conclusions stay the same (most cycles), so only the numbers are new."""

    def __init__(self) -> None:
        self._fixed: dict[str, tuple[tuple[object, ...], tuple[Row, ...], tuple[Row, ...], Row]] = {}

    def _fixed_rows(self, g: GpuSample, a: Assessment) -> tuple[tuple[Row, ...], tuple[Row, ...], Row]:
        key = (g.identity, g.pod, a.verdict, a.bottlenecks, a.recommended, a.summary)
        cached = self._fixed.get(g.identity.key)
        if cached is None or cached[0] != key:
            verdicts = tuple(Row(1.0 if a.verdict == v else 0.0, _VERDICT_LABELS[v], g) for v in VERDICTS)
            found = tuple(
                Row(1.0 if b in a.bottlenecks else 0.0, _BOTTLENECK_LABELS[b], g) for b in BOTTLENECKS
            )
            rec = Row(1.0, (("recommended", a.recommended), ("reason", a.summary)), g)
            cached = self._fixed[g.identity.key] = (key, verdicts, found, rec)
        return cached[1], cached[2], cached[3]

    def rows(
        self,
        gpus: Sequence[GpuSample],
        assessments: Mapping[str, Assessment],
        evidence: Mapping[str, Evidence],
        host_cpu: float | None,
    ) -> dict[str, tuple[Row, ...]]:
        verdict: list[Row] = []
        bottleneck: list[Row] = []
        recommendation: list[Row] = []
        fit: list[Row] = []
        peak: list[Row] = []
        activity: list[Row] = []
        savings: list[Row] = []
        samples: list[Row] = []
        for g in gpus:
            key = g.identity.key
            a = assessments.get(key)
            ev = evidence.get(key)
            if a is None or ev is None:
                continue
            v, b, r = self._fixed_rows(g, a)
            verdict += v
            bottleneck += b
            recommendation.append(r)
            if a.fit_score is not None:
                fit.append(Row(a.fit_score, (), g))
            if ev.memory_peak_bytes is not None:
                peak.append(Row(round(ev.memory_peak_bytes), (), g))
            if ev.activity_p95 is not None:
                activity.append(Row(ev.activity_p95, (), g))
            if a.hourly_savings_dollars is not None:
                savings.append(Row(round(a.hourly_savings_dollars, 6), (), g))
            samples.append(Row(float(ev.samples), (), g))
        if len(self._fixed) > 2 * len(gpus) + 64:  # GPUs come and go: never grow without bound
            present = {g.identity.key for g in gpus}
            self._fixed = {k: v for k, v in self._fixed.items() if k in present}
        return {
            VERDICT: tuple(verdict),
            FIT_SCORE: tuple(fit),
            BOTTLENECK: tuple(bottleneck),
            MEMORY_PEAK: tuple(peak),
            ACTIVITY_P95: tuple(activity),
            RECOMMENDATION: tuple(recommendation),
            SAVINGS: tuple(savings),
            WINDOW_SAMPLES: tuple(samples),
            HOST_CPU: () if host_cpu is None else (Row(host_cpu),),
        }


class LazyApiEntries(dict[str, Any]):
    """``api["gpus"]``: UUID -> this GPU's right-sizing object, built only when /api/v1/gpus asks.

    Holds (assessment, evidence, tracker) triples; item access (what ``exporter.api`` uses) builds
    the object, adding the informational percentiles scoring leaves out from the tracker's window."""

    def __getitem__(self, uuid: str) -> dict[str, Any]:
        a, ev, tracker = super().__getitem__(uuid)
        if tracker is not None and ev.activity_p99 is None:
            ev = tracker.with_details(ev)
        return api_entry(a, ev)

    def get(self, uuid: str, default: Any = None) -> Any:
        if uuid not in self:
            return default
        return self[uuid]

    def items(self) -> Any:
        return [(k, self[k]) for k in self]

    def values(self) -> Any:
        return [self[k] for k in self]


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def api_entry(a: Assessment, ev: Evidence) -> dict[str, Any]:
    """The ``rightsizing`` object merged into this GPU's ``/api/v1/gpus`` entry."""
    return {
        "rightsizing": {
            "verdict": a.verdict,
            "reason": a.reason,
            "summary": a.summary,
            "bottlenecks": list(a.bottlenecks),
            "recommended": a.recommended,
            "current": a.current,
            "hourly_savings_dollars": _r(a.hourly_savings_dollars, 6),
            "fit_score": _r(a.fit_score),
            "projected_activity_ratio": _r(a.projected_activity),
            "memory_need_bytes": None if a.memory_need_bytes is None else round(a.memory_need_bytes),
            "memory_peak_bytes": None if ev.memory_peak_bytes is None else round(ev.memory_peak_bytes),
            "memory_p95_bytes": None if ev.memory_p95_bytes is None else round(ev.memory_p95_bytes),
            "activity_source": ev.activity_source,
            "activity_p50_ratio": _r(ev.activity_p50),
            "activity_p95_ratio": _r(ev.activity_p95),
            "activity_p99_ratio": _r(ev.activity_p99),
            "utilization_p50_ratio": _r(ev.utilization_p50),
            "sm_active_p50_ratio": _r(ev.sm_active_p50),
            "sm_occupancy_p50_ratio": _r(ev.sm_occupancy_p50),
            "tensor_active_p95_ratio": _r(ev.tensor_active_p95),
            "dram_active_p95_ratio": _r(ev.dram_active_p95),
            "pcie_link_high_ratio": _r(ev.pcie_link_high),
            "host_cpu_high_ratio": _r(ev.host_cpu_high),
            "starved_share": _r(ev.starved_share),
            "queues": [
                {"name": q.name, "depth": q.depth_last, "max_depth": q.depth_max, "rise": round(q.rise, 2)}
                for q in ev.queues
            ],
            "window": {
                "samples": ev.samples,
                "history_seconds": round(ev.history_seconds, 3),
                "window_seconds": ev.window_seconds,
            },
        }
    }


def summary(assessments: Iterable[Assessment], s: RightsizingSettings) -> dict[str, Any]:
    """The fleet at a glance for ``/api/v1/rightsizing``."""
    counts = dict.fromkeys(VERDICTS, 0)
    savings = 0.0
    for a in assessments:
        counts[a.verdict] += 1
        if a.hourly_savings_dollars and a.hourly_savings_dollars > 0:
            savings += a.hourly_savings_dollars
    return {
        "verdicts": counts,
        "hourly_savings_dollars": round(savings, 6),
        "window_seconds": s.window_seconds,
        "min_samples": s.min_samples,
        "min_history_seconds": s.min_history_seconds,
    }
