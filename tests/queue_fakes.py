"""Inference-server-shaped expositions and JSON bodies for the queue tests and bench.

vLLM and SGLang publish through prometheus-client, so their expositions are rendered by
prometheus-client from registries holding their real metric names, HELP texts and labels; TGI
(Rust metrics-exporter-prometheus) and Triton (prometheus-cpp) are written out as they print them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import ALLOWUTF8
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

TEXT = "text/plain; version=0.0.4; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
_TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class PrometheusClientServer:
    """An exposition rendered by prometheus-client, cached until a value changes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._cache: dict[bool, bytes] = {}

    def changed(self) -> None:
        self._cache.clear()

    def render(self, openmetrics: bool = False) -> bytes:
        if openmetrics not in self._cache:
            # ALLOWUTF8 keeps "vllm:..." names as written (the default escaping rewrites ':' to '_').
            if openmetrics:
                self._cache[openmetrics] = generate_openmetrics(self.registry, escaping=ALLOWUTF8)
            else:
                self._cache[openmetrics] = generate_latest(self.registry)
        return self._cache[openmetrics]


class VllmMetrics(PrometheusClientServer):
    """vLLM's v1 engine /metrics: scheduler gauges per engine, token counters, latency histograms."""

    def __init__(self, model: str = LLAMA, engines: int = 1) -> None:
        super().__init__()
        labels = ["model_name", "engine"]
        r = self.registry
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=r
        )
        self.kv = kv = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=r
        )
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels, registry=r
        )
        self.prompt = prompt = Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=r
        )
        self.generated = generated = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=r
        )
        self.success = success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=r,
        )
        histograms = [
            Histogram(name, help_, labels, buckets=buckets, registry=r)
            for name, help_, buckets in (
                (
                    "vllm:time_to_first_token_seconds",
                    "Histogram of time to first token in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:inter_token_latency_seconds",
                    "Histogram of inter-token latency in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:e2e_request_latency_seconds",
                    "Histogram of e2e request latency in seconds.",
                    _LATENCY_BUCKETS,
                ),
                (
                    "vllm:request_queue_time_seconds",
                    "Histogram of time spent in WAITING phase for request.",
                    _LATENCY_BUCKETS,
                ),
                ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKEN_BUCKETS),
                ("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKEN_BUCKETS),
            )
        ]
        self.model = model
        self.engines = [str(i) for i in range(engines)]
        for engine in self.engines:
            kv.labels(model, engine).set(0.42)
            self.preemptions.labels(model, engine).inc(7)
            prompt.labels(model, engine).inc(812345)
            generated.labels(model, engine).inc(290211)
            for reason in ("stop", "length", "abort"):
                success.labels(model, engine, reason).inc(1234)
            for h in histograms:
                for v in (0.03, 0.2, 0.9, 3.0, 12.0, 150.0):
                    h.labels(model, engine).observe(v)
        self.set([0.0] * engines, [0.0] * engines)

    def set(self, waiting: Sequence[float], running: Sequence[float]) -> None:
        for engine, w, n in zip(self.engines, waiting, running, strict=True):
            self.waiting.labels(self.model, engine).set(w)
            self.running.labels(self.model, engine).set(n)
        self.changed()

    def publish_cache_config(self, blocks: int, block_size: int = 16, cache_dtype: str = "auto") -> None:
        """``vllm:cache_config_info`` as vLLM's loggers write it: one series per engine whose labels
        are the cache configuration (every field a string, ``None`` spelled out), value 1."""
        info = {
            "block_size": str(block_size), "cache_dtype": cache_dtype, "calculate_kv_scales": "False",
            "cpu_offload_gb": "0", "enable_prefix_caching": "True", "gpu_memory_utilization": "0.9",
            "is_attention_free": "False", "num_cpu_blocks": "None", "num_gpu_blocks": str(blocks),
            "num_gpu_blocks_override": "None", "sliding_window": "None", "swap_space_bytes": "4294967296",
        }  # fmt: skip
        gauge = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [*info, "engine"],
            registry=self.registry,
        )  # fmt: skip
        for engine in self.engines:
            gauge.labels(*info.values(), engine).set(1)
        self.changed()

    def serve(self, generated: float, prompt: float, requests: int) -> None:
        """Count work done by the first engine: tokens generated and prompted, requests finished."""
        engine = self.engines[0]
        self.generated.labels(self.model, engine).inc(generated)
        self.prompt.labels(self.model, engine).inc(prompt)
        self.success.labels(self.model, engine, "stop").inc(requests)
        self.changed()


