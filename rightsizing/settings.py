"""Typed settings of the right-sizing engine (the ``rightsizing`` section of the exporter config).

Every threshold the verdicts and bottlenecks use lives here with its default, its bounds and what
it means, so the README's configuration reference documents them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from rightsizer_core.settings import setting

DAY = 86400.0


@dataclass(frozen=True)
class QueueLink:
    queue: str = setting("", "Name of a configured queue (the `queues:` list) or a simulated queue.")
    gpus: list[str] = setting([], "GPUs this queue feeds: UUIDs or indexes.")
    namespace: str | None = setting(None, "Link to GPUs attributed to pods in this namespace.")
    workload: str | None = setting(
        None, "Link to GPUs attributed to pods of this workload (pod name '<workload>-…' or equal)."
    )

    def validate(self) -> None:
        if not self.queue:
            raise ValueError("queue is required")
        if not (self.gpus or self.namespace or self.workload):
            raise ValueError(f"link for queue {self.queue!r} needs gpus, namespace or workload")


@dataclass(frozen=True)
class BottleneckSettings:
    percentile: float = setting(
        0.90,
        "Percentile of each signal a bottleneck test reads (0.9: high at least 10 % of the time).",
        minimum=0.5,
        maximum=1.0,
    )
    compute_sm_active_ratio: float = setting(
        0.80, "compute: SM active (or activity) at the percentile at or above this.", minimum=0.1, maximum=1.0
    )
    memory_bandwidth_dram_active_ratio: float = setting(
        0.60, "memory_bandwidth: DRAM active at the percentile at or above this.", minimum=0.1, maximum=1.0
    )
    memory_capacity_ratio: float = setting(
        0.95,
        "memory_capacity: peak memory need at or above this share of the GPU's memory.",
        minimum=0.5,
        maximum=1.0,
    )
    launch_overhead_utilization_ratio: float = setting(
        0.80,
        "launch_overhead: median GPU utilization at or above this while SM active stays low.",
        minimum=0.1,
        maximum=1.0,
    )
    launch_overhead_sm_active_ratio: float = setting(
        0.40,
        "launch_overhead: median SM active at or below this while utilization is high.",
        minimum=0.0,
        maximum=1.0,
    )
    pcie_link_ratio: float = setting(
        0.70,
        "data_loading: PCIe throughput at the percentile at or above this share of the link.",
        minimum=0.1,
        maximum=1.0,
    )
    starved_activity_ratio: float = setting(
        0.30,
        "data_loading: a sample is starved when activity is below this while the host CPU is busy.",
        minimum=0.0,
        maximum=1.0,
    )
    starved_host_stall_ratio: float = setting(
        0.10,
        "data_loading: a sample with activity below starved_activity_ratio is also starved when the "
        "host is fully stalled on memory or I/O (PSI 'full') at least this share of the time.",
        minimum=0.01,
        maximum=1.0,
    )
    starved_share: float = setting(
        0.20, "data_loading: at least this share of samples starved.", minimum=0.01, maximum=1.0
    )
    starved_demand_activity_ratio: float = setting(
        0.50,
        "Starvation needs demand: a linked queue with a backlog (mean depth >= 1), or, without a queue, "
        "activity at p95 at or above this (the job runs hot when fed, so its gaps are waits).",
        minimum=0.0,
        maximum=1.0,
    )
    host_cpu_busy_ratio: float = setting(
        0.90,
        "host_cpu: host CPU busy at the percentile at or above this (also 'busy' for starvation).",
        minimum=0.1,
        maximum=1.0,
    )


@dataclass(frozen=True)
class RightsizingSettings:
    enabled: bool = setting(True, "Compute verdicts, bottlenecks and recommendations.")
    window_seconds: float = setting(
        3600.0, "Length of the rolling window every verdict reads.", minimum=60, maximum=30 * DAY
    )
    window_buckets: int = setting(
        60,
        "Time buckets per window (memory is bounded: at most buckets x signals x 101 counters).",
        minimum=6,
        maximum=1440,
    )
    min_samples: int = setting(
        60, "insufficient_data below this many samples in the window.", minimum=1, maximum=10_000_000
    )
    min_history_seconds: float = setting(
        600.0, "insufficient_data while the window covers less time than this.", minimum=0, maximum=30 * DAY
    )
    score_interval_seconds: float = setting(
        0.0,
        "Recompute scores at most this often (sample time); 0 scores every cycle that is read "
        "(a scrape, the API, the status page).",
        minimum=0,
        maximum=3600,
    )
    idle_activity_ratio: float = setting(
        0.05,
        "idle: activity (SM active, GR engine active or utilization) under this for idle_after_seconds.",
        minimum=0.0,
        maximum=0.5,
    )
    idle_after_seconds: float = setting(
        900.0,
        "idle: how long activity must stay under idle_activity_ratio. Memory use never decides idleness.",
        minimum=60,
        maximum=30 * DAY,
    )
    memory_full_ratio: float = setting(
        0.95,
        "Memory full: peak memory at or above this share of the GPU's memory (underprovisioned with a "
        "growing queue, or with PCIe host traffic while the GPU is underfed: the offload signature).",
        minimum=0.5,
        maximum=1.0,
    )
    saturation_activity_ratio: float = setting(
        0.90,
        "Compute saturated: median activity at or above this (underprovisioned while a linked queue grows).",
        minimum=0.5,
        maximum=1.0,
    )
    queue_growth_ratio_per_hour: float = setting(
        0.5,
        "A queue grows when its fitted trend gains at least this share of its own mean depth per hour.",
        minimum=0.0,
        maximum=1e6,
    )
    queue_growth_min: float = setting(
        2.0,
        "... and at least this many items over the history it covers (a trickle is not growth).",
        minimum=0.0,
        maximum=1e9,
    )
    kv_cache_full_ratio: float = setting(
        0.95,
        "Memory pressure on an inference server: KV-cache usage at p95 at or above this (or any "
        "preemption in the window); underprovisioned whatever NVML's memory fraction.",
        minimum=0.5,
        maximum=1.0,
    )
    nvlink_share_ratio: float = setting(
        0.05,
        "Sized as a multi-GPU job (whole GPUs with NVLink, never MIG) when NVLink traffic at the "
        "bottleneck percentile is at or above this share of the link (0.05 of an H100's 900 GB/s is "
        "45 GB/s, more than a PCIe 4.0 x16 link carries).",
        minimum=0.0,
        maximum=1.0,
    )
    target_activity_ratio: float = setting(
        0.70,
        "A recommended GPU must carry the observed p95 activity at or below this projected activity.",
        minimum=0.1,
        maximum=1.0,
    )
    memory_margin_ratio: float = setting(
        0.15, "A recommended GPU must hold peak memory need x (1 + this).", minimum=0.0, maximum=2.0
    )
    short_history_widening: float = setting(
        0.5,
        "With history shorter than the window, margins widen by up to this factor (VPA-style).",
        minimum=0.0,
        maximum=5.0,
    )
    min_savings_ratio: float = setting(
        0.10,
        "overprovisioned only when the recommendation is at least this much cheaper.",
        minimum=0.0,
        maximum=0.9,
    )
    recommend_mig: bool = setting(True, "Consider MIG profiles as well as whole GPUs.")
    slo_min_requests: int = setting(
        100,
        "A latency SLO is judged only over a window with at least this many requests (else: not "
        "enough data).",
        minimum=1,
        maximum=1_000_000_000,
    )
    slo_margin_ratio: float = setting(
        0.10,
        "With an SLO declared, an option is offered only when its projected latency at the objective "
        "is at most (1 - this) x every target; an SLO is met with room at that latency or less.",
        minimum=0.0,
        maximum=0.9,
    )
    slo_scaling_window_seconds: float = setting(
        120.0,
        "The short window of the SLO scaling series (rightsizer_workload_slo_scaling_*) that the "
        "adapter serves to HPA and KEDA, distinct from window_seconds.",
        minimum=10,
        maximum=3600,
    )
    slo_scaling_min_requests: int = setting(
        10,
        "The scaling series are published only over a scaling window with at least this many requests.",
        minimum=1,
        maximum=1_000_000_000,
    )
    procfs_root: str = setting("/proc", "Where /proc/stat is read for host CPU busy.")
    queue_links: list[QueueLink] = setting(
        [], "Queues feeding GPUs (queues with namespace and workload labels also link by themselves)."
    )
    bottlenecks: BottleneckSettings = setting(BottleneckSettings(), "Bottleneck thresholds.")

    def validate(self) -> None:
        if self.min_history_seconds > self.window_seconds:
            raise ValueError("min_history_seconds must not exceed window_seconds")
        if self.idle_after_seconds > self.window_seconds:
            raise ValueError("idle_after_seconds must not exceed window_seconds")
