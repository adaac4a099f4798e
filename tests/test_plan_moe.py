"""``rightsizer plan`` reads mixture-of-experts configs as their architectures define them.

The configs are the published ``config.json`` files (tests/fixtures/models, each with its source);
the expected figures are the model cards' parameter counts, and the KV cache is worked by hand."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rightsizing.catalog import load_catalog
from rightsizing.command.plan_cli import _tokens
from rightsizing.models import PlanError, builtin, from_config
from rightsizing.planner import Workload, memory, plan

MODELS = Path(__file__).parent / "fixtures" / "models"
GIB = 2**30


def config(name: str, tmp_path: Path) -> Path:
    """The fixture as ``<model>/config.json``, the layout of a downloaded model."""
    directory = tmp_path / name
    directory.mkdir()
    shutil.copy(MODELS / f"{name}.json", directory / "config.json")
    return directory


# (fixture, total, active) from the model cards; the published figures are rounded to the digit shown.
PUBLISHED = [
    ("qwen3-30b-a3b", 30.5e9, 3.3e9),  # "30.5B in total and 3.3B activated"
    ("qwen1.5-moe-a2.7b", 14.3e9, 2.7e9),  # "14.3B parameters in total and 2.7B activated"
    ("mixtral-8x7b-v0.1", 46.7e9, 12.9e9),  # "46.7B total parameters but only uses 12.9B per token"
    ("deepseek-v2-lite", 15.7e9, None),  # "15.7B parameters", activated checked below
    ("deepseek-v3", 671e9, 37e9),  # "671B total parameters with 37B activated for each token"
]


@pytest.mark.parametrize(("name", "total", "active"), PUBLISHED)
def test_parameter_counts_match_the_model_cards(
    name: str, total: float, active: float | None, tmp_path: Path
) -> None:
    arch = from_config(str(config(name, tmp_path)))
    assert arch.params == pytest.approx(total, rel=0.005)
    if active is not None:
        assert arch.active_params == pytest.approx(active, rel=0.03)


def test_qwen3_30b_a3b_is_57_gib_in_bf16_not_233_b_parameters(tmp_path: Path) -> None:
    # The reported failure: moe_intermediate_size ignored, 128 experts of the 6144-wide dense MLP
    # made 233.46 B parameters and 457.8 GiB. By hand: per layer attention 2048 x 32 x 128 x 2 +
    # 2048 x 4 x 128 x 2 = 18.87 M, 128 experts x 3 x 2048 x 768 = 603.98 M, router 2048 x 128;
    # 48 layers = 29.90 B, + untied embeddings 2 x 151936 x 2048 = 0.62 B: 30.53 B, 56.87 GiB in bf16.
    arch = from_config(str(config("qwen3-30b-a3b", tmp_path)))
    per_layer = 2048 * 32 * 128 * 2 + 2048 * 4 * 128 * 2 + 128 * 3 * 2048 * 768 + 2048 * 128
    assert arch.params == 48 * per_layer + 2 * 151936 * 2048
    weights = memory(arch, Workload(context=4096)).weights
    assert weights / GIB == pytest.approx(56.87, abs=0.01)
    result = plan(arch, Workload(context=4096), load_catalog())
    assert result.options and min(o.candidate.usable_memory for o in result.options) < 90 * GIB


def test_qwen2_moe_counts_its_shared_expert(tmp_path: Path) -> None:
    arch = from_config(str(config("qwen1.5-moe-a2.7b", tmp_path)))
    # Active per layer: attention 4 x 2048^2, 4 routed experts and the shared one (3 x 2048 x 5632
    # plus its 2048-input gate), router 2048 x 60.
    attention = 4 * 2048 * 2048
    shared = 3 * 2048 * 5632 + 2048
    active = 24 * (attention + 4 * 3 * 2048 * 1408 + shared + 2048 * 60) + 2 * 151936 * 2048
    assert arch.active_params == active


def test_sparse_step_and_dense_layers_are_read(tmp_path: Path) -> None:
    cfg = json.loads((MODELS / "qwen3-30b-a3b.json").read_text())
    base = from_config(str(config("qwen3-30b-a3b", tmp_path)))
    expert_layer = 128 * 3 * 2048 * 768 + 2048 * 128  # experts and router of one sparse layer
    dense_layer = 3 * 2048 * 6144  # the dense MLP (intermediate_size) replacing them
    for change, sparse in (({"decoder_sparse_step": 2}, 24), ({"mlp_only_layers": [0, 47]}, 46)):
        path = tmp_path / f"cfg-{sparse}.json"
        path.write_text(json.dumps({**cfg, **change}))
        arch = from_config(str(path))
        assert base.params - arch.params == (48 - sparse) * (expert_layer - dense_layer)


def test_deepseek_v2_lite_latent_attention_and_first_dense_layer(tmp_path: Path) -> None:
    arch = from_config(str(config("deepseek-v2-lite", tmp_path)))
    # MLA without q compression: q 2048 x 16 x 192, kv_a 2048 x (512 + 64), kv_b 512 x 16 x 256,
    # o 16 x 128 x 2048.
    attention = 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    expert = 3 * 2048 * 1408
    dense = 3 * 2048 * 10944  # layer 0 (first_k_dense_replace 1)
    embeddings = 2 * 102400 * 2048
    assert arch.params == 27 * attention + dense + 26 * (66 * expert + 2048 * 64) + embeddings
    # Its card's 2.4 B activated leaves the input embedding out (a lookup, not a matrix product).
    assert arch.active_params is not None
    assert arch.active_params - 102400 * 2048 == pytest.approx(2.4e9, rel=0.03)


def test_latent_attention_caches_576_values_per_token_and_layer(tmp_path: Path) -> None:
    arch = from_config(str(config("deepseek-v3", tmp_path)))
    assert arch.kv_latent == 512 + 64
    # By hand: 61 layers x 576 values x 2 bytes x 131072 tokens = 9.21 GB (8.58 GiB); K and V of 128
    # heads x 128 would be 2 x 61 x 128 x 128 x 2 x 131072 = 512 GiB. Tensor parallelism keeps the
    # latent whole on every GPU.
    one = memory(arch, Workload(context=131072, precision="fp8"))
    assert one.kv_cache == 61 * 576 * 2 * 131072
    assert memory(arch, Workload(context=131072, precision="fp8", gpus=8)).kv_cache == one.kv_cache


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_experts_per_tok": 300}, "more than the 256 experts"),
        ({"first_k_dense_replace": 99}, "first_k_dense_replace"),
        ({"kv_lora_rank": "512"}, "'kv_lora_rank' must be a positive integer"),
        ({"moe_intermediate_size": -1}, "'moe_intermediate_size' must be a positive integer"),
    ],
)
def test_contradictory_expert_keys_are_refused(
    change: dict[str, object], message: str, tmp_path: Path
) -> None:
    cfg = json.loads((MODELS / "deepseek-v3.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, **change}))
    with pytest.raises(PlanError, match=message):
        from_config(str(path))


def test_bad_mlp_only_layers_is_refused(tmp_path: Path) -> None:
    cfg = json.loads((MODELS / "qwen3-30b-a3b.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**cfg, "mlp_only_layers": [0, 48]}))
    with pytest.raises(PlanError, match="mlp_only_layers"):
        from_config(str(path))


@pytest.mark.parametrize(
    ("hub_id", "name"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3-70B-Instruct", "llama-3-70b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
    ],
)
def test_hugging_face_ids_name_their_builtin(hub_id: str, name: str) -> None:
    arch = builtin(hub_id)
    assert arch.params == builtin(name).params and arch.name == f"{name} ({hub_id})"


def test_an_unknown_hub_id_says_the_planner_does_not_download() -> None:
    with pytest.raises(PlanError, match="never downloads"):
        builtin("Qwen/Qwen3-30B-A3B")


@pytest.mark.parametrize(
    ("text", "tokens"), [("128k", 131072), ("128K", 131072), ("32k", 32768), ("1m", 1048576), ("8192", 8192)]
)
def test_context_takes_k_as_1024(text: str, tokens: int) -> None:
    assert _tokens(text) == tokens


def test_the_command_plans_qwen3_30b_a3b(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "rightsizing.command.cli", "plan", "--config",
         str(config("qwen3-30b-a3b", tmp_path)), "--context", "32k", "--format", "json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["model"]["params"] == pytest.approx(30.53e9, rel=0.001)
    assert result["model"]["active_params"] == pytest.approx(3.35e9, rel=0.001)
    assert result["workload"]["context"] == 32768
    assert result["options"]
    bad = subprocess.run(
        [sys.executable, "-m", "rightsizing.command.cli", "plan", "--model", "llama-3-8b",
         "--context", "1.3k"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "whole number" in bad.stderr and "Traceback" not in bad.stderr
