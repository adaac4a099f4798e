"""One rule for projecting an inference server's measured throughput onto another GPU.

The live exporter, ``rightsizer report`` (``cost``) and ``rightsizer plan --measured-from``
(``command.plan_measured``) all call these functions, so the same workload on the same move gets
the same projection everywhere.

Which resource binds the work (``binding``): decode reads every weight and the KV cache once per
step for ``batch`` tokens, about ``batch`` FLOPs per byte, far under the ridge point of every
catalog GPU (dense FLOP/s over bytes/s: 200-600); so memory bandwidth binds, unless measurement
says otherwise: SM active (a compute signal, DCGM profiling) above the bandwidth signal (DRAM
active, else NVML's memory-copy utilization), as prefill-heavy or large-batch work shows. GPU
utilization is no compute signal (it says a kernel ran, not how much of the SMs it used), so
without SM active bandwidth binds, as ``rightsizer plan`` assumes for decode.

How much the option serves (``projected_rate``): when the GPU is the limit (demand unmet) the rate
scales with the binding resource's capacity, option over today; when demand is met the same work is
served while the option has the capacity for it: at most rate x ratio / busy, where busy is the
binding resource's p95 today (unknown: 1, so never faster on less of it).
"""

from __future__ import annotations

from .catalog import Candidate

COMPUTE = "compute"
BANDWIDTH = "memory bandwidth"


def binding(sm_active: float | None, bandwidth: float | None) -> str:
    """The resource that binds an inference server's work, from the p95 of SM active (None: not
    measured) and of the bandwidth signal (None: not measured)."""
    if sm_active is not None and (bandwidth is None or sm_active > bandwidth):
        return COMPUTE
    return BANDWIDTH


def capacity_ratio(
    current: Candidate, option: Candidate, resource: str, bandwidth_seen: bool = True
) -> float:
    """The option's capacity of ``resource`` over today's (GPU counts aside). A compute projection
    with no bandwidth signal is capped by the bandwidth ratio: unseen bandwidth may bind."""
    ours, theirs = current.memory_bandwidth_bytes_per_second, option.memory_bandwidth_bytes_per_second
    bandwidth = theirs / ours if ours > 0 else 0.0
    if resource == BANDWIDTH:
        return bandwidth
    compute = option.fp16_dense_tflops / current.fp16_dense_tflops if current.fp16_dense_tflops > 0 else 0.0
    return compute if bandwidth_seen else min(compute, bandwidth)


def projected_rate(rate: float, ratio: float, limited: bool, busy: float | None = None) -> float:
    """The rate on an option with ``ratio`` of today's binding capacity: ``limited`` (the GPU is the
    limit) scales it; demand met serves the same work while the option has room for it."""
    if limited:
        return rate * ratio
    room = ratio / busy if busy is not None and busy > 0 else ratio
    return rate * min(1.0, room)


def words(resource: str, ratio: float) -> str:
    """How a projection is said: 'x2.88 by memory bandwidth'."""
    return f"x{ratio:.2f} by {resource}"
