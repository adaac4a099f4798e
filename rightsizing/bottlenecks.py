"""Bottlenecks: which resources limit a GPU's workload (several may hold at once).

Thresholds live in ``rightsizing.bottlenecks``; "high" means at the configured percentile (p90):
- memory_capacity: peak memory need >= 95 % of the GPU's memory, unless a linked inference server
  (which reserves memory by design) shows no pressure or publishes nothing to show it (``pressure``);
  also, whatever NVML's memory fraction, when the server shows pressure or the work offloads to the
  host or queues behind full memory (``unmet``: added by the verdict);
- memory_bandwidth: DRAM active high >= 0.60 (without profiling metrics, NVML's memory-controller
  utilization, DCGM_FI_DEV_MEM_COPY_UTIL, stands in);
- compute: SM active (else the activity signal) high >= 0.80;
- launch_overhead: median GPU utilization >= 0.80 while median SM active <= 0.40 (busy, yet the
  SMs wait for work), unless DRAM is the bottleneck (then the SMs wait on memory);
- data_loading: PCIe throughput high >= 70 % of the link (generation x width), or >= 20 % of
  samples with activity < 0.30 while the host CPU is >= 90 % busy or (PSI) the host's tasks are
  all stalled on memory or I/O >= 10 % of the time (``starved_host_stall_ratio``: a loader waiting
  on storage or page reclaim leaves the CPU idle), and only when there is demand
  (``pressure.starvation_demand``: a backlog in a linked queue, or a job that runs hot when fed);
  PSI alone never makes it: the GPU must be waiting and work must be waiting for the GPU;
- host_cpu: host CPU busy high >= 0.90.

Idle GPUs and GPUs without enough data report none: there is no workload to be limited.
"""

from __future__ import annotations

from .evidence import Evidence
from .settings import BottleneckSettings

BOTTLENECKS = (
    "memory_capacity",
    "memory_bandwidth",
    "compute",
    "launch_overhead",
    "data_loading",
    "host_cpu",
)


def _at_least(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def find_bottlenecks(
    ev: Evidence, s: BottleneckSettings, memory_counts: bool = True, starving_demand: bool = True
) -> tuple[str, ...]:
    """The bottlenecks that hold, in ``BOTTLENECKS`` order. ``memory_counts`` False: a full
    framebuffer is a server's reservation, not a limit; ``starving_demand`` False: nothing waits
    for the GPU, so its gaps are not starvation."""
    found: list[str] = []
    if memory_counts and _at_least(ev.memory_peak_ratio, s.memory_capacity_ratio):
        found.append("memory_capacity")
    dram = ev.dram_active_high if ev.dram_active_high is not None else ev.memory_copy_high
    if _at_least(dram, s.memory_bandwidth_dram_active_ratio):
        found.append("memory_bandwidth")
    compute = ev.sm_active_high if ev.sm_active_high is not None else None
    if compute is None and ev.activity_source != "sm_active":
        compute = ev.activity_p95  # no SM active: the activity signal is the best there is
    if _at_least(compute, s.compute_sm_active_ratio):
        found.append("compute")
    if (
        _at_least(ev.utilization_p50, s.launch_overhead_utilization_ratio)
        and ev.sm_active_p50 is not None
        and ev.sm_active_p50 <= s.launch_overhead_sm_active_ratio
        and "memory_bandwidth" not in found  # SMs waiting on DRAM are bandwidth-bound, not launch-bound
    ):
        found.append("launch_overhead")
    starved = starving_demand and _at_least(ev.starved_share, s.starved_share)
    if _at_least(ev.pcie_link_high, s.pcie_link_ratio) or starved:
        found.append("data_loading")
    if _at_least(ev.host_cpu_high, s.host_cpu_busy_ratio):
        found.append("host_cpu")
    return tuple(found)


def describe(ev: Evidence, names: tuple[str, ...], starving_demand: bool = True, pressure: str = "") -> str:
    """The evidence for each bottleneck, in words (``pressure``: the server's memory pressure in
    words, when it shows any)."""
    parts: list[str] = []
    for name in names:
        if name == "memory_capacity" and ev.memory_peak_ratio is not None:
            server = f" ({pressure})" if pressure else ""
            parts.append(f"memory {ev.memory_peak_ratio:.0%} full at peak{server}")
        elif name == "memory_bandwidth" and ev.dram_active_high is not None:
            parts.append(f"DRAM active {ev.dram_active_high:.0%}")
        elif name == "memory_bandwidth" and ev.memory_copy_high is not None:
            parts.append(f"memory copy utilization {ev.memory_copy_high:.0%}")
        elif name == "compute":
            if ev.sm_active_high is not None:
                parts.append(f"SM active {ev.sm_active_high:.0%}")
            else:
                parts.append(f"{ev.activity_source.replace('_', ' ')} {ev.activity_p95 or 0:.0%}")
        elif name == "launch_overhead":
            util, sm = ev.utilization_p50 or 0.0, ev.sm_active_p50 or 0.0
            parts.append(f"utilization {util:.0%} but SM active {sm:.0%}")
        elif name == "data_loading":
            if ev.pcie_link_high is not None and ev.pcie_link_high >= 0.01:
                parts.append(f"PCIe at {ev.pcie_link_high:.0%} of the link")
            if ev.starved_share and starving_demand:
                host = "the host CPU is busy" if ev.host_stall_high is None else "the host is busy or stalled"
                parts.append(f"GPU starved {ev.starved_share:.0%} of the time while {host}")
            if ev.host_stall_high is not None and ev.host_stall_high >= 0.01:
                parts.append(f"host tasks fully stalled on memory or I/O {ev.host_stall_high:.0%} (PSI)")
        elif name == "host_cpu":
            parts.append(f"host CPU {ev.host_cpu_high or 0:.0%} busy")
    return "; ".join(parts)
