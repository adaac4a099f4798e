"""``rightsizer plan`` against published figures and worked examples, and as a command."""

from __future__ import annotations

import csv
import io
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rightsizing.catalog import load_catalog
from rightsizing.models import BUILTIN, PlanError, builtin, estimate, from_config, parse_params
from rightsizing.planner import Workload, frontier, memory, plan

CATALOG = load_catalog()

# Meta-Llama-3-8B's config.json as published on its model card (the keys the planner reads).
LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


@pytest.mark.parametrize(
    ("text", "value"),
    [("7e9", 7e9), ("7B", 7e9), ("7b", 7e9), ("7000000000", 7e9), ("1.5B", 1.5e9), ("350M", 350e6),
     ("7_000_000_000", 7e9), ("0.5T", 5e11)],
)  # fmt: skip
def test_parameter_counts_in_every_usual_form(text: str, value: float) -> None:
    assert parse_params(text) == value


@pytest.mark.parametrize("text", ["seven", "7X", "", "-7B", "1e3", "1e20", "7 B B"])
def test_impossible_parameter_counts_are_refused(text: str) -> None:
    with pytest.raises(PlanError, match="--params"):
        parse_params(text)


def test_7b_at_fp16_is_14_gb_of_weights() -> None:
    mem = memory(estimate(7e9), Workload(precision="fp16"))
    assert mem.weights == 14e9  # the seed article's example: 7B x 2 bytes
    assert memory(estimate(7e9), Workload(precision="int8")).weights == 7e9
    assert memory(estimate(7e9), Workload(precision="fp32")).weights == 28e9


@pytest.mark.parametrize(("optimizer", "per_param"), [("adamw", 18), ("adamw-8bit", 12), ("sgd", 14)])
def test_training_model_states_per_parameter(optimizer: str, per_param: int) -> None:
    # Hugging Face's model memory anatomy: AdamW in mixed precision = 6 (fp32 + half weights)
    # + 8 (two fp32 moments) + 4 (fp32 gradients) = 18 bytes per parameter before activations.
    mem = memory(builtin("llama-2-7b"), Workload(mode="training", precision="bf16", optimizer=optimizer))
    states = mem.weights + mem.master_weights + mem.optimizer + mem.gradients
    assert states == pytest.approx(6.74e9 * per_param)
    assert mem.weights == pytest.approx(6.74e9 * 2) and mem.master_weights == pytest.approx(6.74e9 * 4)
    assert mem.kv_cache == 0 and mem.activations > 0
    fp32 = memory(builtin("llama-2-7b"), Workload(mode="training", precision="fp32", optimizer=optimizer))
    assert fp32.weights == pytest.approx(6.74e9 * 4) and fp32.master_weights == 0  # one fp32 copy


def test_kv_cache_of_a_llama_3_8b_shaped_config_at_8k_context(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA3_8B_CONFIG))
    arch = from_config(str(path))
    # Worked by hand: K and V (2) x 32 layers x 8 KV heads (grouped-query attention, not the 32
    # attention heads) x head_dim 4096/32 = 128 x 8192 tokens x 1 sequence x 2 bytes (bf16)
    # = 2 x 32 x 8 x 128 x 8192 x 2 = 1,073,741,824 bytes = 1 GiB.
    assert (arch.layers, arch.kv_heads, arch.head_dim) == (32, 8, 128)
    mem = memory(arch, Workload(context=8192, batch=1, precision="bf16"))
    assert mem.kv_cache == 2 * 32 * 8 * 128 * 8192 * 1 * 2 == 1_073_741_824
    # With full multi-head attention it would be 4x as much; batch 4 is 4x as much.
    assert memory(arch, Workload(context=8192, batch=4)).kv_cache == 4 * 1_073_741_824
    # Parameters from the shape: embeddings 2 x 128256 x 4096 + 32 x (attention 41.9 M + MLP 176.2 M).
    assert arch.params == pytest.approx(8.03e9, rel=0.002)
    assert arch.params == builtin("llama-3-8b").params or abs(arch.params - 8.03e9) < 1e7


