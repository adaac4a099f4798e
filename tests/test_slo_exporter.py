"""End to end: the exporter as a subprocess polling real HTTP endpoints that serve vLLM's, SGLang's,
TGI's and Triton's exact latency expositions, with SLOs declared. What it publishes follows the
servers through counter resets, a bucket-layout change, an absent histogram, too few requests and a
source going down; the series lint clean with promtool.

Expected values are worked out from the observations each test feeds (the bucket arithmetic is in
the comments)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from latency_servers import ClientServer, Series, TgiServer, TritonServer
from latency_servers import scrape_series as scrape
from queue_servers import FakeHttpServer
from servers import Process, exporter, http_get, require_binary, wait_for

LATENCY = "rightsizer_workload_latency_seconds"
ATTAINMENT = "rightsizer_workload_slo_window_attainment_ratio"


def get(series: Series, name: str, workload: str, **labels: str) -> float | None:
    want = {("workload", workload), *labels.items()}
    found = [v for (n, lab), v in series.items() if n == name and want <= set(lab)]
    assert len(found) <= 1, (name, workload, labels, found)
    return found[0] if found else None


def slos(p: Process) -> dict[str, dict]:
    status, _, body = http_get(p.url + "/api/v1/rightsizing")
    assert status == 200
    return {s["workload"]: s for s in json.loads(body)["rightsizing"]["slos"]}


@dataclass
class Rig:
    p: Process
    http: FakeHttpServer
    vllm: ClientServer
    sglang: ClientServer
    tgi: TgiServer
    triton: TritonServer


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    vllm, sglang, tgi, triton = ClientServer("vllm"), ClientServer("sglang"), TgiServer(), TritonServer()
    with FakeHttpServer() as http:
        for path, server in (("/vllm", vllm), ("/sglang", sglang), ("/tgi", tgi), ("/triton", triton)):
            http.route(path, body=lambda s=server: s.render())
        queues = [
            {"name": name, "kind": kind, "url": http.url(f"/{kind}"), "backoff_max": 1,
             "labels": {"namespace": ns, "workload": name}}
            for name, kind, ns in (("chat", "vllm", "llm"), ("code", "sglang", "llm"),
                                   ("summ", "tgi", "llm"), ("embed", "triton", "search"))
        ]  # fmt: skip
        config = {
            "queues": queues,
            "slos": [
                {"namespace": "llm", "workload": "chat", "ttft_seconds": 0.5, "itl_seconds": 0.05},
                {"namespace": "llm", "workload": "code", "ttft_seconds": 1.0, "objective": 0.9},
                {"namespace": "llm", "workload": "summ", "ttft_seconds": 1.0, "e2e_seconds": 10},
                {"namespace": "search", "workload": "embed", "e2e_seconds": 0.2},
            ],
        }
        path = tmp_path / "exporter.yaml"
        path.write_text(yaml.safe_dump(config))
        with exporter(["--simulate", "--interval", "0.2", "--config", str(path)]) as p:
            # every source polled once: its baseline (nothing before it is known to be in the window)
            wait_for(
                lambda: all(get(scrape(p), "rightsizer_queue_source_up", q) == 1 for q in ("chat", "code",
                                                                                        "summ", "embed")),
                20, what="every source up",
            )  # fmt: skip
            yield Rig(p, http, vllm, sglang, tgi, triton)


def feed(rig: Rig) -> None:
    rig.vllm.observe("ttft", 0.2, 150)
    rig.vllm.observe("ttft", 0.9, 50)
    rig.vllm.observe("itl", 0.03, 300)
    rig.sglang.observe("ttft", 0.3, 120)
    rig.tgi.observe("e2e", 2.0, 40)
    rig.tgi.observe("itl", 0.02, 40)
    rig.triton.observe("e2e", 0.15, 120)
    rig.triton.observe("queue", 0.01, 120)


def test_attainment_latency_and_ratio_follow_the_servers_histograms(rig: Rig) -> None:
    feed(rig)
    # chat (vLLM) TTFT: 150 of 200 at or under 0.5 s, a bucket bound of vLLM's layout: exactly 0.75.
    # each source is polled on its own schedule: wait until both servers read here were polled
    # after the feed (chat's 200 TTFT requests and code's 120)
    wait_for(lambda: get(scrape(rig.p), ATTAINMENT, "chat", slo="ttft") == 0.75
             and get(scrape(rig.p), "rightsizer_workload_latency_requests", "code", slo="ttft") == 120,
             20, what="chat TTFT attainment 0.75 and code's 120 requests")  # fmt: skip
    s = scrape(rig.p)
    # p95: rank 190 lies in (0.75, 1.0], which holds 150..200: 0.75 + 0.25 x 40 / 50 = 0.95 s
    assert get(s, LATENCY, "chat", slo="ttft", quantile="0.95") == pytest.approx(0.95)
    # p50: rank 100 in (0.1, 0.25] holding 0..150: 0.1 + 0.15 x 100 / 150 = 0.2 s
    assert get(s, LATENCY, "chat", slo="ttft", quantile="0.5") == pytest.approx(0.2)
    assert get(s, ATTAINMENT, "chat", slo="itl") == 1.0
    # the worst target: TTFT at 0.95 s over 0.5 s (ITL: all 300 in (0.025, 0.05]: p95 0.04875 / 0.05)
    assert get(s, "rightsizer_workload_slo_window_latency_ratio", "chat") == pytest.approx(1.9)
    assert get(s, "rightsizer_workload_slo_target_seconds", "chat", slo="ttft") == 0.5
    assert get(s, "rightsizer_workload_slo_objective_ratio", "chat", slo="ttft") == 0.95
    assert get(s, "rightsizer_workload_latency_requests", "chat", slo="ttft") == 200
    assert get(s, "rightsizer_workload_slo_requests_total", "chat", slo="ttft") == 200
    assert get(s, "rightsizer_workload_slo_good_requests_total", "chat", slo="ttft") == 150
    assert get(s, "rightsizer_workload_latency_mean_seconds", "chat", slo="ttft") == pytest.approx(
        (150 * 0.2 + 50 * 0.9) / 200)
    # code (SGLang): all 120 at 0.3 s <= 1.0 s; p90 (its objective) in (0.2, 0.4]: 0.2 + 0.2 x 108/120
    assert get(s, ATTAINMENT, "code", slo="ttft") == 1.0
    assert get(s, LATENCY, "code", slo="ttft", quantile="0.9") == pytest.approx(0.38)
    api = slos(rig.p)
    assert api["chat"]["state"] == "missed" and api["code"]["state"] == "met_with_room"
    ttft = next(x for x in api["chat"]["latencies"] if x["slo"] == "ttft")
    assert ttft["attainment_exact"] is True and ttft["missed"] is True
    assert api["chat"]["scaling"] == {"judged": True, "why_not": None, "latency_ratio": pytest.approx(1.9)}


def test_unknown_is_never_a_value(rig: Rig) -> None:
    feed(rig)
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_latency_requests", "summ", slo="e2e") == 40,
             20, what="TGI's 40 requests")  # fmt: skip
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_latency_mean_seconds", "embed", slo="e2e")
             is not None, 20, what="Triton's mean")  # fmt: skip
    s = scrape(rig.p)
    # TGI has no TTFT histogram: nothing about TTFT is published; 40 requests < 100: no e2e figures.
    assert get(s, "rightsizer_workload_latency_requests", "summ", slo="ttft") is None
    assert get(s, ATTAINMENT, "summ", slo="ttft") is None
    assert get(s, ATTAINMENT, "summ", slo="e2e") is None
    assert get(s, LATENCY, "summ", slo="e2e", quantile="0.95") is None
    assert get(s, "rightsizer_workload_slo_window_latency_ratio", "summ") is None
    assert get(s, "rightsizer_workload_slo_target_seconds", "summ", slo="ttft") == 1.0  # declared
    summ = slos(rig.p)["summ"]
    assert summ["state"] == "not_judged"
    assert summ["not_judged"] == [
        "TTFT: TGI publishes no time-to-first-token histogram",
        "end-to-end latency: 40 requests in the window (needs 100)",
    ]
    # Triton: the mean of its duration counters (0.15 s), said to be a mean; no quantile, no attainment.
    assert get(s, "rightsizer_workload_latency_mean_seconds", "embed", slo="e2e") == pytest.approx(0.15)
    assert get(s, LATENCY, "embed", slo="e2e", quantile="0.95") is None
    assert get(s, ATTAINMENT, "embed", slo="e2e") is None
    assert get(s, "rightsizer_workload_slo_requests_total", "embed", slo="e2e") is None
    embed = slos(rig.p)["embed"]
    assert embed["not_judged"] == ["end-to-end latency: triton publishes only a mean, no distribution"]
    assert next(x for x in embed["latencies"] if x["slo"] == "e2e")["mean_only"] is True


def test_counter_reset_and_bucket_layout_change(rig: Rig) -> None:
    feed(rig)
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_slo_requests_total", "chat", slo="ttft") == 200,
             20, what="chat's first 200")  # fmt: skip
    # vLLM restarts: its 100 new requests count in full (300 in the window, 250 under 0.5 s).
    rig.vllm.restart()
    rig.vllm.observe("ttft", 0.2, 100)
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_latency_requests", "chat", slo="ttft") == 300,
             20, what="the restart counted from zero")  # fmt: skip
    s = scrape(rig.p)
    assert get(s, ATTAINMENT, "chat", slo="ttft") == pytest.approx(250 / 300)
    assert get(s, "rightsizer_workload_slo_requests_total", "chat", slo="ttft") == 300
    # SGLang restarts with other bounds: (0.5, 1.0, 5.0). 1.0 s is a bound of both layouts, so the
    # window keeps it: 120 + 100 under it of 120 + 100 + 20 = 240.
    rig.sglang.restart({"ttft": (0.5, 1.0, 5.0)})
    rig.sglang.observe("ttft", 0.3, 100)
    rig.sglang.observe("ttft", 3.0, 20)
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_latency_requests", "code", slo="ttft") == 240,
             20, what="the new layout's requests")  # fmt: skip
    s = scrape(rig.p)
    assert get(s, ATTAINMENT, "code", slo="ttft") == pytest.approx(220 / 240)
    code = next(x for x in slos(rig.p)["code"]["latencies"] if x["slo"] == "ttft")
    assert code["attainment_exact"] is True
    # p90 over the shared bounds (1.0 s, +Inf): rank 216 in (0, 1.0] holding 220: 1.0 x 216 / 220
    assert code["quantiles"]["p90"] == pytest.approx(216 / 220, abs=1e-6)


def test_a_source_down_stops_the_scaling_series_and_the_adapter_state_says_so(rig: Rig) -> None:
    feed(rig)
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_slo_scaling_up", "chat") == 1, 20,
             what="chat judged over the scaling window")  # fmt: skip
    s = scrape(rig.p)
    assert get(s, "rightsizer_workload_slo_scaling_latency_ratio", "chat") == pytest.approx(1.9)
    assert get(s, "rightsizer_workload_slo_scaling_attainment_ratio", "chat", slo="ttft") == 0.75
    assert get(s, "rightsizer_workload_slo_scaling_up", "embed") == 0  # a mean only: never judged
    good = rig.http.routes["/vllm"]
    rig.http.route("/vllm", status=503, body=b"overloaded")
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_slo_scaling_up", "chat") == 0, 20,
             what="chat's source down")  # fmt: skip
    s = scrape(rig.p)
    assert get(s, "rightsizer_workload_slo_scaling_latency_ratio", "chat") is None
    assert get(s, "rightsizer_workload_slo_scaling_attainment_ratio", "chat", slo="ttft") is None
    assert slos(rig.p)["chat"]["scaling"]["why_not"] == "1 of 1 sources down"
    rig.http.routes["/vllm"] = good
    wait_for(lambda: get(scrape(rig.p), "rightsizer_workload_slo_scaling_up", "chat") == 1, 20,
             what="chat back")  # fmt: skip
    assert "Traceback" not in rig.p.log()


def test_the_slo_series_lint_clean_with_promtool(rig: Rig) -> None:
    feed(rig)
    ratio = "rightsizer_workload_slo_window_latency_ratio"
    wait_for(lambda: get(scrape(rig.p), ratio, "chat") is not None, 20, what="the SLO series")
    _, _, body = http_get(rig.p.url + "/metrics")
    lines = body.decode().splitlines()
    ours = [ln for ln in lines if "rightsizer_workload_" in ln]
    assert any(ln.startswith("rightsizer_workload_slo_good_requests_total{") for ln in ours)
    lint = subprocess.run(
        [require_binary("promtool"), "check", "metrics"], input="\n".join(ours) + "\n",
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr
