"""Latency histograms read from each server's exposition: the sample-line reader gives what
prometheus-client's parser gives (text and OpenMetrics, exemplars, escapes, the source's label
match), and a broken histogram is left out (unknown) while the queue depth is still read."""

from __future__ import annotations

import pytest
from latency_servers import ClientServer, TgiServer, TritonServer
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from rightsizing.slo.latency import Histogram


def pages() -> dict[str, str]:
    vllm, sglang, tgi, triton = ClientServer("vllm"), ClientServer("sglang"), TgiServer(), TritonServer(True)
    for kind in ("ttft", "itl", "e2e", "queue"):
        vllm.observe(kind, 0.07, 30)
        vllm.observe(kind, 3.0, 5)
        sglang.observe(kind, 0.3, 12)
    for kind in ("itl", "e2e", "queue"):
        tgi.observe(kind, 0.02, 9)
    triton.observe("ttft", 0.4, 4)
    triton.observe("e2e", 0.5, 4)
    triton.observe("queue", 0.1, 4)
    return {"vllm": vllm.render().decode(), "sglang": sglang.render().decode(), "tgi": tgi.render().decode(),
            "triton": triton.render().decode()}  # fmt: skip


def by_client(text: str, kind: str) -> dict[str, Histogram]:
    """The same histograms assembled from prometheus-client's parse of the whole page."""
    preset = PRESETS[kind]
    out = {}
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for latency, names in preset.latency.items():
        for name in names:
            fam = families.get(name)
            if fam is None:
                continue
            samples = [s for s in fam.samples if s.name.endswith("_bucket")]
            buckets = sorted((float(s.labels["le"]), s.value) for s in samples)
            total = sum(s.value for s in fam.samples if s.name.endswith("_sum"))
            scale = 1e-3 if name.endswith("_ms") else 1.0
            out[latency] = Histogram(tuple(b * scale for b, _ in buckets[:-1]), tuple(c for _, c in buckets),
                                     total * scale)  # fmt: skip
            break
    return out


@pytest.mark.parametrize("kind", ["vllm", "sglang", "tgi", "triton"])
def test_the_line_reader_agrees_with_prometheus_client(kind: str) -> None:
    text = pages()[kind]
    got = ExpositionReader(PRESETS[kind], {}).read(text, False)
    assert got.latency is not None
    want = by_client(text, kind)
    for latency, h in want.items():
        assert got.latency[latency].bounds == pytest.approx(h.bounds)
        assert got.latency[latency].counts == h.counts
        assert got.latency[latency].total == pytest.approx(h.total)
    if kind == "triton":  # means from the microsecond counters over the successful requests
        assert got.latency["e2e"] == Histogram((), (4.0,), pytest.approx(2.0))
        assert got.latency["queue"].mean == pytest.approx(0.1)
    assert set(got.latency) >= set(want)


def test_openmetrics_with_exemplars_and_a_label_match() -> None:
    server = ClientServer("vllm")
    server.observe("ttft", 0.2, 7)
    lines = openmetrics(server.registry, escaping=ALLOWUTF8).decode().splitlines()
    at = next(i for i, ln in enumerate(lines) if "first_token_seconds_bucket" in ln and 'le="0.25"' in ln)
    lines[at] += ' # {trace_id="a}b"} 0.2 1.7e9'  # an exemplar, a brace in its label value
    text = "\n".join(lines) + "\n"
    got = ExpositionReader(PRESETS["vllm"], {"engine": "0"}).read(text, True)
    assert got.latency is not None and got.latency["ttft"].count == 7
    assert got.latency["ttft"].counts[got.latency["ttft"].bounds.index(0.25)] == 7
    other = ExpositionReader(PRESETS["vllm"], {"engine": "1"})  # matches no series: no histogram
    with pytest.raises(Exception, match="no vllm:num_requests_waiting series"):
        other.read(text, True)


BROKEN = {
    "an unterminated label value": 'vllm:e2e_request_latency_seconds_bucket{le="0.5} 3',
    "a value that is not a number": 'vllm:e2e_request_latency_seconds_bucket{le="0.5"} three',
    "a bound that is not a number": 'vllm:e2e_request_latency_seconds_bucket{le="half"} 3',
    "a negative count": 'vllm:e2e_request_latency_seconds_bucket{le="0.5"} -3',
    "counts that go down": 'vllm:e2e_request_latency_seconds_bucket{le="0.5"} 9',
}


@pytest.mark.parametrize("line", BROKEN.values(), ids=list(BROKEN))
def test_a_broken_histogram_is_unknown_and_the_depth_is_still_read(line: str) -> None:
    good = [
        "vllm:num_requests_waiting 4",
        'vllm:e2e_request_latency_seconds_bucket{le="0.3"} 2',
        'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 5',
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf"} 5',
        "vllm:e2e_request_latency_seconds_sum 2.0",
        "vllm:e2e_request_latency_seconds_count 5",
        'vllm:time_to_first_token_seconds_bucket{le="+Inf"} 5',
        "vllm:time_to_first_token_seconds_sum 1.0",
    ]
    fine = ExpositionReader(PRESETS["vllm"], {}).read("\n".join(good) + "\n", False)
    assert fine.latency is not None and fine.latency["e2e"].counts == (2.0, 5.0, 5.0)
    got = ExpositionReader(PRESETS["vllm"], {}).read("\n".join([*good[:2], line, *good[2:]]) + "\n", False)
    assert got.depth == 4
    assert got.latency is not None and "e2e" not in got.latency  # unknown, never fast
    assert got.latency["ttft"].count == 5  # the others are still read
