"""``rightsizer plan`` as a command: exit codes, --config directories, output wording, the sample in docs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from servers import ROOT

MIB = 2**20

# Meta-Llama-3-8B's config.json as published on its model card (the keys the planner reads).
LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256,
}  # fmt: skip


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rightsizing.command.cli", *args], capture_output=True,
                          text=True, timeout=60, cwd=cwd or ROOT)  # fmt: skip


def test_nothing_fits_exits_2_and_names_the_fewest_gpus_that_would() -> None:
    # Llama-3.1-405B in bf16: 405.9e9 x 2 bytes of weights. Tensor parallel must divide its 128 heads.
    # On 4 GPUs that is 203 GB each, more than a B200's 183359 MiB; on 8, 101 GB, which an H200
    # (143771 MiB) holds with the KV cache, activations and overheads.
    assert 183359 * MIB < 405.9e9 * 2 / 4 and 143771 * MIB > 405.9e9 * 2 / 8 * 1.1
    out = run("plan", "--model", "llama-3.1-405b")
    assert out.returncode == 2
    assert "no catalog GPU holds" in out.stderr and "--gpus 8 would fit" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
    assert "weights" in out.stdout  # the memory breakdown is still printed
    data = run("plan", "--model", "llama-3.1-405b", "--format", "json")
    assert data.returncode == 2 and json.loads(data.stdout)["fits_with_gpus"] == 8
    assert json.loads(data.stdout)["options"] == []
    # 50 T parameters: 100 TB of bf16 weights, 1.56 TB per GPU even on 64: nothing fits at any count.
    hopeless = run("plan", "--params", "50T")
    assert hopeless.returncode == 2 and "no --gpus up to 64 fits" in hopeless.stderr
    fits = run("plan", "--model", "llama-3.1-405b", "--gpus", "8")
    assert fits.returncode == 0 and "H200-SXM-141GB" in fits.stdout


def test_config_accepts_a_model_directory_and_names_the_model_after_it(tmp_path: Path) -> None:
    model = tmp_path / "Meta-Llama-3-8B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(LLAMA3_8B_CONFIG))
    for where, arg in ((tmp_path, "Meta-Llama-3-8B"), (model, "."), (model, "../Meta-Llama-3-8B"),
                       (model, "config.json"), (model / "..", "Meta-Llama-3-8B/config.json")):  # fmt: skip
        out = run("plan", "--config", arg, "--format", "json", cwd=where)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        assert data["model"]["name"] == "Meta-Llama-3-8B", arg
        assert data["model"]["kv_heads"] == 8 and data["model"]["vocab_size"] == 128256
    # A Hub id in the config names the model; a local path there does not.
    (model / "config.json").write_text(json.dumps({**LLAMA3_8B_CONFIG, "_name_or_path": "/home/me/ckpt"}))
    assert json.loads(run("plan", "--config", str(model), "--format", "json").stdout)["model"]["name"] == (
        "Meta-Llama-3-8B"
    )
    hub = {**LLAMA3_8B_CONFIG, "_name_or_path": "meta-llama/Meta-Llama-3-8B"}
    (model / "config.json").write_text(json.dumps(hub))
    assert json.loads(run("plan", "--config", str(model), "--format", "json").stdout)["model"]["name"] == (
        "meta-llama/Meta-Llama-3-8B"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    out = run("plan", "--config", str(empty))
    assert out.returncode == 2 and f"cannot read {empty / 'config.json'}" in out.stderr


def test_training_shows_the_fp32_master_copy_on_its_own_line() -> None:
    out = run("plan", "--model", "llama-2-7b", "--mode", "training", "--format", "json")
    mem = json.loads(out.stdout)["memory_per_gpu_bytes"]
    assert mem["weights"] == 6.74e9 * 2 and mem["master_weights"] == 6.74e9 * 4  # bf16 + fp32 copy
    table = run("plan", "--model", "llama-2-7b", "--mode", "training", "--gpus", "4").stdout
    lines = {line.split("  ")[0].strip(): line.split()[-2] for line in table.splitlines() if "GiB" in line}
    assert float(lines["weights"]) == round(6.74e9 * 2 / 4 / 2**30, 2)
    assert float(lines["master weights"]) == round(6.74e9 * 4 / 4 / 2**30, 2)


def test_hidden_options_note_counts_in_good_english() -> None:
    one = run("plan", "--model", "llama-2-13b", "--gpus", "2").stdout
    assert "Note: 1 more viable option is no cheaper and no faster than one listed" in one
    many = run("plan", "--model", "llama-3-8b").stdout
    assert "more viable options are no cheaper" in many and "1 more viable options" not in many


def test_estimated_prices_and_the_headroom_rule_are_printed() -> None:
    out = run("plan", "--model", "llama-3-70b", "--precision", "fp8", "--context", "8192", "--gpus", "2")
    assert out.returncode == 0
    h200 = next(line for line in out.stdout.splitlines() if line.startswith("2 x H200-SXM-141GB "))
    h100 = next(line for line in out.stdout.splitlines() if line.startswith("2 x H100-SXM-80GB "))
    assert "$27.04*" in h200 and "*" not in h100  # 2 x $13.52 estimated; the H100 SXM is listed by AWS
    assert "* estimated price: no public list price for that GPU" in out.stdout
    assert "Headroom rule: a GPU fits when" in out.stdout and "640 MiB CUDA context" in out.stdout
    rows = json.loads(run("plan", "--model", "llama-3-8b", "--all", "--format", "json").stdout)["options"]
    assert {r["gpu"].split("/")[0] for r in rows if r["price_estimated"]} == {
        "H100-PCIe-80GB", "H200-SXM-141GB", "B200-SXM-180GB"}  # fmt: skip


def test_the_documented_plan_sample_is_what_the_program_prints() -> None:
    text = (ROOT / "docs" / "rightsizing.md").read_text()
    section = text.split("## `rightsizer plan`", 1)[1].split("\n## ", 1)[0]
    shown = "$ .venv/bin/rightsizer plan"
    block = next(b for b in section.split("```")[1::2] if b.lstrip("\n").startswith(shown))
    command, expected = block.lstrip("\n").split("\n", 1)
    out = run(*shlex.split(command.removeprefix("$ .venv/bin/rightsizer ")))
    assert out.returncode == 0, out.stderr
    assert out.stdout == expected


def test_the_kv_cache_dtype_is_its_own_option_and_is_printed() -> None:
    """vLLM caches K and V in the model's dtype unless --kv-cache-dtype says otherwise: fp8 weights
    keep a 16-bit cache. Llama 3 8B at 4,096 tokens: 2 (K, V) x 32 layers x 8 KV heads x 128 x 4,096
    x 2 B = 0.50 GiB; in fp8, 0.25 GiB."""
    auto = run("plan", "--model", "llama-3-8b", "--precision", "fp8")
    assert auto.returncode == 0, auto.stderr
    lines = auto.stdout.splitlines()
    assert lines[1].startswith(
        "Workload  inference, fp8 weights, KV cache bf16 (--kv-cache-dtype auto: the model's dtype, "
        "the servers' default)"
    ), lines[1]
    assert "kv cache      0.50 GiB" in lines
    fp8 = run("plan", "--model", "llama-3-8b", "--precision", "fp8", "--kv-cache-dtype", "fp8")
    assert "Workload  inference, fp8 weights, KV cache fp8, context 4,096" in fp8.stdout
    assert "kv cache      0.25 GiB" in fp8.stdout.splitlines()
    data = json.loads(run("plan", "--model", "llama-3-8b", "--precision", "fp8", "--format", "json").stdout)
    assert (data["workload"]["kv_cache_dtype"], data["workload"]["kv_cache_dtype_asked"]) == ("bf16", "auto")
    assert data["memory_per_gpu_bytes"]["kv_cache"] == 2 * 32 * 8 * 128 * 4096 * 2
    for args, said in (
        (["--kv-cache-dtype", "int4"], "--kv-cache-dtype 'int4': choose one of auto, fp32, bf16, fp16, fp8"),
        (["--mode", "training", "--kv-cache-dtype", "fp8"], "--kv-cache-dtype applies to --mode inference"),
    ):
        bad = run("plan", "--model", "llama-3-8b", *args)
        assert bad.returncode == 2 and said in bad.stderr and len(bad.stderr.splitlines()) == 1, bad.stderr


def test_the_cost_per_token_column_says_it_is_a_ceiling() -> None:
    """The plan's $/M tokens is the price over the decode ceiling at --batch, not what serving costs."""
    out = run("plan", "--model", "llama-3-8b", "--batch", "8").stdout
    header = next(line for line in out.splitlines() if line.startswith("viable GPU"))
    assert header.rstrip().endswith("$/hour  $/M tokens at ceiling"), header
    assert ("$/M tokens at ceiling: the price over the decode ceiling at batch 8 (--batch), a floor on what "
            "the tokens cost\n") in out  # fmt: skip


