"""Workload profiles of the simulated fleet: what a workload does to a GPU at simulated time t.

Every profile is a pure function of (parameters, noise key, t): noise comes from a hash of
(seed, GPU, stream, one-second bucket), never from a global random state, so the value at time
t is the same whenever and however often it is asked. The kinds and their parameters are
documented in docs/scenarios.md; ``DEFAULTS`` is the table of each kind's parameters.

Activity signals are absolute ratios (0-1) in DCGM's sense: ``activity`` is SM active,
``utilization`` is GPU_UTIL (a kernel was running), ``dram`` is DRAM active, ``tensor`` the tensor
pipe, ``occupancy`` the SM occupancy. ``evaluate`` keeps them coherent:
occupancy, tensor <= SM active <= GR engine active <= utilization.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .serving import Serving

MASK = (1 << 64) - 1


def mix(x: int) -> int:
    """splitmix64's finaliser: a fast, well-spread 64-bit hash."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


class Noise:
    """Deterministic noise for one GPU: ``unit(stream, bucket)`` in [0, 1)."""

    __slots__ = ("_fixed", "_keys")
    STREAMS = ("load", "gap", "dram", "power", "temp", "queue", "pcie", "phase", "memory")

    def __init__(self, seed: int, gpu: int) -> None:
        base = mix(mix(seed & MASK) ^ (gpu + 1))
        self._keys = {s: mix(base ^ (i + 1) * 0x632BE59BD9B4E019 & MASK) for i, s in enumerate(self.STREAMS)}
        self._fixed: dict[tuple[str, int], float] = {}

    def unit(self, stream: str, bucket: int) -> float:
        return mix(self._keys[stream] ^ (bucket & MASK)) / 18446744073709551616.0

    def fixed(self, stream: str, k: int) -> float:
        """``unit(stream, k)`` for values that never change (phases, rates), computed once."""
        value = self._fixed.get((stream, k))
        if value is None:
            value = self._fixed[(stream, k)] = self.unit(stream, k)
        return value

    def signed(self, stream: str, bucket: int) -> float:
        """Uniform in [-1, 1)."""
        return 2.0 * self.unit(stream, bucket) - 1.0


KINDS = (
    "idle",
    "steady_inference",
    "bursty_inference",
    "training",
    "memory_bound",
    "data_starved",
    "launch_overhead",
    "memory_saturated",
)

# Parameters every kind accepts, with their defaults (``memory_*`` defaults are per kind below).
COMMON: dict[str, float] = {
    "start_after_seconds": 0.0,  # before this (from the scenario start) the GPU is empty
    "noise": 0.1,  # relative per-second jitter of the activity signals
    "host_cpu": 0.03,  # share of the node's CPU this workload's host side keeps busy
    "pcie_link_ratio": 0.02,  # host-to-GPU traffic as a share of the PCIe link
}
_ACTIVE = {"activity": 0.3, "utilization": 0.5, "dram": 0.25, "tensor": 0.15, "occupancy": 0.12}
_QUEUE = {
    "queue_depth": 2.0,
    "queue_growth_per_hour": 0.0,
    "batch": 8.0,
    "kv_cache_usage": 0.3,
    "preemptions_per_hour": 0.0,
    "generated_tokens_per_second": 500.0,
    "prompt_tokens_per_second": 1500.0,
    "requests_per_second": 2.0,
    "latency_spread": 0.25,
}
_SLOW = {"swing": 0.15, "period_seconds": 1800.0}

