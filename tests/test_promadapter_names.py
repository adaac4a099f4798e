"""Rules whose ``seriesQuery`` finds several series names (tests/fixtures/promadapter/several-names.yaml),
against a real Prometheus scraping the simulated exporter: one upstream query per rule per refresh,
and every metric's answer equal to prometheus-adapter's own query for that one name.

prometheus-adapter renders ``metricsQuery`` per request with ``<<.Series>>`` the one series name
the metric came from; ``upstream`` below sends exactly that query at the instant of the adapter's
refresh. The counters' rules use ``rate()``, which drops the series name, so the names cannot be
told apart after the fact by ``__name__``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from adapter_support import client_get
from servers import Process, exporter, http_get, prom_query, prometheus, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.gate import Gate
from adapter.kubernetes.quantities import format_quantity
from adapter.promadapter import schema
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app

FILE = Path(__file__).parent / "fixtures" / "promadapter" / "several-names.yaml"
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2"
EXTERNAL = "/apis/external.metrics.k8s.io/v1beta1"
# The simulated exporter's DCGM counters (dcgm-exporter's names) and queue counters, per rule.
COUNTERS = [
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
]
QUEUE_COUNTERS = ["generated_tokens", "preemptions", "prompt_tokens", "requests"]
PROM_QUERIES = r'^prometheus_http_requests_total\{code="200",handler="/api/v1/query"\} (\S+)$'


@pytest.fixture(scope="module")
def prom() -> Iterator[Process]:
    with (
        exporter(["--simulate"]) as sim,
        prometheus({"rightsizer": [sim.url.removeprefix("http://")]}) as p,
    ):
        wait_for(  # rate() over 1m needs two samples of every counter
            lambda: (
                len(prom_query(p.url, "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m])")) >= 4
                and prom_query(p.url, "rate(rightsizer_queue_requests_total[1m])")
            ),
            30,
            what="rates",
        )
        yield p


@pytest.fixture
async def served(prom: Process, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, PromAdapterSource]]:
    cfg = load_config(
        None, {"prometheus": {"url": prom.url}, "prometheus_adapter": {"config_file": str(FILE)}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, schema.load(str(FILE)), 600, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    await cache.refresh_once()
    client = await aiohttp_client(create_app(cache, Gate.off(), metrics, None))
    yield client, cache, source
    await source.close()


def at(cache: Cache, metric: str) -> float:
    vector = cache.states[metric].vector
    assert vector is not None, cache.states[metric].error
    return vector.timestamp


def series_names(prom: Process, pattern: str) -> list[str]:
    names = {s["metric"]["__name__"] for s in prom_query(prom.url, f'{{__name__=~"{pattern}",pod!=""}}')}
    return sorted(names)


def queries_answered(prom: Process) -> float:
    text = http_get(prom.url + "/metrics")[2].decode()
    found = re.search(PROM_QUERIES, text, re.M)
    return float(found.group(1)) if found else 0.0


async def test_each_rule_exposes_every_name_its_series_query_finds(served: Any, prom: Process) -> None:
    _, cache, source = served
    gauges = [n for n in series_names(prom, "DCGM_FI_(DEV|PROF)_.*") if n not in COUNTERS]
    assert len(gauges) >= 15  # the simulated fleet's per-pod DCGM gauges
    assert source.found.by_rule == {
        "rules[0]": sorted("dcgm_" + n.split("_", 3)[3] for n in gauges),
        "rules[1]": sorted(n.removeprefix("DCGM_FI_DEV_") + "_per_second" for n in COUNTERS),
        "externalRules[0]": [f"queue_{n}_per_second" for n in QUEUE_COUNTERS],
    }
    assert all(cache.states[n].error is None for n in cache.rules)


async def test_one_upstream_query_per_rule_per_refresh(served: Any, prom: Process) -> None:
    """Prometheus's own count of query API requests across one refresh of 3 rules and their
    (at least) 25 metrics."""
    _, cache, _ = served
    assert len(cache.rules) >= 25
    before = queries_answered(prom)
    await cache.refresh_once()
    assert queries_answered(prom) - before == 3
    assert all(cache.states[n].error is None for n in cache.rules)


async def test_every_gauge_answers_as_its_own_query(served: Any, prom: Process) -> None:
    client, cache, _ = served
    checked = 0
    for series in series_names(prom, "DCGM_FI_(DEV|PROF)_.*"):
        if series in COUNTERS:
            continue
        metric = "dcgm_" + series.split("_", 3)[3]
        checked += await compare_pods(
            client, prom, metric, series, "avg(<s>{<m>}) by (pod)", at(cache, metric)
        )
    assert checked >= 15 * 4


async def test_every_counter_rate_answers_as_its_own_query(served: Any, prom: Process) -> None:
    client, cache, _ = served
    checked = 0
    for series in COUNTERS:
        metric = series.removeprefix("DCGM_FI_DEV_") + "_per_second"
        template = "sum(rate(<s>{<m>}[1m])) by (pod)"
        checked += await compare_pods(client, prom, metric, series, template, at(cache, metric))
    assert checked >= 5 * 4


async def compare_pods(
    client: Any, prom: Process, metric: str, series: str, template: str, when: float
) -> int:
    """The adapter's pods/* answer per namespace against prometheus-adapter's query for it, with
    ``<s>`` the series name and ``<m>`` the request's matchers; the number of pods compared."""
    pods_by_ns: dict[str, set[str]] = {}
    for s in prom_query(prom.url, f'{series}{{pod!=""}}', when):
        pods_by_ns.setdefault(s["metric"]["namespace"], set()).add(s["metric"]["pod"])
    checked = 0
    for ns, pods in sorted(pods_by_ns.items()):
        matchers = f'namespace="{ns}",pod=~"{"|".join(sorted(pods))}"'
        query = template.replace("<s>", series).replace("<m>", matchers)
        expected = {
            s["metric"]["pod"]: format_quantity(float(s["value"][1]))
            for s in prom_query(prom.url, query, when)
        }
        code, body = await client_get(client, f"{CUSTOM}/namespaces/{ns}/pods/*/{metric}")
        assert code == 200, body
        assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == expected, metric
        assert expected
        checked += len(expected)
    return checked


async def test_every_queue_counter_rate_answers_as_its_own_query(served: Any, prom: Process) -> None:
    client, cache, _ = served
    for name in QUEUE_COUNTERS:
        metric = f"queue_{name}_per_second"
        query = f'sum(rate(rightsizer_queue_{name}_total{{namespace="llm"}}[1m])) by (queue)'
        expected = [
            ({"queue": s["metric"]["queue"]}, format_quantity(float(s["value"][1])))
            for s in prom_query(prom.url, query, at(cache, metric))
        ]
        code, body = await client_get(client, f"{EXTERNAL}/namespaces/llm/{metric}")
        assert code == 200, body
        got = [(i["metricLabels"], i["value"]) for i in body["items"]]
        assert sorted(got, key=str) == sorted(expected, key=str) and expected, metric
