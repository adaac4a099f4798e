"""``rightsizer plan``'s memory figures against published checkpoint sizes and NVML's usable memory."""

from __future__ import annotations

import pytest

from rightsizing.catalog import load_catalog
from rightsizing.models import builtin
from rightsizing.planner import Workload, memory, plan

CATALOG = load_catalog()
MIB, GIB = 2**20, 2**30

# int4 as AWQ/GPTQ store it: per group of 128 weights of a linear layer, 128 x 4-bit values, one fp16
# scale (2 bytes) and one 4-bit zero point (0.5 byte); embeddings and output layer stay at 2 bytes.
INT4_BYTES_PER_WEIGHT = (128 * 0.5 + 2 + 0.5) / 128


def int4_checkpoint_bytes(params: float, vocab: int, hidden: int, tied: bool = False) -> float:
    embeddings = vocab * hidden * (1 if tied else 2)
    return (params - embeddings) * INT4_BYTES_PER_WEIGHT + embeddings * 2


def test_int4_weights_match_published_awq_and_gptq_checkpoints() -> None:
    # TheBloke/Llama-2-7b-Chat-GPTQ, branch main (4 bits, group size 128): 3.90 GB on its model card.
    llama2_7b = memory(builtin("llama-2-7b"), Workload(precision="int4")).weights
    assert llama2_7b == pytest.approx(int4_checkpoint_bytes(6.74e9, 32000, 4096))
    assert llama2_7b == pytest.approx(3.90e9, rel=0.01)
    # TheBloke/StableBeluga2-70B-GPTQ (Llama-2-70B shape), branch gptq-4bit-128g-actorder_False: 36.65 GB.
    llama2_70b = memory(builtin("llama-2-70b"), Workload(precision="int4")).weights
    assert llama2_70b == pytest.approx(36.65e9, rel=0.01)
    # Llama-3-70B: 2 x 128256 x 8192 = 2.1 B embedding parameters stay in 16 bits; about 40 GB, where
    # 0.5 byte per parameter alone would say 35.3 GB.
    llama3_70b = memory(builtin("llama-3-70b"), Workload(precision="int4")).weights
    assert llama3_70b == pytest.approx(int4_checkpoint_bytes(70.6e9, 128256, 8192))
    assert 39.5e9 < llama3_70b < 40.5e9 and llama3_70b > 70.6e9 * 0.5 * 1.1
    # Tied embeddings (Gemma-2) are stored once.
    gemma = memory(builtin("gemma-2-9b"), Workload(precision="int4")).weights
    assert gemma == pytest.approx(int4_checkpoint_bytes(9.24e9, 256000, 3584, tied=True))
    # Tensor parallelism splits them like any weights.
    assert memory(builtin("llama-3-70b"), Workload(precision="int4", gpus=4)).weights == pytest.approx(
        llama3_70b / 4
    )


def test_cuda_context_and_allocator_overhead_are_reserved_explicitly() -> None:
    mem = memory(builtin("llama-3-8b"), Workload(context=8192))
    assert mem.cuda_context == 640 * MIB  # pytorch/pytorch PR #86509: 636 MiB with eager loading
    tensors = mem.weights + mem.kv_cache + mem.activations
    assert mem.allocator == pytest.approx(0.05 * tensors)
    assert mem.total == pytest.approx(tensors * 1.05 + 640 * MIB)


def test_llama_2_7b_fp16_at_4k_no_longer_fits_a_t4() -> None:
    # Worked by hand: weights 6.74e9 x 2; KV 2 x 32 layers x 32 KV heads x 128 x 4096 x 2 bytes;
    # activations one 4096-token prefill chunk x (4 x 4096 + 2 x 11008) x 2 bytes + 32000 x 4 logits.
    tensors = 6.74e9 * 2 + 2 * 32 * 32 * 128 * 4096 * 2 + 4096 * (4 * 4096 + 2 * 11008) * 2 + 32000 * 4
    need = tensors * 1.05 + 640 * MIB
    result = plan(builtin("llama-2-7b"), Workload(precision="fp16", context=4096), CATALOG)
    assert result.memory.total == pytest.approx(need)
    # A T4 shows 15360 MiB with ECC on (16 GiB x 15/16): the need does not fit. Against the nominal
    # 16 GiB even the bare tensors plus 1 GiB would have left about 1 % headroom.
    assert need > 15360 * MIB and 1 - (tensors + GIB) / (16 * GIB) < 0.02
    keys = {o.candidate.key for o in result.options}
    assert "T4-16GB" not in keys and "L4-24GB" in keys
    l4 = next(o for o in result.options if o.candidate.key == "L4-24GB")
    assert l4.headroom_ratio == pytest.approx(1 - need / (23034 * MIB))  # L4: 23034 MiB usable


def test_mig_profiles_are_sized_by_the_instance_memory_nvml_reports() -> None:
    # An A100-40GB 1g.5gb instance shows 4.75 GiB (nvidia-smi mig -lgip), not its nominal 5 GiB.
    # phi-3-mini in int4 grows by 2 x 32 layers x 32 KV heads x 96 x 2 bytes = 393,216 bytes per token
    # of context: the first context (in steps of 64) whose need falls between 4.75 and 5 GiB.
    arch = builtin("phi-3-mini")
    needs = {c: memory(arch, Workload(precision="int4", context=c)).total for c in range(1024, 8192, 64)}
    context = next(c for c, need in needs.items() if 4.75 * GIB < need <= 5 * GIB)
    result = plan(arch, Workload(precision="int4", context=context), CATALOG)
    keys = {o.candidate.key for o in result.options}
    assert "A100-SXM-40GB/1g.5gb" not in keys and "A100-SXM-40GB/1g.10gb" in keys
    for o in result.options:
        assert o.candidate.usable_memory >= result.memory.total
        if o.candidate.mig is not None:
            assert o.candidate.usable_memory == o.candidate.mig.usable_memory_bytes


def test_estimated_prices_are_flagged_in_plan_output() -> None:
    result = plan(builtin("llama-3-70b"), Workload(precision="fp8", context=8192, batch=16, gpus=2), CATALOG)
    flagged = {o.candidate.gpu.key for o in result.options if o.candidate.price_estimated}
    assert flagged == {"H100-PCIe-80GB", "H200-SXM-141GB", "B200-SXM-180GB"} & {
        o.candidate.gpu.key for o in result.options
    }
    assert flagged and all(o.candidate.gpu.price_source.startswith("estimate:") for o in result.options
                           if o.candidate.price_estimated)  # fmt: skip