DEFAULTS: dict[str, dict[str, float]] = {
    "idle": {"memory_fraction": 0.9, "host_cpu": 0.0},
    "steady_inference": {"memory_gib": 16.0, **_ACTIVE, **_QUEUE, **_SLOW},
    "bursty_inference": {
        "memory_gib": 16.0,
        **_ACTIVE,
        "activity": 0.7,
        "utilization": 0.9,
        "dram": 0.55,
        "tensor": 0.4,
        "occupancy": 0.3,
        "base_activity": 0.05,
        "period_seconds": 600.0,
        "burst_seconds": 120.0,
        "queue_burst_depth": 60.0,
        "batch": 16.0,
    },
    "training": {
        "memory_gib": 60.0,
        "activity": 0.85,
        "utilization": 0.97,
        "dram": 0.45,
        "tensor": 0.6,
        "occupancy": 0.45,
        "period_seconds": 1800.0,
        "checkpoint_seconds": 60.0,
        "nvlink_ratio": 0.2,
        "host_cpu": 0.1,
        "pcie_link_ratio": 0.05,
    },
    "memory_bound": {
        "memory_gib": 40.0,
        **_ACTIVE,
        **_QUEUE,
        **_SLOW,
        "activity": 0.5,
        "utilization": 0.88,
        "dram": 0.85,
        "tensor": 0.2,
        "occupancy": 0.25,
        "swing": 0.05,
    },
    "data_starved": {
        "memory_gib": 30.0,
        **_ACTIVE,
        "activity": 0.45,
        "utilization": 0.55,
        "dram": 0.3,
        "gap_fraction": 0.3,
        "pcie_link_ratio": 0.85,
        "host_cpu": 0.85,
    },
    "launch_overhead": {
        "memory_gib": 12.0,
        **_ACTIVE,
        **_QUEUE,
        **_SLOW,
        "activity": 0.12,
        "utilization": 0.93,
        "dram": 0.06,
        "tensor": 0.03,
        "occupancy": 0.04,
        "swing": 0.05,
        "host_cpu": 0.08,
    },
    "memory_saturated": {
        "memory_fraction": 0.97,
        **_ACTIVE,
        **_QUEUE,
        **_SLOW,
        "activity": 0.45,
        "utilization": 0.65,
        "swing": 0.05,
        "queue_depth": 20.0,
        "queue_growth_per_hour": 120.0,
        "kv_cache_usage": 0.98,
        "preemptions_per_hour": 30.0,
    },
}

FOLLOW_ACTIVITY = ("utilization", "dram", "tensor", "occupancy")
RATIOS = (
    "noise", "host_cpu", "pcie_link_ratio", "activity", "utilization", "dram", "tensor", "occupancy",
    "base_activity", "gap_fraction", "memory_fraction", "swing", "nvlink_ratio", "kv_cache_usage",
)  # fmt: skip


def parameters_of(kind: str) -> dict[str, float]:
    """Every parameter ``kind`` accepts, with its default."""
    return {**COMMON, **DEFAULTS[kind]}


def resolve(kind: str, given: Mapping[str, float]) -> dict[str, float]:
    """The kind's parameters with ``given`` applied. When ``activity`` is given but the signals
    that follow it (utilization, dram, tensor, occupancy) are not, they keep the kind's proportions
    to activity (utilization stays put for launch_overhead, whose point is high utilization)."""
    params = parameters_of(kind)
    if "activity" in given and "activity" in params:
        factor = given["activity"] / params["activity"]
        for name in FOLLOW_ACTIVITY:
            if name not in given and not (kind == "launch_overhead" and name == "utilization"):
                params[name] = min(0.99, params[name] * factor)
    params.update(given)
    return params


@dataclass(frozen=True, slots=True)
class Workload:
    kind: str
    params: Mapping[str, float]  # every parameter of the kind, defaults filled in
    memory_bytes: float  # memory the workload holds while running
    serving: Serving | None = None  # serving kinds: what the server counts on its device


@dataclass(slots=True)
class Activity:
    running: bool = False  # a process holds the GPU
    utilization: float = 0.0
    gr_engine: float = 0.0
    sm: float = 0.0
    occupancy: float = 0.0
    tensor: float = 0.0
    dram: float = 0.0
    memory_bytes: float = 0.0
    pcie_rx: float = 0.0  # share of the link
    pcie_tx: float = 0.0
    nvlink: float = 0.0  # share of the NVLink bandwidth
    queue_depth: float = 0.0
    in_flight: float = 0.0
    host_cpu: float = 0.0
    kv_cache: float | None = None  # KV-cache usage its inference server reports
    preemptions: float = 0.0  # the server's preemption counter
    # The server's throughput counters (mean rates times the time served), for serving kinds.
    generated_tokens: float | None = None
    prompt_tokens: float | None = None
    requests: float | None = None