def test_tensor_parallel_splits_weights_and_kv_heads() -> None:
    arch = builtin("llama-3-70b")
    one = memory(arch, Workload(context=8192, gpus=1))
    four = memory(arch, Workload(context=8192, gpus=4))
    assert four.weights == pytest.approx(one.weights / 4)
    assert four.kv_cache == pytest.approx(one.kv_cache / 4)  # 8 KV heads, 2 per GPU
    sixteen_heads = memory(builtin("llama-3-8b"), Workload(gpus=16))  # 8 KV heads, 16 GPUs
    assert sixteen_heads.kv_cache == memory(builtin("llama-3-8b"), Workload(gpus=8)).kv_cache  # replicated
    assert four.cuda_context == one.cuda_context == 640 * 2**20  # per GPU, not split


def test_viable_gpus_hold_the_need_and_the_ceiling_comes_from_bandwidth() -> None:
    arch, w = builtin("llama-3-8b"), Workload(context=8192)
    result = plan(arch, w, CATALOG)
    need = result.memory.total
    assert result.options, "an 8B model in bf16 fits many GPUs"
    for o in result.options:
        assert o.candidate.usable_memory >= need
        assert o.headroom_ratio == pytest.approx(1 - need / o.candidate.usable_memory)
        # Each decode step reads the weights and the KV cache once: tokens/s <= bandwidth / bytes.
        expected = o.candidate.memory_bandwidth_bytes_per_second / (
            result.memory.weights + result.memory.kv_cache
        )
        assert o.tokens_per_second == pytest.approx(expected)
        assert o.dollars_per_million_tokens == pytest.approx(o.hourly_price_dollars / (expected * 3600) * 1e6)
    keys = {o.candidate.key for o in result.options}
    assert "T4-16GB" not in keys and "L4-24GB" in keys  # 18.5 GiB: not on a 16 GiB T4
    prices = [o.hourly_price_dollars for o in result.options]
    assert prices == sorted(prices)
    best = frontier(result.options)
    assert all(b.tokens_per_second < c.tokens_per_second for b, c in itertools.pairwise(best))


def test_fp8_needs_fp8_tensor_cores_and_nothing_fits_says_so() -> None:
    fp8 = plan(builtin("llama-3-8b"), Workload(precision="fp8"), CATALOG)
    assert fp8.options and all(o.candidate.gpu.fp8_dense_tflops is not None for o in fp8.options)
    huge = plan(builtin("llama-3.1-405b"), Workload(precision="bf16"), CATALOG)
    assert not huge.options and any("no catalog GPU holds" in n for n in huge.notes)
    assert plan(builtin("llama-3.1-405b"), Workload(precision="int4", gpus=8), CATALOG).options


