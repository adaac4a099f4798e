"""Recommendations: the cheapest catalog option (whole GPU or MIG profile) that carries the work.

A candidate fits only when EVERY resource the work binds projects at or under the target on it,
each from its own signal:
- memory: its usable memory (NVML's memory.total, not the nominal size) holds the need x margin;
- compute: SM active p95 (else the activity signal) x current / candidate dense FP16 throughput;
- memory bandwidth: DRAM active p95 (else NVML's memory-controller utilization,
  DCGM_FI_DEV_MEM_COPY_UTIL) x current / candidate memory bandwidth. With no bandwidth signal at all
  a candidate must offer at least today's bandwidth: less bandwidth is never recommended unseen;
  likewise with no activity signal at all (MIG instances of GPUs without profiling metrics report
  no utilization) a candidate must offer at least today's compute;
- bursts: the p99 of compute and of bandwidth project at or under ``BURST_CEILING`` (100 %): rare
  bursts (above p95) must not saturate the option, or they would take several times longer;
- host link: PCIe throughput high (p90) x today's link / the candidate's link (generation x width;
  a MIG instance gets its compute share of its GPU's copy engines and link), judged on whole GPUs
  today (NVML counts PCIe per GPU): a transfer-bound job is never sent to a narrower link;
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
from .pressure import memory_need
from .settings import RightsizingSettings

# Bursts (p99) may use all of an option, never more: beyond it they queue and take longer.
BURST_CEILING = 1.0


@dataclass(frozen=True, slots=True)
class Fit:
    candidate: Candidate
    projected_activity: float  # the highest projection (compute or bandwidth) on the candidate
    binding: str  # "compute" or "memory bandwidth": the resource that projected highest


@dataclass(frozen=True, slots=True)
class Demand:
    memory_bytes: float  # memory a candidate must hold (need x margin x widening)
    activity: float | None  # compute activity at p95 (share of the current option's compute); None: no signal
    bandwidth: float | None  # bandwidth activity at p95 (share of today's bandwidth); None: no signal
    widening: float
    whole_gpus: bool = False  # several GPUs or NVLink traffic: no MIG instance
    nvlink: bool = False  # the work uses NVLink: candidates need it too
    pcie: float | None = None  # PCIe throughput high as a share of today's link; None: unknown
    activity_burst: float | None = None  # compute activity at p99 (bursts); None: no signal
    bandwidth_burst: float | None = None  # bandwidth activity at p99 (bursts); None: no signal

    @property
    def binding(self) -> str:
        """The resource busier today (what limits the work on the current option)."""
        if self.bandwidth is not None and (self.activity is None or self.bandwidth > self.activity):
            return "memory bandwidth"
        return "compute" if self.activity is not None else "memory"


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
    ev: Evidence,
    s: RightsizingSettings,
    memory_floor: float = 0.0,
    activity_floor: float = 0.0,
    bandwidth_floor: float = 0.0,
) -> Demand:
    w = widening(ev, s)
    need = max(memory_need(ev) or 0.0, memory_floor)
    bandwidth = ev.bandwidth
    activity = ev.activity_p95
    # A floor on compute or bandwidth (saturated: at least today's capacity) raises the other in
    # proportion: more throughput does more FLOPs and moves more bytes.
    raised = 1.0
    if activity is not None and activity_floor > activity > 0:
        raised = activity_floor / activity
    if bandwidth is not None and bandwidth_floor > bandwidth[1] > 0:
        raised = max(raised, bandwidth_floor / bandwidth[1])
    return Demand(
        memory_bytes=need * (1.0 + s.memory_margin_ratio) * w,
        activity=None
        if activity is None
        else min(max(1.0, activity_floor), max(activity * raised, activity_floor)),
        bandwidth=None if bandwidth is None else min(1.0, max(bandwidth[1] * raised, bandwidth_floor)),
        widening=w,
        whole_gpus=multi_gpu(ev, s),
        nvlink=uses_nvlink(ev, s),
        pcie=ev.pcie_link_high if ev.mig_profile is None else None,
        activity_burst=binding_burst(ev.activity_p95, ev.activity_p99, s),
        bandwidth_burst=binding_burst(None if bandwidth is None else bandwidth[1], ev.bandwidth_p99, s),
    )


def binding_burst(p95: float | None, p99: float | None, s: RightsizingSettings) -> float | None:
    """The p99 when it can decide anything: at or under p95 / target it never projects past the
    ceiling where the p95 fits (None then, which also keeps the live engine's reuse of decisions)."""
    if p99 is None or (p95 is not None and p99 * s.target_activity_ratio <= p95 * BURST_CEILING):
        return None
    return p99


def has_nvlink(c: Candidate) -> bool:
    return c.mig is None and c.gpu.interconnect.lower().startswith("nvlink")


def host_link(c: Candidate) -> float:
    """Host link bytes/s of a candidate: a MIG instance gets its compute share of the GPU's."""
    return c.gpu.pcie_bytes_per_second * (c.mig.sm_fraction if c.mig is not None else 1.0)


def project(d: Demand, current: Candidate, c: Candidate) -> tuple[float, str]:
    """(highest projected activity on ``c``, the resource that projects it); (0, "memory") when
    neither compute nor bandwidth is measured (``fits`` then asks for no less of either)."""
    if d.activity is None:
        compute, name = 0.0, "memory"
    elif c.fp16_dense_tflops > 0:
        compute, name = d.activity * current.fp16_dense_tflops / c.fp16_dense_tflops * d.widening, "compute"
    else:
        compute, name = float("inf"), "compute"
    if d.bandwidth is None:
        return compute, name
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
    if d.activity is None and c.fp16_dense_tflops < current.fp16_dense_tflops:
        return None  # no activity signal: never less compute than today
    if d.pcie is not None and c.key != current.key:
        link = host_link(c)
        carried = d.pcie * host_link(current) / link * d.widening if link > 0 else float("inf")
        if carried > max(s.target_activity_ratio, d.pcie * d.widening):
            return None  # a narrower host link than today's would not carry its transfers
    if not carries_bursts(d, current, c):
        return None
    projected = project(d, current, c)
    return projected if projected[0] <= s.target_activity_ratio else None


def burst_share(d: Demand, current: Candidate, c: Candidate) -> float:
    """The highest p99 projection (compute or bandwidth) on ``c``; 0 when neither is measured."""
    shares = [0.0]
    if d.activity_burst is not None:
        tflops = c.fp16_dense_tflops
        shares.append(d.activity_burst * current.fp16_dense_tflops / tflops if tflops > 0 else float("inf"))
    if d.bandwidth_burst is not None:
        theirs = c.memory_bandwidth_bytes_per_second
        ours = current.memory_bandwidth_bytes_per_second
        shares.append(d.bandwidth_burst * ours / theirs if theirs > 0 else float("inf"))
    return max(shares) * d.widening


def carries_bursts(d: Demand, current: Candidate, c: Candidate) -> bool:
    """Today's option carries its own bursts; another must keep them at or under ``BURST_CEILING``."""
    return c.key == current.key or burst_share(d, current, c) <= BURST_CEILING


def cheapest_fit(
    catalog: Catalog, d: Demand, current: Candidate, s: RightsizingSettings, upgrade: bool = False
) -> Fit | None:
    """Cheapest candidate that carries the work; at equal price the current option wins (no churn
    for nothing). An ``upgrade`` leaves the current option out and looks first at the same GPU
    model's options that cost no more than today (a profile costs the larger of its memory and compute
    share of the GPU, so a larger one rarely does), then at the cheapest option of any model (a
    saturated 1g slice goes to an L40S at +$0.11/h rather than to its own 2g at +$1.76/h)."""
    if upgrade:
        same = [
            c
            for c in catalog.candidates()
            if c.gpu.key == current.gpu.key
            and c.key != current.key
            and c.hourly_price_dollars <= current.hourly_price_dollars + 1e-9
        ]
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
