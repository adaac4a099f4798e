"""Recommendations: the cheapest catalog option (whole GPU or MIG profile) that carries the work.

A candidate fits only when EVERY resource the work binds projects at or under the target on it,
each from its own signal:
- memory: its usable memory (NVML's memory.total, not the nominal size) holds the need x margin;
- compute: SM active p95 (else the activity signal) x current / candidate dense FP16 throughput;
- memory bandwidth: DRAM active p95 (else NVML's memory-controller utilization,
  DCGM_FI_DEV_MEM_COPY_UTIL) x current / candidate memory bandwidth. With no bandwidth signal at all
  a candidate must offer at least today's bandwidth: less bandwidth is never recommended unseen;
- topology: work spread over several GPUs or moving data over NVLink gets whole GPUs only (MIG
  instances have no NVLink or peer-to-peer), with NVLink when it uses NVLink.

The reason names the resource that decided: the one projecting highest on the recommendation.
With history shorter than the window the bounds widen (VPA-style): margin and projections are
multiplied by ``1 + short_history_widening x (1 - history / window)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .catalog import Candidate, Catalog
from .evidence import Evidence
from .settings import RightsizingSettings


@dataclass(frozen=True, slots=True)
class Fit:
    candidate: Candidate
    projected_activity: float  # the highest projection (compute or bandwidth) on the candidate
    binding: str  # "compute" or "memory bandwidth": the resource that projected highest


@dataclass(frozen=True, slots=True)
class Demand:
    memory_bytes: float  # memory a candidate must hold (need x margin x widening)
    activity: float  # compute activity at p95 (share of the current option's compute)
    bandwidth: float | None  # bandwidth activity at p95 (share of today's bandwidth); None: no signal
    widening: float
    whole_gpus: bool = False  # several GPUs or NVLink traffic: no MIG instance
    nvlink: bool = False  # the work uses NVLink: candidates need it too

    @property
    def binding(self) -> str:
        """The resource busier today (what limits the work on the current option)."""
        if self.bandwidth is not None and self.bandwidth > self.activity:
            return "memory bandwidth"
        return "compute"


@lru_cache(maxsize=4096)
def current_candidate(catalog: Catalog, model: str, mig_profile: str | None) -> Candidate | None:
    """The catalog option the GPU (or MIG instance) is today, by its NVML name."""
    gpu = catalog.lookup(model)
    if gpu is None:
        return None
    if mig_profile:
        return catalog.candidate(f"{gpu.key}/{mig_profile}")
    return catalog.candidate(gpu.key)


def widening(ev: Evidence, s: RightsizingSettings) -> float:
    return 1.0 + s.short_history_widening * (1.0 - ev.confidence)


def multi_gpu(ev: Evidence, s: RightsizingSettings) -> bool:
    """Sized as a whole: several GPUs in one pod, or NVLink traffic above the documented share."""
    return ev.workload_gpus > 1 or uses_nvlink(ev, s)


def uses_nvlink(ev: Evidence, s: RightsizingSettings) -> bool:
    return ev.nvlink_high is not None and ev.nvlink_high >= s.nvlink_share_ratio


def demand(
    ev: Evidence, s: RightsizingSettings, memory_floor: float = 0.0, activity_floor: float = 0.0
) -> Demand:
    w = widening(ev, s)
    need = max(ev.memory_peak_bytes or 0.0, memory_floor)
    bandwidth = ev.bandwidth
    activity = ev.activity_p95 or 0.0
    # A floor on compute (saturated: at least today's capacity) raises bandwidth in proportion.
    raised = activity_floor / activity if activity_floor > activity > 0 else 1.0
    return Demand(
        memory_bytes=need * (1.0 + s.memory_margin_ratio) * w,
        activity=max(activity, activity_floor),
        bandwidth=None if bandwidth is None else min(1.0, bandwidth[1] * raised),
        widening=w,
        whole_gpus=multi_gpu(ev, s),
        nvlink=uses_nvlink(ev, s),
    )


def has_nvlink(c: Candidate) -> bool:
    return c.mig is None and c.gpu.interconnect.lower().startswith("nvlink")


def project(d: Demand, current: Candidate, c: Candidate) -> tuple[float, str]:
    """(highest projected activity on ``c``, the resource that projects it)."""
    compute = (
        d.activity * current.fp16_dense_tflops / c.fp16_dense_tflops * d.widening
        if c.fp16_dense_tflops > 0
        else float("inf")
    )
    if d.bandwidth is None:
        return compute, "compute"
    theirs = c.memory_bandwidth_bytes_per_second
    bandwidth = (
        d.bandwidth * current.memory_bandwidth_bytes_per_second / theirs * d.widening
        if theirs > 0
        else float("inf")
    )
    return (bandwidth, "memory bandwidth") if bandwidth > compute else (compute, "compute")


def fits(d: Demand, current: Candidate, c: Candidate, s: RightsizingSettings) -> tuple[float, str] | None:
    """The projection on ``c`` when ``c`` carries the work, else None."""
    if c.usable_memory < d.memory_bytes:
        return None
    if c.mig is not None and (d.whole_gpus or not s.recommend_mig):
        return None
    if d.nvlink and not has_nvlink(c):
        return None
    less_bandwidth = c.memory_bandwidth_bytes_per_second < current.memory_bandwidth_bytes_per_second
    if d.bandwidth is None and less_bandwidth:
        return None  # no bandwidth signal: never less bandwidth than today
    projected = project(d, current, c)
    return projected if projected[0] <= s.target_activity_ratio else None


def cheapest_fit(
    catalog: Catalog, d: Demand, current: Candidate, s: RightsizingSettings, upgrade: bool = False
) -> Fit | None:
    """Cheapest candidate that carries the work; at equal price the current option wins (no churn
    for nothing). An ``upgrade`` leaves the current option out and looks first at the same GPU
    model's larger MIG profiles and whole GPU, then at every other option."""
    if upgrade:
        same = [c for c in catalog.candidates() if c.gpu.key == current.gpu.key and c.key != current.key]
        found = _cheapest(same, d, current, s)
        if found is not None:
            return found
        return _cheapest([c for c in catalog.candidates() if c.key != current.key], d, current, s)
    return _cheapest(catalog.candidates(), d, current, s)


def _cheapest(
    candidates: tuple[Candidate, ...] | list[Candidate], d: Demand, current: Candidate, s: RightsizingSettings
) -> Fit | None:
    best: Fit | None = None
    for c in candidates:  # cheapest first
        if best is not None and c.hourly_price_dollars > best.candidate.hourly_price_dollars:
            break
        projected = fits(d, current, c, s)
        if projected is None:
            continue
        if best is None or c.key == current.key:
            best = Fit(c, projected[0], projected[1])
    return best


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
