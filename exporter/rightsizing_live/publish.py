"""Rows of the right-sizing families and the right-sizing part of ``/api/v1/gpus``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from rightsizer_core.snapshot import GpuSample, Row
from rightsizing.balance import findings, judged
from rightsizing.bottlenecks import BOTTLENECKS
from rightsizing.catalog import Catalog
from rightsizing.evidence import Evidence
from rightsizing.numa import NumaPlacement, format_cpulist
from rightsizing.patches.settings import PatchSettings
from rightsizing.settings import RightsizingSettings
from rightsizing.slo.attainment import SloEvidence
from rightsizing.slo.summary import slo_json, slo_state
from rightsizing.slo.windows import Scaling, SloTracker
from rightsizing.tracker import GpuTracker
from rightsizing.verdicts import VERDICTS, Assessment

from .slo_match import Unmatched
from .slo_rows import slo_rows

VERDICT = "rightsizer_gpu_verdict"
FIT_SCORE = "rightsizer_gpu_fit_score"
BOTTLENECK = "rightsizer_gpu_bottleneck"
MEMORY_PEAK = "rightsizer_gpu_memory_peak_bytes"
ACTIVITY_P95 = "rightsizer_gpu_activity_p95_ratio"
RECOMMENDATION = "rightsizer_gpu_recommendation_info"
SAVINGS = "rightsizer_gpu_hourly_savings_dollars"
WINDOW_SAMPLES = "rightsizer_gpu_window_samples"
HOST_CPU = "rightsizer_host_cpu_busy_ratio"
BALANCE = "rightsizer_gpu_balance_finding"
PRESSURE = "rightsizer_host_pressure_stalled_ratio"
FAMILY_NAMES = (
    VERDICT, FIT_SCORE, BOTTLENECK, MEMORY_PEAK, ACTIVITY_P95, RECOMMENDATION, SAVINGS, WINDOW_SAMPLES,
    HOST_CPU, BALANCE, PRESSURE,
)  # fmt: skip

_VERDICT_LABELS = {v: (("verdict", v),) for v in VERDICTS}
_BOTTLENECK_LABELS = {b: (("bottleneck", b),) for b in BOTTLENECKS}


class RowMaker:
    """Builds each cycle's rows. A GPU's rows are kept and reused while its labels, conclusions and
    numbers stay the same (most cycles: percentiles move in 1 % bins), so only the sample count is new."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[tuple[object, ...], dict[str, tuple[Row, ...]]]] = {}

    def _gpu_rows(self, g: GpuSample, a: Assessment, ev: Evidence) -> dict[str, tuple[Row, ...]]:
        found = tuple(judged(ev).items())
        key = (g.identity, g.pod, a, ev.memory_peak_bytes, ev.activity_p95, found, ev.numa)
        kept = self._kept.get(g.identity.key)
        if kept is not None and kept[0] == key:
            return kept[1]
        labels = (
            ("recommended", a.recommended),
            ("reason", a.summary),
            ("price_source", a.price_source),
            ("workload_change", a.workload_change),
        )
        rows = {
            VERDICT: tuple(Row(1.0 if a.verdict == v else 0.0, _VERDICT_LABELS[v], g) for v in VERDICTS),
            BOTTLENECK: tuple(
                Row(1.0 if b in a.bottlenecks else 0.0, _BOTTLENECK_LABELS[b], g) for b in BOTTLENECKS
            ),
            RECOMMENDATION: (Row(1.0, labels, g),),
            FIT_SCORE: () if a.fit_score is None else (Row(a.fit_score, (), g),),
            MEMORY_PEAK: () if ev.memory_peak_bytes is None else (Row(round(ev.memory_peak_bytes), (), g),),
            ACTIVITY_P95: () if ev.activity_p95 is None else (Row(ev.activity_p95, (), g),),
            SAVINGS: ()
            if a.hourly_savings_dollars is None
            else (Row(round(a.hourly_savings_dollars, 6), (), g),),
            # A check whose evidence is missing (no PCIe link values, no NUMA layout) publishes
            # nothing: unknown.
            BALANCE: tuple(
                Row(1.0 if hit else 0.0, (("finding", name),), g) for name, hit in judged(ev).items()
            ),
        }
        self._kept[g.identity.key] = (key, rows)
        return rows

    def rows(
        self,
        gpus: Sequence[GpuSample],
        assessments: Mapping[str, Assessment],
        evidence: Mapping[str, Evidence],
        host_cpu: float | None,
        pressure: Mapping[tuple[str, str], float] | None = None,
    ) -> dict[str, tuple[Row, ...]]:
        out: dict[str, list[Row]] = {name: [] for name in FAMILY_NAMES}
        samples = out[WINDOW_SAMPLES]
        for g in gpus:
            key = g.identity.key
            a = assessments.get(key)
            ev = evidence.get(key)
            if a is None or ev is None:
                continue
            for name, rows in self._gpu_rows(g, a, ev).items():
                out[name] += rows
            samples.append(Row(float(ev.samples), (), g))
        if host_cpu is not None:
            out[HOST_CPU].append(Row(host_cpu))
        for (resource, kind), ratio in sorted((pressure or {}).items()):
            out[PRESSURE].append(Row(round(ratio, 6), (("resource", resource), ("kind", kind))))
        if len(self._kept) > 2 * len(gpus) + 64:  # GPUs come and go: never grow without bound
            present = {g.identity.key for g in gpus}
            self._kept = {k: v for k, v in self._kept.items() if k in present}
        return {name: tuple(rows) for name, rows in out.items()}


