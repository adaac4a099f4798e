"""System balance: a PCIe link trained below its maximum is a finding with its evidence, from
NVML's current and maximum link values (the C double through nvidia-ml-py, the simulated fleet),
judged by the best link over the window so an idle GPU's power-saving downshift is not flagged."""

from __future__ import annotations

from pathlib import Path

from nvmldouble import NvmlDouble, api_gpus, exporter_args, gpu_values, scrape_until, value
from report_history import exporter_history
from servers import exporter

from rightsizing.balance import LinkSeen

SCENARIOS = Path(__file__).parent / "scenarios"


def test_a_gpu_trained_at_gen3_in_a_gen5_slot_is_flagged_with_its_evidence() -> None:
    fleet = exporter_history(SCENARIOS / "memory_reserved_by_server.yaml", 3600.0, 15.0, {}, None)
    gpus = {g.name: g for g in fleet.source.scenario.gpus}
    reading = fleet.source.reading_at(fleet.last)
    contribution = fleet.live.contribute(reading, reading.gpus)
    rows = {
        r.gpu.identity.uuid: r.value for r in contribution.rows["rightsizer_gpu_balance_finding"] if r.gpu
    }
    degraded = gpus["tgi-h100-light"].uuid
    assert rows == {g.uuid: (1.0 if g.uuid == degraded else 0.0) for g in gpus.values()}
    entry = contribution.api["gpus"][degraded]["rightsizing"]
    (finding,) = entry["findings"]
    assert finding["finding"] == "pcie_link_degraded"
    # H100 SXM: Gen5 x16; trained at Gen3: a quarter of the bandwidth to the host.
    assert (
        "Gen3 x16" in finding["evidence"]
        and "Gen5 x16" in finding["evidence"]
        and "25%" in finding["evidence"]
    )
    # A finding, not a verdict: the H100 stays the GPU for its work.
    assert entry["verdict"] == "rightsized" and entry["recommended"] == "H100-SXM-80GB"
    for g in gpus.values():
        if g.uuid != degraded:
            assert contribution.api["gpus"][g.uuid]["rightsizing"]["findings"] == []


def test_the_best_link_over_the_window_decides() -> None:
    link = LinkSeen(width=60.0, bucket_count=60)
    assert link.best() is None
    # Idle most of the hour at Gen1 (power saving), at Gen4 x16 while it worked: full speed seen.
    for t in range(0, 3600, 15):
        link.add(float(t), 4.0 if 1200 <= t < 1300 else 1.0, 16.0, 4.0, 16.0)
    assert link.best() == (4.0, 16.0) and link.maximum == (4.0, 16.0)
    # An hour later the full-speed moment has left the window: only Gen1 was seen since.
    for t in range(3600, 7200 + 1200, 15):
        link.add(float(t), 1.0, 16.0, 4.0, 16.0)
    assert link.best() == (1.0, 16.0)
    # No link values at all (a GPU that reports none): nothing is known.
    empty = LinkSeen(width=60.0, bucket_count=60)
    empty.add(0.0, None, None, None, None)
    assert empty.best() is None and empty.maximum is None


def test_nvml_link_values_through_the_double_flag_the_degraded_gpu(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    degraded, full = gpu_values(0), gpu_values(1, **{"pcie.gen": 5, "pcie.width": 16})
    nvml_double.set({"gpus": 2, **degraded, **full})
    uuids = [str(g[next(k for k in g if k.endswith(".uuid"))]) for g in (degraded, full)]
    config = exporter_args(tmp_path)
    Path(config[1]).write_text(
        Path(config[1]).read_text() + "rightsizing: {min_samples: 1, min_history_seconds: 0}\n"
    )
    with exporter(config, env=nvml_double.env()) as proc:
        samples = scrape_until(
            proc.url,
            lambda s: all(value(s, "rightsizer_gpu_balance_finding", UUID=u) is not None for u in uuids),
            "balance findings for both GPUs",
        )
        assert (
            value(samples, "rightsizer_gpu_balance_finding", UUID=uuids[0], finding="pcie_link_degraded") == 1
        )
        assert (
            value(samples, "rightsizer_gpu_balance_finding", UUID=uuids[1], finding="pcie_link_degraded") == 0
        )
        api = api_gpus(proc.url)
        (finding,) = api[uuids[0]]["rightsizing"]["findings"]
        assert (
            "Gen4 x8" in finding["evidence"]
            and "Gen5 x16" in finding["evidence"]
            and "25%" in finding["evidence"]
        )
        assert api[uuids[1]]["rightsizing"]["findings"] == []
