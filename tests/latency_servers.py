"""Inference servers' /metrics with their exact latency histogram expositions, for the SLO tests.

vLLM and SGLang publish through prometheus-client, so theirs are rendered by prometheus-client from
registries holding their real names, labels and default bucket layouts (vLLM
``vllm/v1/metrics/loggers.py``, SGLang ``python/sglang/srt/metrics/collector.py``); TGI's Rust
metrics-exporter-prometheus (its ``*duration`` histograms: 35 buckets from 0.00015 s, x1.5 each) and
Triton's prometheus-cpp (cumulative microsecond counters; the millisecond first-response histogram
only with ``--metrics-config histogram_latencies=true``) are written out as they print them.

Each server can ``observe`` latencies, ``restart`` (every count from zero, optionally with another
bucket layout) and be told to leave a histogram out.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from servers import Process, http_get

VLLM_BUCKETS = {
    "ttft": (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
             20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    "itl": (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
            40.0, 80.0),
    "e2e": (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
            240.0, 480.0, 960.0, 1920.0, 7680.0),
}  # fmt: skip
VLLM_BUCKETS["queue"] = VLLM_BUCKETS["e2e"]
VLLM_NAMES = {
    "ttft": ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "e2e": ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."),
    "queue": ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."),
}
_SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_BUCKETS = {
    "ttft": _SGLANG_TTFT,
    "itl": (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
            0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
    "e2e": (*_SGLANG_TTFT, 800),
    "queue": (*_SGLANG_TTFT, 800),
}  # fmt: skip
SGLANG_NAMES = {
    "ttft": ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds."),
    "itl": ("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."),
    "e2e": ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds"),
    "queue": ("sglang:queue_time_seconds", "Histogram of queueing time in seconds."),
}
TGI_BUCKETS = tuple(0.0001 * 1.5**k for k in range(1, 36))


class ClientServer:
    """vLLM or SGLang: a prometheus-client registry with the server's gauges and histograms."""

    def __init__(self, kind: str, buckets: dict[str, Sequence[float]] | None = None,
                 leave_out: Sequence[str] = ()) -> None:  # fmt: skip
        self.kind = kind
        self.restart(buckets, leave_out)

    def restart(
        self, buckets: dict[str, Sequence[float]] | None = None, leave_out: Sequence[str] = ()
    ) -> None:
        """A new process: every counter and histogram from zero."""
        self.registry = r = CollectorRegistry()
        if self.kind == "vllm":
            names, layout, labels = VLLM_NAMES, dict(VLLM_BUCKETS), ["model_name", "engine"]
            self.values: tuple[str, ...] = ("meta-llama/Llama-3.1-8B-Instruct", "0")
            Gauge("vllm:num_requests_waiting", "Number of requests waiting.", labels, registry=r).labels(
                *self.values).set(3)  # fmt: skip
            Gauge("vllm:num_requests_running", "Number of requests running.", labels, registry=r).labels(
                *self.values).set(8)  # fmt: skip
            Counter("vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=r)
        else:
            names, layout = SGLANG_NAMES, dict(SGLANG_BUCKETS)
            labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
            self.values = ("meta-llama/Llama-3.1-8B-Instruct", "unified", "0", "0")
            Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels,
                  registry=r).labels(*self.values).set(2)  # fmt: skip
            Gauge("sglang:num_running_reqs", "The number of running requests.", labels, registry=r).labels(
                *self.values).set(6)  # fmt: skip
        layout.update(buckets or {})
        self.histograms = {
            kind: Histogram(name, help_, labels, buckets=layout[kind], registry=r)
            for kind, (name, help_) in names.items()
            if kind not in leave_out
        }
        if self.kind == "vllm":  # vLLM creates its per-engine series at start; SGLang on first use
            for h in self.histograms.values():
                h.labels(*self.values)

    def observe(self, kind: str, value: float, n: int = 1) -> None:
        h = self.histograms[kind].labels(*self.values)
        for _ in range(n):
            h.observe(value)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _le(bound: float) -> str:
    return repr(float(bound))


