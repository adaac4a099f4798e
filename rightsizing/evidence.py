"""What a window (live) or Prometheus history (``rightsizer report``) says about one GPU.

Verdicts, bottlenecks and recommendations are pure functions of an ``Evidence``: the live engine and
the report build it from different places and share every decision.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .numa import NumaPlacement
    from .slo.attainment import SloEvidence

# Activity is SM active when the GPU reports it, else GR engine active, else GPU utilization.
ACTIVITY_SOURCES = ("sm_active", "gr_engine_active", "gpu_utilization")


@dataclass(frozen=True, slots=True)
class QueueEvidence:
    name: str
    depth_last: float
    depth_max: float
    rise: float  # fitted trend's rise over the window (items); > 0 grows
    depth_mean: float | None = None  # mean depth over the window (the level growth is judged against)
    history_seconds: float = 0.0  # time the queue's samples span
    server: str | None = None  # inference server behind the queue: vllm, sglang, tgi, ...
    kv_cache_high: float | None = None  # KV-cache usage (0-1) at p95 over the window, when reported
    preemptions: float | None = None  # requests preempted (or retracted) over the window, when reported
    # Measured throughput over the window, per second, when the server counts it (None: not counted).
    generated_tokens_rate: float | None = None
    prompt_tokens_rate: float | None = None
    requests_rate: float | None = None
    slo: SloEvidence | None = None  # the served workload's latencies over the window, and its SLO
    # The server's KV-cache pool in bytes over all of its GPUs (vLLM's blocks x the model's bytes per
    # token), when known: what its usage leaves free of it is reserved, not needed.
    kv_cache_bytes: float | None = None

    @property
    def growth_per_hour(self) -> float:
        """Fitted growth per hour relative to the queue's own level (mean depth, at least 1 item)."""
        if self.history_seconds <= 0:
            return 0.0
        level = max(1.0, self.depth_mean if self.depth_mean is not None else self.depth_last)
        return self.rise / level * 3600.0 / self.history_seconds


@dataclass(frozen=True, slots=True)
class Evidence:
    samples: int
    history_seconds: float
    window_seconds: float
    model: str  # NVML name of the GPU (or "<name> MIG <profile>")
    mig_profile: str | None
    memory_total_bytes: float
    memory_peak_bytes: float | None  # peak of what the workload holds (framebuffer used)
    memory_p95_bytes: float | None
    activity_source: str
    activity_p50: float | None
    activity_p95: float | None
    activity_p99: float | None
    activity_recent_max: float | None  # max activity over the last idle_after_seconds
    utilization_p50: float | None = None
    sm_active_p50: float | None = None
    sm_active_high: float | None = None  # at the bottleneck percentile
    sm_occupancy_p50: float | None = None
    tensor_active_p95: float | None = None
    dram_active_p95: float | None = None
    dram_active_high: float | None = None
    pcie_link_high: float | None = None  # PCIe throughput / link capacity at the bottleneck percentile
    host_cpu_high: float | None = None
    starved_share: float | None = None  # share of samples with low activity while the host CPU is busy
    queues: tuple[QueueEvidence, ...] = ()
    # Bandwidth: DRAM active when profiling reports it, else NVML's memory-controller utilization.
    memory_copy_p95: float | None = None  # DCGM_FI_DEV_MEM_COPY_UTIL as a ratio, p95
    memory_copy_high: float | None = None  # ... at the bottleneck percentile
    nvlink_high: float | None = None  # NVLink traffic / the link's bandwidth at the bottleneck percentile
    workload_gpus: int = 1  # GPUs of its multi-GPU workload (``group.merge``); 1 for single-GPU work
    # PCIe link: the best current generation and width over the window, and the maximum (NVML).
    pcie_link_generation: float | None = None
    pcie_link_generation_max: float | None = None
    pcie_link_width: float | None = None
    pcie_link_width_max: float | None = None
    # Max GPU utilization (a kernel ran) over the last idle_after_seconds: a GPU whose kernels run
    # is not idle however little of the SMs they keep busy.
    utilization_recent_max: float | None = None
    # Bursts: p99 of the bandwidth signals (activity_p99 is compute's). An option must carry them
    # without saturating, however rare (a 20 s burst every 10 min is 3 % of the time: above p95).
    dram_active_p99: float | None = None
    memory_copy_p99: float | None = None
    host_stall_high: float | None = None  # PSI: share fully stalled on memory or I/O, at the percentile
    numa: NumaPlacement | None = None  # the GPU's and its container's NUMA placement (balance check)

    @property
    def bandwidth(self) -> tuple[str, float] | None:
        """(signal, p95) of the memory-bandwidth activity, or None when no signal exists."""
        if self.dram_active_p95 is not None:
            return "DRAM active", self.dram_active_p95
        if self.memory_copy_p95 is not None:
            return "memory copy utilization", self.memory_copy_p95
        return None

    @property
    def bandwidth_p99(self) -> float | None:
        """p99 of the signal ``bandwidth`` reads."""
        if self.dram_active_p95 is not None:
            return self.dram_active_p99
        return self.memory_copy_p99 if self.memory_copy_p95 is not None else None

    @property
    def confidence(self) -> float:
        """History as a share of the window (1 when the window is full, within 2 %: a full window's
        samples span a little less than its length)."""
        if self.window_seconds <= 0:
            return 1.0
        return max(0.0, min(1.0, self.history_seconds / (0.98 * self.window_seconds)))

    @property
    def memory_peak_ratio(self) -> float | None:
        if self.memory_peak_bytes is None or self.memory_total_bytes <= 0:
            return None
        return self.memory_peak_bytes / self.memory_total_bytes
