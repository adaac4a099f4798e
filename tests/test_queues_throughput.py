"""Measured throughput: inference servers' token and request counters are read on the same poll as
their queue depth (vLLM, SGLang, TGI's histogram sums, Triton's inference count, older spellings),
kept as rates over the right-sizing window, and attributed to the GPUs the queue feeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from queue_fakes import SglangMetrics, VllmMetrics, tgi_metrics, triton_metrics
from queue_servers import FakeHttpServer
from servers import exporter, http_get, wait_for

from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from exporter.sources.simulated.source import load_scenario
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample, PodRef
from rightsizing.catalog import load_catalog
from rightsizing.links import QueueReading
from rightsizing.settings import RightsizingSettings
from rightsizing.trend import WindowCounter

GIB = 2**30


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    families = text_string_to_metric_families(text)
    return [(dict(s.labels), s.value) for fam in families for s in fam.samples if s.name == name]


def reader(kind: str) -> ExpositionReader:
    return ExpositionReader(PRESETS[kind], {})


@pytest.mark.parametrize("openmetrics", [False, True])
def test_vllm_token_and_request_counters_come_with_the_depth(openmetrics: bool) -> None:
    fake = VllmMetrics(engines=2)
    fake.set([3, 4], [1, 1])
    v = reader("vllm").read(fake.render(openmetrics).decode(), openmetrics)
    assert v.depth == 7
    # Both engines' counters summed; requests over every finished_reason.
    assert (v.generated_tokens_total, v.prompt_tokens_total, v.requests_total) == (580422, 1624690, 7404)
    fake.serve(generated=1000, prompt=3000, requests=10)
    after = reader("vllm").read(fake.render(openmetrics).decode(), openmetrics)
    assert after.generated_tokens_total == 581422 and after.requests_total == 7414


def test_sglang_tgi_and_triton_counters() -> None:
    s = reader("sglang").read(SglangMetrics().render().decode(), False)
    assert (s.generated_tokens_total, s.prompt_tokens_total, s.requests_total) == (20480, 51234, 160)
    # TGI has no token counter: the generated-tokens and input-length histograms' sums.
    t = reader("tgi").read(tgi_metrics(4, 2).decode(), False)
    assert (t.generated_tokens_total, t.prompt_tokens_total, t.requests_total) == (3620000, 9117000, 18100)
    # Triton counts inferences (both models summed), no tokens.
    n = reader("triton").read(triton_metrics({"a": 1, "b": 2}).decode(), False)
    assert (n.generated_tokens_total, n.prompt_tokens_total, n.requests_total) == (None, None, 19752)


def test_other_spellings_and_broken_counters() -> None:
    # TGI's counter with a _total suffix; without a success counter, the histogram's count.
    tgi = reader("tgi")
    assert tgi.read("tgi_queue_size 1\ntgi_request_success_total 12\n", False).requests_total == 12
    only_hist = "tgi_queue_size 1\ntgi_request_generated_tokens_count 9\n"
    assert tgi.read(only_hist, False).requests_total == 9
    # Triton without nv_inference_count: its successful requests.
    older = 'nv_inference_pending_request_count{model="a"} 0\nnv_inference_request_success{model="a"} 5\n'
    assert reader("triton").read(older, False).requests_total == 5
    # A NaN or negative counter is left out, never a fault and never a zero.
    text = "vllm:num_requests_waiting 2\nvllm:generation_tokens_total NaN\nvllm:prompt_tokens_total -4\n"
    v = reader("vllm").read(text, False)
    assert v.depth == 2 and v.generated_tokens_total is None and v.prompt_tokens_total is None
    assert v.requests_total is None  # not published: unknown


def test_window_counter_rate_survives_a_restart_and_forgets_old_buckets() -> None:
    c = WindowCounter(width=60.0, bucket_count=60)  # a one-hour window
    assert c.rate() is None
    c.add(0.0, 1000.0)
    assert c.rate() is None and c.increase() == 0.0  # one reading spans no time
    for t in range(15, 1800, 15):
        c.add(float(t), 1000.0 + 40.0 * t)
    assert c.rate() == pytest.approx(40.0)
    # The server restarts at 1800 s (its counter starts again) and serves 40 tokens/s on.
    for t in range(1800, 3600, 15):
        c.add(float(t), 40.0 * (t - 1800) + 20.0)
    assert c.rate() == pytest.approx(40.0, rel=0.01)
    # Two hours later at 10 tokens/s: the first hour has left the window.
    for t in range(3600, 7200 + 3600, 15):
        c.add(float(t), 72020.0 + 10.0 * (t - 3600))
    assert c.rate() == pytest.approx(10.0)


class Feed:
    def __init__(self) -> None:
        self.readings: list[QueueReading] = []

    def queue_readings(self) -> list[QueueReading]:
        return self.readings


def test_rates_over_the_window_reach_the_gpu_the_queue_feeds() -> None:
    ident = GpuIdentity(0, "GPU-cccc", "00000000:18:00.0", "NVIDIA L4", 0, "550", 24 * GIB)
    other = GpuIdentity(1, "GPU-dddd", "00000000:19:00.0", "NVIDIA L4", 1, "550", 24 * GIB)
    pods = (PodRef("chat-7d9f8b6c4-x2k9q", "llm", "vllm"), PodRef("embed-5f6c7d8b9-q2w4z", "llm", "srv"))
    fields = {"sm_active_ratio": 0.4, "gpu_utilization_ratio": 0.6, "memory_used_bytes": 20.0 * GIB}
    gpus = tuple(GpuSample(i, True, fields, pod=p) for i, p in zip((ident, other), pods, strict=True))
    feed = Feed()
    settings = RightsizingSettings(min_samples=10, min_history_seconds=60)
    ext = RightsizingExtension(settings, load_catalog(), 15.0, queues=feed)
    labels = {"namespace": "llm", "workload": "chat"}
    t0 = 5_000_000.0
    for k in range(240):  # an hour at 15 s: 250 tokens/s generated, 600 prompted, 1.5 requests/s
        t = 15.0 * k
        feed.readings = [QueueReading("chat", 1.0, labels, (), "vllm", 0.2, 0.0, 250 * t, 600 * t, 1.5 * t)]
        c = ext.contribute(GpuReading(t0 + t, gpus, CollectorStatus("nvml", True, 0.0)), gpus)
    entries = c.api["gpus"]  # what /api/v1/gpus shows
    (q,) = entries["GPU-cccc"]["rightsizing"]["queues"]
    rates = (q["generated_tokens_per_second"], q["prompt_tokens_per_second"], q["requests_per_second"])
    assert rates == pytest.approx((250, 600, 1.5))
    assert entries["GPU-dddd"]["rightsizing"]["queues"] == []  # the embedding pod is not fed by it
    # A server that counts nothing has no rate: unknown, not zero.
    feed.readings = [QueueReading("chat", 1.0, labels, (), "tgi")]
    ext2 = RightsizingExtension(settings, load_catalog(), 15.0, queues=feed)
    for k in range(20):
        c = ext2.contribute(GpuReading(t0 + 15 * k, gpus, CollectorStatus("nvml", True, 0.0)), gpus)
    (q,) = c.api["gpus"]["GPU-cccc"]["rightsizing"]["queues"]
    rates = (q["generated_tokens_per_second"], q["prompt_tokens_per_second"], q["requests_per_second"])
    assert rates == (None, None, None)


SERVED_H100 = """\
description: a vLLM server on an H100
seed: 62
history_seconds: 3600
gpus:
  - name: vllm-h100
    model: H100-SXM-80GB
    workload: {kind: steady_inference, memory_fraction: 0.9, activity: 0.3}
    pod: {pod: chat-8b-7b8c9-pqrst, namespace: llm, container: vllm}
