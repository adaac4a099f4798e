"""Host pressure (PSI) as evidence for ``data_loading``: /proc/pressure/memory and io read on the
host CPU poller's cadence, published as series, and a documented rule: a GPU sample with low
activity is starved when the host CPU is busy or the host's tasks are all stalled on memory or I/O
(``starved_host_stall_ratio``), still only when work waits for the GPU."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from report_history import exporter_history, prometheus_with_history

from rightsizing.hostcpu import HostCpuMonitor
from rightsizing.hostpsi import PsiReader, parse_psi

FIXTURE = Path(__file__).parent / "fixtures" / "proc"
SCENARIO = Path(__file__).parent / "scenarios" / "balance" / "psi_io_stall.yaml"
PRESSURE = "rightsizer_host_pressure_stalled_ratio"


def test_the_kernel_format_parses() -> None:
    text = (FIXTURE / "pressure" / "io").read_text()
    assert parse_psi(text) == {"some": 98211305.0, "full": 71002117.0}
    assert parse_psi("nothing here\n") is None
    assert parse_psi("some avg10=0.00 total=x\n") is None


def _advance(root: Path, resource: str, some: float, full: float) -> None:
    """Add stalled microseconds to a copy of the fixture file, as the kernel's counters grow."""
    path = root / "pressure" / resource
    totals = parse_psi(path.read_text())
    assert totals is not None
    path.write_text(
        f"some avg10=0.00 avg60=0.00 avg300=0.00 total={totals['some'] + some:.0f}\n"
        f"full avg10=0.00 avg60=0.00 avg300=0.00 total={totals['full'] + full:.0f}\n"
    )


def test_stall_shares_are_the_counters_change_over_the_interval(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE / "pressure", tmp_path / "pressure")
    psi = PsiReader(str(tmp_path))
    psi.poll(100.0)
    assert psi.available is True and psi.latest == {}  # one read: no interval yet
    # Over 2 s: I/O stalled some task 1.2 s and all of them 0.5 s; memory 0.1 s and none.
    _advance(tmp_path, "io", 1_200_000, 500_000)
    _advance(tmp_path, "memory", 100_000, 0)
    psi.poll(102.0)
    assert psi.latest == pytest.approx(
        {("io", "some"): 0.6, ("io", "full"): 0.25, ("memory", "some"): 0.05, ("memory", "full"): 0.0}
    )
    assert psi.full_stall() == pytest.approx(0.25)


def test_a_missing_file_is_unknown_and_a_kernel_without_psi_publishes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "pressure").mkdir()
    shutil.copy(FIXTURE / "pressure" / "io", tmp_path / "pressure" / "io")
    psi = PsiReader(str(tmp_path))
    psi.poll(1.0)
    _advance(tmp_path, "io", 0, 300_000)
    psi.poll(2.0)
    assert set(psi.latest) == {("io", "some"), ("io", "full")}  # memory unknown: absent, not 0
    assert [r.getMessage() for r in caplog.records] == ["host pressure (PSI) partly unknown"]  # once
    caplog.clear()
    no_psi = tmp_path / "old-kernel"
    no_psi.mkdir()
    with caplog.at_level(logging.INFO, logger="rightsizer.rightsizing"):
        monitor = HostCpuMonitor(str(no_psi), 1.0)
        for _ in range(3):
            monitor.poll()
    assert monitor.psi.available is False and monitor.psi.latest == {}
    lines = [r for r in caplog.records if "PSI" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO


def _judged(path: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, str], object]:
    fleet = exporter_history(path, 3600.0, 15.0, {}, None)
    names = {g.uuid: g.name for g in fleet.source.scenario.gpus}
    reading = fleet.source.reading_at(fleet.last)
    contribution = fleet.live.contribute(reading, reading.gpus)
    bottlenecks = {names[u]: a.bottlenecks for u, a in fleet.live.assessments.items()}
    summaries = {names[u]: a.summary for u, a in fleet.live.assessments.items()}
    return bottlenecks, summaries, contribution


def test_io_stall_starves_the_hot_trainer_and_not_the_quiet_gpu(tmp_path: Path) -> None:
    with_psi, _, contribution = _judged(SCENARIO)
    # Gaps 30 % of the time while the host is stalled on I/O 30 % (>= 10 %): data loading; the CPU
    # (~25 % busy) is no bottleneck; the quiet L4 has no demand, so PSI alone flags nothing.
    assert "data_loading" in with_psi["io-starved-trainer"]
    assert "host_cpu" not in with_psi["io-starved-trainer"]
    assert "data_loading" not in with_psi["quiet-l4"]
    rows = {
        dict(r.labels)["resource"] + "/" + dict(r.labels)["kind"]: r.value
        for r in contribution.rows[PRESSURE]
    }
    assert rows == {"io/some": 0.5, "io/full": 0.3, "memory/some": 0.02, "memory/full": 0.0}
    # The same node without PSI (a kernel without it): the CPU alone does not explain the gaps.
    data = yaml.safe_load(SCENARIO.read_text())
    del data["host_pressure"]
    plain = tmp_path / "no_psi.yaml"
    plain.write_text(yaml.safe_dump(data))
    without, _, contribution = _judged(plain)
    assert "data_loading" not in without["io-starved-trainer"]
    assert contribution.rows[PRESSURE] == ()


def test_the_report_reads_the_same_pressure_and_agrees() -> None:
    with prometheus_with_history([SCENARIO], 3600.0, 15.0) as (url, fleets):
        (fleet,) = fleets
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
               "--window", "1h", "--at", f"{fleet.last + 1:.3f}", "--format", "json"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    names = {g.uuid: g.name for g in fleet.source.scenario.gpus}
    report = {names[g["uuid"]]: g["bottlenecks"] for g in json.loads(out.stdout)["gpus"]}
    live = {names[u]: list(a.bottlenecks) for u, a in fleet.live.assessments.items()}
    assert report == live and "data_loading" in report["io-starved-trainer"]
