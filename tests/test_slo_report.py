"""``rightsizer report`` judges latency SLOs from the exporter's series in Prometheus history: the
hour of tests/scenarios/slo_latency.yaml (SLO missed on ITL, missed on TTFT with queueing, met
with room, a downsizing the SLO forbids) reaches the verdicts and recommendations written in that
file from physics, and says each workload's SLO state."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_history
from test_report import HOUR, STEP, report

from exporter.sources.simulated.source import SimulatedSource

SCENARIO = Path(__file__).parent / "scenarios" / "slo_latency.yaml"


@pytest.fixture(scope="module")
def history() -> Iterator[tuple[str, float, SimulatedSource]]:
    with report_history.prometheus_with_history([SCENARIO], HOUR, STEP) as (url, fleets):
        yield url, fleets[0].last, fleets[0].source


def test_the_report_reaches_the_slo_verdicts_from_history(history) -> None:
    url, at, source = history
    out = report(url, at, "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_uuid = {g["uuid"]: g for g in data["gpus"]}
    for sim in source.scenario.gpus:
        got, want = by_uuid[sim.uuid], sim.expect
        assert want is not None
        assert (got["verdict"], got["bottlenecks"], got["recommended"]) == (
            want.verdict, list(want.bottlenecks), want.recommended,
        ), f"{sim.name}: {got['reason']}"  # fmt: skip
    slos = {s["workload"]: s for s in data["slos"]}
    assert {w: s["state"] for w, s in slos.items()} == {
        "chat-itl": "missed", "chat-ttft": "missed", "chat-room": "met_with_room",
        "chat-tight": "met_with_room", "chat-forbid": "met_with_room",
    }  # fmt: skip
    itl = next(x for x in slos["chat-itl"]["latencies"] if x["slo"] == "itl")
    assert 0.85 <= itl["attainment_ratio"] < 0.95  # ~90 % of tokens under 80 ms (see the scenario)
    itl_gpu, ttft_gpu = (by_uuid[g.uuid] for g in source.scenario.gpus[:2])
    assert "binding memory bandwidth" in itl_gpu["reason"] and itl_gpu["deciding"] == "memory bandwidth"
    assert "binding capacity" in ttft_gpu["reason"] and ttft_gpu["deciding"] == "capacity"
    assert by_uuid[source.scenario.gpus[4].uuid]["deciding"] == "latency SLO"  # the SLO forbids the move


def test_the_text_report_has_an_slo_table(history) -> None:
    url, at, _ = history
    out = report(url, at)
    assert out.returncode == 0, out.stderr
    assert "Latency SLOs" in out.stdout
    line = next(ln for ln in out.stdout.splitlines() if "chat-ttft" in ln and "missed" in ln)
    assert "ttft" in line
