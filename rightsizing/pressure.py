"""What the evidence says about demand: memory pressure, starvation demand and queue growth.

- Memory: inference servers reserve most of the GPU by design (vLLM 90 % by default; SGLang and TGI
  likewise), so a full framebuffer says nothing about need. Pressure is shown only by the server's
  own counters, read from the same /metrics poll as its queue depth: KV-cache usage at p95 at or
  above ``kv_cache_full_ratio`` (vLLM ``vllm:kv_cache_usage_perc``, older
  ``vllm:gpu_cache_usage_perc``; SGLang ``sglang:token_usage``), or any preemption in the window
  (vLLM ``vllm:num_preemptions_total``; SGLang ``sglang:num_retracted_requests_total``). TGI
  publishes no KV-cache usage (its token budget, ``max_batch_total_tokens``, is only on /info), so a
  TGI GPU's need stays unknown.
- Starvation: gaps on a GPU are starvation only when work waits for it: a linked queue with a
  backlog (mean depth >= 1), or, without a queue, a job that runs hot when fed (activity p95 at or
  above ``starved_demand_activity_ratio``). A GPU that is never busy is under-used, not starved.
- Queue growth: the fitted trend's gain per hour relative to the queue's own mean depth, at least
  ``queue_growth_ratio_per_hour``, and at least ``queue_growth_min`` items over the history.

Unmet demand (``unmet`` turns these into an underprovisioned verdict), each a named check:
- ``kv_pressure``: the server shows memory pressure, whatever NVML's memory fraction (vLLM reserves
  ``--gpu-memory-utilization`` 0.9, so NVML never shows it 95 % full);
- ``saturated``: the resources at their limit, for a queue growing by its own level: the KV cache
  (``kv_pressure``), memory full (peak at or above ``memory_full_ratio``, unless the server's own
  counters show no pressure, or it publishes none, as TGI, while bandwidth or compute is saturated:
  then the full framebuffer is its warm-up reservation and the need cannot be said), DRAM
  bandwidth (DRAM active, else memory-copy utilization, at the bottleneck percentile at or above
  the ``memory_bandwidth`` flag) or compute (median activity at or above
  ``saturation_activity_ratio``);
- ``offloading``: memory full with the PCIe host link at the ``data_loading`` flag while the GPU is
  underfed (no compute bottleneck): the work keeps part of its state in host memory and streams
  it (ZeRO-Offload, UVM oversubscription, CPU-offloaded weights or KV); more memory removes it.
"""

from __future__ import annotations

from .evidence import Evidence, QueueEvidence
from .settings import RightsizingSettings

INFERENCE_SERVERS = ("vllm", "sglang", "tgi", "triton")


def server_queue(ev: Evidence) -> QueueEvidence | None:
    """The first linked queue whose source is an inference server."""
    return next((q for q in ev.queues if q.server in INFERENCE_SERVERS), None)


def memory_pressure(ev: Evidence, s: RightsizingSettings) -> bool | None:
    """True when a linked server shows memory pressure, False when its counters show none, None when
    no counter says (no server linked, or a server that publishes none)."""
    seen = False
    for q in ev.queues:
        if q.kv_cache_high is not None:
            seen = True
            if q.kv_cache_high >= s.kv_cache_full_ratio:
                return True
        if q.preemptions is not None:
            seen = True
            if q.preemptions >= 1.0:
                return True
    return False if seen else None


def reserved_free(ev: Evidence) -> float:
    """Bytes of each of the workload's GPUs that linked inference servers reserve but leave unused:
    the share of their KV-cache pool (``QueueEvidence.kv_cache_bytes``, over all the server's GPUs)
    that their usage at p95 leaves free. 0 when no server's pool is known."""
    free = 0.0
    for q in ev.queues:
        if q.kv_cache_bytes is not None and q.kv_cache_high is not None:
            free += q.kv_cache_bytes * (1.0 - q.kv_cache_high)
    return free / max(1, ev.workload_gpus)


