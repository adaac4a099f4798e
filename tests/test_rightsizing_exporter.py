"""The right-sizing engine inside the real exporter: the default simulated fleet shows every verdict
with reasons on /metrics and in /api/v1/gpus as soon as the exporter is ready, own families lint
clean, and configured queues (a real vLLM-shaped endpoint) link to the GPUs they feed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from queue_fakes import VllmMetrics
from queue_servers import FakeHttpServer
from servers import exporter, http_get, require_binary, wait_for

from exporter.sources.simulated.source import load_scenario
from rightsizing.bottlenecks import BOTTLENECKS
from rightsizing.verdicts import VERDICTS

OWN = tuple(
    f"rightsizer_{name}"
    for name in (
        "gpu_verdict", "gpu_fit_score", "gpu_bottleneck", "gpu_memory_peak_bytes", "gpu_activity_p95_ratio",
        "gpu_recommendation_info", "gpu_hourly_savings_dollars", "gpu_window_samples", "host_cpu_busy_ratio",
    )
)  # fmt: skip


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    ]


def api_gpus(url: str) -> dict[str, dict]:
    status, _, body = http_get(url + "/api/v1/gpus")
    assert status == 200
    return {g["uuid"]: g for g in json.loads(body)["gpus"]}


def test_default_fleet_shows_every_verdict_with_reasons_once_ready() -> None:
    scenario = load_scenario("default")
    with exporter(["--simulate"]) as p:
        # No waiting: history is replayed before the first snapshot, so readiness means verdicts.
        text = http_get(p.url + "/metrics")[2].decode()
        current = {
            labels["UUID"]: labels["verdict"]
            for labels, v in samples(text, "rightsizer_gpu_verdict")
            if v == 1
        }
        assert set(current.values()) == set(VERDICTS)
        for labels, _ in samples(text, "rightsizer_gpu_verdict"):
            assert labels["model_name"] and labels["Hostname"] and "modelName" not in labels
        per_gpu = {}
        for labels, value in samples(text, "rightsizer_gpu_verdict"):
            per_gpu.setdefault(labels["UUID"], []).append(value)
        assert all(sorted(v) == [0, 0, 0, 0, 1] for v in per_gpu.values())  # one series per state
        reasons = {
            labels["UUID"]: labels["reason"]
            for labels, _ in samples(text, "rightsizer_gpu_recommendation_info")
        }
        assert all(reasons.values()) and len(reasons) == len(scenario.gpus)
        bottlenecks = samples(text, "rightsizer_gpu_bottleneck")
        assert len(bottlenecks) == len(scenario.gpus) * len(BOTTLENECKS)
        gpus = api_gpus(p.url)
        for sim in scenario.gpus:
            rs = gpus[sim.uuid]["rightsizing"]
            assert sim.expect is not None
            assert (rs["verdict"], rs["bottlenecks"], rs["recommended"]) == (
                sim.expect.verdict, list(sim.expect.bottlenecks), sim.expect.recommended,
            ), f"{sim.name}: {rs['reason']}"  # fmt: skip
            assert current[sim.uuid] == rs["verdict"] and len(rs["reason"]) > 20
            found = {
                labels["bottleneck"] for labels, v in bottlenecks if labels["UUID"] == sim.uuid and v == 1
            }
            assert found == set(rs["bottlenecks"])
        savings = {labels["UUID"]: v for labels, v in samples(text, "rightsizer_gpu_hourly_savings_dollars")}
        assert any(v < 0 for v in savings.values()) and any(v > 0 for v in savings.values())
        summary = json.loads(http_get(p.url + "/api/v1/rightsizing")[2])["rightsizing"]
        assert all(summary["verdicts"][v] >= 1 for v in VERDICTS)
        assert summary["hourly_savings_dollars"] == round(sum(v for v in savings.values() if v > 0), 6)


def test_own_families_lint_clean_with_promtool() -> None:
    promtool = require_binary("promtool")
    with exporter(["--simulate"]) as p:
        text = http_get(p.url + "/metrics")[2].decode()
    own, family = [], ""
    for line in text.splitlines():
        if line.startswith("# HELP "):
            family = line.split(" ", 3)[2]
        if family in OWN:
            own.append(line)
    assert {line.split(" ", 3)[2] for line in own if line.startswith("# TYPE ")} == set(OWN)
    lint = subprocess.run([promtool, "check", "metrics"], input="\n".join(own) + "\n",
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_configured_queues_link_to_the_gpus_they_feed(tmp_path: Path) -> None:
    scenario = load_scenario("default")
    by_name = {g.name: g for g in scenario.gpus}
    vllm = VllmMetrics()
    vllm.set([7.0], [3.0])
    with FakeHttpServer() as server:
        server.route("/metrics", body=lambda: vllm.render())
        config = tmp_path / "exporter.yaml"
        config.write_text(
            "queues:\n"
            f"  - {{name: chat, kind: vllm, url: '{server.url('/metrics')}',\n"
            "     labels: {namespace: llm, workload: chat-8b}}\n"
            "rightsizing:\n"
            "  queue_links:\n"
            "    - {queue: chat, gpus: ['0']}\n"
        )
        with exporter(["--simulate", "--config", str(config)]) as p:

            def queues_of(name: str) -> dict[str, float]:
                rs = api_gpus(p.url)[by_name[name].uuid]["rightsizing"]
                return {q["name"]: q["depth"] for q in rs["queues"]}

            # The pod chat-8b-7b8c9-pqrst in llm belongs to workload chat-8b: linked by labels,
            # next to the simulated queue the simulator links by UUID.
            wait_for(lambda: queues_of("full-l4").get("chat") == 7.0, 30, what="the vLLM queue on full-l4")
            assert "chat-requests" in queues_of("full-l4")
            # Linked by index in rightsizing.queue_links.
            wait_for(lambda: queues_of("idle-h100") == {"chat": 7.0}, 30, what="the vLLM queue on idle-h100")
            assert "chat" not in queues_of("rightsized-l40s")
            vllm.set([11.0], [3.0])
            wait_for(lambda: queues_of("full-l4").get("chat") == 11.0, 30, what="the new depth")


FULL_H100 = """\
description: a vLLM server holding 97 % of an H100 at low load
seed: 61
history_seconds: 3600
gpus:
  - name: vllm-h100
    model: H100-SXM-80GB
    workload: {kind: steady_inference, memory_fraction: 0.97, activity: 0.1, utilization: 0.3}
    pod: {pod: chat-8b-7b8c9-pqrst, namespace: llm, container: vllm}
