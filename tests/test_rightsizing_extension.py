"""The right-sizing extension's plumbing: host CPU from a procfs tree, queue links, windows per GPU
and pod, forgetting, repeated readings, the rightsizing config section."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.api import gpus_json
from exporter.config import load_config
from exporter.rightsizing_live.extension import RightsizingExtension
from rightsizer_core.settings import ConfigError
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample, PodRef, Snapshot
from rightsizer_core.workloads import workload_of
from rightsizing.catalog import load_catalog
from rightsizing.hostcpu import HostCpuMonitor, ProcStatError, busy_ratio, read_cpu_times
from rightsizing.links import QueueReading, linked
from rightsizing.settings import QueueLink, RightsizingSettings

GIB = 2**30
IDENT = GpuIdentity(0, "GPU-aaaa", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", 0, "550", 80 * GIB)
POD = PodRef("chat-7d9f8b6c4-x2k9q", "prod", "vllm")


def sample(
    pod: PodRef | None = POD, up: bool = True, activity: float = 0.3, ident: GpuIdentity = IDENT
) -> GpuSample:
    fields = {"sm_active_ratio": activity, "gpu_utilization_ratio": min(1.0, activity + 0.3),
              "memory_used_bytes": 20.0 * GIB, "dram_active_ratio": 0.1}  # fmt: skip
    return GpuSample(ident, up, fields if up else {}, pod=pod)


def stat(root: Path, user: int, idle: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    (root / "stat").write_text(f"cpu  {user} 0 100 {idle} 50 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n")


def test_host_cpu_busy_from_proc_stat(tmp_path: Path) -> None:
    stat(tmp_path, 1000, 8000)
    assert read_cpu_times(str(tmp_path)) == (1100.0, 9150.0)
    monitor = HostCpuMonitor(str(tmp_path), 1.0)
    monitor.poll()
    assert monitor.latest is None  # one read is no interval yet
    stat(tmp_path, 1900, 8100)  # +900 busy, +100 idle
    monitor.poll()
    assert monitor.latest == pytest.approx(0.9)
    assert busy_ratio((10.0, 100.0), (10.0, 100.0)) is None  # counters did not move
    (tmp_path / "stat").unlink()
    monitor.poll()
    assert monitor.latest is None and monitor.error is not None and "cannot read" in monitor.error
    (tmp_path / "stat").write_text("intr 1 2 3\n")
    with pytest.raises(ProcStatError, match="not the aggregate 'cpu' line"):
        read_cpu_times(str(tmp_path))
    (tmp_path / "stat").write_text("cpu  a b c d\n")
    with pytest.raises(ProcStatError, match="not a number"):
        read_cpu_times(str(tmp_path))


async def test_without_a_simulator_host_cpu_comes_from_the_procfs_root(tmp_path: Path) -> None:
    stat(tmp_path, 1000, 8000)
    settings = RightsizingSettings(procfs_root=str(tmp_path))
    ext = RightsizingExtension(settings, load_catalog(), 1.0)
    await ext.start()
    try:
        stat(tmp_path, 1500, 8500)
        assert ext.host_cpu is not None
        ext.host_cpu.poll()
        c = ext.contribute(GpuReading(1000.0, (sample(),), CollectorStatus("nvml", True, 0.0)), (sample(),))
        (row,) = c.rows["rightsizer_host_cpu_busy_ratio"]
        assert row.value == pytest.approx(0.5) and row.gpu is None
    finally:
        await ext.stop()


@pytest.mark.parametrize(
    ("pod", "workload"),
    [("chat-7d9f8b6c4-x2k9q", "chat"), ("trainer-0", "trainer"), ("log-shipper-x2k9q", "log-shipper"),
     ("notebook", "notebook"), ("chat-8b-7b8c9-pqrst", "chat-8b")],
)  # fmt: skip
def test_workload_of_a_pod(pod: str, workload: str) -> None:
    assert workload_of(pod) == workload


def test_queue_links() -> None:
    q_labels = QueueReading("chat", 3, {"namespace": "prod", "workload": "chat"})
    q_other = QueueReading("embed", 3, {"namespace": "prod", "workload": "embed"})
    q_source = QueueReading("sim", 3, {}, ("GPU-aaaa",))
    q_config = QueueReading("jobs", 3, {})
    queues = [q_labels, q_other, q_source, q_config]
    assert linked(sample(), queues, []) == ["chat", "sim"]
    assert linked(sample(pod=None), queues, []) == ["sim"]
    assert linked(sample(), queues, [QueueLink(queue="jobs", gpus=["0"])]) == ["chat", "sim", "jobs"]
    assert linked(sample(), queues, [QueueLink(queue="jobs", gpus=["GPU-aaaa"])])[-1] == "jobs"
    assert "jobs" in linked(sample(), queues, [QueueLink(queue="jobs", namespace="prod")])
    assert "jobs" not in linked(sample(), queues, [QueueLink(queue="jobs", namespace="dev")])
    assert "jobs" in linked(sample(), queues, [QueueLink(queue="jobs", workload="chat")])


def reading(t: float, *gpus: GpuSample) -> GpuReading:
    return GpuReading(t, gpus, CollectorStatus("test", True, 0.0))


def test_windows_run_on_sample_time_restart_with_a_new_pod_and_are_forgotten() -> None:
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source=object())
    t0 = 1_000_000.0
    for k in range(120):  # two minutes of simulated time, fed as fast as we like
        ext.contribute(reading(t0 + k, sample()), (sample(),))
    assert ext.trackers["GPU-aaaa"].window.samples == 120
    # The same timestamp again (frozen simulated time) adds nothing.
    ext.contribute(reading(t0 + 119, sample()), (sample(),))
    assert ext.trackers["GPU-aaaa"].window.samples == 120
    # A GPU that is down this cycle is not fed, and keeps its window.
    down = sample(up=False)
    ext.contribute(reading(t0 + 120, down), (down,))
    assert ext.trackers["GPU-aaaa"].window.samples == 120
    # Attribution lost for a cycle keeps the window; another pod starts a new one.
    ext.contribute(reading(t0 + 121, sample(pod=None)), (sample(pod=None),))
    assert ext.trackers["GPU-aaaa"].window.samples == 121
    other = sample(pod=PodRef("embed-5f6c7d8b9-q2w4z", "prod", "server"))
    c = ext.contribute(reading(t0 + 122, other), (other,))
    assert ext.trackers["GPU-aaaa"].window.samples == 1
    (samples_row,) = c.rows["rightsizer_gpu_window_samples"]
    assert samples_row.value == 1 and samples_row.gpu is other
    # A GPU gone from the readings for longer than the window is forgotten.
    ident2 = dataclasses.replace(IDENT, index=1, uuid="GPU-bbbb")
    second = sample(ident=ident2)
    ext.contribute(reading(t0 + 123, second), (second,))
    assert "GPU-aaaa" in ext.trackers  # gone for a second only
    ext.contribute(reading(t0 + 123 + 3601, second), (second,))
    assert "GPU-aaaa" not in ext.trackers and "GPU-bbbb" in ext.trackers


def test_scores_reach_the_gpu_api_and_respect_the_score_interval() -> None:
    settings = RightsizingSettings(min_samples=10, min_history_seconds=60, score_interval_seconds=30)
    ext = RightsizingExtension(settings, load_catalog(), 1.0, source=object())
    t0 = 2_000_000.0
    first = None
    for k in range(100):
        c = ext.contribute(reading(t0 + k, sample()), (sample(),))
        first = first or ext.assessments["GPU-aaaa"]
        if k < 30:
            assert ext.assessments["GPU-aaaa"] is first  # scored at t0, next at t0 + 30
    assert ext.assessments["GPU-aaaa"].verdict != "insufficient_data"
    assert first is not None and first.verdict == "insufficient_data"
    snap = Snapshot(t0 + 99, "node", (sample(),), (), c.rows, c.api)
    (gpu,) = gpus_json(snap)["gpus"]
    rs = gpu["rightsizing"]
    assert rs["verdict"] == ext.assessments["GPU-aaaa"].verdict and rs["reason"]
    # Evidence and verdict both come from the latest scoring, at t0 + 90 (91 samples then).
    assert rs["window"]["samples"] == 91 and rs["memory_peak_bytes"] == 20 * GIB
    assert c.api["rightsizing"]["verdicts"][rs["verdict"]] == 1


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{window_seconds: 10}", "rightsizing.window_seconds: must be at least 60"),
        ("{min_history_seconds: 7200}", "min_history_seconds must not exceed window_seconds"),
        ("{target: 1}", "rightsizing: unknown key 'target'"),
        ("{queue_links: [{queue: chat}]}", "needs gpus, namespace or workload"),
        ("{bottlenecks: {percentile: 2}}", "rightsizing.bottlenecks.percentile: must be at most 1.0"),
    ],
)
def test_bad_rightsizing_config_is_named(tmp_path: Path, section: str, message: str) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(f"rightsizing: {section}\n")
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(str(path), {}, environ={})


def test_rightsizing_settings_from_config_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text("rightsizing:\n  window_seconds: 7200\n  target_activity_ratio: 0.6\n")
    cfg = load_config(str(path), {}, environ={"RIGHTSIZER_RIGHTSIZING_MEMORY_MARGIN_RATIO": "0.25"})
    assert cfg.rightsizing.window_seconds == 7200 and cfg.rightsizing.target_activity_ratio == 0.6
    assert cfg.rightsizing.memory_margin_ratio == 0.25


def test_down_gpus_and_mig_parents_get_no_verdict() -> None:
    settings = RightsizingSettings(min_samples=1, min_history_seconds=0)
    ext = RightsizingExtension(settings, load_catalog(), 1.0)
    up = (sample(),)
    for t in range(100):
        ext.feed(1000.0 + t, up)
    ext.score(up)
    assert IDENT.key in ext.assessments
    down = (sample(up=False),)
    ext.score(down)  # lost or hung: no verdict published while it does not answer
    assert IDENT.key not in ext.assessments
    mig = dataclasses.replace(IDENT, uuid="MIG-1111", mig_profile="3g.40gb", mig_instance_id=1,
                              parent_uuid=IDENT.uuid)  # fmt: skip
    with_instance = (sample(), sample(ident=mig))
    ext.feed(1100.0, with_instance)
    ext.score(with_instance)  # the GPU in MIG mode is judged through its instances only
    assert IDENT.key not in ext.assessments and "MIG-1111" in ext.assessments
