"""What each inference server's /metrics page is read for: the names of its depth, in-flight count,
KV-cache usage, counters and latency histograms, with the spellings of the versions seen (the
version table of docs/queues.md says where each name was seen)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from .kv_pool import CACHE_INFO
from .settings import QueueSettings


@dataclass(frozen=True)
class Preset:
    """What one kind of server is read for. Every name in it is a sample name read from the page;
    ``read_names`` collects them all (a field marked ``histogram`` in its metadata names histogram
    families, read as their ``_bucket``, ``_sum`` and ``_count`` samples), and only those lines are
    kept from an answer: a name added here is read, with no other list to update."""

    depth: str
    in_flight: str | None
    # Memory pressure, read on the same poll for right-sizing: KV-cache usage 0-1 (the first name
    # found wins; several series: the highest) and a preemption counter (series summed).
    kv_cache: tuple[str, ...] = ()
    preemptions: str | None = None
    # Throughput counters, read on the same poll for cost per inference (series summed; of several
    # names, the first found wins): tokens generated, prompt tokens processed, requests finished.
    generated_tokens: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    requests: tuple[str, ...] = ()
    # Latency histograms (seconds unless ``histograms.SCALES`` says otherwise; of several names, the
    # first found wins), and cumulative duration counters giving a mean over ``mean_count``.
    ttft: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    itl: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    e2e: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    queue_time: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    mean_e2e: tuple[str, ...] = ()
    mean_queue: tuple[str, ...] = ()
    mean_count: tuple[str, ...] = ()
    # The server's cache configuration (an info series: its labels are read, not its value), which
    # sizes its KV-cache pool in bytes (``kv_pool``).
    cache_info: str | None = None
    # Or the pool's size in tokens, a gauge (several series: the largest).
    pool_tokens: str | None = None
    # The depth's and in-flight count's spellings in other versions of the server (docs/queues.md's
    # version table); the first of depth, *depth_also found is read.
    depth_also: tuple[str, ...] = ()
    in_flight_also: tuple[str, ...] = ()

    @property
    def depth_names(self) -> tuple[str, ...]:
        return (self.depth, *self.depth_also)

    @property
    def in_flight_names(self) -> tuple[str, ...]:
        return (*((self.in_flight,) if self.in_flight else ()), *self.in_flight_also)

    @property
    def latency(self) -> dict[str, tuple[str, ...]]:
        """Latency kind -> histogram names."""
        return {"ttft": self.ttft, "itl": self.itl, "e2e": self.e2e, "queue": self.queue_time}

    @property
    def means(self) -> dict[str, tuple[str, ...]]:
        return {"e2e": self.mean_e2e, "queue": self.mean_queue}

    @property
    def counters(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        return (self.generated_tokens, self.prompt_tokens, self.requests)

    @property
    def read_names(self) -> frozenset[str]:
        names: set[str] = set()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            found = (value,) if isinstance(value, str) else tuple(value or ())
            suffixes = ("_bucket", "_sum", "_count") if f.metadata.get("histogram") else ("",)
            names.update(name + suffix for name in found for suffix in suffixes)
        return frozenset(names)


# The metric names each inference server publishes (see the README's presets table). TGI and
# Triton publish no KV-cache usage share. TGI has no token counter: its generated-tokens and
# input-length histograms' sums are the totals (its Rust exporter writes counters without _total;
# either spelling is read). Triton counts inferences, not tokens.
PRESETS: Mapping[str, Preset] = {
    "vllm": Preset(
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "vllm:num_preemptions_total",
        ("vllm:generation_tokens_total",),
        ("vllm:prompt_tokens_total",),
        ("vllm:request_success_total",),
        ttft=("vllm:time_to_first_token_seconds",),
        itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        e2e=("vllm:e2e_request_latency_seconds",),
        queue_time=("vllm:request_queue_time_seconds",),
        cache_info=CACHE_INFO,
    ),
    "tgi": Preset(
        "tgi_queue_size",
        "tgi_batch_current_size",
        generated_tokens=("tgi_request_generated_tokens_sum",),
        prompt_tokens=("tgi_request_input_length_sum",),
        requests=("tgi_request_success", "tgi_request_success_total", "tgi_request_generated_tokens_count"),
        itl=("tgi_request_mean_time_per_token_duration",),
        e2e=("tgi_request_duration",),
        queue_time=("tgi_request_queue_duration",),
    ),
    "triton": Preset(
        "nv_inference_pending_request_count",
        None,
        requests=("nv_inference_count", "nv_inference_request_success"),
        ttft=("nv_inference_first_response_histogram_ms",),
        mean_e2e=("nv_inference_request_duration_us", "nv_inference_request_duration_us_total"),
        mean_queue=("nv_inference_queue_duration_us", "nv_inference_queue_duration_us_total"),
        mean_count=("nv_inference_request_success", "nv_inference_request_success_total"),
    ),
    "sglang": Preset(
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        ("sglang:token_usage",),
        "sglang:num_retracted_requests_total",
        ("sglang:generation_tokens_total",),
        ("sglang:prompt_tokens_total",),
        ("sglang:num_requests_total",),
        ttft=("sglang:time_to_first_token_seconds",),
        itl=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        e2e=("sglang:e2e_request_latency_seconds",),
        queue_time=("sglang:queue_time_seconds", "sglang:waiting_request_latency_seconds"),
        pool_tokens="sglang:max_total_num_tokens",
        depth_also=("sglang:num_requests_waiting",),  # SGLang 0.3 (with a `name` label)
        in_flight_also=("sglang:num_requests_running",),
    ),
}


def preset_for(cfg: QueueSettings) -> Preset:
    if cfg.kind == "prometheus":
        assert cfg.metric is not None  # checked by the configuration schema
        return Preset(cfg.metric, cfg.in_flight_metric)
    return PRESETS[cfg.kind]
