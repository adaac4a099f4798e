"""Inference servers' memory pressure is read from the same exposition as their queue depth:
KV-cache usage (vLLM's current and older names, SGLang's token usage) and preemption counters."""

from __future__ import annotations

import pytest
from queue_fakes import SglangMetrics, VllmMetrics

from exporter.sources.queues.base import QueueSourceError
from exporter.sources.queues.scrape import PRESETS, ExpositionReader


def reader(kind: str) -> ExpositionReader:
    return ExpositionReader(PRESETS[kind], {})


@pytest.mark.parametrize("openmetrics", [False, True])
def test_vllm_kv_cache_and_preemptions_come_with_the_depth(openmetrics: bool) -> None:
    fake = VllmMetrics(engines=2)
    fake.set([3, 4], [1, 1])
    value = reader("vllm").read(fake.render(openmetrics).decode(), openmetrics)
    assert (value.depth, value.in_flight) == (7, 2)
    assert value.kv_cache_usage == pytest.approx(0.42)  # the fullest engine's
    assert value.preemptions_total == 14  # both engines' counters


def test_older_vllm_name_and_sglang_token_usage() -> None:
    old = (
        'vllm:num_requests_waiting{model_name="m"} 2\n'
        'vllm:num_requests_running{model_name="m"} 1\n'
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.97\n'
    )
    value = reader("vllm").read(old, False)
    assert value.kv_cache_usage == pytest.approx(0.97) and value.preemptions_total is None
    sglang = reader("sglang").read(SglangMetrics().render().decode(), False)
    assert sglang.kv_cache_usage == pytest.approx(0.31) and sglang.preemptions_total == 3


def test_a_broken_pressure_figure_is_left_out_and_never_fails_the_depth() -> None:
    text = (
        "vllm:num_requests_waiting 5\n"
        "vllm:kv_cache_usage_perc NaN\n"
        "vllm:num_preemptions_total -3\n"
    )
    value = reader("vllm").read(text, False)
    assert value.depth == 5 and value.kv_cache_usage is None and value.preemptions_total is None
    tgi = reader("tgi").read("tgi_queue_size 4\ntgi_batch_current_size 2\n", False)
    assert tgi.kv_cache_usage is None and tgi.preemptions_total is None  # TGI publishes neither
    with pytest.raises(QueueSourceError):
        reader("vllm").read("vllm:kv_cache_usage_perc 0.5\n", False)  # the depth itself is missing