class LazyApiEntries(dict[str, Any]):
    """``api["gpus"]``: UUID -> this GPU's right-sizing object, built only when /api/v1/gpus asks.

    Holds (assessment, evidence, tracker) triples; item access (what ``exporter.api`` uses) builds
    the object, adding the informational percentiles scoring leaves out from the tracker's window."""

    margin = 0.1  # slo_margin_ratio: an SLO met with room

    def __getitem__(self, uuid: str) -> dict[str, Any]:
        a, ev, tracker = super().__getitem__(uuid)
        if tracker is not None and ev.memory_p95_bytes is None:
            ev = tracker.with_details(ev)
        return api_entry(a, ev, getattr(self, "margin", 0.1))

    def parts(self, uuid: str) -> tuple[Assessment, Evidence, Any] | None:
        """The (assessment, evidence, tracker) a GPU's entry is built from, or None (read-only use:
        the status page draws its charts from the tracker's window)."""
        if uuid not in self:
            return None
        a, ev, tracker = super().__getitem__(uuid)
        return a, ev, tracker

    def get(self, uuid: str, default: Any = None) -> Any:
        if uuid not in self:
            return default
        return self[uuid]

    def items(self) -> Any:
        return [(k, self[k]) for k in self]

    def values(self) -> Any:
        return [self[k] for k in self]


class ScoredExtension(Protocol):
    """What a cycle's view reads of the right-sizing extension (named here, so that this module
    does not import the extension back)."""

    settings: RightsizingSettings
    catalog: Catalog
    patch_settings: PatchSettings
    node: str
    row_maker: RowMaker
    trackers: dict[str, GpuTracker]
    _evidence: dict[str, Evidence]
    _cost_rows: dict[str, tuple[Row, ...]]
    _cost_json: list[dict[str, object]]
    slo: SloTracker
    _slo_evidence: dict[tuple[str, str], SloEvidence]
    _slo_scaling: dict[tuple[str, str], Scaling]
    slo_unmatched: tuple[Unmatched, ...]

    @property
    def assessments(self) -> dict[str, Assessment]: ...


