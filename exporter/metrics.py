"""The one table of every metric family Rightsizer publishes.

The renderer, the README's metric table and the tests all read ``FAMILIES``. Each family says
where its rows come from (``scope``) and, for per-GPU families, which snapshot field feeds it
and how to convert that field (kept in SI units) to the family's unit.

DCGM-compatible families (``dcgm=True``) copy dcgm-exporter's names, types and units exactly so
existing dashboards work unchanged; they are the only families exempt from ``promtool check
metrics`` (see ``PROMTOOL_EXCEPTIONS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "info", "summary"]
Scope = Literal[
    "gpu",  # one row per GPU that is up and reports ``field``
    "gpu_up",  # one row per known GPU, up or down
    "gpu_info",  # one row per known GPU, value 1
    "gpu_clock_events",  # one row per GPU and clock-event reason, 0/1
    "collector_success",
    "collector_duration",
    "last_sample",
    "build_info",
    "extension",  # rows a subsystem (queues, right-sizing) puts in ``Snapshot.rows`` under the family's name
]

# Label names of every per-GPU series, in dcgm-exporter's order. ``Hostname`` is switchable to
# ``hostname`` (dcgm-exporter's 2026 spelling) by configuration; MIG and pod labels are present
# only on MIG instances and attributed GPUs respectively.
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName")  # own families: model_name
MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")
HOST_LABELS = ("Hostname", "DCGM_FI_DRIVER_VERSION")
POD_LABELS = ("pod", "namespace", "container")

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: MetricType
    unit: str
    help: str
    scope: Scope
    field: str | None = None
    scale: float = 1.0
    dcgm: bool = False
    extra_labels: tuple[str, ...] = ()

    @property
    def labels_doc(self) -> str:
        """Labels as the README documents them."""
        if self.scope in ("gpu", "gpu_up", "gpu_info", "gpu_clock_events") or (
            self.scope == "extension" and "gpu" in self.extra_labels
        ):
            base = "GPU labels"
            extra = [lbl for lbl in self.extra_labels if lbl not in GPU_LABELS]
            return ", ".join([base, *extra]) if extra else base
        return ", ".join(self.extra_labels) or "—"


def _dcgm(name: str, type_: MetricType, unit: str, help_: str, field: str, scale: float = 1.0) -> Family:
    return Family(name, type_, unit, help_, "gpu", field, scale, dcgm=True)


def _gpu(name: str, unit: str, help_: str, field: str, type_: MetricType = "gauge") -> Family:
    return Family(name, type_, unit, help_, "gpu", field)


FAMILIES: tuple[Family, ...] = (
    # --- dcgm-exporter compatible (names, types and units fixed by dcgm-exporter) ---
    _dcgm("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz", "SM clock frequency (in MHz).", "sm_clock_hz", 1e-6),
    _dcgm(
        "DCGM_FI_DEV_MEM_CLOCK", "gauge", "MHz", "Memory clock frequency (in MHz).", "memory_clock_hz", 1e-6
    ),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", "gauge", "°C", "GPU temperature (in C).", "gpu_temperature_celsius"),
    _dcgm(
        "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "°C", "Memory temperature (in C).", "memory_temperature_celsius"
    ),
    _dcgm("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", "Power draw (in W).", "power_usage_watts"),
    _dcgm(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "mJ",
        "Total energy consumption since boot (in mJ).",
        "energy_joules",
        1000.0,
    ),
    _dcgm(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "retries",
        "Total number of PCIe retries.",
        "pcie_replay_count",
    ),
    _dcgm("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", "GPU utilization (in %).", "gpu_utilization_ratio", 100.0),
    _dcgm(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "%",
        "Memory utilization (in %).",
        "memory_copy_utilization_ratio",
        100.0,
    ),
    _dcgm(
        "DCGM_FI_DEV_ENC_UTIL",
        "gauge",
        "%",
        "Encoder utilization (in %).",
        "encoder_utilization_ratio",
        100.0,
    ),
    _dcgm(
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "%",
        "Decoder utilization (in %).",
        "decoder_utilization_ratio",
        100.0,
    ),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", "gauge", "XID", "Value of the last XID error encountered.", "xid_last"),
    _dcgm(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "MiB",
        "Framebuffer memory free (in MiB).",
        "memory_free_bytes",
        1 / MIB,
    ),
    _dcgm(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "MiB",
        "Framebuffer memory used (in MiB).",
        "memory_used_bytes",
        1 / MIB,
    ),
    _dcgm(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "MiB",
        "Framebuffer memory reserved (in MiB).",
        "memory_reserved_bytes",
        1 / MIB,
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "errors",
        "Total number of single-bit volatile ECC errors.",
        "ecc_corrected_count",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "errors",
        "Total number of double-bit volatile ECC errors.",
        "ecc_uncorrected_count",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        "nvlink_bandwidth_count",
    ),
    _dcgm(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "ratio",
        "Ratio of time the graphics engine is active.",
        "gr_engine_active_ratio",
    ),
    _dcgm(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "ratio",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active_ratio",
    ),
    _dcgm(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "ratio",
        "The ratio of number of warps resident on an SM.",
        "sm_occupancy_ratio",
    ),
    _dcgm(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "ratio",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active_ratio",
    ),
    _dcgm(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "ratio",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active_ratio",
    ),
    _dcgm(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "B/s",
        "The rate of data transmitted over the PCIe bus.",
        "pcie_tx_bytes_per_second",
    ),
    _dcgm(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "B/s",
        "The rate of data received over the PCIe bus.",
        "pcie_rx_bytes_per_second",
    ),
    # --- Rightsizer's own GPU families ---
    Family(
        "rightsizer_gpu_up",
        "gauge",
        "bool",
        "1 when the GPU answered this cycle, 0 when it is lost, hung or failing.",
        "gpu_up",
    ),
    Family(
        "rightsizer_gpu_info",
        "info",
        "info",
        "GPU identity: labels carry index, UUID, PCI bus id, model, driver and total memory.",
        "gpu_info",
        extra_labels=("memory_total_bytes",),
    ),
    _gpu("rightsizer_gpu_memory_total_bytes", "bytes", "Total framebuffer memory.", "memory_total_bytes"),
    _gpu("rightsizer_gpu_power_limit_watts", "W", "Enforced power limit.", "power_limit_watts"),
    _gpu("rightsizer_gpu_sm_clock_max_hertz", "Hz", "Maximum SM clock.", "sm_clock_max_hz"),
    _gpu("rightsizer_gpu_memory_clock_max_hertz", "Hz", "Maximum memory clock.", "memory_clock_max_hz"),
    _gpu(
        "rightsizer_gpu_pcie_link_generation", "generation", "Current PCIe link generation.", "pcie_link_gen"
    ),
    _gpu(
        "rightsizer_gpu_pcie_link_generation_max",
        "generation",
        "Maximum PCIe link generation.",
        "pcie_link_gen_max",
    ),
    _gpu("rightsizer_gpu_pcie_link_width", "lanes", "Current PCIe link width.", "pcie_link_width"),
    _gpu("rightsizer_gpu_pcie_link_width_max", "lanes", "Maximum PCIe link width.", "pcie_link_width_max"),
    Family(
        "rightsizer_gpu_clock_event_active",
        "gauge",
        "bool",
        "1 while the clock-event (throttle) reason is active.",
        "gpu_clock_events",
        extra_labels=("reason",),
    ),
    _gpu(
        "rightsizer_gpu_compute_processes",
        "processes",
        "Compute processes running on the GPU.",
        "compute_processes",
    ),
    _gpu(
        "rightsizer_gpu_compute_processes_memory_bytes",
        "bytes",
        "GPU memory used by the compute processes running on the GPU.",
        "compute_processes_memory_bytes",
    ),
    _gpu(
        "rightsizer_gpu_nvlink_rx_bytes_per_second",
        "B/s",
        "NVLink receive rate over all links (NVML GPM, Hopper and newer), averaged over the cycle.",
        "nvlink_rx_bytes_per_second",
    ),
    _gpu(
        "rightsizer_gpu_nvlink_tx_bytes_per_second",
        "B/s",
        "NVLink transmit rate over all links (NVML GPM, Hopper and newer), averaged over the cycle.",
        "nvlink_tx_bytes_per_second",
    ),
    # --- XID errors (exporter/sources/nvml/events.py); rows come from the XID extension ---
    Family(
        "rightsizer_xid_errors_total",
        "counter",
        "errors",
        "XID errors reported by NVML events for the GPU since the exporter started, per XID.",
        "extension",
        extra_labels=("gpu", "xid"),
    ),
    Family(
        "rightsizer_xid_last_seen_timestamp_seconds",
        "gauge",
        "seconds",
        "Unix time of the last XID error reported for the GPU.",
        "extension",
        extra_labels=("gpu",),
    ),
    # --- pod attribution (exporter/sources/pods); rows come from the pods extension ---
    Family(
        "rightsizer_pod_gpu_memory_used_bytes",
        "gauge",
        "bytes",
        "GPU memory used by a pod's container on a GPU or MIG instance: its processes' memory "
        "(NVML running processes attributed through /proc/<pid>/cgroup), also on shared GPUs.",
        "extension",
        extra_labels=("gpu", "UUID", "pod", "namespace", "container"),
    ),
    # --- the exporter itself ---
    Family(
        "rightsizer_collector_success",
        "gauge",
        "bool",
        "1 if the collector's last run succeeded.",
        "collector_success",
        extra_labels=("collector",),
    ),
    Family(
        "rightsizer_collector_duration_seconds",
        "gauge",
        "seconds",
        "Duration of the collector's last run.",
        "collector_duration",
        extra_labels=("collector",),
    ),
    Family(
        "rightsizer_last_sample_timestamp_seconds",
        "gauge",
        "seconds",
        "Unix time of the sample the published values come from.",
        "last_sample",
    ),
    Family(
        "rightsizer_http_malformed_requests_total",
        "counter",
        "requests",
        "HTTP requests refused before reaching a handler: malformed, over a size limit, or without "
        "HTTP/1.x (each logged at debug level only).",
        "extension",
    ),
    Family(
        "rightsizer_http_connections_dropped_total",
        "counter",
        "connections",
        "HTTP connections the listener closed to protect itself: header_timeout (no complete request "
        "in time), response_timeout (a response not read in time), evicted (at the connection cap, to "
        "make room), refused (at the cap, nothing to evict).",
        "extension",
        extra_labels=("reason",),
    ),
    Family(
        "rightsizer_http_accept_errors_total",
        "counter",
        "errors",
        "Times accepting a connection failed for lack of file descriptors or memory (accepting then "
        "pauses for a second).",
        "extension",
    ),
    Family(
        "rightsizer_http_open_connections",
        "gauge",
        "connections",
        "Open HTTP connections, TLS handshakes included.",
        "extension",
    ),
    Family(
        "rightsizer_build_info",
        "info",
        "info",
        "Build information of the running exporter.",
        "build_info",
        extra_labels=("version", "python_version"),
    ),
    # --- queue depth (exporter/sources/queues); rows come from the queue extension ---
    Family(
        "rightsizer_queue_depth",
        "gauge",
        "items",
        "Items waiting in the queue (requests waiting, list or stream length, consumer-group lag) "
        "at the latest successful poll; absent while the source is down.",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_in_flight",
        "gauge",
        "items",
        "Items being worked on (requests running, stream entries pending), where the source reports it.",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_kv_cache_usage_ratio",
        "gauge",
        "ratio",
        "KV-cache usage (0-1) the inference server reports on the same poll as its queue depth "
        "(vLLM kv_cache_usage_perc or gpu_cache_usage_perc, SGLang token_usage).",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_kv_cache_capacity_bytes",
        "gauge",
        "bytes",
        "The inference server's KV-cache pool, over all of its GPUs (vLLM: num_gpu_blocks x block_size "
        "of cache_config_info, SGLang: max_total_num_tokens, x the model's bytes per token), when its "
        "model's shape is known. What "
        "right-sizing subtracts, less the usage, from the memory the server reserves.",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_preemptions_total",
        "counter",
        "requests",
        "Requests the inference server preempted (vLLM) or retracted (SGLang), as it counts them.",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_generated_tokens_total",
        "counter",
        "tokens",
        "Tokens the inference server generated, as it counts them (vLLM and SGLang "
        "generation_tokens_total, TGI tgi_request_generated_tokens_sum).",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_prompt_tokens_total",
        "counter",
        "tokens",
        "Prompt tokens the inference server processed (vLLM and SGLang prompt_tokens_total, "
        "TGI tgi_request_input_length_sum).",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_requests_total",
        "counter",
        "requests",
        "Requests the inference server finished (vLLM request_success_total, SGLang num_requests_total, "
        "TGI tgi_request_success, Triton nv_inference_count).",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_source_up",
        "gauge",
        "bool",
        "1 if the queue source's latest poll succeeded, 0 if it failed (labels as on the depth).",
        "extension",
        extra_labels=("queue", "kind", "(static labels)"),
    ),
    Family(
        "rightsizer_queue_source_duration_seconds",
        "gauge",
        "seconds",
        "Duration of the queue source's latest poll.",
        "extension",
        extra_labels=("queue",),
    ),
    Family(
        "rightsizer_queue_last_success_timestamp_seconds",
        "gauge",
        "seconds",
        "Unix time of the queue source's latest successful poll.",
        "extension",
        extra_labels=("queue",),
    ),
    # --- the node's dcgm-exporter (exporter/sources/dcgm), when dcgm_exporter.url is set ---
    Family(
        "rightsizer_dcgm_exporter_up",
        "gauge",
        "bool",
        "1 when the node's dcgm-exporter was read well within dcgm_exporter.max_age_seconds, 0 when it is "
        "down or answers junk (its profiling ratios are then not used, never taken as 0).",
        "extension",
    ),
    Family(
        "rightsizer_dcgm_exporter_gpus",
        "gauge",
        "GPUs",
        "GPUs and MIG instances of this node matched on the dcgm-exporter page by UUID this cycle.",
        "extension",
    ),
    Family(
        "rightsizer_dcgm_exporter_last_success_timestamp_seconds",
        "gauge",
        "seconds",
        "Unix time of the latest good read of the node's dcgm-exporter.",
        "extension",
    ),
    # --- right-sizing (rightsizing/); rows come from its extension (exporter/rightsizing_live) ---
    Family(
        "rightsizer_gpu_verdict",
        "gauge",
        "bool",
        "Right-sizing verdict over the window: one series per state (idle, overprovisioned, rightsized, "
        "underprovisioned, insufficient_data), 1 on the current one.",
        "extension",
        extra_labels=("gpu", "verdict"),
    ),
    Family(
        "rightsizer_gpu_fit_score",
        "gauge",
        "ratio",
        "How well the GPU fits its work, 0-1: price of the cheapest option that carries it over this "
        "GPU's price (or the inverse when a bigger one is needed); 0 when idle.",
        "extension",
        extra_labels=("gpu",),
    ),
    Family(
        "rightsizer_gpu_bottleneck",
        "gauge",
        "bool",
        "1 while the resource limits the GPU's workload (memory_capacity, memory_bandwidth, compute, "
        "launch_overhead, data_loading, host_cpu); several may hold.",
        "extension",
        extra_labels=("gpu", "bottleneck"),
    ),
    Family(
        "rightsizer_gpu_memory_peak_bytes",
        "gauge",
        "bytes",
        "Peak framebuffer memory used over the window.",
        "extension",
        extra_labels=("gpu",),
    ),
    Family(
        "rightsizer_gpu_activity_p95_ratio",
        "gauge",
        "ratio",
        "95th percentile over the window of activity (SM active, else GR engine active, else utilization).",
        "extension",
        extra_labels=("gpu",),
    ),
    Family(
        "rightsizer_gpu_recommendation_info",
        "info",
        "info",
        "Recommended catalog option (GPU key, '<GPU key>/<MIG profile>', 'release' or 'none'), the "
        "reason in a few words (the full reason is in /api/v1/gpus), where the recommended option's "
        "price comes from (list, estimate or configured) and, for multi-GPU work, the workload's move.",
        "extension",
        extra_labels=("gpu", "recommended", "reason", "price_source", "workload_change"),
    ),
    Family(
        "rightsizer_gpu_hourly_savings_dollars",
        "gauge",
        "dollars",
        "Current hourly price minus the recommended option's (negative when the right GPU costs more).",
        "extension",
        extra_labels=("gpu",),
    ),
    Family(
        "rightsizer_gpu_window_samples",
        "gauge",
        "samples",
        "Samples in the GPU's right-sizing window.",
        "extension",
        extra_labels=("gpu",),
    ),
    Family(
        "rightsizer_host_cpu_busy_ratio",
        "gauge",
        "ratio",
        "Share of the node's CPU time busy (from /proc/stat) at the latest sample.",
        "extension",
    ),
    Family(
        "rightsizer_host_pressure_stalled_ratio",
        "gauge",
        "ratio",
        "Share of the last poll interval the node's tasks stalled on a resource (PSI, /proc/pressure): "
        "resource=memory|io, kind=some (at least one task) or full (all non-idle tasks at once); "
        "absent on kernels without PSI.",
        "extension",
        extra_labels=("resource", "kind"),
    ),
    Family(
        "rightsizer_gpu_balance_finding",
        "gauge",
        "bool",
        "1 when a system-balance check finds a problem with how the GPU sits in its host, 0 when it "
        "finds none; absent while its evidence is missing. finding=pcie_link_degraded: the best PCIe "
        "link generation or width over the window is below the maximum (the reason is in /api/v1/gpus); "
        "finding=numa_mismatch: none of the CPUs the GPU's container may run on is on the GPU's NUMA node.",
        "extension",
        extra_labels=("gpu", "finding"),
    ),
    Family(
        "rightsizer_workload_throughput_per_second",
        "gauge",
        "units/s",
        "An inference server's measured throughput over the right-sizing window (option=current), and "
        "projected on the recommended options (option=recommended); unit=tokens (generated) or requests.",
        "extension",
        extra_labels=("queue", "kind", "unit", "option"),
    ),
    Family(
        "rightsizer_workload_cost_dollars",
        "gauge",
        "dollars",
        "Cost per inference of the GPUs an inference server's queue feeds: dollars per million generated "
        "tokens (per=million_tokens) or per thousand requests (per=thousand_requests), at today's price "
        "(option=current) and projected on the recommended options (option=recommended).",
        "extension",
        extra_labels=("queue", "kind", "per", "option"),
    ),
    Family(
        "rightsizer_workload_latency_requests",
        "gauge",
        "requests",
        "Requests an inference workload's servers observed over the right-sizing window, per latency "
        "histogram (slo=ttft|itl|e2e|queue; itl counts tokens where the server observes per token).",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_latency_seconds",
        "summary",
        "seconds",
        "Latency of an inference workload: quantile=0.5, 0.95, 0.99 and its SLO's objective over the "
        "right-sizing window, from the servers' histogram buckets (PromQL's histogram_quantile "
        "convention), absent with fewer than slo_min_requests requests or without a distribution "
        "(Triton's means); _sum and _count: every observation since the exporter started.",
        "extension",
        extra_labels=("namespace", "workload", "slo", "quantile"),
    ),
    Family(
        "rightsizer_workload_latency_mean_seconds",
        "gauge",
        "seconds",
        "Mean latency of an inference workload over the right-sizing window (the histogram's sum over"
        " its count; Triton without histograms: its cumulative duration counters over its successful "
        "requests). A mean, not a percentile.",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_target_seconds",
        "gauge",
        "seconds",
        "A declared SLO target (slos: in the configuration).",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_objective_ratio",
        "gauge",
        "ratio",
        "A declared SLO's objective: the share of requests that must meet the target.",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_window_attainment_ratio",
        "gauge",
        "ratio",
        "Share of the right-sizing window's requests at or under the SLO target, from bucket counts "
        "(exact when the target is a bucket bound, else interpolated in its bucket); absent with "
        "fewer than slo_min_requests requests or without a distribution. Not the adapter's "
        "rightsizer_workload_slo_attainment_ratio, which is the scaling window's.",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_window_latency_ratio",
        "gauge",
        "ratio",
        "The worst declared target's latency at the objective over the target, over the right-sizing "
        "window (1.0 = on the edge; above 1: missed); absent when no target can be judged. Not the "
        "adapter's rightsizer_workload_slo_latency_ratio, which is the scaling window's.",
        "extension",
        extra_labels=("namespace", "workload"),
    ),
    Family(
        "rightsizer_workload_slo_requests_total",
        "counter",
        "requests",
        "Requests observed for a declared SLO target since the exporter started (the histogram's "
        "count increases, restarts of the server counted on).",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_good_requests_total",
        "counter",
        "requests",
        "Requests at or under a declared SLO target since the exporter started (from bucket counts, "
        "interpolated in a bucket when the target is not a bound): good / requests over any window is"
        " the attainment.",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_scaling_latency_ratio",
        "gauge",
        "ratio",
        "The SLO latency ratio over the short scaling window (slo_scaling_window_seconds): what the "
        "adapter serves as rightsizer_workload_slo_latency_ratio; absent when "
        "rightsizer_workload_slo_scaling_up is 0.",
        "extension",
        extra_labels=("namespace", "workload"),
    ),
    Family(
        "rightsizer_workload_slo_scaling_attainment_ratio",
        "gauge",
        "ratio",
        "A declared target's attainment over the short scaling window: what the adapter serves as "
        "rightsizer_workload_slo_attainment_ratio; absent when it cannot be judged.",
        "extension",
        extra_labels=("namespace", "workload", "slo"),
    ),
    Family(
        "rightsizer_workload_slo_scaling_up",
        "gauge",
        "bool",
        "1 when a workload's SLO can be judged over the scaling window now, 0 when it cannot (a "
        "source down, too few requests, an invalid histogram): the adapter answers 503 then, never a value.",
        "extension",
        extra_labels=("namespace", "workload"),
    ),
    Family(
        "rightsizer_workload_slo_scaling_unjudged_info",
        "info",
        "info",
        "Why a declared SLO cannot be judged over the scaling window now, present exactly while "
        "rightsizer_workload_slo_scaling_up is 0: 'sources down', 'too few requests in the window', "
        "'no latency histogram read', 'the server publishes only a mean' or 'invalid histogram: "
        "<family>: <fault>'.",
        "extension",
        extra_labels=("namespace", "workload", "reason"),
    ),
)

FAMILIES_BY_NAME = {f.name: f for f in FAMILIES}

# NVML's clock-event reason bits (nvmlClocksEventReason*), published by name.
CLOCK_EVENT_REASONS: tuple[tuple[str, int], ...] = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clock_setting", 0x100),
)

# promtool check metrics findings accepted, one by one, because dcgm-exporter fixed these names:
# (metric name, finding as promtool prints it). Own families (``rightsizer_*``) must lint clean;
# they carry the same GPU labels except ``model_name`` for dcgm-exporter's ``modelName``.
PROMTOOL_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        *(
            (f.name, "label names should be written in 'snake_case' not 'camelCase'")
            for f in FAMILIES
            if f.dcgm
        ),
        *(
            (f.name, 'counter metrics should have "_total" suffix')
            for f in FAMILIES
            if f.dcgm and f.type == "counter"
        ),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "metric name should not include type 'counter'"),
    }
)
