"""Direct mode: several exporters scraped concurrently, grouping and aggregation, and what a dead
exporter does to the rules its families feed (never an empty queue read as zero)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from adapter_support import ExpositionServer, exposition

from adapter.cache import Cache
from adapter.config import load_config
from adapter.rules import RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.scrape import ScrapeSource, evaluate, parse_samples
from adapter.vectors import Series
from exporter.settings import build

NODE_A = exposition(
    {
        "rightsizer_queue_depth": [({"queue": "jobs", "namespace": "prod"}, 4)],
        "DCGM_FI_DEV_GPU_UTIL": [({"UUID": "GPU-a", "pod": "p-0", "namespace": "prod"}, 50)],
    }
)
NODE_B = exposition({"DCGM_FI_DEV_GPU_UTIL": [({"UUID": "GPU-b", "pod": "p-1", "namespace": "prod"}, 30)]})


def rule(**direct: Any) -> RuleConfig:
    return build(RuleConfig, {"name": "r", "direct": direct}, "rule")


def test_evaluate_groups_scales_and_renames() -> None:
    samples = [
        Series({"a": "1", "b": "x", "instance": "n1"}, 10.0),
        Series({"a": "1", "b": "y", "instance": "n2"}, 30.0),
        Series({"a": "2", "b": "y", "instance": "n1"}, float("nan")),
    ]
    by_a = evaluate(rule(family="f", aggregation="avg", by=["a"], scale=0.5), samples)
    assert [(dict(s.labels), s.value) for s in by_a] == [({"a": "1"}, 10.0)]  # NaN left out
    total = evaluate(rule(family="f", aggregation="sum", by=[]), samples)
    assert sorted(((dict(s.labels), s.value) for s in total), key=lambda p: p[1]) == [
        ({"a": "1", "b": "x"}, 10.0),
        ({"a": "1", "b": "y"}, 30.0),
    ]
    top = evaluate(
        rule(family="f", aggregation="max", without=["instance", "b"], rename={"a": "queue"}), samples
    )
    assert [(dict(s.labels), s.value) for s in top] == [({"queue": "1"}, 30.0)]
    matched = evaluate(
        build(RuleConfig, {"name": "r", "match": ['b="y"'], "direct": {"family": "f"}}, ""), samples
    )
    assert [s.value for s in matched] == [30.0]


def test_only_wanted_families_are_parsed_with_the_instance_label() -> None:
    text = NODE_A + 'other_family{x="1"} 3\n'
    parsed = parse_samples(text, frozenset({"rightsizer_queue_depth"}), "node-a:9430")
    assert list(parsed) == ["rightsizer_queue_depth"]
    assert dict(parsed["rightsizer_queue_depth"][0].labels) == {
        "queue": "jobs",
        "namespace": "prod",
        "instance": "node-a:9430",
    }
    with pytest.raises(ValueError):
        parse_samples('rightsizer_queue_depth{queue="a} 1\n', frozenset({"rightsizer_queue_depth"}), "n")


async def two_nodes(stale_after: float) -> tuple[Cache, ScrapeSource, ExpositionServer, ExpositionServer]:
    a = await ExpositionServer(NODE_A).__aenter__()
    b = await ExpositionServer(NODE_B).__aenter__()
    direct = {"exporters": [a.url, b.url], "stale_after_seconds": stale_after}
    cfg = load_config(None, {"direct": direct}, environ={})
    metrics = AdapterMetrics()
    source = ScrapeSource(cfg.direct, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    await cache.refresh_once()
    return cache, source, a, b


def values(cache: Cache, name: str) -> list[float] | str:
    state = cache.states[name]
    return state.error or "" if state.vector is None else sorted(s.value for s in state.vector.series)


async def test_exporters_are_merged_and_a_dead_one_fails_only_its_families(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache, source, a, b = await two_nodes(stale_after=0)
    assert values(cache, "rightsizer_gpu_utilization_ratio") == [0.3, 0.5]
    assert values(cache, "rightsizer_queue_depth") == [4.0]
    caplog.set_level(logging.WARNING)
    b.status = 500  # node b, which publishes GPU utilization but no queue, stops answering
    await cache.refresh_once()
    assert "is not answering: HTTP 500" in values(cache, "rightsizer_gpu_utilization_ratio")
    assert values(cache, "rightsizer_queue_depth") == [4.0]
    a.status = 500  # and now every exporter is down
    await cache.refresh_once()
    assert "no exporter answered" in values(cache, "rightsizer_queue_depth")
    warnings = [r for r in caplog.records if r.getMessage() == "rules have no values"]
    assert len(warnings) == 2  # one line per cause (b is down; no exporter answers), not one per rule
    a.status = b.status = 200
    await cache.refresh_once()
    assert values(cache, "rightsizer_queue_depth") == [4.0]
    await source.close()
    for srv in (a, b):
        await srv.__aexit__()


async def test_a_blip_within_stale_after_keeps_the_last_good_values() -> None:
    cache, source, a, b = await two_nodes(stale_after=3600)
    a.text = NODE_A.replace('namespace="prod"} 4', 'namespace="prod} 9')  # unparsable: a failure too
    await cache.refresh_once()
    assert values(cache, "rightsizer_queue_depth") == [4.0]  # the last good value, not a fabricated zero
    a.text = NODE_A.replace("} 4", "} 9")
    await cache.refresh_once()
    assert values(cache, "rightsizer_queue_depth") == [9.0]
    await source.close()
    for srv in (a, b):
        await srv.__aexit__()
