"""The inference server's flags that depend on the GPU, read from the manifest's container args and
checked against the target (planner-level, tests/patches_units.py). The figures below are written
from the catalog (the L4's usable memory: NVML's 23,034 MiB = 22.49 GiB) and the built-in model
table (Llama 3.1 8B: 32 layers, 8 KV heads of 128, 8.03 B parameters), not from the code."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import yaml
from patches_units import held, patch_set

from rightsizing.patches.manifests import Manifests
from rightsizing.patches.owners import OwnerSeries

GIB = 2**30
L4 = 23034 * 2**20  # bytes
OWNERS = OwnerSeries(
    pods={("llm", "chat-7b9c4-x2k9q"): ("ReplicaSet", "chat-7b9c4")},
    replicasets={("llm", "chat-7b9c4"): ("Deployment", "chat")},
    present=True,
)


def run(args: list[str], need_gib: float, gpus: int = 1):  # type: ignore[no-untyped-def]
    resources = {"requests": {"cpu": "3", "memory": "12Gi"}, "limits": {"nvidia.com/gpu": gpus}}
    container = {"name": "server", "image": "vllm/vllm-openai:v0.6.3", "args": args, "resources": resources}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": "llm"},
           "spec": {"template": {"spec": {"containers": [container]}}}}  # fmt: skip
    u = held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB")
    u = dataclasses.replace(u, assessment=dataclasses.replace(u.assessment, memory_need_bytes=need_gib * GIB))
    ps = patch_set([u], owners=OWNERS, manifests=Manifests([("chat.yaml", obj)]))
    (m,) = ps.moves
    return m, ps


def patched_args(ps) -> Any:  # type: ignore[no-untyped-def]
    spec = yaml.safe_load(ps.files["llm_deployment_chat.yaml"])["spec"]["template"]["spec"]
    return next(c.get("args") for c in spec.get("containers", [{}]))  # None: the containers are not patched


def test_a_reservation_too_small_on_the_target_is_raised_to_the_need() -> None:
    # 0.9 x 22.49 GiB = 20.24 GiB < the 21.3 GiB needed: ceil(21.3 / 22.49 x 100) / 100 = 0.95.
    assert math.ceil(21.3 * GIB / L4 * 100) / 100 == 0.95
    m, ps = run(["--model", "facebook/opt-6.7b", "--gpu-memory-utilization", "0.9"], 21.3)
    assert m.outcome == "patch"
    assert patched_args(ps) == ["--model", "facebook/opt-6.7b", "--gpu-memory-utilization", "0.95"]
    assert "--gpu-memory-utilization 0.9 -> 0.95" in ps.files["llm_deployment_chat.yaml"]
    # SGLang's flag, written with '=': rewritten the same way.
    _, ps = run(["--model-path", "x/y", "--mem-fraction-static=0.85"], 21.3)
    assert patched_args(ps) == ["--model-path", "x/y", "--mem-fraction-static=0.95"]
    # Enough room already (0.9 x 22.49 = 20.24 GiB >= 18 GiB): the containers are not in the patch.
    _, ps = run(["--gpu-memory-utilization", "0.9"], 18.0)
    assert patched_args(ps) is None


def test_a_need_above_what_a_server_may_reserve_is_left_to_a_person() -> None:
    # 22 GiB of 22.49: 0.98 > 0.95.
    m, ps = run(["--gpu-memory-utilization", "0.9"], 22.0)
    assert m.outcome == "manual" and "llm_deployment_chat.yaml" not in ps.files
    assert "--gpu-memory-utilization 0.9 leaves 20.2 GiB of the L4-24GB's 22.5 GiB" in m.why
    assert "needs 22.0 GiB there, more than 95%" in m.why


def test_max_model_len_against_the_kv_cache_the_target_leaves() -> None:
    per_token = 2 * 32 * 8 * 128 * 2  # K and V, layers, KV heads, head dim, fp16 bytes: 128 KiB
    pool = 0.9 * L4 - 8.03e9 * 2  # the 0.9 share less the fp16 weights: 5.29 GiB
    model = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "0.9"]
    # 32,768 tokens take 4 GiB: they fit.
    m, _ = run([*model, "--max-model-len", "32768"], 16.0)
    assert 32768 * per_token <= pool and m.outcome == "patch"
    # 131,072 tokens take 16 GiB: a person lowers it to what fits, or keeps the GPU.
    m, _ = run([*model, "--max-model-len=131072"], 16.0)
    assert m.outcome == "manual"
    assert f"lower it to {int(pool // per_token)} tokens or less" in m.why and "16.0 GiB of KV cache" in m.why
    # A model the table does not know: said, not guessed.
    m, ps = run(["--model", "acme/secret-13b", "--max-model-len", "32768"], 16.0)
    assert m.outcome == "patch" and "not a built-in one" in ps.files["llm_deployment_chat.yaml"]


def test_a_tensor_parallel_size_that_does_not_match_the_gpus_is_said() -> None:
    _, ps = run(["--tensor-parallel-size", "2"], 16.0)
    assert "--tensor-parallel-size 2 while the container holds 1 GPU" in ps.files["llm_deployment_chat.yaml"]


def tp_group(args: list[str]):  # type: ignore[no-untyped-def]
    """One pod whose one vLLM container holds 4 H100s as a tensor-parallel group; the engine moves
    the group to 2 H200s (the H200's price is an estimate: patched when asked)."""
    change = "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB"
    resources = {
        "limits": {"nvidia.com/gpu": 4},
        "requests": {"cpu": "16", "memory": "200Gi", "nvidia.com/gpu": 4},
    }
    container = {"name": "server", "image": "vllm/vllm-openai:v0.6.3", "args": args, "resources": resources}
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": "llm"},
           "spec": {"template": {"spec": {"containers": [container]}}}}  # fmt: skip
    units = [dataclasses.replace(held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "H200-SXM-141GB", change=change),
                                 gpu=f"GPU-{i}") for i in range(4)]  # fmt: skip
    ps = patch_set(
        units, owners=OWNERS, manifests=Manifests([("chat.yaml", obj)]), include_estimated_prices=True
    )
    (m,) = ps.moves
    return m, ps


def test_a_tensor_parallel_group_resized_with_its_flag() -> None:
    m, ps = tp_group(["--model", "x/y", "--tensor-parallel-size", "4"])
    assert (m.outcome, m.change) == ("patch", "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB")
    spec = yaml.safe_load(ps.files["llm_deployment_chat.yaml"])["spec"]["template"]["spec"]
    # Two GPUs in limits and requests, the degree with them, the H200's nodes.
    two = {"limits": {"nvidia.com/gpu": 2}, "requests": {"nvidia.com/gpu": 2}}
    args = ["--model", "x/y", "--tensor-parallel-size", "2"]
    assert spec["containers"] == [{"name": "server", "args": args, "resources": two}]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}
    # Without the flag (vLLM would run on one GPU), or with another degree: a person decides.
    m, _ = tp_group(["--model", "x/y"])
    assert m.outcome == "manual" and "no tensor-parallel size in its args" in m.why
    m, _ = tp_group(["--model", "x/y", "-tp", "8"])
    assert m.outcome == "manual" and "the server says -tp 8" in m.why
