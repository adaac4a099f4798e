"""Serving physics of a simulated inference workload: what its server can count on its GPU.

A serving workload's ``generated_tokens_per_second``, ``prompt_tokens_per_second`` and
``requests_per_second`` are the load offered to its server. What the server counts is that load as
far as the GPU serves it, by the rules ``rightsizer plan`` uses for its ceilings
(``rightsizing.planner``):

- a decode step reads every active weight and the KV cache of the sequences in flight once, so it
  takes (active weight bytes + KV bytes) / memory bandwidth, and at least batch x 2 x active
  parameters FLOPs / dense FLOP/s; it yields one token per sequence (``batch`` of them);
- prefill costs 2 x active parameters FLOPs per prompt token;
- the GPU moves at most its DRAM-active share of its bandwidth (the workload's ``dram``), does at
  most its tensor-active share of its dense FLOP/s (``tensor``) and runs kernels at most its
  utilization share of the time (``utilization``), each at the kind's mean load.

The served rates are the offered ones times one factor (the same requests, fewer of them per
second) so that every bound holds. Weights: the workload's ``model`` (a ``rightsizer plan``
built-in) at its ``precision``, split evenly over the GPUs of its pod (tensor parallel: each GPU
holds, reads and computes its share); without a model, half of the memory the workload holds. KV bytes
read per step: ``kv_cache_usage`` x the KV pool (memory held - weights - CUDA context).

``Serving`` keeps what latency needs as well: the decode step time at a batch and the prefill time
of a prompt token (service times from the binding resource).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rightsizer_core.settings import ConfigError
from rightsizing.catalog import Candidate
from rightsizing.models import BUILTIN, Architecture
from rightsizing.planner import CUDA_CONTEXT_BYTES, PRECISION_BYTES, weight_bytes

GIB = 2**30
RATES = ("generated_tokens_per_second", "prompt_tokens_per_second", "requests_per_second")
PRECISIONS = tuple(p for p in PRECISION_BYTES if p != "fp32")
UNMODELLED_WEIGHT_SHARE = 0.5  # without a model: the share of its memory read as weights per step


@dataclass(frozen=True, slots=True)
class Serving:
    """How one serving workload turns requests into tokens on its device (GPU or MIG instance)."""

    model: str  # the built-in model's name, or "" when the weights are assumed from memory
    precision: str
    weight_bytes: float  # active weights read per decode step
    kv_bytes: float  # KV cache read per decode step at full batch
    params_per_token: float  # active parameters (2 FLOPs each per token)
    bandwidth: float  # bytes/s of the device
    flops: float  # dense FLOP/s of the device at the precision
    batch: float  # sequences in flight at full load
    offered: tuple[float, float, float]  # generated tokens/s, prompt tokens/s, requests/s asked
    scale: float  # served / offered: 1 when the GPU keeps up, less when it cannot
    bound: str  # what limits the served rates: "", "memory bandwidth", "compute" or "utilization"
    pool_bytes: float = 0.0  # the KV-cache pool: memory held - weights - CUDA context

    @property
    def served(self) -> tuple[float, float, float]:
        """Generated tokens/s, prompt tokens/s and requests/s the server counts."""
        return (self.offered[0] * self.scale, self.offered[1] * self.scale, self.offered[2] * self.scale)

    def step_seconds(self, batch: float) -> float:
        """One decode step with ``batch`` sequences in flight (each holding its share of the KV)."""
        b = max(batch, 1.0)
        kv = self.kv_bytes * b / max(self.batch, 1.0)
        return max((self.weight_bytes + kv) / self.bandwidth, b * 2.0 * self.params_per_token / self.flops)

    @property
    def prefill_seconds_per_token(self) -> float:
        return 2.0 * self.params_per_token / self.flops

    @property
    def decode_ceiling(self) -> float:
        """Generated tokens/s with the GPU decoding all the time at full batch."""
        return self.batch / self.step_seconds(self.batch)


def architecture(name: str, where: str) -> Architecture:
    found = BUILTIN.get(name.strip().lower())
    if found is None:
        raise ConfigError(f"{where}.model: {name!r} is not a built-in model (known: {', '.join(BUILTIN)})")
    return found


def mean_level(kind: str, p: Mapping[str, float]) -> float:
    """The kind's mean load relative to its ``activity`` (bursts and gaps lower it)."""
    if kind == "bursty_inference":
        burst, period = p["burst_seconds"], max(p["period_seconds"], 1e-9)
        base = p["base_activity"] / max(p["activity"], 1e-9)
        return min(1.0, (min(burst, period) + max(0.0, period - burst) * base) / period)
    if kind == "data_starved":
        return 1.0 - 0.98 * p["gap_fraction"]
    return 1.0


