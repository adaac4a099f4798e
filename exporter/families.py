"""Named sets of metric families for the exporter's ``families`` setting (publish only these).

``headless``: what the shipped recording and alert rules, the adapter's built-in rules and
``rightsizer report`` read. ``shipped``: that, plus what the shipped dashboards read. A test derives
both from those files, so they cannot drift from them.
"""

from __future__ import annotations

from collections.abc import Iterable

from .metrics import FAMILIES_BY_NAME

HEADLESS: frozenset[str] = frozenset({
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "rightsizer_gpu_activity_p95_ratio",
    "rightsizer_gpu_fit_score", "rightsizer_gpu_hourly_savings_dollars", "rightsizer_gpu_info",
    "rightsizer_gpu_memory_peak_bytes", "rightsizer_gpu_memory_total_bytes",
    "rightsizer_gpu_pcie_link_generation", "rightsizer_gpu_pcie_link_generation_max",
    "rightsizer_gpu_pcie_link_width", "rightsizer_gpu_pcie_link_width_max", "rightsizer_gpu_up",
    "rightsizer_gpu_verdict", "rightsizer_host_cpu_busy_ratio", "rightsizer_pod_gpu_memory_used_bytes",
    "rightsizer_last_sample_timestamp_seconds",
    "rightsizer_queue_depth", "rightsizer_queue_in_flight", "rightsizer_queue_kv_cache_usage_ratio",
    "rightsizer_queue_kv_cache_capacity_bytes",
    "rightsizer_queue_preemptions_total", "rightsizer_queue_source_up", "rightsizer_xid_errors_total",
    "rightsizer_queue_generated_tokens_total", "rightsizer_queue_prompt_tokens_total",
    "rightsizer_queue_requests_total", "rightsizer_host_pressure_stalled_ratio",
    "rightsizer_gpu_balance_finding", "rightsizer_queue_last_success_timestamp_seconds",
    "rightsizer_workload_latency_mean_seconds", "rightsizer_workload_latency_requests",
    "rightsizer_workload_latency_seconds", "rightsizer_workload_slo_window_attainment_ratio",
    "rightsizer_workload_slo_good_requests_total", "rightsizer_workload_slo_objective_ratio",
    "rightsizer_workload_slo_requests_total", "rightsizer_workload_slo_scaling_attainment_ratio",
    "rightsizer_workload_slo_scaling_latency_ratio", "rightsizer_workload_slo_scaling_up",
    "rightsizer_workload_slo_target_seconds",
})

SHIPPED: frozenset[str] = HEADLESS | frozenset({
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS", "rightsizer_build_info", "rightsizer_collector_duration_seconds",
    "rightsizer_collector_success", "rightsizer_gpu_bottleneck", "rightsizer_gpu_clock_event_active",
    "rightsizer_gpu_power_limit_watts", "rightsizer_gpu_recommendation_info",
    "rightsizer_workload_cost_dollars", "rightsizer_workload_slo_window_latency_ratio",
    "rightsizer_workload_throughput_per_second",
    "rightsizer_gpu_sm_clock_max_hertz",
})

PRESETS: dict[str, frozenset[str]] = {"headless": HEADLESS, "shipped": SHIPPED}


def resolve(entries: Iterable[str]) -> frozenset[str] | None:
    """The families that ``entries`` (family names and preset names) name; None for none given
    (publish everything). Raises ValueError naming an entry that is neither."""
    chosen: set[str] = set()
    given = False
    for entry in entries:
        given = True
        if entry in PRESETS:
            chosen |= PRESETS[entry]
        elif entry in FAMILIES_BY_NAME:
            chosen.add(entry)
        else:
            presets = ", ".join(PRESETS)
            raise ValueError(f"families: {entry!r} is neither a metric family nor a preset ({presets})")
    return frozenset(chosen) if given else None