class SglangMetrics(PrometheusClientServer):
    """SGLang's /metrics (``--enable-metrics``): per tensor-parallel rank gauges and histograms."""

    def __init__(self, model: str = LLAMA) -> None:
        super().__init__()
        labels = ["model_name", "engine_type", "tp_rank", "pp_rank"]
        r = self.registry
        self.queue = Gauge(
            "sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, registry=r
        )
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", labels, registry=r)
        Gauge("sglang:token_usage", "The token usage.", labels, registry=r).labels(
            model, "unified", "0", "0"
        ).set(0.31)
        Counter(
            "sglang:num_retracted_requests", "The number of retracted requests.", labels, registry=r
        ).labels(model, "unified", "0", "0").inc(3)
        Gauge("sglang:gen_throughput", "The generation throughput (token/s).", labels, registry=r).labels(
            model, "unified", "0", "0"
        ).set(86.5)
        for name, help_, value in (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", 51234),
            ("sglang:generation_tokens", "Number of generation tokens processed.", 20480),
            ("sglang:num_requests", "The number of processed requests.", 160),
        ):
            Counter(name, help_, labels, registry=r).labels(model, "unified", "0", "0").inc(value)
        ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            labels,
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        for v in (0.05, 0.4, 2.0):
            ttft.labels(model, "unified", "0", "0").observe(v)
        self.labels = (model, "unified", "0", "0")
        self.set(0, 0)

    def set(self, queue: float, running: float) -> None:
        self.queue.labels(*self.labels).set(queue)
        self.running.labels(*self.labels).set(running)
        self.changed()


def tgi_metrics(queue: float, batch: float) -> bytes:
    """TGI's router /metrics (Rust metrics-exporter-prometheus: TYPE lines, histograms, no timestamps)."""
    return (
        "# TYPE tgi_request_count counter\ntgi_request_count 18234\n"
        "# TYPE tgi_request_success counter\ntgi_request_success 18100\n"
        "# TYPE tgi_queue_size gauge\n"
        f"tgi_queue_size {queue:g}\n"
        "# TYPE tgi_batch_current_size gauge\n"
        f"tgi_batch_current_size {batch:g}\n"
        "# TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 8123\n"
        "# TYPE tgi_request_queue_duration histogram\n"
        'tgi_request_queue_duration_bucket{le="0.005"} 9000\n'
        'tgi_request_queue_duration_bucket{le="0.05"} 15000\n'
        'tgi_request_queue_duration_bucket{le="0.5"} 18000\n'
        'tgi_request_queue_duration_bucket{le="+Inf"} 18234\n'
        "tgi_request_queue_duration_sum 1312.5\n"
        "tgi_request_queue_duration_count 18234\n"
        "# TYPE tgi_request_generated_tokens histogram\n"
        'tgi_request_generated_tokens_bucket{le="10"} 2000\n'
        'tgi_request_generated_tokens_bucket{le="1000"} 18000\n'
        'tgi_request_generated_tokens_bucket{le="+Inf"} 18100\n'
        "tgi_request_generated_tokens_sum 3620000\n"
        "tgi_request_generated_tokens_count 18100\n"
        "# TYPE tgi_request_input_length histogram\n"
        'tgi_request_input_length_bucket{le="1000"} 12000\n'
        'tgi_request_input_length_bucket{le="+Inf"} 18234\n'
        "tgi_request_input_length_sum 9117000\n"
        "tgi_request_input_length_count 18234\n"
        "# TYPE tgi_batch_inference_duration histogram\n"
        'tgi_batch_inference_duration_bucket{method="decode",le="0.05"} 70000\n'
        'tgi_batch_inference_duration_bucket{method="decode",le="+Inf"} 71234\n'
        'tgi_batch_inference_duration_sum{method="decode"} 2201.25\n'
        'tgi_batch_inference_duration_count{method="decode"} 71234\n'
    ).encode()


def triton_metrics(pending: dict[str, float]) -> bytes:
    """Triton's /metrics (port 8002): per-model counters and the pending-request gauge, GPU gauges."""
    lines = [
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes",
        "# TYPE nv_inference_request_success counter",
        *(f'nv_inference_request_success{{model="{m}",version="1"}} 4321' for m in pending),
        "# HELP nv_inference_count Number of inferences performed (does not include cached requests)",
        "# TYPE nv_inference_count counter",
        *(f'nv_inference_count{{model="{m}",version="1"}} 9876' for m in pending),
        "# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting "
        "execution per-model.",
        "# TYPE nv_inference_pending_request_count gauge",
        *(f'nv_inference_pending_request_count{{model="{m}",version="1"}} {v:g}' for m, v in pending.items()),
        "# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)",
        "# TYPE nv_gpu_utilization gauge",
        'nv_gpu_utilization{gpu_uuid="GPU-9b8a7c6d-0000-4000-8000-000000000001"} 0.87',
        "# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes",
        "# TYPE nv_gpu_memory_used_bytes gauge",
        'nv_gpu_memory_used_bytes{gpu_uuid="GPU-9b8a7c6d-0000-4000-8000-000000000001"} 30064771072',
    ]
    return ("\n".join(lines) + "\n").encode()


def json_body(doc: Any) -> bytes:
    return json.dumps(doc).encode()