class CycleView:
    """One cycle's rows and API objects, built from its scores on first read."""

    __slots__ = ("at", "cpu", "ext", "gpus", "pressure")

    def __init__(
        self,
        ext: ScoredExtension,
        gpus: tuple[GpuSample, ...],
        cpu: float | None,
        pressure: Mapping[tuple[str, str], float],
        at: float = 0.0,
    ) -> None:
        self.ext, self.gpus, self.cpu, self.pressure, self.at = ext, gpus, cpu, pressure, at

    def rows(self) -> dict[str, tuple[Row, ...]]:
        ext = self.ext
        assessments = ext.assessments
        rows = ext.row_maker.rows(self.gpus, assessments, ext._evidence, self.cpu, self.pressure)
        rows.update(ext._cost_rows)
        rows.update(slo_rows(ext._slo_evidence, ext._slo_scaling, ext.slo.counted))
        return rows

    def entries(self) -> LazyApiEntries:
        ext = self.ext
        assessments = ext.assessments
        entries = LazyApiEntries()
        entries.margin = ext.settings.slo_margin_ratio
        for g in self.gpus:
            key = g.identity.key
            if key in assessments:
                entries[g.identity.uuid] = (assessments[key], ext._evidence[key], ext.trackers.get(key))
        return entries

    def patches(self) -> dict[str, Any]:
        """``/api/v1/patches``: the node's moves as kustomize patches (owners from the pods' names:
        the exporter sees pods, not the objects that own them). The patch writer loads on the first
        request for them."""
        from rightsizing.patches.build import build_patches
        from rightsizing.patches.plan import Context, Held

        ext = self.ext
        assessments, evidence = ext.assessments, ext._evidence
        held = [
            Held(g.pod.namespace, g.pod.pod, g.pod.container, g.identity.uuid, assessments[k], evidence[k])
            for g in self.gpus
            if g.pod is not None and (k := g.identity.key) in assessments and k in evidence
        ]
        where = f"rightsizer-exporter on {ext.node}" if ext.node else "rightsizer-exporter"
        ctx = Context(self.at, ext.settings.window_seconds, ext.catalog, ext.patch_settings, where,
                      None, "pod names (the exporter sees pods, not their owners)", None,
                      ext.settings.slo_margin_ratio)  # fmt: skip
        return build_patches(held, ctx).json()

    def overview(self) -> dict[str, Any]:
        ext = self.ext
        overview = summary(ext.assessments.values(), ext.settings)
        named = ext.catalog
        overview["price_set"] = {"name": named.price_set, "description": named.price_set_description}
        overview["workloads"] = ext._cost_json
        margin = ext.settings.slo_margin_ratio
        overview["slos"] = [
            slo_json(ev, ext._slo_scaling.get(key), margin) for key, ev in sorted(ext._slo_evidence.items())
        ]
        overview["slos_unmatched"] = [u.json() for u in ext.slo_unmatched]
        return overview


def _r(x: float | None, digits: int = 4) -> float | None:
    return None if x is None else round(x, digits)


def api_entry(a: Assessment, ev: Evidence, margin: float = 0.1) -> dict[str, Any]:
    """The ``rightsizing`` object merged into this GPU's ``/api/v1/gpus`` entry."""
    return {
        "rightsizing": {
            "verdict": a.verdict,
            "reason": a.reason,
            "summary": a.summary,
            "deciding": a.deciding or None,
            "bottlenecks": list(a.bottlenecks),
            "recommended": a.recommended,
            "current": a.current,
            "price_source": a.price_source,
            "workload_change": a.workload_change or None,
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
            "host_stall_high_ratio": _r(ev.host_stall_high),
            "starved_share": _r(ev.starved_share),
            "memory_copy_p95_ratio": _r(ev.memory_copy_p95),
            "nvlink_high_ratio": _r(ev.nvlink_high),
            "findings": [{"finding": f.name, "evidence": f.evidence} for f in findings(ev)],
            "numa": None if ev.numa is None else numa_json(ev.numa),
            "queues": [
                {
                    "name": q.name,
                    "depth": q.depth_last,
                    "max_depth": q.depth_max,
                    "rise": round(q.rise, 2),
                    "growth_per_hour_ratio": round(q.growth_per_hour, 4),
                    "server": q.server,
                    "kv_cache_p95_ratio": _r(q.kv_cache_high),
                    "preemptions": q.preemptions,
                    "generated_tokens_per_second": _r(q.generated_tokens_rate, 3),
                    "prompt_tokens_per_second": _r(q.prompt_tokens_rate, 3),
                    "requests_per_second": _r(q.requests_rate, 4),
                    "slo": None if q.slo is None else slo_state(q.slo, margin),
                    "slo_latency_ratio": None if q.slo is None or q.slo.ratio is None else _r(q.slo.ratio),
                }
                for q in ev.queues
            ],
            "window": {
                "samples": ev.samples,
                "history_seconds": round(ev.history_seconds, 3),
                "window_seconds": ev.window_seconds,
            },
        }
    }


def numa_json(n: NumaPlacement) -> dict[str, Any]:
    return {
        "gpu_node": n.gpu_node,
        "node_cpus": None if n.node_cpus is None else format_cpulist(n.node_cpus),
        "container": n.container or None,
        "container_cpus": None if n.container_cpus is None else format_cpulist(n.container_cpus),
        "mismatch": n.mismatch,
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
