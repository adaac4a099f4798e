"""Every name the inference-server presets read, what it is, and where it was seen: the server
versions whose public /metrics pages carry it, and the page in tests/fixtures/servers that the
tests read it from (empty where no page in the tests has it). docs/queues.md's version table is
generated from here (``exporter.docs``); a test holds that every name a preset reads is listed and
that each page named holds its name."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping

from .presets import PRESETS, Preset

# Preset field -> what the name is, in the order the table lists them.
ROLES: Mapping[str, str] = {
    "depth": "depth",
    "depth_also": "depth",
    "in_flight": "in flight",
    "in_flight_also": "in flight",
    "kv_cache": "KV-cache usage",
    "preemptions": "preemptions",
    "generated_tokens": "generated tokens",
    "prompt_tokens": "prompt tokens",
    "requests": "requests",
    "ttft": "TTFT histogram",
    "itl": "inter-token latency histogram",
    "e2e": "end-to-end latency histogram",
    "queue_time": "queue time histogram",
    "mean_e2e": "request duration (mean)",
    "mean_queue": "queue duration (mean)",
    "mean_count": "requests (for the means)",
    "cache_info": "cache configuration (KV pool)",
    "pool_tokens": "KV pool in tokens",
}

SGLANG_03 = "sglang-0.3-name-label.prom"
SGLANG_04 = "sglang-0.4-model-name.prom"
VLLM_V0 = "vllm-v0-cache-info-first.prom"
TRITON = "triton-trtllm.prom"

# name -> (versions it was seen in, page in tests/fixtures/servers or "")
SEEN_IN: Mapping[str, tuple[str, str]] = {
    "vllm:num_requests_waiting": ("V0 (early 2025); V1 (0.8+, with an `engine` label from 0.10)", VLLM_V0),
    "vllm:num_requests_running": ("V0 (early 2025); V1 (0.8+)", VLLM_V0),
    "vllm:kv_cache_usage_perc": ("V1 0.10.0 and 0.20 (`engine` label)", "vllm-v1-engine-created.prom"),
    "vllm:gpu_cache_usage_perc": ("V0 (early 2025) and V1 before 0.10", "vllm-v0-router.prom"),
    "vllm:num_preemptions_total": ("V0 (early 2025); V1", VLLM_V0),
    "vllm:generation_tokens_total": ("V0 (early 2025); V1", VLLM_V0),
    "vllm:prompt_tokens_total": ("V0 (early 2025); V1", VLLM_V0),
    "vllm:request_success_total": ("V0 (early 2025, `finished_reason` label); V1", VLLM_V0),
    "vllm:time_to_first_token_seconds": ("V0 and V1", ""),
    "vllm:inter_token_latency_seconds": ("V1 (newer name)", ""),
    "vllm:time_per_output_token_seconds": ("V0 and early V1", ""),
    "vllm:e2e_request_latency_seconds": ("V0 and V1", ""),
    "vllm:request_queue_time_seconds": ("V1 0.10.0 (`engine` label)", "vllm-v1-engine-created.prom"),
    "vllm:cache_config_info": ("V0 (early 2025; before any `model_name` line) and V1", VLLM_V0),
    "tgi_queue_size": ("TGI's router; IBM's TGIS adapter for vLLM", "tgi-names-tgis.prom"),
    "tgi_batch_current_size": ("TGI's router; IBM's TGIS adapter for vLLM", "tgi-names-tgis.prom"),
    "tgi_request_generated_tokens_sum": ("TGI (histogram sum)", ""),
    "tgi_request_input_length_sum": ("TGI (histogram sum)", ""),
    "tgi_request_success": ("TGI (counter written without `_total`)", ""),
    "tgi_request_success_total": ("the same counter, as client libraries name it", ""),
    "tgi_request_generated_tokens_count": ("TGI (histogram count)", ""),
    "tgi_request_mean_time_per_token_duration": ("TGI", ""),
    "tgi_request_duration": ("TGI", ""),
    "tgi_request_queue_duration": ("TGI", ""),
    "nv_inference_pending_request_count": ("Triton with TensorRT-LLM; absent on early Triton pages", TRITON),
    "nv_inference_count": ("Triton (every version in the tests)", "triton-early-no-pending.prom"),
    "nv_inference_request_success": ("Triton (every version in the tests)", "triton-early-no-pending.prom"),
    "nv_inference_first_response_histogram_ms": ("Triton with histogram latencies on", ""),
    "nv_inference_request_duration_us": ("Triton", ""),
    "nv_inference_request_duration_us_total": ("the same counter, as client libraries name it", ""),
    "nv_inference_queue_duration_us": ("Triton", ""),
    "nv_inference_queue_duration_us_total": ("the same counter, as client libraries name it", ""),
    "nv_inference_request_success_total": ("the same counter, as client libraries name it", ""),
    "sglang:num_queue_reqs": ("0.4 and newer (`model_name` label)", SGLANG_04),
    "sglang:num_requests_waiting": ("0.3 (`name` label)", SGLANG_03),
    "sglang:num_running_reqs": ("0.4 and newer", SGLANG_04),
    "sglang:num_requests_running": ("0.3 (`name` label)", SGLANG_03),
    "sglang:token_usage": ("0.3 and 0.4", SGLANG_04),
    "sglang:num_retracted_requests_total": ("newer SGLang", ""),
    "sglang:generation_tokens_total": ("0.3 and 0.4", SGLANG_04),
    "sglang:prompt_tokens_total": ("0.3 and 0.4", SGLANG_03),
    "sglang:num_requests_total": ("0.4 and newer", ""),
    "sglang:time_to_first_token_seconds": ("0.3 and 0.4", ""),
    "sglang:inter_token_latency_seconds": ("newer SGLang (after 0.4)", ""),
    "sglang:time_per_output_token_seconds": ("0.3 and 0.4 (the inter-token latency's older name)", SGLANG_04),
    "sglang:e2e_request_latency_seconds": ("0.3 and 0.4", ""),
    "sglang:queue_time_seconds": ("newer SGLang", ""),
    "sglang:waiting_request_latency_seconds": ("0.3 (queue time's older name)", SGLANG_03),
    "sglang:max_total_num_tokens": ("0.3 (`name` label) and newer", SGLANG_03),
}


def preset_names(preset: Preset) -> Iterator[tuple[str, str]]:
    """(role, family name) of every name ``preset`` reads, in the table's order."""
    for field in ROLES:
        value = getattr(preset, field)
        for name in (value,) if isinstance(value, str) else tuple(value or ()):
            yield ROLES[field], name


def rows() -> Iterator[tuple[str, str, str, str, str]]:
    """(kind, role, name, versions, page) for every name every preset reads."""
    for kind, preset in PRESETS.items():
        if {f.name for f in dataclasses.fields(preset)} != set(ROLES):
            raise ValueError("a Preset field has no role in versions.ROLES")
        for role, name in preset_names(preset):
            versions, page = SEEN_IN.get(name, ("", ""))
            yield kind, role, name, versions, page