def _clip(x: float, high: float = 1.0) -> float:
    return 0.0 if x < 0.0 else high if x > high else x


def evaluate(w: Workload, noise: Noise, t: float, elapsed: float) -> Activity:
    """The workload's activity at simulated time ``t``, ``elapsed`` seconds after it started (the
    GPU is empty before: negative ``elapsed``)."""
    p = w.params
    if elapsed < 0:
        return Activity()
    kind, sec = w.kind, math.floor(t)
    a = Activity(running=w.memory_bytes > 0, memory_bytes=w.memory_bytes, host_cpu=p["host_cpu"])
    if kind == "idle":
        return a
    jitter = p["noise"] * noise.signed("load", sec)
    level = 1.0 + jitter
    if "swing" in p:
        phase = 2 * math.pi * noise.fixed("phase", 0)
        level += p["swing"] * math.sin(2 * math.pi * t / p["period_seconds"] + phase)
    a.pcie_rx = p["pcie_link_ratio"] * (1.0 + 0.05 * noise.signed("pcie", sec))
    a.pcie_tx = a.pcie_rx * 0.25
    scale = 1.0
    if kind == "bursty_inference":
        period, burst = p["period_seconds"], p["burst_seconds"]
        into = (elapsed + period * noise.fixed("phase", 1)) % period
        if into < burst:
            a.queue_depth = p["queue_burst_depth"] * into / burst
            a.memory_bytes *= 1.03
        else:
            scale = p["base_activity"] / max(p["activity"], 1e-9)
            a.queue_depth = p["queue_burst_depth"] * max(0.0, 1.0 - 2.0 * (into - burst) / burst)
        a.in_flight = p["batch"] * min(1.0, scale)
    elif kind == "training":
        into = elapsed % p["period_seconds"]
        if into >= p["period_seconds"] - p["checkpoint_seconds"]:  # writing a checkpoint to the host
            scale = 0.03
            a.pcie_tx, a.pcie_rx = 0.6, 0.01
        a.nvlink = p["nvlink_ratio"] * scale * level
    elif kind == "data_starved" and noise.unit("gap", sec) < p["gap_fraction"]:
        scale = 0.02  # waiting for the next batch from the host
    if "queue_depth" in p:
        grown = p["queue_growth_per_hour"] * elapsed / 3600.0
        a.queue_depth = max(0.0, p["queue_depth"] * (1.0 + 0.5 * noise.signed("queue", sec)) + grown)
        a.in_flight = p["batch"] * _clip(level)
    if "kv_cache_usage" in p:
        a.kv_cache = _clip(p["kv_cache_usage"] * (1.0 + 0.02 * noise.signed("queue", sec + 1)))
        a.preemptions = float(math.floor(p["preemptions_per_hour"] * elapsed / 3600.0))
    if w.serving is not None:  # the rates its GPU serves (serving.py), never more than it can
        generated, prompt, requests = w.serving.served
        a.generated_tokens = float(math.floor(generated * elapsed))
        a.prompt_tokens = float(math.floor(prompt * elapsed))
        a.requests = float(math.floor(requests * elapsed))
    level *= scale
    a.sm = _clip(p["activity"] * level)
    a.utilization = _clip(max(p["utilization"] * level, a.sm))
    a.gr_engine = min(a.utilization, max(a.sm, 0.96 * a.utilization))
    a.occupancy = min(a.sm, _clip(p["occupancy"] * level))
    a.tensor = min(a.sm, _clip(p["tensor"] * level))
    a.dram = _clip(p["dram"] * (level + 0.03 * noise.signed("dram", sec)))
    return a
