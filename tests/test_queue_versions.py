"""Real inference-server pages of several versions (tests/fixtures/servers, each citing where it
was published) read by the presets: every version's spelling of the depth, in-flight count,
KV-cache usage, counters and latency histograms that docs/queues.md's version table lists."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from exporter.sources.queues.base import QueueSourceError
from exporter.sources.queues.scrape import PRESETS, ExpositionReader
from exporter.sources.queues.versions import SEEN_IN, rows
from rightsizing.models import builtin, kv_bytes_per_token

PAGES = Path(__file__).parent / "fixtures" / "servers"


def read(kind: str, page: str):
    return ExpositionReader(PRESETS[kind], {}, name=page).read((PAGES / page).read_text(), False)


def test_sglang_0_3_waiting_requests_with_a_name_label() -> None:
    v = read("sglang", "sglang-0.3-name-label.prom")
    assert (v.depth, v.in_flight, v.kv_cache_usage) == (0, 0, pytest.approx(0.01))
    assert (v.generated_tokens_total, v.prompt_tokens_total) == (424549, 506780)
    assert v.latency is not None
    # Inter-token latency as SGLang 0.3 and 0.4 named it, queue time as 0.3 named it.
    assert v.latency["itl"].count == 422425 and v.latency["itl"].total == pytest.approx(29846.5393948555)
    assert v.latency["queue"].count == 2104
    # The model is named in the `name` label: its pool of 161,721 tokens is sized in bytes.
    assert v.kv_cache_bytes == pytest.approx(161721 * kv_bytes_per_token(builtin("gemma-2-9b"), 2))


def test_sglang_0_4_inter_token_latency_is_time_per_output_token() -> None:
    v = read("sglang", "sglang-0.4-model-name.prom")
    assert (v.depth, v.in_flight, v.kv_cache_usage) == (2826, 162, pytest.approx(0.28))
    assert (v.generated_tokens_total, v.prompt_tokens_total) == (7557572, 8128902)
    assert v.latency is not None and set(v.latency) == {"itl"}
    assert v.latency["itl"].count == 7400757 and v.latency["itl"].bounds[:3] == (0.005, 0.01, 0.015)


def test_vllm_v0_cache_config_before_the_model_name(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "rightsizer.queues")
    v = read("vllm", "vllm-v0-cache-info-first.prom")
    assert (v.depth, v.in_flight, v.kv_cache_usage, v.preemptions_total) == (0, 0, 0.0, 0)
    assert (v.generated_tokens_total, v.prompt_tokens_total, v.requests_total) == (955, 148, 4)
    # The cache configuration was read although no model name had been seen yet: the pool is
    # unknown only because that model is not a built-in, and the reason names it.
    reasons = [getattr(r, "reason", "") for r in caplog.records if r.getMessage() == "KV-cache pool unknown"]
    assert reasons and "serves 'Qwen/Qwen2.5-Coder-1.5B-Instruct', not a built-in" in reasons[0]


def test_vllm_v0_gpu_cache_usage_name() -> None:
    v = read("vllm", "vllm-v0-router.prom")
    assert (v.depth, v.in_flight, v.kv_cache_usage) == (0, 0, 0.0)


def _partial(kind: str, page: str):
    """The families a partial paste holds, read as a poll reads them (it has no depth line)."""
    reader = ExpositionReader(PRESETS[kind], {})
    scan = reader.scan(False)
    scan.feed((PAGES / page).read_bytes())
    scan.lines.finish()
    reader._add(scan.lines.take(), False, scan.sums)
    return scan.sums


def test_vllm_v1_engine_label_and_created_samples() -> None:
    sums = _partial("vllm", "vllm-v1-engine-created.prom")
    assert sums.highest == {"vllm:kv_cache_usage_perc": pytest.approx(9.75010481363281e-06)}
    assert sums.model_name is None and not sums.totals  # `_created` gauges are not counters read
    with pytest.raises(QueueSourceError, match="metric vllm:num_requests_waiting not found"):
        read("vllm", "vllm-v1-engine-created.prom")


def test_a_negative_kv_cache_usage_is_unknown_not_a_number() -> None:
    sums = _partial("vllm", "vllm-v1-negative-usage.prom")
    assert sums.highest == {"vllm:kv_cache_usage_perc": pytest.approx(-0.3875395987328405)}
    text = (PAGES / "vllm-v1-negative-usage.prom").read_text() + 'vllm:num_requests_waiting{engine="3"} 2\n'
    assert ExpositionReader(PRESETS["vllm"], {}).read(text, False).kv_cache_usage is None


def test_tgi_and_triton_pages() -> None:
    tgi = read("tgi", "tgi-names-tgis.prom")
    assert (tgi.depth, tgi.in_flight) == (0, 0)
    triton = read("triton", "triton-trtllm.prom")
    assert (triton.depth, triton.in_flight) == (0, None)


def test_a_triton_without_pending_count_is_down_not_zero() -> None:
    with pytest.raises(QueueSourceError, match="metric nv_inference_pending_request_count not found"):
        read("triton", "triton-early-no-pending.prom")


def test_neither_sglang_spelling_names_both_in_the_reason() -> None:
    with pytest.raises(QueueSourceError, match=r"sglang:num_queue_reqs \(or sglang:num_requests_waiting\)"):
        ExpositionReader(PRESETS["sglang"], {}).read("sglang:token_usage 0.5\n", False)


def test_the_newer_spelling_wins_when_a_page_has_both() -> None:
    text = "sglang:num_queue_reqs 7\nsglang:num_requests_waiting 3\nsglang:num_running_reqs 1\n"
    assert ExpositionReader(PRESETS["sglang"], {}).read(text, False).depth == 7


def test_the_version_table_lists_every_name_read_and_its_pages_hold_them() -> None:
    listed = list(rows())
    assert {name for _, _, name, _, _ in listed} == set(SEEN_IN), "a name read is missing from SEEN_IN"
    for kind, _, name, versions, page in listed:
        assert versions, f"{kind}: {name} says no version"
        if page:
            lines = (PAGES / page).read_text().splitlines()
            assert any(line.startswith(name) for line in lines if not line.startswith("#")), (page, name)
    for page in PAGES.glob("*.prom"):
        assert page.read_text().startswith("# Source: "), f"{page.name} does not cite its source"
    # The new spellings are in the table and on their pages.
    assert ("sglang", "depth", "sglang:num_requests_waiting") in {(k, r, n) for k, r, n, _, _ in listed}
