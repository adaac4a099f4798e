"""The simulated fleet: determinism, coherent physics, workload signatures, time, history, end to end."""

from __future__ import annotations

import asyncio
import json
import re
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import exporter, http_get

from exporter.sources.simulated.physics import GPM_FIELDS
from exporter.sources.simulated.scenario import Scenario, build_scenario
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from exporter.sources.simulated.workloads import KINDS
from rightsizing.catalog import load_catalog

START = "2025-06-01T12:00:00Z"
T0 = 1748779200.0  # START as Unix time


def _scenario(gpus: list[dict[str, Any]], seed: int = 3, **top: Any) -> Scenario:
    return build_scenario("test", {"seed": seed, "start": START, **top, "gpus": gpus}, load_catalog())


def fields(src: SimulatedSource, t: float, i: int = 0) -> dict[str, float]:
    return dict(src.reading_at(t).gpus[i].fields)


# --- determinism -----------------------------------------------------------------------------------
def test_same_seed_same_values_in_any_order_other_seed_differs() -> None:
    gpus = [{"model": "H100-SXM-80GB", "workload": {"kind": k}} for k in KINDS if k != "idle"]
    times = [T0 - 1800.5, T0 + 3.2, T0 + 7200.0, T0 - 10.0]
    a, b = SimulatedSource(_scenario(gpus)), SimulatedSource(_scenario(gpus))
    first = [a.reading_at(t).gpus for t in times]
    second = [b.reading_at(t).gpus for t in reversed(times)][::-1]
    assert first == second  # energy integrals included, asked in the opposite order
    assert a.host_cpu_busy_ratio(T0 + 3) == b.host_cpu_busy_ratio(T0 + 3)
    assert a.queue_samples(T0 + 3) == b.queue_samples(T0 + 3)
    other = SimulatedSource(_scenario(gpus, seed=4))
    assert [g.fields for g in other.reading_at(T0 + 3.2).gpus] != [g.fields for g in first[1]]


# --- coherence ---------------------------------------------------------------------------------------
MODELS = [g.key for g in load_catalog().all()]


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(KINDS),
    model=st.sampled_from(MODELS),
    offset=st.floats(-3000, 20000),
    seed=st.integers(0, 99),
)
def test_every_workload_is_physically_coherent(kind: str, model: str, offset: float, seed: int) -> None:
    memory = {"memory_fraction": 0.5} if kind not in ("idle", "memory_saturated") else {}
    src = SimulatedSource(_scenario([{"model": model, "workload": {"kind": kind, **memory}}], seed))
    spec = src.scenario.gpus[0].spec
    sample = src.reading_at(T0 + offset).gpus[0]
    f = sample.fields
    # NVML's memory.total is the usable size (ECC and the driver's reserve off), as the catalog says.
    total = spec.usable_memory
    assert total == spec.usable_memory_bytes <= spec.memory_bytes
    assert f["memory_used_bytes"] + f["memory_free_bytes"] + f["memory_reserved_bytes"] == total
    assert 0 <= f["memory_used_bytes"] <= total and f["memory_total_bytes"] == total
    assert f["compute_processes_memory_bytes"] <= f["memory_used_bytes"]
    for name, value in f.items():
        if name.endswith("_ratio"):
            assert 0.0 <= value <= 1.0, name
    assert 0.0 < f["power_usage_watts"] <= f["power_limit_watts"] == spec.tdp_watts
    assert 200e6 <= f["sm_clock_hz"] <= f["sm_clock_max_hz"] == spec.sm_clock_max_mhz * 1e6
    assert 400e6 <= f["memory_clock_hz"] <= f["memory_clock_max_hz"]
    assert 20 <= f["gpu_temperature_celsius"] <= 27 + 55 * f["power_usage_watts"] / spec.tdp_watts + 1.5
    assert f["energy_joules"] > 0 and f["pcie_rx_bytes_per_second"] <= spec.pcie_bytes_per_second
    if spec.gpm_supported:
        assert f["sm_active_ratio"] <= f["gr_engine_active_ratio"]
        assert (
            f["sm_occupancy_ratio"] <= f["sm_active_ratio"]
            and f["tensor_active_ratio"] <= f["sm_active_ratio"]
        )
    else:
        assert not set(GPM_FIELDS) & set(f) and set(GPM_FIELDS) <= sample.unsupported
    assert not set(f) & sample.unsupported
    if f["gpu_utilization_ratio"] == 0:
        assert sample.clock_event_reasons is not None and sample.clock_event_reasons & 0x1  # gpu_idle
    if kind == "memory_saturated":
        assert f["memory_used_bytes"] >= 0.95 * total
    if kind == "idle":
        assert f["gpu_utilization_ratio"] == 0 and f["power_usage_watts"] < 0.15 * spec.tdp_watts + 9


