"""``rightsizer plan``: from a model and a workload to the memory it needs and the GPUs that hold it.

Memory per GPU (tensor parallel over ``gpus`` splits weights, optimizer state, gradients, KV heads
and most activations):
- weights: parameters x bytes per parameter (fp32 4, bf16/fp16 2, fp8/int8 1). int4 counts real
  AWQ/GPTQ checkpoints: every linear layer of the transformer blocks at 4 bits plus, per group of
  128 weights, an fp16 scale and a 4-bit zero point (0.5 + 2.5/128 B/param), while the embeddings
  and the output layer stay in 16 bits (2 x vocab x hidden parameters unless tied: 2.1 B of
  Llama-3-70B's 70.6 B with its 128k vocabulary). Checked against published checkpoints:
  TheBloke/Llama-2-7b-Chat-GPTQ (4-bit, group 128) is 3.90 GB, the formula gives 3.89 GB;
  TheBloke/StableBeluga2-70B-GPTQ (Llama-2-70B, 4-bit, group 128) is 36.65 GB, the formula 36.62 GB;
  Llama-3-70B comes to 39.8 GB (0.5 B/param alone would say 35.3 GB);
- training in bf16/fp16 is mixed precision: half-precision weights (2 B/param) plus an fp32 master
  copy (4 B/param, its own line); fp32 training keeps one fp32 copy;
- optimizer state (training): AdamW two fp32 states 8 B/param, 8-bit Adam 2, SGD with momentum 4;
- gradients (training): fp32, 4 B/param. AdamW mixed precision totals 18 B/param before
  activations (Hugging Face's "model memory anatomy");
- KV cache (inference): 2 x layers x KV heads x head_dim x context x batch x bytes (grouped-query
  attention counts KV heads, not attention heads; KV heads split over tensor-parallel GPUs and
  replicated when fewer than them), or with DeepSeek's multi-head latent attention layers x
  (kv_lora_rank + qk_rope_head_dim) x context x batch x bytes, whole on every GPU, at
  ``kv_cache_dtype``; ``auto``, the default, is
  what the servers default to, the model's own dtype (vLLM's ``--kv-cache-dtype auto``): fp32 for
  fp32, 16 bits otherwise, fp8, int8 and int4 weights included (quantized checkpoints compute
  and cache in 16 bits); ``fp8`` halves it, as ``--kv-cache-dtype fp8`` does on the server;
- activations: training, per layer s x b x h x (10 + 24 / t) bytes with flash attention
  (Korthikanti et al. 2022), or 2 x s x b x h with activation checkpointing plus one layer
  recomputed, plus fp32 logits s x b x vocab x 4 / t; inference, one prefill chunk of up to 8192
  tokens x (4h + 2 x MLP width) x 2 bytes / t plus batch x vocab x 4 for the logits;
- allocator overhead: 5 % of the tensors above (the caching allocator rounds blocks up and keeps
  freed blocks cached; an allowance, not a measurement);
- CUDA context: 640 MiB per GPU (PyTorch measured 636 MiB for the context with eager module
  loading and 274 MiB with lazy loading, pytorch/pytorch PR #86509; the eager figure is kept to
  cover library workspaces).

Headroom rule: a GPU fits when that total is at most its usable memory, the total NVML reports
(``Candidate.usable_memory``: ECC and driver reserve already taken off, the same figure the
recommendation engine uses); headroom is the share of usable memory left over.

Throughput ceilings: decoding reads every (active) weight and the whole KV cache once per step, so
tokens/s <= batch x memory bandwidth / bytes read per step; training needs 6 x params FLOPs per token
(8 with checkpointing), so tokens/s <= dense FP16 FLOP/s / that. Cost per million tokens is the
hourly price of the GPUs over the ceiling: a floor on what the tokens will really cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from .catalog import Candidate, Catalog
from .models import Architecture, PlanError, kv_elements_per_token

GIB = 2**30
MIB = 2**20
PRECISION_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# The KV cache's dtype (vLLM's --kv-cache-dtype names) and, for ``auto``, the model dtype a server
# runs weights of each precision in (bf16 for fp8 checkpoints, fp16 for AWQ/GPTQ and int8 ones).
KV_CACHE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
KV_CACHE_AUTO = {
    "fp32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16", "int8": "fp16", "int4": "fp16",
}  # fmt: skip
OPTIMIZER_BYTES = {"adamw": 8.0, "adamw-8bit": 2.0, "sgd": 4.0}
GRADIENT_BYTES = 4.0
MASTER_WEIGHT_BYTES = 4.0  # fp32 master copy of mixed-precision training
INT4_GROUP_SIZE = 128
# 4-bit weight + per group an fp16 scale (2 B) and a 4-bit zero point packed in int32 (0.5 B)
INT4_QUANTIZED_BYTES = 0.5 + (2 + 0.5) / INT4_GROUP_SIZE
EMBEDDING_BYTES = 2.0  # int4 checkpoints keep embeddings and the output layer in 16 bits
ALLOCATOR_SHARE = 0.05
CUDA_CONTEXT_BYTES = 640 * MIB
PREFILL_CHUNK_TOKENS = 8192
HEADROOM_RULE = (
    "a GPU fits when weights, KV cache, activations and training state, plus "
    f"{ALLOCATOR_SHARE:.0%} allocator overhead and {CUDA_CONTEXT_BYTES // MIB} MiB CUDA context, "
    "are at most its usable memory (the total NVML reports, ECC on); headroom is what is left of it"
)


@dataclass(frozen=True)
class Workload:
    mode: str = "inference"  # inference | training
    precision: str = "bf16"
    optimizer: str = "adamw"
    context: int = 4096
    batch: int = 1
    gpus: int = 1
    checkpointing: bool = False
    kv_cache_dtype: str = "auto"  # auto (the model's dtype, the servers' default) or a KV_CACHE_BYTES key

    @property
    def kv_dtype(self) -> str:
        """The KV cache's dtype, ``auto`` resolved to the one a server uses by default."""
        if self.kv_cache_dtype == "auto":
            return KV_CACHE_AUTO.get(self.precision, "bf16")
        return self.kv_cache_dtype


