"""A request's end-to-end latency is at least its TTFT, which is at least its time in the queue, so
every quantile the exporter publishes keeps that order: queue <= TTFT <= end to end.

Checked on every simulated scenario (the built-in ones and tests/scenarios) through the exporter's
own path: the simulated servers' histograms, the live engine's windows, the rendered page. The
simulator draws one request's wait, service and decode (``latency._after_wait``), and the engine
reads a workload's histograms together (``latency.ordered``): vLLM's TTFT buckets are not its end
to end's, and each interpolated alone, chat-8b's end-to-end p95 read 1217 s under a TTFT p95 of
1885 s. Also checked directly on the histograms: cumulative counts at every shared bound.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from servers import ROOT

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sources.simulated.latency import LatencyModel
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.snapshot import Snapshot
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings
from rightsizing.slo.attainment import evaluate
from rightsizing.slo.latency import Histogram, ordered, quantile, same_bound

SCENARIOS = sorted([*ROOT.glob("exporter/scenarios/*.yaml"), *ROOT.glob("tests/scenarios/**/*.yaml")])
SERVED = [p for p in SCENARIOS if "server:" in p.read_text()]
START = 1.7e9
SECONDS, STEP = 3600.0, 30.0
ORDER = ("queue", "ttft", "e2e")  # never falls along a request's life


def published(path: Path) -> dict[tuple[str, str, str], dict[str, float]]:
    """(namespace, workload, quantile) -> {slo kind: seconds} as the exporter renders them."""
    scenario = dataclasses.replace(load_scenario(str(path)), start=START, frozen=True)
    source = SimulatedSource(scenario)
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), STEP, source)
    rows = {}
    for reading in source.history(SECONDS, STEP):
        rows = dict(ext.contribute(reading, reading.gpus).rows)
    snap = Snapshot(reading.timestamp, "sim-node", reading.gpus, (reading.status,), rows, {})
    out: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(Renderer("Hostname").render(snap).text.decode()):
        for s in family.samples:
            if s.name == "rightsizer_workload_latency_seconds":
                key = (s.labels["namespace"], s.labels["workload"], s.labels["quantile"])
                out[key][s.labels["slo"]] = s.value
    return out


@pytest.mark.parametrize("path", SERVED, ids=lambda p: str(p.relative_to(ROOT)))
def test_published_quantiles_keep_a_requests_order(path: Path) -> None:
    crossed = []
    for key, kinds in published(path).items():
        present = [(k, kinds[k]) for k in ORDER if k in kinds]
        for (a, x), (b, y) in itertools.pairwise(present):
            if x > y:
                crossed.append(f"{key}: {a} {x:g} s > {b} {y:g} s")
    assert crossed == []


def test_the_default_fleets_chat_8b_publishes_all_three_kinds() -> None:
    """The case that was seen: the test above has something to compare there."""
    got = published(ROOT / "exporter/scenarios/default.yaml")
    kinds = got[("llm", "chat-8b", "0.95")]
    assert set(ORDER) <= set(kinds) and kinds["queue"] <= kinds["ttft"] <= kinds["e2e"]
    assert kinds["e2e"] > 60  # its queue grows all hour: minutes of waiting, not seconds


def counted_at_shared_bounds(h: dict[str, Histogram], a: str, b: str) -> list[tuple[float, float, float]]:
    """(bound, count of ``a`` at or under it, count of ``b``) at every bound both layouts have."""
    out = []
    for i, x in enumerate(h[a].bounds):
        j = next((j for j, y in enumerate(h[b].bounds) if same_bound(x, y)), None)
        if j is not None:
            out.append((x, h[a].counts[i], h[b].counts[j]))
    return out


@pytest.mark.parametrize("path", SERVED, ids=lambda p: str(p.relative_to(ROOT)))
def test_simulated_histograms_count_a_request_no_sooner_than_its_earlier_stage(path: Path) -> None:
    """The simulator's own physics, before any reading: at every bound two kinds share, no more
    requests finish end to end by then than got their first token, and no more got it than left
    the queue, at every hour of the history."""
    source = SimulatedSource(dataclasses.replace(load_scenario(str(path)), start=START, frozen=True))
    models: dict[str, LatencyModel] = source._latency
    for model in models.values():
        for elapsed in (600.0, 3600.0, 7200.0):
            h = model.at(elapsed)
            if h is None:
                continue
            for a, b in itertools.pairwise(ORDER):
                if a in h and b in h:
                    for x, earlier, later in counted_at_shared_bounds(h, a, b):
                        assert later <= earlier, (model.server, elapsed, a, b, x, earlier, later)


def hist(bounds: tuple[float, ...], counts: tuple[float, ...]) -> Histogram:
    return Histogram(bounds, (*counts, 100.0), 0.0)


VLLM_TTFT = (640.0, 2560.0)  # the top of vLLM's TTFT layout
VLLM_E2E = (960.0, 1920.0, 7680.0)  # and of its end-to-end (and queue time) layout


def test_a_ttft_bucket_wider_than_end_to_ends_is_held_by_their_counts() -> None:
    """PromQL alone: TTFT p95 = 640 + 1920 x 65/69 = 2448.7 s, end to end p95 = 1920 s. Read
    together: TTFT's share at 960 s lies in [0.50, 0.60] (end to end's and queue time's counts
    there), its interpolated 0.415 becomes 0.50; at 1920 s in [0.95, 0.96], 0.76 becomes 0.95. So
    TTFT p95 = 960 + 960 x 45/45 = 1920 s, end to end's unchanged, and queue time's 960 + 960 x
    35/36 = 1893.3 s under both. p99: queue time's share at 2560 s is raised to TTFT's 0.99, so
    both are 2560 s; end to end 1920 + 5760 x 4/5 = 6528 s."""
    h = {
        "queue": hist(VLLM_E2E, (60.0, 96.0, 100.0)),
        "ttft": hist(VLLM_TTFT, (30.0, 99.0)),
        "e2e": hist(VLLM_E2E, (50.0, 95.0, 100.0)),
    }
    assert quantile(h["ttft"], 0.95) == pytest.approx(2448.696, abs=1e-3)  # alone
    ev = evaluate("llm", "chat", None, h, 10, "vllm")
    got = {x.kind: dict(x.quantiles) for x in ev.latencies}
    assert got["ttft"][0.95] == pytest.approx(1920.0)
    assert got["e2e"][0.95] == pytest.approx(1920.0)
    assert got["queue"][0.95] == pytest.approx(1893.333, abs=1e-3)
    assert got["queue"][0.99] == pytest.approx(2560.0) and got["ttft"][0.99] == pytest.approx(2560.0)
    assert got["e2e"][0.99] == pytest.approx(6528.0)
    assert got["e2e"][0.5] == pytest.approx(960.0)  # counted: 50 of 100 at 960 s


def test_past_ttfts_last_bucket_its_quantile_is_at_least_queue_times() -> None:
    """10 % of first tokens after 2560 s: PromQL answers 2560 s (the least it can be), while queue
    time's p95 reads 1920 + 5760 x 15/18 = 6720 s. A request's TTFT is at least its queue time, so
    TTFT's share at 7680 s is queue time's 0.98: TTFT p95 = 2560 + 5120 x 5/8 = 5760 s; queue
    time's share at 2560 s is raised to TTFT's 0.90, giving the same 5760 s; end to end p95 is at
    its counted 7680 s."""
    h = {
        "queue": hist(VLLM_E2E, (60.0, 80.0, 98.0)),
        "ttft": hist(VLLM_TTFT, (30.0, 90.0)),
        "e2e": hist(VLLM_E2E, (50.0, 75.0, 95.0)),
    }
    assert quantile(h["ttft"], 0.95) == 2560.0 and quantile(h["queue"], 0.95) == pytest.approx(6720.0)
    got = {x.kind: dict(x.quantiles) for x in evaluate("llm", "chat", None, h, 10, "vllm").latencies}
    assert got["ttft"][0.95] == pytest.approx(5760.0)
    assert got["queue"][0.95] == pytest.approx(5760.0)
    assert got["e2e"][0.95] == pytest.approx(7680.0)


def test_counted_shares_and_other_kinds_pass_unchanged() -> None:
    """Same layouts: nothing is interpolated where another kind counts, so nothing moves; the
    inter-token latency is per token, outside the chain."""
    itl = hist((0.01, 0.05), (40.0, 90.0))
    h = {"ttft": hist(VLLM_E2E, (50.0, 95.0, 100.0)), "e2e": hist(VLLM_E2E, (40.0, 90.0, 100.0)), "itl": itl}
    assert ordered(h) == h
    h["ttft"] = hist(VLLM_TTFT, (30.0, 99.0))
    again = ordered(h)  # on every kind's bounds now, its own counts as they were
    assert again["itl"] is itl and again["e2e"].bounds == (640.0, 960.0, 1920.0, 2560.0, 7680.0)
    assert again["e2e"].project(VLLM_E2E) == h["e2e"] and again["ttft"].project(VLLM_TTFT) == h["ttft"]