def test_energy_counter_integrates_power_and_never_decreases() -> None:
    src = SimulatedSource(_scenario([{"model": "H100-SXM-80GB", "workload": {"kind": "training"}}]))
    ts = [T0 - 3000 + 7.3 * k for k in range(1500)]
    readings = [fields(src, t) for t in ts]
    energy = [r["energy_joules"] for r in readings]
    assert all(b > a for a, b in pairwise(energy))
    mean_power = sum(r["power_usage_watts"] for r in readings) / len(readings)
    rate = (energy[-1] - energy[0]) / (ts[-1] - ts[0])
    assert rate == pytest.approx(mean_power, rel=0.05)
    assert fields(src, T0 - 3000 + 7.3 * 3)["energy_joules"] == energy[3]  # asked again, out of order


def test_workload_signatures() -> None:
    src = SimulatedSource(
        _scenario(
            [
                {"model": "H100-SXM-80GB", "workload": {"kind": "launch_overhead"}},
                {"model": "A100-SXM-80GB", "workload": {"kind": "data_starved"}},
                {"model": "H200", "workload": {"kind": "memory_bound"}},
                {
                    "model": "L4",
                    "workload": {"kind": "bursty_inference", "period_seconds": 100, "burst_seconds": 40},
                },
                {"model": "T4", "workload": {"kind": "training", "activity": 1, "tensor": 1, "dram": 1}},
                {"model": "L40S", "workload": {"kind": "steady_inference", "start_after_seconds": 600}},
                {"model": "L4", "workload": {"kind": "memory_saturated", "queue_growth_per_hour": 600}},
            ]
        )
    )
    samples = [src.reading_at(T0 + k).gpus for k in range(0, 400)]
    col = [[g.fields for g in row] for row in zip(*samples, strict=True)]
    launch, starved, bound, bursty, hot, late, full = col
    assert min(f["gpu_utilization_ratio"] for f in launch) >= 0.8
    assert (
        max(f["sm_active_ratio"] for f in launch) <= 0.2
        and max(f["sm_occupancy_ratio"] for f in launch) < 0.1
    )
    link = load_catalog().lookup("A100-SXM-80GB").pcie_bytes_per_second  # type: ignore[union-attr]
    assert min(f["pcie_rx_bytes_per_second"] for f in starved) >= 0.8 * link
    gaps = sum(f["gpu_utilization_ratio"] < 0.05 for f in starved) / len(starved)
    assert 0.2 <= gaps <= 0.4
    assert min(f["dram_active_ratio"] - f["sm_active_ratio"] for f in bound) > 0.2
    utils = [f["gpu_utilization_ratio"] for f in bursty]
    assert max(utils) > 0.7 and min(utils) < 0.1  # bursts and lulls
    assert all(s.clock_event_reasons & 0x4 for s in (row[4] for row in samples))  # sw_power_cap
    assert max(f["sm_clock_hz"] for f in hot) < load_catalog().lookup("T4").sm_clock_max_mhz * 1e6  # type: ignore[union-attr]
    assert late[0]["compute_processes"] == 0 and late[0]["memory_used_bytes"] == 0
    assert fields(src, T0 + 601, 5)["compute_processes"] == 1
    assert min(f["memory_used_bytes"] / f["memory_total_bytes"] for f in full) >= 0.95
    depth = [src.queue_samples(T0 + h * 3600) for h in (0, 1, 2)]
    assert depth == [[], [], []]  # no queue declared: the workload's queue is not published
    assert src.host_cpu_busy_ratio(T0) > 0.15