def device_flops(device: Candidate, precision: str) -> float:
    """Dense FLOP/s of the device for the precision's matrix math (fp8 and int8 on their own
    tensor cores where the GPU has them; 16-bit otherwise)."""
    gpu = device.gpu
    tflops = device.fp16_dense_tflops
    low = {"fp8": gpu.fp8_dense_tflops, "int8": gpu.int8_dense_tops}.get(precision)
    if low:
        tflops = low * device.compute_fraction
    return tflops * 1e12


def serving(
    kind: str,
    p: Mapping[str, float],
    memory_bytes: float,
    device: Candidate,
    model: str | None,
    precision: str,
    where: str,
    shards: int = 1,
) -> Serving:
    """The workload's serving physics on ``device``; ConfigError when its model cannot be held.

    ``shards``: the GPUs of the pod that serve the model together (tensor parallel). Each holds
    and reads its share of the weights and does its share of each token's FLOPs; a step still
    yields one token per sequence for the whole group."""
    if model:
        arch = architecture(model, where)
        total_weights = weight_bytes(arch, precision) / shards
        if total_weights + CUDA_CONTEXT_BYTES > memory_bytes:
            split = f" (1/{shards} each of the pod's {shards} GPUs)" if shards > 1 else ""
            raise ConfigError(
                f"{where}.model: {arch.name} at {precision} has {total_weights / GIB:.1f} GiB of weights"
                f"{split}; with the CUDA context they do not fit the {memory_bytes / GIB:.1f} GiB the "
                "workload holds"
            )
        active = total_weights * arch.params_per_token / arch.params
        params = arch.params_per_token / shards
    else:
        total_weights = active = UNMODELLED_WEIGHT_SHARE * memory_bytes
        params = active / PRECISION_BYTES[precision]
    pool = max(0.0, memory_bytes - total_weights - CUDA_CONTEXT_BYTES)
    kv = p["kv_cache_usage"] * pool
    bandwidth = device.memory_bandwidth_bytes_per_second
    flops = device_flops(device, precision)
    batch = max(p["batch"], 1.0)
    offered = (p[RATES[0]], p[RATES[1]], p[RATES[2]])
    level = mean_level(kind, p)
    draft = Serving(
        model or "", precision, active, kv, params, bandwidth, flops, batch, offered, 1.0, "", pool
    )
    generated, prompt = offered[0], offered[1]
    steps = generated / batch
    needs = {
        "memory bandwidth": (steps * (active + kv), min(1.0, p["dram"] * level) * bandwidth),
        "compute": ((generated + prompt) * 2.0 * params, min(1.0, p["tensor"] * level) * flops),
        "utilization": (
            steps * draft.step_seconds(batch) + prompt * draft.prefill_seconds_per_token,
            min(1.0, p["utilization"] * level),
        ),
    }
    scale, bound = 1.0, ""
    for name, (need, budget) in needs.items():
        if need > 0 and budget / need < scale:
            scale, bound = max(0.0, budget / need), name
    return Serving(
        model or "", precision, active, kv, params, bandwidth, flops, batch, offered, scale, bound, pool
    )
