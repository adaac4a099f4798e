"""``rightsizer plan --measured-from URL --workload NS/NAME`` with a latency SLO declared: a real
Prometheus scraping the simulated exporter on tests/scenarios/slo_latency.yaml. The plan shows the
SLO's state today and each option's projected latency at the objective over the target, by the
model the engine uses (inter-token latency scales with the bandwidth that binds decode)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import exporter, prom_query, prometheus, wait_for

from rightsizing.catalog import load_catalog

SCENARIO = Path(__file__).parent / "scenarios" / "slo_latency.yaml"
CATALOG = load_catalog()


@pytest.fixture(scope="module")
def source() -> Iterator[str]:
    with exporter(["--simulate", str(SCENARIO)]) as exp, prometheus(
        {"rightsizer": [exp.url.removeprefix("http://")]}
    ) as prom:
        wait_for(
            lambda: prom_query(prom.url, 'rightsizer_workload_slo_window_latency_ratio{workload="chat-itl"}')
            and prom_query(prom.url, 'rightsizer_workload_throughput_per_second{queue="chat-itl"}'),
            60, what="the SLO and the throughput in Prometheus",
        )  # fmt: skip
        yield prom.url


def plan(url: str, workload: str, fmt: str = "json") -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "plan", "--model", "llama-3-8b", "--all",
           "--measured-from", url, "--workload", workload, "--format", fmt]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def bandwidth(key: str) -> float:
    c = CATALOG.candidate(key)
    assert c is not None
    return c.memory_bandwidth_bytes_per_second


def test_the_plan_projects_the_slo_on_every_option(source: str) -> None:
    out = plan(source, "llm/chat-itl")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    m = data["measured"]
    slo = m["slo"]
    assert slo["state"] == "missed" and slo["latency_ratio"] > 1.0
    assert m["current"] == "L4-24GB" and m["projected_by"] == "memory bandwidth"
    today = slo["latency_ratio"]
    for o in data["options"]:
        # ITL on the option = ITL today x today's bandwidth / the option's (memory-bound decode)
        want = today * bandwidth("L4-24GB") / (bandwidth(o["gpu"]) * o["gpus"])
        assert o["measured_projected_slo_latency_ratio"] == pytest.approx(want, rel=1e-3), o["gpu"]
    l40s = next(o for o in data["options"] if o["gpu"] == "L40S-48GB" and o["gpus"] == 1)
    assert l40s["measured_projected_slo_latency_ratio"] <= 0.9  # keeps it, as the verdict says
    text = plan(source, "llm/chat-itl", "table").stdout
    assert "Latency SLO over the last hour: missed by" in text
    assert "latency/target, projected" in text and "(keeps it)" in text