def test_queue_grows_and_host_cpu_follows_workloads() -> None:
    sc = _scenario(
        [
            {
                "model": "L4",
                "workload": {"kind": "memory_saturated", "queue_growth_per_hour": 600},
                "queue": {"name": "chat"},
            },
            {
                "model": "L4",
                "workload": {"kind": "bursty_inference", "period_seconds": 100, "burst_seconds": 40},
                "queue": {"name": "burst"},
            },
        ],
        host_cpu_busy_ratio=0.5,
    )
    src = SimulatedSource(sc)
    chat = [src.queue_samples(T0 - 3600 + 600 * k)[0].depth for k in range(7)]
    assert chat[-1] - chat[0] >= 500 and chat == sorted(chat)
    burst = [src.queue_samples(T0 + k)[1].depth for k in range(100)]
    assert max(burst) >= 40 and min(burst) == 0
    cpu = [src.host_cpu_busy_ratio(T0 + k) for k in range(50)]
    assert all(0.5 <= c <= 1 for c in cpu) and len(set(cpu)) > 1


def test_mig_instances_report_their_own_memory_ratios_and_pods() -> None:
    src = SimulatedSource(load_scenario("mig"))
    gpus = src.reading_at(src.now()).gpus
    parent, instances = gpus[0], gpus[1:5]
    assert parent.identity.mig_profile is None and "gpu_utilization_ratio" in parent.unsupported
    assert "gpu_utilization_ratio" not in parent.fields and parent.fields["power_usage_watts"] > 0
    assert [i.identity.mig_profile for i in instances] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [i.identity.mig_instance_id for i in instances] == [1, 2, 3, 4]
    for inst in instances:
        ident, f = inst.identity, inst.fields
        assert ident.parent_uuid == parent.identity.uuid and ident.uuid.startswith("MIG-")
        assert ident.index == parent.identity.index and ident.pci_bus_id == parent.identity.pci_bus_id
        assert f["memory_used_bytes"] + f["memory_free_bytes"] == f["memory_total_bytes"]
        assert f["memory_total_bytes"] == ident.memory_total_bytes
        # What nvidia-smi mig -lgip reports for the profile, not its nominal size.
        profile = src.scenario.gpus[0].spec.mig_profile(ident.mig_profile or "")
        assert profile is not None and f["memory_total_bytes"] == profile.usable_memory_bytes
        assert f["sm_occupancy_ratio"] <= f["sm_active_ratio"] <= f["gr_engine_active_ratio"] <= 1
        assert "gpu_utilization_ratio" not in f and "power_usage_watts" in inst.unsupported
        assert inst.pod is not None
    assert parent.fields["memory_used_bytes"] == sum(i.fields["memory_used_bytes"] for i in instances)
    weighted = sum(i.fields["sm_active_ratio"] * int(i.identity.mig_profile[0]) / 7 for i in instances)  # type: ignore[index]
    assert parent.fields["sm_active_ratio"] == pytest.approx(weighted, abs=1e-3)
    assert instances[2].fields["sm_active_ratio"] == 0 and instances[3].fields["sm_active_ratio"] > 0.5
    queues = {q.name: q.gpus for q in src.queue_samples()}
    assert queues == {
        "chat-13b-requests": (instances[0].identity.uuid,),
        "embed-requests": (instances[1].identity.uuid,),
    }