"""


def test_memory_pressure_comes_from_the_queue_poll_of_a_real_vllm_endpoint(tmp_path: Path) -> None:
    """A full GPU behind vLLM is the server's reservation until vLLM itself reports pressure, read
    from the same /metrics the queue preset polls: then it needs a bigger GPU."""
    scenario = tmp_path / "full.yaml"
    scenario.write_text(FULL_H100)
    uuid = load_scenario(str(scenario)).gpus[0].uuid
    vllm = VllmMetrics()
    vllm.set([2.0], [4.0])
    with FakeHttpServer() as server:
        server.route("/metrics", body=lambda: vllm.render())
        config = tmp_path / "exporter.yaml"
        config.write_text(
            "queues:\n"
            f"  - {{name: chat, kind: vllm, url: '{server.url('/metrics')}',\n"
            "     labels: {namespace: llm, workload: chat-8b}}\n"
        )
        with exporter(["--simulate", str(scenario), "--config", str(config)]) as p:

            def judged() -> dict:
                return api_gpus(p.url)[uuid]["rightsizing"]

            wait_for(lambda: [q["server"] for q in judged()["queues"]] == ["vllm"], 30, what="the vLLM link")
            wait_for(lambda: judged()["queues"][0]["kv_cache_p95_ratio"] is not None, 30, what="KV usage")
            quiet = judged()
            assert quiet["verdict"] == "rightsized" and quiet["recommended"] == "H100-SXM-80GB"
            assert "memory reserved by the server; need unknown" in quiet["reason"]
            assert "KV cache 42% used at p95" in quiet["reason"]
            assert "memory_capacity" not in quiet["bottlenecks"]
            # vLLM starts preempting requests: real memory pressure.
            vllm.preemptions.labels(vllm.model, "0").inc(5)
            vllm.changed()
            wait_for(lambda: judged()["verdict"] == "underprovisioned", 30, what="pressure seen")
            pressed = judged()
            assert "5 preemptions" in pressed["reason"] and "memory_capacity" in pressed["bottlenecks"]
            # The H100 has nothing bigger of its own: another GPU holding 80 GiB x 1.15.
            assert pressed["recommended"] == "H200-SXM-141GB", pressed["reason"]
            text = http_get(p.url + "/metrics")[2].decode()
            kv = samples(text, "rightsizer_queue_kv_cache_usage_ratio")
            assert [(lab["queue"], lab["kind"], value) for lab, value in kv] == [("chat", "vllm", 0.42)]
