"""vLLM's reservation is not the need: the server's KV-cache pool (``vllm:cache_config_info``: blocks x
block size, times the model's bytes per token) tells what of the 90 % it reserves the work uses.

The model shapes below are written from each model's ``config.json`` on its Hugging Face card, not
read from the program's table: Llama 3.1 8B has 32 layers, 8 KV heads of 128 dimensions, bf16.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from queue_fakes import LLAMA, VllmMetrics
from queue_servers import FakeHttpServer
from servers import exporter, http_get, wait_for

from exporter.sources.queues.kv_pool import pool_bytes
from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from exporter.sources.queues.settings import QueueSettings
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.evidence import Evidence, QueueEvidence
from rightsizing.models import BUILTIN, served_model
from rightsizing.pressure import memory_need

GIB = 2**30
LLAMA_8B_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x layers x KV heads x head dim x bf16: 128 KiB


@pytest.mark.parametrize(
    ("served", "builtin"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
        ("meta-llama/Llama-2-7b-chat-hf", "llama-2-7b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("microsoft/Phi-3-mini-4k-instruct", "phi-3-mini"),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", "llama-3.1-70b"),
        ("llama-3-8b", "llama-3-8b"),
    ],
)
def test_a_served_hugging_face_id_names_its_builtin(served: str, builtin: str) -> None:
    found = served_model(served)
    assert found is not None and found.name == builtin


@pytest.mark.parametrize("served", ["chat", "my-org/finetune-v3", "meta-llama/Llama-3.3-70B-Instruct", ""])
def test_a_served_name_the_table_does_not_know_is_never_guessed(served: str) -> None:
    assert served_model(served) is None


def vllm_page(model: str, blocks: str, cache_dtype: str = "auto", engines: int = 1) -> str:
    lines = []
    for e in range(engines):
        lines += [
            f'vllm:num_requests_waiting{{engine="{e}",model_name="{model}"}} 2',
            f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="{model}"}} 0.05',
            f'vllm:cache_config_info{{block_size="16",cache_dtype="{cache_dtype}",engine="{e}",'
            f'gpu_memory_utilization="0.9",num_gpu_blocks="{blocks}",sliding_window="None"}} 1.0',
        ]
    return "\n".join(lines) + "\n"


def test_the_pool_is_blocks_times_block_size_times_the_models_bytes_per_token() -> None:
    value = ExpositionReader(PRESETS["vllm"], {}).read(vllm_page(LLAMA, "28724"), False)
    assert value.kv_cache_bytes == 28724 * 16 * LLAMA_8B_TOKEN  # 56.1 GiB
    fp8 = ExpositionReader(PRESETS["vllm"], {}).read(vllm_page(LLAMA, "28724", "fp8_e4m3"), False)
    assert fp8.kv_cache_bytes == 28724 * 16 * LLAMA_8B_TOKEN / 2  # one byte per element
    two = ExpositionReader(PRESETS["vllm"], {}).read(vllm_page(LLAMA, "1000", engines=2), False)
    assert two.kv_cache_bytes == 2 * 1000 * 16 * LLAMA_8B_TOKEN  # each engine's pool, together
    # ``match`` narrows the series counted; the cache configuration (no model_name) is the server's.
    pair = vllm_page(LLAMA, "1000", engines=2)
    engine0 = ExpositionReader(PRESETS["vllm"], {"engine": "0"}).read(pair, False)
    assert engine0.depth == 2 and engine0.kv_cache_bytes is not None


@pytest.mark.parametrize("blocks", ["None", "", "-5", "1e9", "12345678901234567890"])
def test_a_malformed_block_count_gives_no_pool_and_never_fails_the_depth(blocks: str) -> None:
    value = ExpositionReader(PRESETS["vllm"], {}).read(vllm_page(LLAMA, blocks), False)
    assert value.depth == 2 and value.kv_cache_usage == 0.05 and value.kv_cache_bytes is None


def test_an_unknown_served_name_needs_the_model_setting() -> None:
    page = vllm_page("chat", "28724")
    assert ExpositionReader(PRESETS["vllm"], {}).read(page, False).kv_cache_bytes is None
    configured = BUILTIN["llama-3.1-8b"]
    value = ExpositionReader(PRESETS["vllm"], {}, model=configured).read(page, False)
    assert value.kv_cache_bytes == 28724 * 16 * LLAMA_8B_TOKEN


def test_the_model_setting_takes_a_builtin_or_a_config_json_and_refuses_anything_else(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        '{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, '
        '"num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336}'
    )
    base = {"name": "chat", "kind": "vllm", "url": "http://127.0.0.1:8000/metrics"}
    from_file = QueueSettings(**base, model=str(config)).architecture
    assert from_file is not None
    assert pool_bytes([{"num_gpu_blocks": "10", "block_size": "16"}], from_file) == 10 * 16 * LLAMA_8B_TOKEN
    with pytest.raises(ValueError, match="model 'llama-9b' is neither a built-in"):
        QueueSettings(**base, model="llama-9b").validate()
    with pytest.raises(ValueError, match="'model' does not apply to kind tgi"):
        QueueSettings(**{**base, "kind": "tgi"}, model="llama-3-8b").validate()


def evidence(peak: float, gpus: int = 1, pool: float | None = 60e9, used: float | None = 0.05) -> Evidence:
    q = QueueEvidence("chat", 1.0, 1.0, 0.0, server="vllm", kv_cache_high=used, kv_cache_bytes=pool)
    base = Evidence(
        240, 3600.0, 3600.0, "NVIDIA H100 80GB HBM3", None, 85.5e9, peak, peak, "sm_active",
        0.1, 0.1, 0.1, 0.1,
    )  # fmt: skip
    return dataclasses.replace(base, queues=(q,), workload_gpus=gpus)


def test_the_need_is_what_is_held_less_the_pool_the_usage_leaves_free() -> None:
    assert memory_need(evidence(77e9)) == pytest.approx(77e9 - 60e9 * 0.95)
    # A tensor-parallel pair: the server's pool is split over its two GPUs.
    assert memory_need(evidence(77e9, gpus=2, pool=120e9)) == pytest.approx(77e9 - 60e9 * 0.95)
    # Unknown pool or usage: the reservation stays the need.
    assert memory_need(evidence(77e9, pool=None)) == 77e9
    assert memory_need(evidence(77e9, used=None)) == 77e9
    # A pool that would leave nothing held does not describe this GPU: not used.
    assert memory_need(evidence(50e9, pool=60e9)) == 50e9


SCENARIO = """\
description: three vLLM servers holding 90 % of an H100 each, at low load
seed: 71
history_seconds: 3600
gpus:
  - name: chat-h100
    model: H100-SXM-80GB
    workload: {kind: steady_inference, memory_fraction: 0.9, activity: 0.06, utilization: 0.15, dram: 0.05,
               swing: 0, noise: 0.05}
    pod: {pod: chat-7b8c9-pqrst, namespace: llm, container: vllm}
  - name: bot-h100
    model: H100-SXM-80GB
    workload: {kind: steady_inference, memory_fraction: 0.9, activity: 0.06, utilization: 0.15, dram: 0.05,
               swing: 0, noise: 0.05}
    pod: {pod: bot-7b8c9-pqrst, namespace: llm, container: vllm}
  - name: named-h100
    model: H100-SXM-80GB
    workload: {kind: steady_inference, memory_fraction: 0.9, activity: 0.06, utilization: 0.15, dram: 0.05,
               swing: 0, noise: 0.05}
    pod: {pod: named-7b8c9-pqrst, namespace: llm, container: vllm}
