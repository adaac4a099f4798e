"""``rightsizer plan --measured-from URL --workload NS/NAME``: a real Prometheus scraping the
simulated exporter; the plan shows the workload's measured tokens/s and $/M tokens and projects
them on each option by memory bandwidth (what binds decode), never faster on less bandwidth."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from query_recorder import recording
from servers import exporter, free_port, prom_query, prometheus, wait_for

from rightsizing.catalog import load_catalog

SCENARIO = Path(__file__).parent / "scenarios" / "balance" / "measured_plan.yaml"
CATALOG = load_catalog()


def candidate(key: str) -> Any:
    c = CATALOG.candidate(key)
    assert c is not None
    return c


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with exporter(["--simulate", str(SCENARIO)]) as exp:
        target = exp.url.removeprefix("http://")
        with prometheus({"rightsizer": [target]}) as prom:
            wait_for(
                lambda: (
                    len(prom_query(prom.url, 'rightsizer_workload_throughput_per_second{option="current"}'))
                    == 2
                    and prom_query(prom.url, 'rightsizer_gpu_verdict{verdict="underprovisioned"} == 1')
                ),
                60,
                what="measured throughput and verdicts in Prometheus",
            )
            yield prom.url


def plan(url: str, workload: str, fmt: str = "json", *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "plan", "--model", "llama-3-8b", "--all",
           "--measured-from", url, "--workload", workload, "--format", fmt, *extra]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_demand_met_is_projected_at_most_at_its_rate_and_slower_by_bandwidth(source: str) -> None:
    out = plan(source, "llm/chat")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    m = data["measured"]
    # The scenario's server generates 900 tokens/s (its GPU can serve them: the arithmetic is in
    # the scenario file); the window's rate is that, within noise.
    assert m["per_second"] == pytest.approx(900, rel=0.05)
    assert (m["current"], m["gpus"], m["gpus_are_the_limit"]) == ("A100-SXM-80GB", 1, False)
    # An A100 has no SM active (no DCGM profiling): bandwidth binds, busy as its memory-copy
    # utilization at p95 (0.85 x DRAM active 0.4 = 0.34). The scenario has no slow wave, so the
    # few samples Prometheus holds differ only by the per-second jitter (+/-10 % load, +/-3 % DRAM):
    # 0.34 x 0.87 to 0.34 x 1.13, rounded to the exporter's two places.
    assert m["projected_by"] == "memory bandwidth"
    assert 0.29 <= m["binding_p95"] <= 0.39
    a100 = candidate("A100-SXM-80GB")
    assert m["dollars_per_million_tokens"] == pytest.approx(
        a100.hourly_price_dollars / (m["per_second"] * 3600) * 1e6, rel=0.02
    )
    bw = a100.memory_bandwidth_bytes_per_second
    for o in data["options"]:
        c = candidate(o["gpu"])
        share = c.memory_bandwidth_bytes_per_second * o["gpus"] / bw
        # Demand met: the same rate while the option has room for it (its bandwidth over what the
        # work uses today), never more than today.
        want = m["per_second"] * min(1.0, share / m["binding_p95"])
        assert o["measured_projected_tokens_per_second"] == pytest.approx(want, rel=1e-3), o["gpu"]
        assert o["measured_projected_dollars_per_million_tokens"] == pytest.approx(
            o["hourly_price_dollars"] / (want * 3600) * 1e6, rel=2e-3
        )
    # Some options are too slow for the work (a T4's 320 GB/s is 0.16 of the A100's: under 0.34).
    assert any(o["measured_projected_tokens_per_second"] < 0.99 * m["per_second"] for o in data["options"])
    text = plan(source, "llm/chat", "table").stdout
    assert "Measured  llm/chat on 1 x A100-SXM-80GB:" in text and "demand is met today" in text
    assert "Projected by memory bandwidth" in text
    # The plan's own $/M tokens, printed above the measured one, says it is a ceiling's.
    ceiling = text.index("$/M tokens at ceiling: the price over the decode ceiling at batch 1 (--batch)")
    assert ceiling < text.index("Measured  llm/chat")
    assert "a floor on what the tokens cost; not a measurement: the measured cost is below" in text


def test_gpus_that_are_the_limit_scale_with_bandwidth_both_ways(source: str) -> None:
    data = json.loads(plan(source, "llm/pressed").stdout)
    m = data["measured"]
    assert (m["current"], m["gpus_are_the_limit"]) == ("L40S-48GB", True)
    assert m["per_second"] == pytest.approx(400, rel=0.05)
    assert m["projected_by"] == "memory bandwidth"  # an L40S reports no SM active
    bw = candidate("L40S-48GB").memory_bandwidth_bytes_per_second
    faster = 0
    for o in data["options"]:
        share = candidate(o["gpu"]).memory_bandwidth_bytes_per_second * o["gpus"] / bw
        assert o["measured_projected_tokens_per_second"] == pytest.approx(m["per_second"] * share, rel=1e-3)
        faster += share > 1
    assert faster  # an option with more bandwidth serves more of the waiting work


@pytest.mark.parametrize("workload", ["chat", "pressed"])
def test_plan_and_the_exporter_project_the_recommended_option_alike(source: str, workload: str) -> None:
    """One projection rule: the plan's figure for the GPU the exporter recommends is the exporter's
    own projection on it (``rightsizer_workload_throughput_per_second{option="recommended"}``)."""
    (rec,) = prom_query(source, f'rightsizer_gpu_recommendation_info{{namespace="llm",pod=~"{workload}-.*"}}')
    recommended = rec["metric"]["recommended"]
    (live,) = prom_query(
        source, f'rightsizer_workload_throughput_per_second{{queue="{workload}",option="recommended"}}'
    )
    data = json.loads(plan(source, f"llm/{workload}").stdout)
    mine = [o for o in data["options"] if o["gpu"] == recommended and o["gpus"] == 1]
    assert mine, f"{recommended} is not among the plan's options for llama-3-8b"
    assert mine[0]["measured_projected_tokens_per_second"] == pytest.approx(float(live["value"][1]), rel=0.01)


def test_unknown_workload_and_a_source_that_is_down_exit_2_with_one_line(source: str) -> None:
    for url, workload, says in (
        (source, "llm/nothing", "no queue of workload llm/nothing"),
        (f"http://127.0.0.1:{free_port()}", "llm/chat", "--measured-from"),
    ):
        out = plan(url, workload)
        assert out.returncode == 2 and out.stdout == ""
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and says in lines[0] and "Traceback" not in out.stderr, out.stderr


def test_headers_and_bearer_token_reach_the_measured_from_prometheus(source: str, tmp_path: Path) -> None:
    """A Prometheus behind an authenticating proxy or a multi-tenant store (Mimir's X-Scope-OrgID)
    gets the headers the plan was given, on every query; a bad header is one line and exit 2."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    auth = ["--header", "X-Scope-OrgID: team-a", "--bearer-token-file", str(token)]
    with recording(source) as rec:
        out = plan(rec.url, "llm/chat", "json", *auth)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["measured"]["per_second"] > 0
        sent = [{k.lower(): v for k, v in a.headers.items()} for a in rec.answers]
        assert sent and all(
            h.get("x-scope-orgid") == "team-a" and h.get("authorization") == "Bearer s3cret" for h in sent
        ), sent
    bad = plan(source, "llm/chat", "json", "--header", "no colon")
    assert bad.returncode == 2 and bad.stderr.strip() == "rightsizer: --header 'no colon' must be NAME:VALUE"
    alone = subprocess.run(
        [sys.executable, "-m", "rightsizing.command.cli", "plan", "--model", "llama-3-8b", *auth],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert alone.returncode == 2 and "go with --measured-from" in alone.stderr, alone.stderr
