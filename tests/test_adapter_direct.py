"""Direct mode: several exporters scraped concurrently, grouping and aggregation, and what a dead
exporter does to the rules its families feed (never an empty queue read as zero)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from adapter_support import ExpositionServer, exposition
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from servers import ROOT

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.answers import external
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.exposition import SampleReader
from adapter.sources.pace import MARGIN, Pace
from adapter.sources.scrape import ScrapeSource, evaluate
from adapter.vectors import Series
from rightsizer_core.settings import build

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


def test_only_wanted_families_are_read_with_the_instance_label() -> None:
    text = NODE_A + 'other_family{x="1"} 3\n'
    parsed = SampleReader("node-a:9430").read(text, ["rightsizer_queue_depth"])
    assert list(parsed) == ["rightsizer_queue_depth"]
    [sample] = parsed["rightsizer_queue_depth"]
    assert dict(sample.labels) == {"queue": "jobs", "namespace": "prod", "instance": "node-a:9430"}
    for bad in (
        'rightsizer_queue_depth{queue="a} 1\n',
        "rightsizer_queue_depth{} one\n",
        "rightsizer_queue_depth{}\n",
    ):
        with pytest.raises(ValueError):
            SampleReader("n").read(bad, ["rightsizer_queue_depth"])


def reference(text: str, families: list[str], instance: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """What prometheus-client's parser reads from the whole text."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in families:
                out.setdefault(sample.name, []).append(
                    ({**sample.labels, "instance": instance}, sample.value)
                )
    return out


def plain(parsed: dict[str, list[Series]]) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {k: [(dict(s.labels), s.value) for s in v] for k, v in parsed.items()}


def test_reader_agrees_with_the_parser_on_a_real_exposition() -> None:
    text = (ROOT / "tests/golden/simulated.prom").read_text()
    families = [r.direct.family for r in BUILTIN_RULES if r.direct] + [
        "DCGM_FI_DEV_FB_USED",
        "rightsizer_gpu_up",
    ]
    reader = SampleReader("node:9430")
    first = plain(reader.read(text, families))
    assert first == reference(text, families, "node:9430") and first
    assert plain(reader.read(text, families)) == first  # from the label cache this time


label_value = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\r"), max_size=8)


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["fam", "fam_total", "other", "fam_x"]),
            st.dictionaries(st.sampled_from(["a", "b", "le"]), label_value, max_size=2),
            st.floats(allow_nan=False),
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_reader_agrees_with_the_parser_on_any_layout(
    rows: list[tuple[str, dict[str, str], float, bool]],
) -> None:
    def line(name: str, labels: dict[str, str], value: float, ts: bool) -> str:
        pairs = ",".join(
            k + '="' + v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') + '"'
            for k, v in labels.items()
        )
        return f"{name}{{{pairs}}} {value!r}" + (" 1000" if ts else "")

    lines = [line(*row) for row in rows]
    text = "\n".join(lines) + "\n"
    seen = {(n, tuple(sorted(lbl.items()))) for n, lbl, _, _ in rows}
    if len(seen) != len(rows):
        return  # duplicate series: not valid exposition
    assert plain(SampleReader("i").read(text, ["fam", "other"])) == reference(text, ["fam", "other"], "i")


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


def answer(cache: Cache, metric: str, selector: str) -> tuple[int, Any]:
    """The external metrics API's answer in namespace prod: (code, item values or the Status)."""
    code, body = external(cache, metric, "prod", {"labelSelector": selector} if selector else {})
    data = json.loads(body)
    return code, [i["value"] for i in data["items"]] if code == 200 else data


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
    util = "rightsizer_gpu_utilization_ratio"
    assert values(cache, util) == [0.5]  # node a's GPU: its own source is current
    code, body = answer(cache, util, "pod=p-1")  # node b's pod: missed, never dropped
    assert code == 503 and "is not answering: HTTP 500" in body["message"], body
    assert answer(cache, util, "pod=p-0") == (200, ["500m"])
    assert answer(cache, util, "")[0] == 503  # the namespace, a and b: never a smaller answer
    assert values(cache, "rightsizer_queue_depth") == [4.0]
    a.status = 500  # and now every exporter is down
    await cache.refresh_once()
    assert "no exporter is current" in values(cache, "rightsizer_queue_depth")
    warnings = [r for r in caplog.records if r.getMessage() == "rules have no values"]
    # One line per cause, not one per rule: no exporter is current (b's failure was its own line,
    # "exporter scrape failed": every built-in rule then still answers what does not need b).
    assert len(warnings) == 1
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


def test_pace_scrapes_just_after_each_publication() -> None:
    pace = Pace(fallback=0.5)
    pace.scraped(None, now=10.0, wall=1000.0)
    assert pace.due == pytest.approx(10.5)  # no timestamp published: fixed cadence
    pace.scraped(100.0, now=20.0, wall=100.02)  # first sample seen, period unknown yet
    assert 20.0 < pace.due <= 20.5
    pace.scraped(100.0, now=20.2, wall=100.22)  # too early: chase shortly after
    assert pace.due == pytest.approx(20.25)
    pace.scraped(101.0, now=21.0, wall=101.01)  # new sample: the period is 1 s
    assert pace.period == 1.0
    assert pace.due == pytest.approx(21.0 + (101.0 + 1.0 - 101.01 + MARGIN))  # just after 102.0
    pace.scraped(102.0, now=22.0, wall=102.0 + 30)  # clocks 30 s apart: fall back to the cadence
    assert pace.due == pytest.approx(22.5)
    pace.failed(now=23.0)
    assert pace.due == pytest.approx(23.5)
    for _ in range(1, 8):  # a stalled exporter: chases, then the fixed cadence
        pace.scraped(102.0, now=30.0, wall=200.0)
    assert pace.due == pytest.approx(30.5)


async def test_a_sample_time_that_is_not_a_time_makes_the_exporter_down() -> None:
    """NaN differs from itself: read as a time it would look like an exporter that always moves."""
    cache, source, a, b = await two_nodes(stale_after=0)
    b.stamp = float("nan")
    await cache.refresh_once()
    code, body = answer(cache, "rightsizer_gpu_utilization_ratio", "pod=p-1")
    assert code == 503 and "rightsizer_last_sample_timestamp_seconds is nan, not a time" in body["message"]
    await source.close()
    for srv in (a, b):
        await srv.__aexit__()