def memory_need(ev: Evidence) -> float | None:
    """What the work needs of each GPU's memory: the peak it holds, less what a linked server
    reserves and leaves unused (vLLM's weights + KV cache in use, not its 90 % reservation). The
    peak itself when no pool is known, or when the pool reported would leave nothing (it does not
    describe this GPU)."""
    peak = ev.memory_peak_bytes
    if peak is None:
        return None
    free = reserved_free(ev)
    return peak - free if 0.0 < free < peak else peak


def backlog(q: QueueEvidence) -> bool:
    level = q.depth_mean if q.depth_mean is not None else q.depth_last
    return level >= 1.0


def starvation_demand(ev: Evidence, s: RightsizingSettings) -> bool:
    if ev.queues:
        return any(backlog(q) for q in ev.queues)
    return (ev.activity_p95 or 0.0) >= s.bottlenecks.starved_demand_activity_ratio


def growing(q: QueueEvidence, s: RightsizingSettings) -> bool:
    return q.rise >= max(s.queue_growth_min, 1e-9) and q.growth_per_hour >= s.queue_growth_ratio_per_hour


def growing_queues(ev: Evidence, s: RightsizingSettings) -> list[QueueEvidence]:
    return [q for q in ev.queues if growing(q, s)]


def kv_pressure(ev: Evidence, s: RightsizingSettings) -> bool:
    """A linked inference server shows memory pressure (KV-cache usage p95 or preemptions),
    whatever NVML's memory fraction: the server reserves a fixed share of the memory."""
    return memory_pressure(ev, s) is True


def memory_full(ev: Evidence, s: RightsizingSettings, pressure: bool | None) -> bool:
    """Peak memory at or above ``memory_full_ratio``, unless the server's counters show no pressure
    (then it is the server's reservation, not a limit)."""
    return (ev.memory_peak_ratio or 0.0) >= s.memory_full_ratio and pressure is not False


def bandwidth_saturated(ev: Evidence, s: RightsizingSettings) -> bool:
    """DRAM active (else memory-copy utilization) at the bottleneck percentile at the bandwidth flag."""
    high = ev.dram_active_high if ev.dram_active_high is not None else ev.memory_copy_high
    return high is not None and high >= s.bottlenecks.memory_bandwidth_dram_active_ratio


def compute_saturated(ev: Evidence, s: RightsizingSettings) -> bool:
    return (ev.activity_p50 or 0.0) >= s.saturation_activity_ratio


def saturated(ev: Evidence, s: RightsizingSettings, pressure: bool | None) -> tuple[str, ...]:
    """The resources at their limit: "KV cache", "memory", "memory bandwidth", "compute". A linked
    server that publishes no memory counter (TGI) fills the GPU at warm-up: when bandwidth or compute
    is saturated, they explain the queue and the full memory says nothing (its need cannot be said);
    with nothing else saturated, the full memory is the evidence there is."""
    busy = (("memory bandwidth", bandwidth_saturated(ev, s)), ("compute", compute_saturated(ev, s)))
    reservation = pressure is None and server_queue(ev) is not None and any(held for _, held in busy)
    found = (
        ("KV cache", pressure is True),
        ("memory", memory_full(ev, s, pressure) and not reservation),
        *busy,
    )
    return tuple(name for name, held in found if held)


def offloading(ev: Evidence, s: RightsizingSettings, bottlenecks: tuple[str, ...]) -> bool:
    """Memory full, the PCIe host link at the data_loading flag and the GPU underfed (no compute
    bottleneck): the offload signature."""
    full = (ev.memory_peak_ratio or 0.0) >= s.memory_full_ratio
    link = ev.pcie_link_high is not None and ev.pcie_link_high >= s.bottlenecks.pcie_link_ratio
    return full and link and "compute" not in bottlenecks
