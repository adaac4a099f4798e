"""Recommendations: the cheapest catalog option (whole GPU or MIG profile) that carries the work.

A candidate fits when
- its memory holds the peak memory need x (1 + margin), and
- the observed activity (its p95, as krr reads CPU), scaled by the ratio of the binding resource —
  memory bandwidth for memory-bound work (DRAM active above SM active), dense FP16 throughput
  otherwise — stays at or below the target activity on it.

With history shorter than the window both bounds widen (VPA-style): margin and projected activity
are multiplied by ``1 + short_history_widening x (1 - history / window)``.
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
    projected_activity: float


@dataclass(frozen=True, slots=True)
class Demand:
    memory_bytes: float  # memory a candidate must hold (need x margin x widening)
    activity: float  # observed activity at the chosen percentile
    binding: str  # "memory bandwidth" or "compute"
    widening: float


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


def binding_resource(ev: Evidence) -> str:
    compute = ev.sm_active_high if ev.sm_active_high is not None else ev.activity_p95
    if ev.dram_active_high is not None and ev.dram_active_high > (compute or 0.0):
        return "memory bandwidth"
    return "compute"


def demand(
    ev: Evidence, s: RightsizingSettings, memory_floor: float = 0.0, activity_floor: float = 0.0
) -> Demand:
    w = widening(ev, s)
    need = max(ev.memory_peak_bytes or 0.0, memory_floor)
    return Demand(
        memory_bytes=need * (1.0 + s.memory_margin_ratio) * w,
        activity=max(ev.activity_p95 or 0.0, activity_floor),
        binding=binding_resource(ev),
        widening=w,
    )


def capacity(c: Candidate, binding: str) -> float:
    return c.memory_bandwidth_bytes_per_second if binding == "memory bandwidth" else c.fp16_dense_tflops


def project(d: Demand, current: Candidate, c: Candidate) -> float:
    """Activity the observed work would cause on ``c``."""
    mine, theirs = capacity(current, d.binding), capacity(c, d.binding)
    if theirs <= 0:
        return float("inf")
    return d.activity * (mine / theirs) * d.widening


def cheapest_fit(
    catalog: Catalog, d: Demand, current: Candidate, s: RightsizingSettings, exclude_model: bool = False
) -> Fit | None:
    """Cheapest candidate holding the memory and keeping projected activity under the target.

    At equal price the current option wins (no churn for nothing). ``exclude_model`` skips every
    option of the current GPU model (an upgrade must be another GPU).
    """
    bandwidth = d.binding == "memory bandwidth"
    mine = current.memory_bandwidth_bytes_per_second if bandwidth else current.fp16_dense_tflops
    # projected = activity x mine / theirs x widening <= target  <=>  theirs >= needed
    needed = d.activity * mine * d.widening / s.target_activity_ratio
    memory, mig_ok, model = d.memory_bytes, s.recommend_mig, current.gpu.key
    best: Candidate | None = None
    for c in catalog.candidates():  # cheapest first
        if best is not None and c.hourly_price_dollars > best.hourly_price_dollars:
            break
        if c.memory_bytes < memory or (c.mig is not None and not mig_ok):
            continue
        theirs = c.memory_bandwidth_bytes_per_second if bandwidth else c.fp16_dense_tflops
        if theirs <= 0 or theirs < needed or (exclude_model and c.gpu.key == model):
            continue
        if best is None or c.key == current.key:
            best = c
    return None if best is None else Fit(best, project(d, current, best))


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
