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
from rightsizing.command import report_slo
from rightsizing.command.promapi import Sample
from rightsizing.settings import RightsizingSettings

SCENARIO = Path(__file__).parent / "scenarios" / "slo_latency.yaml"


@pytest.fixture(scope="module")
def history(prometheus_version: object) -> Iterator[tuple[str, float, SimulatedSource]]:
    """The hour in Prometheus 2.42 and, with --prometheus3, 3.5 (tests/prometheus_versions.py)."""
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
    assert 0.75 <= itl["attainment_ratio"] < 0.95  # ~82 % of tokens under 80 ms (see the scenario)
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


def test_the_markdown_and_html_reports_have_the_same_slo_table(history) -> None:
    """Each format carries the table the text report prints, one row per declared SLO, from the
    same rows: the state and the worst attainment of each workload."""
    url, at, _ = history
    data = json.loads(report(url, at, "--format", "json").stdout)
    states = {s["workload"]: s["state"].replace("_", " ") for s in data["slos"] if s["state"] != "no_slo"}
    assert len(states) == 5
    markdown = report(url, at, "--format", "markdown")
    assert markdown.returncode == 0, markdown.stderr
    section = markdown.stdout.split("## Latency SLOs", 1)[1].split("\n## ", 1)[0]
    cells = [ln.split(" | ") for ln in section.splitlines() if ln.startswith("| ")]
    rows = [c for c in cells if c[1] not in ("workload", "---")]
    assert {c[1].replace("\\", ""): c[2] for c in rows} == states
    html = report(url, at, "--format", "html")
    assert html.returncode == 0, html.stderr
    table = html.stdout.split("<h2>Latency SLOs</h2>", 1)[1].split("</table>", 1)[0]
    assert table.count('<tr class="slo">') == 5
    for workload, state in states.items():
        assert f'<td data-label="workload">{workload}</td><td data-label="SLO">{state}</td>' in table


class TwoExporters:
    """A collector whose answers come from two exporters (two shards' parts of one answer) serving
    one workload: 300 of 400 requests good on one, 90 of 100 on the other."""

    w = "1h"

    def run(self, what: str, expr: str) -> list[Sample]:
        per = {"a": (400.0, 300.0), "b": (100.0, 90.0)}
        if "rightsizer_workload_slo_target_seconds" in expr and "and on" not in expr:
            values = {"a": 0.5, "b": 0.5}
        elif "rightsizer_workload_slo_objective_ratio" in expr:
            values = {"a": 0.95, "b": 0.95}
        elif "slo_good_requests_total" in expr:
            values = {k: good for k, (_, good) in per.items()}
        elif "slo_requests_total" in expr:
            values = {k: n for k, (n, _) in per.items()}
        else:
            return []
        labels = {"namespace": "chat", "workload": "llama", "slo": "ttft"}
        return [Sample({"instance": i, **labels}, v) for i, v in values.items()]


def test_a_workload_served_by_several_exporters_is_summed_over_them() -> None:
    """The report's shards split the fleet by exporter and concatenate the answers: the SLO's
    counts are summed over every exporter serving the workload, never one shard's part."""
    slos = report_slo.collect(TwoExporters(), RightsizingSettings())
    (ttft,) = slos[("chat", "llama")].latencies
    assert ttft.requests == 500 and ttft.attainment == pytest.approx(390 / 500)