"""


def test_token_rates_come_from_the_queue_poll_of_a_real_vllm_endpoint(tmp_path: Path) -> None:
    """vLLM's exposition (as prometheus-client renders it) feeds the counters on /metrics and the
    rates on the GPU its queue feeds. The endpoint serves 1,000 generated and 3,000 prompt tokens and
    4 requests between polls, so the rates keep those proportions whatever the poll timing."""
    scenario = tmp_path / "served.yaml"
    scenario.write_text(SERVED_H100)
    uuid = load_scenario(str(scenario)).gpus[0].uuid
    vllm = VllmMetrics()
    vllm.set([2.0], [4.0])

    def scrape() -> bytes:
        vllm.serve(generated=1000, prompt=3000, requests=4)
        return vllm.render()

    with FakeHttpServer() as server:
        server.route("/metrics", body=scrape)
        config = tmp_path / "exporter.yaml"
        config.write_text(
            "queues:\n"
            f"  - {{name: chat, kind: vllm, url: '{server.url('/metrics')}',\n"
            "     labels: {namespace: llm, workload: chat-8b}}\n"
            "rightsizing: {score_interval_seconds: 1}\n"
        )
        with exporter(["--simulate", str(scenario), "--config", str(config)]) as p:

            def chat() -> dict:
                status, _, body = http_get(p.url + "/api/v1/gpus")
                assert status == 200
                (gpu,) = [g for g in json.loads(body)["gpus"] if g["uuid"] == uuid]
                return next((q for q in gpu["rightsizing"]["queues"] if q["name"] == "chat"), {})

            wait_for(lambda: (chat().get("generated_tokens_per_second") or 0) > 0, 60, what="a token rate")
            q = chat()
            generated = q["generated_tokens_per_second"]
            assert q["prompt_tokens_per_second"] == pytest.approx(3 * generated, rel=1e-3)
            assert q["requests_per_second"] == pytest.approx(0.004 * generated, rel=1e-2)
            text = http_get(p.url + "/metrics")[2].decode()
            polls = server.routes["/metrics"].requests
            for name, start, per_poll in (
                ("rightsizer_queue_generated_tokens_total", 290211, 1000),
                ("rightsizer_queue_prompt_tokens_total", 812345, 3000),
                ("rightsizer_queue_requests_total", 3 * 1234, 4),
            ):
                ((labels, value),) = samples(text, name)
                assert labels["queue"] == "chat" and labels["kind"] == "vllm"
                assert (value - start) % per_poll == 0 and 1 <= (value - start) / per_poll <= polls
            # Cost per inference of the H100 the queue feeds, on /api/v1/rightsizing and as series.
            status, _, body = http_get(p.url + "/api/v1/rightsizing")
            assert status == 200
            (cost,) = [w for w in json.loads(body)["rightsizing"]["workloads"] if w["queue"] == "chat"]
            h100 = load_catalog().candidate("H100-SXM-80GB")
            assert h100 is not None and cost["unit"] == "tokens" and cost["gpus"] == 1
            assert cost["hourly_dollars"] == pytest.approx(h100.hourly_price_dollars)
            per_million = h100.hourly_price_dollars / (cost["per_second"] * 3600) * 1e6
            assert cost["dollars_per_million_tokens"] == pytest.approx(per_million, rel=1e-4)
            series = samples(text, "rightsizer_workload_cost_dollars")
            current = [v for lab, v in series if lab["queue"] == "chat" and lab["option"] == "current"]
            assert len(current) == 1 and current[0] > 0