@dataclass(frozen=True)
class Memory:
    weights: float  # at the precision the model runs in
    kv_cache: float
    activations: float
    optimizer: float
    gradients: float
    master_weights: float = 0.0  # fp32 copy of mixed-precision training
    allocator: float = 0.0
    cuda_context: float = 0.0

    @property
    def tensors(self) -> float:
        return (
            self.weights + self.master_weights + self.kv_cache + self.activations + self.optimizer
            + self.gradients
        )  # fmt: skip

    @property
    def total(self) -> float:
        return self.tensors + self.allocator + self.cuda_context

    def items(self) -> list[tuple[str, float]]:
        return [
            ("weights", self.weights),
            ("master_weights", self.master_weights),
            ("kv_cache", self.kv_cache),
            ("activations", self.activations),
            ("optimizer", self.optimizer),
            ("gradients", self.gradients),
            ("allocator", self.allocator),
            ("cuda_context", self.cuda_context),
        ]


@dataclass(frozen=True)
class Option:
    candidate: Candidate
    gpus: int
    headroom_ratio: float  # free share of each GPU's usable memory
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
    fits_with_gpus: int | None = None  # nothing fits: the fewest tensor-parallel GPUs that would


def check(arch: Architecture, w: Workload) -> list[str]:
    """Raise PlanError for impossible input; return notes for questionable input."""
    if w.precision not in PRECISION_BYTES:
        raise PlanError(f"--precision {w.precision!r}: choose one of {', '.join(PRECISION_BYTES)}")
    if w.mode not in ("inference", "training"):
        raise PlanError(f"--mode {w.mode!r}: choose inference or training")
    if w.optimizer not in OPTIMIZER_BYTES:
        raise PlanError(f"--optimizer {w.optimizer!r}: choose one of {', '.join(OPTIMIZER_BYTES)}")
    if w.kv_cache_dtype != "auto" and w.kv_cache_dtype not in KV_CACHE_BYTES:
        choices = ", ".join(["auto", *KV_CACHE_BYTES])
        raise PlanError(f"--kv-cache-dtype {w.kv_cache_dtype!r}: choose one of {choices}")
    if w.mode == "training" and w.kv_cache_dtype != "auto":
        raise PlanError("--kv-cache-dtype applies to --mode inference (training keeps no KV cache)")
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


def weight_bytes(arch: Architecture, precision: str) -> float:
    """Bytes of the model's weights at ``precision`` (int4: AWQ/GPTQ layout, see the module doc)."""
    if precision != "int4":
        return arch.params * PRECISION_BYTES[precision]
    embeddings = min(arch.params, arch.vocab * arch.hidden * (1 if arch.tied_embeddings else 2))
    return (arch.params - embeddings) * INT4_QUANTIZED_BYTES + embeddings * EMBEDDING_BYTES


def _with_runtime(m: Memory) -> Memory:
    return replace(m, allocator=m.tensors * ALLOCATOR_SHARE, cuda_context=CUDA_CONTEXT_BYTES)


def memory(arch: Architecture, w: Workload) -> Memory:
    t = w.gpus
    s, b, h, layers = w.context, w.batch, arch.hidden, arch.layers
    inter = arch.intermediate or 4 * h
    if w.mode == "training":
        mixed = w.precision in ("bf16", "fp16")
        act_scale = 2.0 if w.precision == "fp32" else 1.0
        per_layer = s * b * h * (10 + 24 / t) * act_scale
        kept = layers * 2 * s * b * h * act_scale + per_layer if w.checkpointing else layers * per_layer
        logits = s * b * arch.vocab * 4 / t
        return _with_runtime(Memory(
            weights=arch.params * (2.0 if mixed else 4.0) / t,
            master_weights=arch.params * MASTER_WEIGHT_BYTES / t if mixed else 0.0,
            kv_cache=0.0,
            activations=kept + logits,
            optimizer=arch.params * OPTIMIZER_BYTES[w.optimizer] / t,
            gradients=arch.params * GRADIENT_BYTES / t,
        ))  # fmt: skip
    kv_bytes = KV_CACHE_BYTES[w.kv_dtype]
    tokens = min(s * b, PREFILL_CHUNK_TOKENS)
    return _with_runtime(Memory(
        weights=weight_bytes(arch, w.precision) / t,
        kv_cache=kv_elements_per_token(arch, t) * s * b * kv_bytes,
        activations=tokens * (4 * h + 2 * inter) * 2 / t + b * arch.vocab * 4,
        optimizer=0.0,
        gradients=0.0,
    ))  # fmt: skip


def tokens_per_second(arch: Architecture, w: Workload, mem: Memory, c: Candidate) -> float:
    if w.mode == "training":
        flops_per_token = (8 if w.checkpointing else 6) * arch.params
        rate = c.fp16_dense_tflops * 1e12 * (0.5 if w.precision == "fp32" else 1.0)  # TF32 ~ half of FP16
        return w.gpus * rate / flops_per_token
    active_weights = mem.weights * (arch.params_per_token / arch.params)  # weights read per step
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


def fits(w: Workload, mem: Memory, c: Candidate) -> bool:
    if c.mig is not None and w.gpus > 1:
        return False  # tensor parallelism runs across whole GPUs
    if w.precision == "fp8" and c.gpu.fp8_dense_tflops is None:
        return False  # no FP8 tensor cores (before Ada/Hopper)
    return mem.total <= c.usable_memory


def fewest_gpus(arch: Architecture, w: Workload, catalog: Catalog, top: int = 64) -> int | None:
    """The fewest tensor-parallel GPUs (above ``w.gpus``) with which some catalog GPU fits."""
    for gpus in range(w.gpus + 1, top + 1):
        if not arch.estimated and arch.heads % gpus:
            continue
        bigger = replace(w, gpus=gpus)
        mem = memory(arch, bigger)
        if any(fits(bigger, mem, c) for c in catalog.candidates()):
            return gpus
    return None


def plan(arch: Architecture, w: Workload, catalog: Catalog) -> Plan:
    notes = check(arch, w)
    mem = memory(arch, w)
    options = []
    for c in catalog.candidates():  # cheapest first
        if not fits(w, mem, c):
            continue
        tps = tokens_per_second(arch, w, mem, c)
        price = c.hourly_price_dollars * w.gpus
        cost = price / (tps * 3600) * 1e6 if tps > 0 and price > 0 else None
        options.append(Option(c, w.gpus, 1 - mem.total / c.usable_memory, price, tps, cost))
    more = None
    if not options:
        more = fewest_gpus(arch, w, catalog)
        fix = f"--gpus {more} would fit" if more else "no --gpus up to 64 fits"
        notes.append(
            f"no catalog GPU holds {mem.total / GIB:.1f} GiB per GPU: {fix}; or lower "
            "--precision, --context or --batch" + (", or use --checkpointing" if w.mode == "training" else "")
        )
    if w.precision == "fp8":
        notes.append("fp8 needs FP8 tensor cores: GPUs before Ada/Hopper are left out")
    return Plan(arch, w, mem, tuple(options), tuple(notes), more)
