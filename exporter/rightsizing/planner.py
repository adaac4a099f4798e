"""``rightsizer plan``: from a model and a workload to the memory it needs and the GPUs that hold it.

Memory per GPU (tensor parallel over ``gpus`` splits weights, optimizer state, gradients, KV heads
and most activations):
- weights: parameters x bytes per parameter (fp32 4, bf16/fp16 2, fp8/int8 1, int4 0.5); training
  in bf16/fp16 is mixed precision: fp32 master copy + half copy = 6 bytes per parameter;
- optimizer state (training): AdamW two fp32 states 8 B/param, 8-bit Adam 2, SGD with momentum 4;
- gradients (training): fp32, 4 B/param. AdamW mixed precision totals 18 B/param before
  activations (Hugging Face's "model memory anatomy");
- KV cache (inference): 2 x layers x KV heads x head_dim x context x batch x bytes (grouped-query
  attention counts KV heads, not attention heads; KV is kept at 16 bits for int8/int4 weights);
- activations: training, per layer s x b x h x (10 + 24 / t) bytes with flash attention
  (Korthikanti et al. 2022), or 2 x s x b x h with activation checkpointing plus one layer
  recomputed, plus fp32 logits s x b x vocab x 4 / t; inference, one prefill chunk of up to 8192
  tokens x (4h + 2 x MLP width) x 2 bytes / t plus batch x vocab x 4 for the logits;
- runtime overhead: 1 GiB per GPU (CUDA context, allocator, communication buffers).

Throughput ceilings: decoding reads every (active) weight and the whole KV cache once per step, so
tokens/s <= batch x memory bandwidth / bytes read per step; training needs 6 x params FLOPs per token
(8 with checkpointing), so tokens/s <= dense FP16 FLOP/s / that. Cost per million tokens is the
hourly price of the GPUs over the ceiling: a floor on what the tokens will really cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .catalog import Candidate, Catalog
from .models import Architecture, PlanError

GIB = 2**30
PRECISION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
OPTIMIZER_BYTES = {"adamw": 8.0, "adamw-8bit": 2.0, "sgd": 4.0}
GRADIENT_BYTES = 4.0
OVERHEAD_BYTES = 1 * GIB
PREFILL_CHUNK_TOKENS = 8192


@dataclass(frozen=True)
class Workload:
    mode: str = "inference"  # inference | training
    precision: str = "bf16"
    optimizer: str = "adamw"
    context: int = 4096
    batch: int = 1
    gpus: int = 1
    checkpointing: bool = False


@dataclass(frozen=True)
class Memory:
    weights: float
    kv_cache: float
    activations: float
    optimizer: float
    gradients: float
    overhead: float

    @property
    def total(self) -> float:
        return (
            self.weights + self.kv_cache + self.activations + self.optimizer + self.gradients + self.overhead
        )

    def items(self) -> list[tuple[str, float]]:
        return [
            ("weights", self.weights),
            ("kv_cache", self.kv_cache),
            ("activations", self.activations),
            ("optimizer", self.optimizer),
            ("gradients", self.gradients),
            ("overhead", self.overhead),
        ]


@dataclass(frozen=True)
class Option:
    candidate: Candidate
    gpus: int
    headroom_ratio: float  # free share of each GPU's memory
    hourly_price_dollars: float  # for all ``gpus``
    tokens_per_second: float  # decode (inference) or training ceiling
    dollars_per_million_tokens: float | None


@dataclass(frozen=True)
class Plan:
    model: Architecture
    workload: Workload
    memory: Memory  # per GPU
    options: tuple[Option, ...]  # viable, cheapest first
    notes: tuple[str, ...] = field(default=())


def check(arch: Architecture, w: Workload) -> list[str]:
    """Raise PlanError for impossible input; return notes for questionable input."""
    if w.precision not in PRECISION_BYTES:
        raise PlanError(f"--precision {w.precision!r}: choose one of {', '.join(PRECISION_BYTES)}")
    if w.mode not in ("inference", "training"):
        raise PlanError(f"--mode {w.mode!r}: choose inference or training")
    if w.optimizer not in OPTIMIZER_BYTES:
        raise PlanError(f"--optimizer {w.optimizer!r}: choose one of {', '.join(OPTIMIZER_BYTES)}")
    if w.mode == "training" and w.precision not in ("fp32", "bf16", "fp16"):
        raise PlanError(
            f"--mode training with --precision {w.precision}: training needs fp32, or bf16/fp16 "
            "mixed precision (quantized weights are for inference)"
        )
    for name, value, top in (
        ("--context", w.context, 10_000_000),
        ("--batch", w.batch, 1_000_000),
        ("--gpus", w.gpus, 64),
    ):
        if not 1 <= value <= top:
            raise PlanError(f"{name} {value}: must be between 1 and {top:,}")
    if not arch.estimated and arch.heads % w.gpus:
        raise PlanError(
            f"--gpus {w.gpus}: tensor parallelism splits attention heads, and {w.gpus} does not "
            f"divide the model's {arch.heads} heads"
        )
    notes = []
    if arch.max_context and w.context > arch.max_context:
        notes.append(f"context {w.context:,} is beyond the model's {arch.max_context:,} positions")
    if arch.estimated:
        notes.append(
            "architecture estimated from the parameter count (Llama-shaped, no grouped-query "
            "attention, so the KV cache is an upper bound): give --model or --config for exact figures"
        )
    return notes


def memory(arch: Architecture, w: Workload) -> Memory:
    t = w.gpus
    s, b, h, layers = w.context, w.batch, arch.hidden, arch.layers
    inter = arch.intermediate or 4 * h
    if w.mode == "training":
        weight_bytes = 6.0 if w.precision in ("bf16", "fp16") else 4.0
        act_scale = 2.0 if w.precision == "fp32" else 1.0
        per_layer = s * b * h * (10 + 24 / t) * act_scale
        kept = layers * 2 * s * b * h * act_scale + per_layer if w.checkpointing else layers * per_layer
        logits = s * b * arch.vocab * 4 / t
        return Memory(
            weights=arch.params * weight_bytes / t,
            kv_cache=0.0,
            activations=kept + logits,
            optimizer=arch.params * OPTIMIZER_BYTES[w.optimizer] / t,
            gradients=arch.params * GRADIENT_BYTES / t,
            overhead=OVERHEAD_BYTES,
        )
    kv_bytes = {"fp32": 4.0, "fp8": 1.0}.get(w.precision, 2.0)
    kv_heads = math.ceil(arch.kv_heads / t)  # fewer KV heads than GPUs: heads are replicated
    tokens = min(s * b, PREFILL_CHUNK_TOKENS)
    return Memory(
        weights=arch.params * PRECISION_BYTES[w.precision] / t,
        kv_cache=2 * layers * kv_heads * arch.head_dim * s * b * kv_bytes,
        activations=tokens * (4 * h + 2 * inter) * 2 / t + b * arch.vocab * 4,
        optimizer=0.0,
        gradients=0.0,
        overhead=OVERHEAD_BYTES,
    )


def tokens_per_second(arch: Architecture, w: Workload, mem: Memory, c: Candidate) -> float:
    if w.mode == "training":
        flops_per_token = (8 if w.checkpointing else 6) * arch.params
        rate = c.fp16_dense_tflops * 1e12 * (0.5 if w.precision == "fp32" else 1.0)  # TF32 ~ half of FP16
        return w.gpus * rate / flops_per_token
    active_weights = mem.weights * (arch.params_per_token / arch.params)
    step_seconds = (active_weights + mem.kv_cache) / c.memory_bandwidth_bytes_per_second
    return w.batch / step_seconds if step_seconds > 0 else math.inf


def frontier(options: tuple[Option, ...]) -> tuple[Option, ...]:
    """The options no other option beats on both price and throughput (cheapest first)."""
    kept: list[Option] = []
    best = -1.0
    for o in sorted(options, key=lambda o: (o.hourly_price_dollars, -o.tokens_per_second)):
        if o.tokens_per_second > best:
            kept.append(o)
            best = o.tokens_per_second
    return tuple(kept)


def plan(arch: Architecture, w: Workload, catalog: Catalog) -> Plan:
    notes = check(arch, w)
    mem = memory(arch, w)
    options = []
    for c in catalog.candidates():  # cheapest first
        if c.mig is not None and w.gpus > 1:
            continue  # tensor parallelism runs across whole GPUs
        if c.memory_bytes < mem.total:
            continue
        if w.precision == "fp8" and c.gpu.fp8_dense_tflops is None:
            continue  # no FP8 tensor cores (before Ada/Hopper)
        tps = tokens_per_second(arch, w, mem, c)
        price = c.hourly_price_dollars * w.gpus
        cost = price / (tps * 3600) * 1e6 if tps > 0 and price > 0 else None
        options.append(Option(c, w.gpus, 1 - mem.total / c.memory_bytes, price, tps, cost))
    if not options:
        notes.append(
            f"no catalog GPU holds {mem.total / GIB:.1f} GiB per GPU: raise --gpus, lower "
            "--precision, --context or --batch" + (", or use --checkpointing" if w.mode == "training" else "")
        )
    if w.precision == "fp8":
        notes.append("fp8 needs FP8 tensor cores: GPUs before Ada/Hopper are left out")
    return Plan(arch, w, mem, tuple(options), tuple(notes))