@pytest.mark.parametrize(
    ("workload", "message"),
    [
        (Workload(mode="training", precision="int4"), "training needs fp32, or bf16/fp16"),
        (Workload(gpus=3), "does not divide the model's 32 heads"),
        (Workload(context=0), "--context 0"),
        (Workload(batch=-1), "--batch -1"),
        (Workload(precision="fp4"), "--precision 'fp4'"),
        (Workload(mode="finetune"), "--mode 'finetune'"),
    ],
)
def test_impossible_workloads_are_refused(workload: Workload, message: str) -> None:
    with pytest.raises(PlanError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan(builtin("llama-3-8b"), workload, CATALOG)


def test_bad_config_files_say_what_is_wrong(tmp_path: Path) -> None:
    cases = {
        "missing.json": None,
        "notjson.json": "{not json",
        "list.json": "[1, 2]",
        "nolayers.json": json.dumps({"hidden_size": 4096, "num_attention_heads": 32}),
        "badheads.json": json.dumps({**LLAMA3_8B_CONFIG, "num_key_value_heads": 5}),
        "negative.json": json.dumps({**LLAMA3_8B_CONFIG, "hidden_size": -1}),
    }
    messages = {
        "missing.json": "cannot read",
        "notjson.json": "not valid JSON at line 1",
        "list.json": "must be a JSON object",
        "nolayers.json": "missing 'num_hidden_layers'",
        "badheads.json": "not a multiple of num_key_value_heads 5",
        "negative.json": "'hidden_size' must be a positive integer",
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(PlanError, match=messages[name]):
            from_config(str(path))


def test_every_builtin_model_plans() -> None:
    for name, arch in BUILTIN.items():
        assert arch.heads % arch.kv_heads == 0, name
        assert (
            plan(arch, Workload(precision="int4", gpus=8 if arch.params > 1e11 else 1), CATALOG).memory.total
            > 0
        )


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rightsizing.command.cli", *args], capture_output=True,
                          text=True, timeout=60)  # fmt: skip


def test_the_command_in_every_format(tmp_path: Path) -> None:
    table = run("plan", "--model", "llama-3-8b", "--context", "8192")
    assert table.returncode == 0, table.stderr
    assert "kv cache" in table.stdout and "1.00 GiB" in table.stdout and "L40S-48GB" in table.stdout
    # The L4 ($0.80) is the cheapest that holds it; the A100's 1g.20gb ($5.1207 x 2/8 = $1.28, 510
    # GB/s) is dearer and slower than the A10G ($1.01, 600 GB/s): only with --all.
    assert "\nL4-24GB " in table.stdout and "A100-SXM-80GB/1g.20gb" not in table.stdout
    every = run("plan", "--model", "llama-3-8b", "--context", "8192", "--all").stdout
    assert "A100-SXM-80GB/1g.20gb" in every
    assert "decode tok/s ceiling" in table.stdout and "$/M tokens" in table.stdout
    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B_CONFIG))
    data = json.loads(run("plan", "--config", str(config), "--context", "8192", "--format", "json").stdout)
    assert data["memory_per_gpu_bytes"]["kv_cache"] == 1_073_741_824
    assert data["model"]["kv_heads"] == 8 and data["options"]
    rows = list(csv.DictReader(io.StringIO(run("plan", "--params", "7B", "--precision", "fp16", "--all",
                                               "--format", "csv").stdout)))  # fmt: skip
    assert rows and all(int(r["usable_memory_bytes"]) >= int(r["need_bytes"]) for r in rows)
    assert len(rows) >= len(plan(estimate(7e9), Workload(precision="fp16"), CATALOG).options)
    training = run("plan", "--params", "7e9", "--mode", "training", "--optimizer", "sgd", "--format", "json")
    assert json.loads(training.stdout)["workload"]["optimizer"] == "sgd"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--params", "7X"], "--params '7X' is not a parameter count"),
        (["--model", "gpt-9"], "--model 'gpt-9' is not in the built-in table"),
        (["--config", "/nonexistent/config.json"], "cannot read"),
        (["--model", "llama-3-70b", "--gpus", "3"], "does not divide"),
        (["--model", "llama-3-8b", "--batch", "0"], "--batch 0: must be between 1"),
        (["--model", "llama-3-8b", "--optimizer", "sgd"], "--optimizer only applies to --mode training"),
        (["--model", "llama-3-8b", "--mode", "training", "--precision", "int8"], "training needs"),
        (["--model", "llama-3-8b", "--context", "lots"], "--context must be a whole number"),
    ],
)
def test_the_command_refuses_impossible_input_in_one_line(args: list[str], message: str) -> None:
    out = run("plan", *args)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_the_kv_cache_is_kept_in_the_models_dtype_unless_asked() -> None:
    """Servers cache K and V in the model's dtype by default (vLLM's --kv-cache-dtype auto), whatever
    the weights are quantized to. Llama 3 8B at 4,096 tokens: 2 (K, V) x 32 layers x 8 KV heads x
    128 x 4,096 x 2 B = 512 MiB in 16 bits, twice that in fp32, half in fp8."""
    arch = builtin("llama-3-8b")
    sixteen = 2 * 32 * 8 * 128 * 4096 * 2
    for precision in ("bf16", "fp16", "fp8", "int8", "int4"):
        assert memory(arch, Workload(precision=precision)).kv_cache == sixteen, precision
    assert memory(arch, Workload(precision="fp32")).kv_cache == 2 * sixteen
    for kv in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        assert memory(arch, Workload(precision="fp8", kv_cache_dtype=kv)).kv_cache == sixteen / 2
    assert Workload(precision="fp8").kv_dtype == "bf16" and Workload(precision="int4").kv_dtype == "fp16"