def test_llama_3_8b_plan_leads_with_the_l4_not_a_cheaper_looking_mig_slice() -> None:
    """Llama 3 8B in bf16 needs ~17.2 GiB. The L4 ($0.8048/h, 22.5 GiB) is the cheapest GPU that holds
    it. The A100 80GB's 1g.20gb (19.5 GiB) takes 2 of the A100's 8 memory slices (4 fit per GPU), so
    it costs $5.1207 x 2/8 = $1.28/h, not the $0.73 of a seventh, and must not sit above the L4."""
    out = run("plan", "--model", "llama-3-8b")
    assert out.returncode == 0, out.stderr
    table = out.stdout.split("viable GPU", 1)[1].splitlines()[2:]
    first = table[0].split()
    assert first[0] == "L4-24GB" and "$0.80" in first
    rows = json.loads(run("plan", "--model", "llama-3-8b", "--all", "--format", "json").stdout)["options"]
    by_gpu = {r["gpu"]: r for r in rows}
    assert rows[0]["gpu"] == "L4-24GB"
    mig = by_gpu["A100-SXM-80GB/1g.20gb"]
    assert mig["hourly_price_dollars"] == pytest.approx(1.2802, abs=1e-4)
    assert mig["hourly_price_dollars"] > by_gpu["L4-24GB"]["hourly_price_dollars"]
    assert "memory slices (2/8) and compute slices (1/7)" in mig["price_source"]