def _histogram_text(name: str, bounds: Sequence[float], values: Sequence[float], labels: str = "",
                    scale: float = 1.0) -> list[str]:  # fmt: skip
    """Histogram lines of ``values`` (seconds) on ``bounds`` (in the family's unit: value x scale)."""
    scaled = sorted(v * scale for v in values)
    sep = "," if labels else ""
    out = [f"# TYPE {name} histogram"]
    for b in bounds:
        out.append(f'{name}_bucket{{{labels}{sep}le="{_le(b)}"}} {bisect.bisect_right(scaled, b)}')
    out.append(f'{name}_bucket{{{labels}{sep}le="+Inf"}} {len(scaled)}')
    braces = f"{{{labels}}}" if labels else ""
    out.append(f"{name}_sum{braces} {float(sum(scaled))!r}")
    out.append(f"{name}_count{braces} {len(scaled)}")
    return out


class TgiServer:
    """TGI's router /metrics: no first-token histogram; a mean time per token per request."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self.values: dict[str, list[float]] = {"itl": [], "e2e": [], "queue": []}

    def observe(self, kind: str, value: float, n: int = 1) -> None:
        self.values[kind] += [value] * n

    def render(self) -> bytes:
        n = len(self.values["e2e"])
        lines = [
            "# TYPE tgi_request_success counter", f"tgi_request_success {n}",
            "# TYPE tgi_queue_size gauge", "tgi_queue_size 4",
            "# TYPE tgi_batch_current_size gauge", "tgi_batch_current_size 5",
        ]  # fmt: skip
        names = (("itl", "tgi_request_mean_time_per_token_duration"), ("e2e", "tgi_request_duration"),
                 ("queue", "tgi_request_queue_duration"))  # fmt: skip
        for kind, name in names:
            lines += _histogram_text(name, TGI_BUCKETS, self.values[kind])
        return ("\n".join(lines) + "\n").encode()


class TritonServer:
    """Triton's /metrics: cumulative microsecond duration counters per model; the first-response
    histogram in milliseconds only when ``histograms`` (``histogram_latencies=true``)."""

    def __init__(self, histograms: bool = False) -> None:
        self.histograms = histograms
        self.restart()

    def restart(self) -> None:
        self.values: dict[str, list[float]] = {"ttft": [], "e2e": [], "queue": []}

    def observe(self, kind: str, value: float, n: int = 1) -> None:
        self.values[kind] += [value] * n

    def render(self) -> bytes:
        label = 'model="embedder",version="1"'
        n = len(self.values["e2e"])
        lines = [
            "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
            "# TYPE nv_inference_request_success counter",
            f"nv_inference_request_success{{{label}}} {n}",
            "# HELP nv_inference_count Number of inferences performed (does not include cached requests)",
            "# TYPE nv_inference_count counter",
            f"nv_inference_count{{{label}}} {n}",
            "# HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds "
            "(includes cached requests)",
            "# TYPE nv_inference_request_duration_us counter",
            f"nv_inference_request_duration_us{{{label}}} {round(sum(self.values['e2e']) * 1e6)}",
            "# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds "
            "(includes cached requests)",
            "# TYPE nv_inference_queue_duration_us counter",
            f"nv_inference_queue_duration_us{{{label}}} {round(sum(self.values['queue']) * 1e6)}",
            "# TYPE nv_inference_pending_request_count gauge",
            f"nv_inference_pending_request_count{{{label}}} 1",
        ]
        if self.histograms:
            lines += _histogram_text("nv_inference_first_response_histogram_ms", (100, 500, 2000, 5000),
                                     self.values["ttft"], label, scale=1000.0)  # fmt: skip
        return ("\n".join(lines) + "\n").encode()


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape_series(p: Process, workload: str | None = None) -> Series:
    """One scrape of exporter ``p``: every sample by (name, sorted labels); only those labelled
    ``workload`` when it is given."""
    status, _, body = http_get(p.url + "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if workload is None or s.labels.get("workload") == workload
    }
