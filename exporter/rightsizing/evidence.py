"""What a window (live) or Prometheus history (``rightsizer report``) says about one GPU.

Verdicts, bottlenecks and recommendations are pure functions of an ``Evidence``: the live engine and
the report build it from different places and share every decision.
"""

from __future__ import annotations

from dataclasses import dataclass

# Activity is SM active when the GPU reports it, else GR engine active, else GPU utilization.
ACTIVITY_SOURCES = ("sm_active", "gr_engine_active", "gpu_utilization")


@dataclass(frozen=True, slots=True)
class QueueEvidence:
    name: str
    depth_last: float
    depth_max: float
    rise: float  # fitted trend's rise over the window (items); > 0 grows


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