"""


def test_a_small_model_under_vllms_reservation_moves_to_what_its_weights_and_kv_need(tmp_path: Path) -> None:
    """Llama 3.1 8B in bf16 under vLLM's default 0.9 on an H100 (85.52 GB usable: 76.97 GB held).
    Weights 8.03e9 x 2 = 16.06 GB and the 0.67 GB CUDA context leave vLLM a 60.24 GB pool: 28,724
    blocks of 16 tokens at 128 KiB a token. 3 % used: the work needs 16.06 + 0.67 + 0.03 x 60.24 =
    18.5 GB = 17.3 GiB; x 1.15 = 19.9 GiB. The L4 holds 22.49 GiB, carries SM p95 ~0.066 x 989 = 65
    TFLOPS at 54 % of its 121 and DRAM p95 ~0.054 x 3.35 TB/s = 181 GB/s at 60 % of its 300: the L4.
    A served name the table does not know gives no pool: the 71.7 GiB held stays the need (x 1.15 =
    82.4 GiB: the B200's 3g.90gb slice, 88.5 GiB) until the queue's ``model`` names it."""
    path = tmp_path / "reserved.yaml"
    path.write_text(SCENARIO)
    uuids = {g.name: g.uuid for g in load_scenario(str(path)).gpus}
    fakes = {"chat": VllmMetrics(), "bot": VllmMetrics(model="bot"), "named": VllmMetrics(model="bot")}
    for fake in fakes.values():
        fake.kv.labels(fake.model, "0").set(0.03)
        fake.set([1.0], [2.0])
        fake.publish_cache_config(28724)
    with FakeHttpServer() as server:
        for name, fake in fakes.items():
            server.route(f"/{name}/metrics", body=fake.render)
        config = tmp_path / "exporter.yaml"
        entries = [
            f"  - {{name: {name}, kind: vllm, url: '{server.url(f'/{name}/metrics')}',"
            f" labels: {{namespace: llm, workload: {name}}}"
            + (", model: llama-3.1-8b}" if name == "named" else "}")
            for name in fakes
        ]
        config.write_text("queues:\n" + "\n".join(entries) + "\n")
        with exporter(["--simulate", str(path), "--config", str(config)]) as p:

            def judged(gpu: str) -> dict:
                status, _, body = http_get(p.url + "/api/v1/gpus")
                assert status == 200
                return next(g for g in json.loads(body)["gpus"] if g["uuid"] == uuids[gpu])["rightsizing"]

            for gpu in uuids:
                wait_for(
                    lambda gpu=gpu: any(q["kv_cache_p95_ratio"] is not None for q in judged(gpu)["queues"]),
                    30,
                    what=f"{gpu}'s vLLM link",
                )
            chat = judged("chat-h100")
            assert chat["verdict"] == "overprovisioned" and chat["recommended"] == "L4-24GB", chat["reason"]
            assert "memory need 17.3 GiB (the server holds 71.7 GiB" in chat["reason"]
            need = chat["memory_need_bytes"] / GIB
            assert 19.5 <= need <= 20.2, need  # 17.3 GiB x 1.15
            bot = judged("bot-h100")
            assert bot["recommended"] == "B200-SXM-180GB/3g.90gb", bot["reason"]
            assert "peak memory 71.7 GiB" in bot["reason"] and "memory need" not in bot["reason"]
            named = judged("named-h100")
            assert named["recommended"] == "L4-24GB", named["reason"]
            text = http_get(p.url + "/metrics")[2].decode()
            pools = {
                line.split('queue="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("rightsizer_queue_kv_cache_capacity_bytes{")
            }
            assert pools == {"chat": 28724 * 16 * LLAMA_8B_TOKEN, "named": 28724 * 16 * LLAMA_8B_TOKEN}


TP_PAIR = """\
description: Llama 3 70B fp8 at tensor parallel 2, one pod, vLLM at 0.9 of each H100
seed: 72
history_seconds: 600
gpus:
  - name: rank-0
    model: H100-SXM-80GB
    workload: &w {kind: steady_inference, model: llama-3-70b, precision: fp8, memory_fraction: 0.9,
                  activity: 0.25, utilization: 0.5, dram: 0.3, swing: 0, noise: 0.05, kv_cache_usage: 0.35}
    pod: &p {pod: chat-70b-7b8c9-pqrst, namespace: llm, container: vllm}
    queue: &q {name: chat-70b, labels: {namespace: llm, workload: chat-70b}, server: vllm}
  - {name: rank-1, model: H100-SXM-80GB, workload: *w, pod: *p, queue: *q}
"""


def test_a_tensor_parallel_pair_holds_half_the_weights_on_each_gpu(tmp_path: Path) -> None:
    """Tensor parallel splits the weights: Llama 3 70B (70.55e9 parameters, config.json) in fp8 is
    70.55 GB, 35.3 GB on each H100. Each holds 0.9 x 85.52 GB = 76.97 GB, so the one server's pool
    is 2 x 76.97 - 70.55 - 2 x 0.67 (CUDA context) = 82.0 GB, not the 11.5 GB that whole weights on
    each GPU would leave; and each step reads 35.3 GB per GPU, not 70.55."""
    path = tmp_path / "tp2.yaml"
    path.write_text(TP_PAIR)
    scenario = load_scenario(str(path))
    for g in scenario.gpus:
        assert g.workload is not None and g.workload.serving is not None
        assert g.workload.serving.weight_bytes == pytest.approx(70.55e9 / 2, rel=0.01)
    (queue,) = SimulatedSource(scenario).queue_samples()
    assert len(queue.gpus) == 2
    assert queue.kv_cache_bytes == pytest.approx(2 * 0.9 * 85.52e9 - 70.55e9 - 2 * 640 * 2**20, rel=0.01)


def sglang_page(model: str, tokens: str) -> str:
    labels = f'engine_type="unified",model_name="{model}",pp_rank="0",tp_rank="0"'
    return (
        f"sglang:num_queue_reqs{{{labels}}} 3\n"
        f"sglang:token_usage{{{labels}}} 0.05\n"
        f"sglang:max_total_num_tokens{{{labels}}} {tokens}\n"
    )


def test_sglang_publishes_its_pool_in_tokens_and_not_its_cache_dtype() -> None:
    # Qwen2.5 7B (its config.json: 28 layers, 4 KV heads of 128 dimensions): 56 KiB a token in bf16.
    qwen_token = 2 * 28 * 4 * 128 * 2
    page = sglang_page("Qwen/Qwen2.5-7B-Instruct", "1040000")
    value = ExpositionReader(PRESETS["sglang"], {}).read(page, False)
    assert value.depth == 3 and value.kv_cache_bytes == 1040000 * qwen_token
    fp8 = ExpositionReader(PRESETS["sglang"], {}, kv_cache_dtype="fp8_e4m3").read(page, False)
    assert fp8.kv_cache_bytes == 1040000 * qwen_token / 2  # the queue's kv_cache_dtype says fp8
    unknown = ExpositionReader(PRESETS["sglang"], {}).read(sglang_page("agent", "1040000"), False)
    assert unknown.kv_cache_bytes is None and unknown.kv_cache_usage == 0.05
    nan = sglang_page("Qwen/Qwen2.5-7B-Instruct", "NaN")
    broken = ExpositionReader(PRESETS["sglang"], {}).read(nan, False)
    assert broken.depth == 3 and broken.kv_cache_bytes is None
    base = {"name": "agent", "kind": "sglang", "url": "http://127.0.0.1:30000/metrics"}
    QueueSettings(**base, model="qwen2.5-7b", kv_cache_dtype="fp8_e4m3").validate()
    with pytest.raises(ValueError, match="'kv_cache_dtype' does not apply to kind vllm"):
        QueueSettings(**{**base, "kind": "vllm"}, kv_cache_dtype="fp8_e4m3").validate()


def test_an_unsized_pool_is_said_once_with_what_to_set(caplog: pytest.LogCaptureFixture) -> None:
    reader = ExpositionReader(PRESETS["vllm"], {}, name="chat")
    with caplog.at_level("WARNING", logger="rightsizer.queues"):
        for blocks in ("28724", "28724", "28724"):
            reader.read(vllm_page("chat", blocks).replace(" 2\n", f" {len(caplog.records) + 2}\n", 1), False)
    said = [r for r in caplog.records if r.getMessage() == "KV-cache pool unknown"]
    assert len(said) == 1 and said[0].__dict__["queue"] == "chat"
    assert "serves 'chat', not a built-in; set 'model' on the queue" in said[0].__dict__["reason"]


def test_a_cache_configuration_line_that_does_not_parse_leaves_the_pool_unknown() -> None:
    page = vllm_page(LLAMA, "28724").replace('block_size="16",', 'block_size="16,', 1)  # an unclosed quote
    value = ExpositionReader(PRESETS["vllm"], {}).read(page, False)
    assert value.depth == 2 and value.kv_cache_usage == 0.05 and value.kv_cache_bytes is None


def test_the_live_engine_judges_again_when_the_pool_becomes_known() -> None:
    """The live engine reuses an assessment while ``decision_inputs`` are equal: a pool that appears
    (the queue's ``model`` set, a server restarted with another cache) must change them."""
    from rightsizing.settings import RightsizingSettings
    from rightsizing.verdicts import decision_inputs

    s = RightsizingSettings()
    known, unknown = evidence(77e9), evidence(77e9, pool=None)
    assert decision_inputs(known, s) != decision_inputs(unknown, s)