def test_injected_xids_set_the_last_xid_and_are_delivered_as_events() -> None:
    src = SimulatedSource(
        _scenario(
            [
                {"model": "L4", "workload": {"kind": "idle"}, "xids": [{"after_seconds": 120, "xid": 79}]},
                {"model": "T4", "workload": {"kind": "idle"}, "xids": [{"after_seconds": -60, "xid": 48}]},
            ]
        )
    )
    l4, t4 = (g.identity.uuid for g in src.reading_at(T0).gpus)
    assert [fields(src, T0 + dt, 0)["xid_last"] for dt in (-61, 0, 119, 120, 500)] == [0, 0, 0, 79, 79]
    assert fields(src, T0 - 61, 1)["xid_last"] == 0 and fields(src, T0, 1)["xid_last"] == 48
    events = src.xid_events(T0 - 3600, T0 + 3600)
    assert [(e.timestamp - T0, e.gpu_uuid, e.xid) for e in events] == [(-60, t4, 48), (120, l4, 79)]
    assert src.xid_events(T0 + 120, T0 + 3600) == []  # since is exclusive, until inclusive
    assert [e.xid for e in src.xid_events(T0, T0 + 120)] == [79]


# --- time ---------------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_speed_factor_and_frozen_clock() -> None:
    clock = FakeClock()
    fast = SimulatedSource(
        _scenario([{"model": "L4", "workload": {"kind": "idle"}}], speed=60), monotonic=clock
    )
    assert fast.now() == T0
    clock.now += 10
    assert fast.now() == pytest.approx(T0 + 600)
    assert asyncio.run(fast.collect()).timestamp == pytest.approx(T0 + 600)
    frozen = SimulatedSource(
        _scenario([{"model": "L4", "workload": {"kind": "training", "memory_gib": 10}}], frozen=True),
        monotonic=clock,
    )
    one = asyncio.run(frozen.collect())
    clock.now += 100
    two = asyncio.run(frozen.collect())
    assert one.timestamp == two.timestamp == T0 and one.gpus == two.gpus
    unset = SimulatedSource(
        _scenario([{"model": "L4", "workload": {"kind": "idle"}}], start=None), wall=lambda: 2e9
    )
    assert unset.now() == pytest.approx(2e9)


def test_history_replays_the_past_before_now() -> None:
    clock = FakeClock()
    sc = _scenario(
        [
            {"model": "L4", "workload": {"kind": "steady_inference"}},
            {"model": "T4", "history_seconds": 100, "workload": {"kind": "steady_inference"}},
        ],
        history_seconds=600,
        speed=2,
    )
    src = SimulatedSource(sc, monotonic=clock)
    clock.now += 50  # now = start + 100
    past = list(src.history(300, 10))
    stamps = [r.timestamp for r in past]
    assert stamps == [T0 + 100 - 10 * k for k in range(30, 0, -1)]
    assert [len(r.gpus) for r in past] == [1] * 10 + [2] * 20  # the T4's past starts 100 s before start
    assert past[5].gpus[0] == src.reading_at(stamps[5]).gpus[0]
    assert len(list(src.history(10_000, 60))) == 11  # never beyond the scenario's history_seconds
    with pytest.raises(ValueError):
        next(src.history(10, 0))


# --- collect cost and end to end -----------------------------------------------------------------------
def test_collect_is_one_reading_of_every_gpu() -> None:
    src = SimulatedSource(load_scenario("default"))
    reading = asyncio.run(src.collect())
    assert len(reading.gpus) == 8 and reading.status.success and reading.status.name == "simulated"
    assert all(g.up and g.fields for g in reading.gpus)


DURATION = re.compile(r"^(rightsizer_collector_duration_seconds\{[^}]*\}) .*$", re.M)


def test_exporter_serves_the_default_fleet_and_golden_reproducibly() -> None:
    with exporter(["--simulate"]) as p:
        status, _, body = http_get(p.url + "/metrics")
        api = json.loads(http_get(p.url + "/api/v1/gpus")[2])
    assert status == 200
    temps = re.findall(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)"', body.decode(), re.M)
    assert sorted(temps, key=int) == [str(i) for i in range(8)]
    assert len(api["gpus"]) == 8 and {g["model"] for g in api["gpus"]} >= {"NVIDIA L4", "NVIDIA H200"}
    runs = []
    for _ in range(2):
        with exporter(["--simulate", "golden", "--hostname", "golden-node"]) as p:
            runs.append(DURATION.sub(r"\1 <duration>", http_get(p.url + "/metrics")[2].decode()))
    assert runs[0] == runs[1] and "DCGM_FI_PROF_SM_ACTIVE{" in runs[0]
