"""``rightsizer report`` against a real Prometheus holding an hour of the exporter's history.

The history is what the exporter itself renders for a simulated fleet (the scenario suite's mixed
inference fleet), one exposition every 15 s over the past hour, written as OpenMetrics with
timestamps and turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics`` before
Prometheus starts (and sent to VictoriaMetrics's import API: every test runs on both engines).
The report must then reach the same verdicts as the live engine and as the
scenario file says, per GPU and per workload, sorted by money.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import report_history
from servers import free_port

from exporter.sources.simulated.source import SimulatedSource

SCENARIO = Path(__file__).parent / "scenarios" / "mixed_inference_fleet.yaml"
STEP = 15.0
HOUR = 3600.0


@contextlib.contextmanager
def prometheus_with_history(engine: str = "prometheus") -> Iterator[tuple[str, float, SimulatedSource]]:
    with report_history.prometheus_with_history([SCENARIO], HOUR, STEP, engine=engine) as (url, fleets):
        yield url, fleets[0].last, fleets[0].source


@pytest.fixture(scope="module", params=report_history.ENGINES)
def history(request: pytest.FixtureRequest) -> Iterator[tuple[str, float, SimulatedSource]]:
    """The same hour in Prometheus and in VictoriaMetrics (its import API)."""
    with prometheus_with_history(request.param) as h:
        yield h


def report(url: str, at: float, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "rightsizing.command.cli",
        "report",
        "--prometheus-url",
        url,
        "--window",
        "1h",
    ]
    return subprocess.run([*cmd, "--at", f"{at + 1:.3f}", *args], capture_output=True, text=True, timeout=180)


def test_report_reaches_the_scenario_verdicts_from_prometheus_history(history) -> None:
    url, at, source = history
    out = report(url, at, "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_uuid = {g["uuid"]: g for g in data["gpus"]}
    assert len(by_uuid) == len(source.scenario.gpus)
    for sim in source.scenario.gpus:
        got = by_uuid[sim.uuid]
        assert sim.expect is not None
        assert (got["verdict"], got["bottlenecks"], got["recommended"]) == (
            sim.expect.verdict, list(sim.expect.bottlenecks), sim.expect.recommended,
        ), f"{sim.name}: {got['reason']}"  # fmt: skip
        assert got["samples"] >= HOUR / STEP - 2 and HOUR - 2 * STEP <= got["history_seconds"] <= HOUR + STEP
        if sim.pod is not None:
            assert got["pod"] == sim.pod.pod and got["namespace"] == sim.pod.namespace
    savings = [g["hourly_savings_dollars"] for g in data["gpus"]]
    assert savings == sorted(savings, reverse=True), "sorted by money"
    totals = data["totals"]
    assert totals["hourly_savings_dollars"] == pytest.approx(sum(s for s in savings if s > 0), abs=1e-3)
    assert totals["hourly_upgrade_cost_dollars"] > 0  # the full L40S needs a bigger GPU
    # Per workload: the two summarizer replicas (pods summarizer-0 and summarizer-1) are one workload.
    workloads = {(w["namespace"], w["workload"]): w for w in data["workloads"]}
    summarizer = workloads[("llm", "summarizer")]
    assert summarizer["gpus"] == 2 and summarizer["verdicts"] == "2 overprovisioned"
    assert summarizer["hourly_savings_dollars"] == pytest.approx(
        sum(g["hourly_savings_dollars"] for g in data["gpus"] if (g["pod"] or "").startswith("summarizer"))
    )


def test_report_as_a_table_and_as_csv(history) -> None:
    url, at, source = history
    table = report(url, at)
    assert table.returncode == 0, table.stderr
    assert "Right-sizing saves" in table.stdout and "overprovisioned" in table.stdout
    assert "llm/summarizer-0" in table.stdout and "Reasons:" in table.stdout
    assert "\r" not in table.stderr  # no progress line when stderr is not a terminal
    rows = list(csv.DictReader(io.StringIO(report(url, at, "--format", "csv").stdout)))
    assert len(rows) == len(source.scenario.gpus) and {
        "verdict",
        "recommended",
        "hourly_savings_dollars",
    } <= set(rows[0])
    wl = list(csv.DictReader(io.StringIO(report(url, at, "--format", "csv", "--view", "workloads").stdout)))
    assert {r["workload"] for r in wl} >= {"summarizer", "chat-13b", "chat-small", "pretrain", "(no pod)"}


def test_progress_is_shown_on_a_terminal(history) -> None:
    url, at, _ = history
    controller, terminal = pty.openpty()
    try:
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
               "--window", "1h", "--at", f"{at + 1:.3f}", "--format", "json"]  # fmt: skip
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=terminal, timeout=180)
        os.close(terminal)
        terminal = -1
        seen = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(controller, 65536):
                seen += chunk
    finally:
        os.close(controller)
        if terminal >= 0:
            os.close(terminal)
    assert proc.returncode == 0
    assert b"querying Prometheus [1/" in seen and b"\r" in seen
    json.loads(proc.stdout)  # stdout stays clean JSON


def test_unreachable_prometheus_is_one_clear_line() -> None:
    port = free_port()  # nothing listens there
    out = subprocess.run(
        [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", f"http://127.0.0.1:{port}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert (
        out.stderr.strip()
        == f"rightsizer: cannot reach Prometheus at http://127.0.0.1:{port}: Connection refused"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "a week"], "--window 'a week' is not a duration"),
        (["--window", "0s"], "--window '0s' must be longer than 0 (examples: 7d, 24h, 90m, 1h30m)"),
        (["--idle-after", "0m"], "--idle-after '0m' must be longer than 0"),
        (["--at", "yesterday"], "--at 'yesterday' is neither Unix seconds nor an RFC 3339 time"),
        (["--header", "no-colon"], "--header 'no-colon' must be NAME:VALUE"),
    ],
)
def test_bad_arguments_are_one_clear_line(args: list[str], message: str) -> None:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", "http://127.0.0.1:1"]
    out = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_not_a_prometheus_and_no_gpu_data(history) -> None:
    url, at, _ = history
    # Before the history, and years after it: no series, said in words (not "the last 604800s").
    empty = report(url, at - 10 * HOUR)
    assert empty.returncode == 2 and "no GPU series (DCGM_FI_DEV_FB_USED)" in empty.stderr
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url]
    later = subprocess.run([*cmd, "--at", "2030-01-01T00:00:00Z"], capture_output=True, text=True, timeout=60)
    assert later.returncode == 2 and later.stderr == (
        "rightsizer: no GPU series (DCGM_FI_DEV_FB_USED) in Prometheus over the 7 d to 2030-01-01 "
        "00:00:00 UTC: is it scraping rightsizer-exporter?\n"
    )
    wrong = report(url + "/not-prometheus", at)
    # Prometheus answers an unknown path 404, VictoriaMetrics 400: either way one line naming it.
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert re.fullmatch(
        r"rightsizer: \S+/not-prometheus is not the Prometheus query API: /api/v1/query answered 40[04] .*\n",
        wrong.stderr,
    )


def test_idle_from_the_first_hour_and_the_history_found_is_said(history) -> None:
    """With an hour of history and the default week-long window, the idle A10G is idle (after the
    exporter's idle_after_seconds, not after the window) and the header says how much it found."""
    url, at, _ = history
    table = report(url, at, "--window", "7d")
    assert table.returncode == 0, table.stderr
    # An exposition every 15 s over the past hour: 3,585 s from the first to the last, to the second.
    said = "History found: 59 min 45 s of the 7 d window (less than the window"
    assert said in table.stdout, table.stdout[:600]
    data = json.loads(report(url, at, "--window", "7d", "--format", "json").stdout)
    idle = [g for g in data["gpus"] if g["model"] == "NVIDIA A10G"]
    assert [g["verdict"] for g in idle] == ["idle"], idle
    assert data["totals"]["history_found_seconds"] == HOUR - STEP
