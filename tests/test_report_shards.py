"""``rightsizer report`` split by shard: the same report from a fleet queried whole or in groups of
exporters, on a real Prometheus and a real VictoriaMetrics holding the same hour, with every
answer counted by a recording proxy between the report and the engine.

The fleet is several simulated scenarios, each its own exporter (``instance``): MIG instances,
queues linked to GPUs, a multi-GPU workload, a starved node (host CPU joined on ``instance``), so
a shard boundary in the wrong place would change a verdict, a link or a cost.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from query_recorder import Recorder, recording
from report_history import ENGINES, Fleet, engines_with_history

from exporter.sources.simulated.scenario import SCENARIO_DIR
from rightsizing.command.report import QUERIES
from rightsizing.command.report_shards import SIZED_BY

HERE = Path(__file__).parent / "scenarios"
SCENARIOS = [
    HERE / "independent_mig_sizes.yaml",
    HERE / "independent_queue_levels.yaml",
    HERE / "independent_sglang_pcie_pair.yaml",
    HERE / "independent_starved_node.yaml",
    HERE / "mixed_inference_fleet.yaml",
    SCENARIO_DIR / "default.yaml",
]
HOUR = 3600.0
STEP = 30.0


@pytest.fixture(scope="module")
def fleets() -> Iterator[tuple[dict[str, str], list[Fleet]]]:
    with engines_with_history(SCENARIOS, HOUR, STEP) as h:
        yield h


@pytest.fixture(params=ENGINES)
def engine(
    request: pytest.FixtureRequest, fleets: tuple[dict[str, str], list[Fleet]]
) -> Iterator[tuple[str, Recorder, float]]:
    urls, history = fleets
    with recording(urls[request.param]) as rec:
        yield rec.url, rec, max(f.last for f in history) + 1


def report(url: str, at: float, *args: str) -> dict[str, object]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--window", "1h", "--at", f"{at:.3f}", "--format", "json", *args]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    document: dict[str, object] = json.loads(out.stdout)
    document.pop("prometheus_url")
    return document


def gpu_series_per_exporter(rec: Recorder, at: float) -> dict[str, int]:
    """Straight from the engine: each exporter's DCGM_FI_DEV_FB_USED series over the hour."""
    body = urllib.parse.urlencode({"query": "count by (instance) (last_over_time(DCGM_FI_DEV_FB_USED[1h]))",
                                   "time": f"{at:.3f}"}).encode()  # fmt: skip
    with urllib.request.urlopen(rec.upstream + "/api/v1/query", data=body, timeout=60) as r:
        result = json.loads(r.read())["data"]["result"]
    return {x["metric"]["instance"]: int(float(x["value"][1])) for x in result}


def sizes_per_exporter(rec: Recorder, at: float) -> dict[str, int]:
    """Straight from the engine: each exporter's largest answer to any report query, its GPUs (plus
    its own first or last sample time), queues or workload latency series, whichever is most."""
    sizes: dict[str, int] = {}
    for family in SIZED_BY:
        body = urllib.parse.urlencode({"query": f"count by (instance) (last_over_time({family}[1h]))",
                                       "time": f"{at:.3f}"}).encode()  # fmt: skip
        with urllib.request.urlopen(rec.upstream + "/api/v1/query", data=body, timeout=60) as r:
            result = json.loads(r.read())["data"]["result"]
        extra = 1 if family == "DCGM_FI_DEV_FB_USED" else 0
        for x in result:
            name = x["metric"]["instance"]
            sizes[name] = max(sizes.get(name, 0), int(float(x["value"][1])) + extra)
    return sizes


def test_split_report_equals_whole_report_and_no_answer_exceeds_the_bound(engine) -> None:
    url, rec, at = engine
    per_exporter = sizes_per_exporter(rec, at)
    assert set(per_exporter) == {p.stem for p in SCENARIOS}
    # The default fleet's workload latency SLOs (kinds x quantiles) outnumber its GPUs: the sizing
    # must count them, or a shard's answer to the latency query would pass the bound.
    assert per_exporter["default"] > gpu_series_per_exporter(rec, at)["default"] + 1
    whole = report(url, at)
    whole_answers = list(rec.answers)
    # One shard: the report's queries plus the two that size the shards, none with a matcher.
    assert len(whole_answers) == len(SIZED_BY) + QUERIES
    assert not any("instance=~" in a.query for a in whole_answers)
    assert max(a.series for a in whole_answers) > max(per_exporter.values())  # a bound below would split
    # Prometheus evaluates timestamp() of a selector in a subquery with a fresh iterator per step,
    # a cost of steps x samples (minutes per query over a week of a few hundred GPUs): not sent.
    assert not any("timestamp(" in a.query for a in whole_answers)
    rec.answers.clear()

    # A bound at the largest exporter: every exporter fits a shard, and the fleet needs several.
    bound = max(per_exporter.values())
    split = report(url, at, "--max-series-per-query", str(bound), "--concurrency", "3")
    assert split == whole
    sized, queries = rec.answers[: len(SIZED_BY)], rec.answers[len(SIZED_BY) :]
    assert all(a.query.startswith("count by (instance)") for a in sized)
    assert all(a.series <= bound for a in queries), max(a.series for a in queries)
    shards = {a.query.split('instance=~"', 1)[1].split('"', 1)[0] for a in queries}
    assert all('instance=~"' in a.query for a in queries)
    groups = [set(s.replace("\\\\", "\\").split("|")) for s in shards]
    names = [n for g in groups for n in g]
    assert len(groups) >= 3 and len(names) == len(set(names)) and set(names) == set(per_exporter)
    assert len(queries) == QUERIES * len(groups)
    # Each shard holds at most ``bound`` series of any one query: the sizing the engine itself reports.
    assert all(sum(per_exporter[n] for n in g) <= bound for g in groups)


def test_split_html_report_with_charts_equals_whole(engine) -> None:
    """The charts' range queries are split by the same shards: the same HTML, charts included."""
    url, rec, at = engine
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--window", "1h", "--at", f"{at:.3f}", "--format", "html"]  # fmt: skip
    whole = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    rec.answers.clear()
    split = subprocess.run([*cmd, "--max-series-per-query", "8"], capture_output=True, text=True, timeout=600)
    assert whole.returncode == 0 and split.returncode == 0, whole.stderr + split.stderr
    assert whole.stderr == split.stderr == ""  # no "written without charts"
    def content(html: str) -> str:  # less the footer's "written <time>"
        return re.sub(r"written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "", html)

    assert "<polyline" in whole.stdout and content(split.stdout) == content(whole.stdout)
    # The charts' range queries (GPU families; the workload latency query is an instant one, and an
    # exporter whose latency series outnumber the bound is a shard of its own).
    charts = [a for a in rec.answers if "avg_over_time" in a.query and "rightsizer_workload_" not in a.query]
    assert charts and all('instance=~"' in a.query and a.series <= 8 for a in charts)


def test_progress_lines_when_asked_off_a_terminal(engine) -> None:
    url, _, at = engine
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--window", "1h", "--at", f"{at:.3f}", "--format", "json", "--progress",
           "--max-series-per-query", "20"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines and all(line.startswith("querying Prometheus [") for line in lines), out.stderr
    assert 2 <= len(lines) <= 11 and "\r" not in out.stderr
    json.loads(out.stdout)


def test_bad_bounds_are_one_clear_line() -> None:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", "http://127.0.0.1:1"]
    out = subprocess.run([*cmd, "--max-series-per-query", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == "rightsizer: --max-series-per-query and --concurrency must be at least 1\n"
