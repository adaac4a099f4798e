"""``rightsizer report`` on a Prometheus that scrapes both the node's rightsizer-exporter (which
does not read dcgm-exporter here) and the node's dcgm-exporter: the report takes SM and DRAM active
from dcgm-exporter's series of the same GPUs (by UUID), reaches the verdicts the scenario states
with those ratios, and judges each GPU once, not once per exporter."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import report_history
from test_report import report

from exporter.sources.simulated.dcgm_page import WITH_SM, dcgm_page
from exporter.sources.simulated.source import SimulatedSource, load_scenario

FLEET = Path(__file__).parent / "scenarios" / "dcgm" / "no_gpm_fleet.yaml"
START = 1_780_000_000.0
STEP = 15.0
HOUR = 3600.0
MIB = 1048576.0


def dcgm_exporter_history(instance: str) -> dict[str, list[str]]:
    """What the node's dcgm-exporter published over the hour: its profiling page of each moment,
    plus the framebuffer and utilization fields it publishes for every GPU."""
    scenario = dataclasses.replace(load_scenario(str(FLEET)), start=START, frozen=True)
    source = SimulatedSource(scenario)
    families: dict[str, list[str]] = {}
    for reading in source.history(HOUR, STEP):
        t = reading.timestamp
        lines = dcgm_page(source, t, WITH_SM, hostname="node-a").splitlines()
        for g in reading.gpus:
            i = g.identity
            labels = f'gpu="{i.index}",UUID="{i.uuid}",device="nvidia{i.minor_number}",modelName="{i.model}"'
            lines.append(f"DCGM_FI_DEV_FB_USED{{{labels}}} {g.fields['memory_used_bytes'] / MIB:.0f}")
            lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {g.fields['gpu_utilization_ratio'] * 100:.0f}")
        for line in lines:
            if line and not line.startswith("#"):
                name, rest = line.split("{", 1)
                families.setdefault(name, []).append(f'{name}{{instance="{instance}",{rest} {t:.3f}')
    return families


def test_the_report_reads_dcgm_exporter_profiling_and_judges_each_gpu_once() -> None:
    extra = dcgm_exporter_history("node-a:9400")
    with report_history.prometheus_with_history(
        [FLEET], HOUR, STEP, instances=True, extra=extra, start=START
    ) as (
        url,
        fleets,
    ):
        out = report(url, fleets[0].last, "--format", "json")
    assert out.returncode == 0, out.stderr
    gpus = json.loads(out.stdout)["gpus"]
    scenario = load_scenario(str(FLEET))
    assert sorted(g["uuid"] for g in gpus) == sorted(g.uuid for g in scenario.gpus)  # once each
    by_uuid = {g["uuid"]: g for g in gpus}
    for sim in scenario.gpus:
        got, want = by_uuid[sim.uuid], sim.expect
        assert want is not None
        assert (got["verdict"], got["bottlenecks"], got["recommended"]) == (
            want.verdict, list(want.bottlenecks), want.recommended,
        ), f"{sim.name}: {got['reason']}"  # fmt: skip
        assert got["samples"] >= HOUR / STEP - 2
    l40s = by_uuid[scenario.gpus[0].uuid]
    assert "sm active" in l40s["reason"].lower(), l40s["reason"]


def test_without_dcgm_exporter_the_report_reads_gpu_utilization() -> None:
    with report_history.prometheus_with_history([FLEET], HOUR, STEP, start=START) as (url, fleets):
        out = report(url, fleets[0].last, "--format", "json")
    assert out.returncode == 0, out.stderr
    by_name = {g["uuid"]: g for g in json.loads(out.stdout)["gpus"]}
    l40s = by_name[load_scenario(str(FLEET)).gpus[0].uuid]
    assert l40s["verdict"] != "overprovisioned" and "compute" in l40s["bottlenecks"], l40s["reason"]
