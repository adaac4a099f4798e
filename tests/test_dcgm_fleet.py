"""A simulated A100/L4/L40S fleet (no GPM) judged with the node's dcgm-exporter: the simulator's
SM and DRAM activity is published as a dcgm-exporter page on a loopback HTTP server, read by the
exporter's dcgm-exporter source, merged into the samples and judged by the real right-sizing
extension. Each GPU's verdict with the ratios is written in its scenario file
(tests/scenarios/dcgm/), from physics; what GPU utilization alone concludes is written here, and
differs where it misleads."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from queue_servers import FakeHttpServer

from exporter.api import gpus_json
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sources.dcgm.extension import DcgmExporterExtension, merge
from exporter.sources.dcgm.page import read_page
from exporter.sources.dcgm.settings import DcgmExporterSettings
from exporter.sources.simulated.dcgm_page import DEFAULT_COUNTERS, WITH_SM, dcgm_page
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.snapshot import GpuReading, Snapshot
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings

FLEET = Path(__file__).parent / "scenarios" / "dcgm" / "no_gpm_fleet.yaml"
START = 1_780_000_000.0

# What GPU utilization alone concludes (no dcgm-exporter), from the same physics: the L40S's and
# the L4's always-running kernels read as load, and the A100's utilization as compute.
WITHOUT = {
    "busy-looking-l40s": {"verdict_not": "overprovisioned", "bottleneck": "compute"},
    "light-l4": {"verdict": "rightsized", "recommended": "L4-24GB"},
    "decode-a100": {"bottlenecks": ["memory_bandwidth", "compute"]},
}


class WithDcgmHistory:
    """The simulated source whose replayed past carries the dcgm-exporter page of each moment,
    parsed and merged by the same code as the live reads."""

    def __init__(self, source: SimulatedSource, counters: tuple[str, ...]) -> None:
        self._source, self._counters = source, counters

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)

    def history(self, seconds: float, step: float, cancelled: Any = lambda: False) -> Iterator[GpuReading]:
        for r in self._source.history(seconds, step, cancelled):
            values = read_page(dcgm_page(self._source, r.timestamp, self._counters)).values
            yield dataclasses.replace(r, gpus=merge(r.gpus, values)[0])


async def judge(counters: tuple[str, ...] | None) -> tuple[dict[str, dict[str, Any]], Any]:
    """Each GPU's right-sizing as the API publishes it; with dcgm-exporter's ``counters`` or without."""
    scenario = dataclasses.replace(load_scenario(str(FLEET)), start=START, frozen=True)
    source = SimulatedSource(scenario)
    names = {g.uuid: g.name for g in scenario.gpus}
    feed: Any = source if counters is None else WithDcgmHistory(source, counters)
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, feed)
    with FakeHttpServer() as server:
        dcgm = None
        if counters is not None:
            server.route("/metrics", body=dcgm_page(source, None, counters).encode())
            dcgm = DcgmExporterExtension(DcgmExporterSettings(url=server.url("/metrics")))
            await dcgm.start()
        await ext.start()
        try:
            reading = await source.collect()
            gpus, extra = reading.gpus, None
            if dcgm is not None:
                extra = dcgm.contribute(reading, gpus)
                gpus = extra.gpus
            contribution = ext.contribute(reading, gpus)
        finally:
            await ext.stop()
            if dcgm is not None:
                await dcgm.stop()
    snap = Snapshot(reading.timestamp, "node", gpus, (), contribution.rows, contribution.api)
    return {names[g["uuid"]]: g["rightsizing"] for g in gpus_json(snap)["gpus"]}, extra


async def test_verdicts_with_dcgm_exporter_name_sm_and_dram_active() -> None:
    judged, extra = await judge(WITH_SM)
    scenario = load_scenario(str(FLEET))
    wrong = []
    for g in scenario.gpus:
        got, want = judged[g.name], g.expect
        assert want is not None
        have = (got["verdict"], got["bottlenecks"], got["recommended"])
        expected = (want.verdict, list(want.bottlenecks), want.recommended)
        if have != expected:
            wrong.append(f"{g.name}: {have}, expected {expected}: {got['reason']}")
    assert not wrong, "\n".join(wrong)
    # Every GPU was matched on the page by its UUID, and the source says so.
    assert extra.rows["rightsizer_dcgm_exporter_up"][0].value == 1.0
    assert extra.rows["rightsizer_dcgm_exporter_gpus"][0].value == 3.0
    assert extra.collectors[0].success
    # The reasons name what decided: SM active on the two GPUs whose kernels mislead, DRAM active on
    # the memory-bound one.
    for name, signal in (
        ("busy-looking-l40s", "sm active"),
        ("light-l4", "sm active"),
        ("decode-a100", "dram active"),
    ):
        assert signal in judged[name]["reason"].lower(), judged[name]


async def test_gpu_utilization_alone_misleads_on_the_same_fleet() -> None:
    judged, _ = await judge(None)
    l40s, l4, a100 = judged["busy-looking-l40s"], judged["light-l4"], judged["decode-a100"]
    assert l40s["verdict"] != WITHOUT["busy-looking-l40s"]["verdict_not"], l40s
    assert "compute" in l40s["bottlenecks"], l40s
    assert (l4["verdict"], l4["recommended"]) == ("rightsized", "L4-24GB"), l4
    assert a100["bottlenecks"] == WITHOUT["decode-a100"]["bottlenecks"], a100
    assert "sm active" not in (l40s["reason"] + l4["reason"]).lower()


async def test_default_counters_give_dram_active_and_gr_engine_active_only() -> None:
    # dcgm-exporter's default counters file has no SM active: GR engine active (time any engine was
    # busy) reads like GPU utilization, so the launch-overhead L40S still looks compute-bound, while
    # DRAM active replaces memory-copy utilization as the bandwidth signal.
    judged, extra = await judge(DEFAULT_COUNTERS)
    l40s, a100 = judged["busy-looking-l40s"], judged["decode-a100"]
    assert "gr engine active" in l40s["reason"].lower() and "sm active" not in l40s["reason"].lower()
    assert l40s["verdict"] != "overprovisioned" and "compute" in l40s["bottlenecks"], l40s
    assert "dram active" in a100["reason"].lower() and "memory_bandwidth" in a100["bottlenecks"], a100
    assert extra.rows["rightsizer_dcgm_exporter_gpus"][0].value == 3.0


def test_mig_instances_are_matched_by_parent_and_instance_and_gpm_stays_first() -> None:
    # The built-in MIG fleet: an H100 (GPM) in MIG mode and a whole A100 (no GPM). dcgm-exporter
    # publishes both; each H100 instance is found on the page under its parent's UUID and GPU_I_ID,
    # but keeps GPM's own ratios; the A100 takes the page's.
    scenario = dataclasses.replace(load_scenario(str(SCENARIO_DIR / "mig.yaml")), start=START, frozen=True)
    source = SimulatedSource(scenario)
    reading = source.reading_at(source.now())
    values = read_page(dcgm_page(source, source.now(), WITH_SM)).values
    merged, matched = merge(reading.gpus, values)
    instances = [g for g in reading.gpus if g.identity.mig_instance_id is not None]
    assert instances and all("sm_active_ratio" in g.fields for g in instances)  # GPM's
    found = {m["uuid"]: m["fields"] for m in matched}
    for before, after in zip(reading.gpus, merged, strict=True):
        if before.identity.mig_instance_id is not None:
            assert found[before.identity.uuid] == [] and after.fields == before.fields
    a100 = next(g for g in merged if g.identity.model.startswith("NVIDIA A100"))
    page_sm = values[(a100.identity.uuid, None)]["sm_active_ratio"]
    assert a100.fields["sm_active_ratio"] == page_sm and "sm_active_ratio" in found[a100.identity.uuid]
