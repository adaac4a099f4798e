"""One upstream query per rule per refresh in Prometheus mode, source states included, on both engines.

The queue rules need to know which queue sources are up (1), down (0) or stale (-1); the first of
them carries that query inside its own (``(query) or label_replace(up query, marker)``) and the other
awaits it. Against a real Prometheus and a real VictoriaMetrics holding the same half hour of three
queues (jobs up with 5 items, chat's source down, embed not scraped for the last 20 minutes) the
adapter's own counters must show exactly one query per rule per refresh, each rule's values and
states must equal what its query and the up query give when asked alone at the same instant, and
the answers must still tell down and stale (503) and unknown (404) from a real value.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from adapter_support import assert_status, client_get
from prometheus_client import generate_latest
from report_history import ENGINES, engine_holding
from test_adapter_prometheus import FakePrometheus, cache_for, prom, vector

from adapter.cache import Cache
from adapter.config import load_config
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.promql import render
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.source_states import MARKER

__all__ = ["prom"]

EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_depth"
STEP, SPAN = 15.0, 1800.0
QUEUES = {  # queue -> (kind, last sample this many seconds before now, source up, depth)
    "jobs": ("redis", 0.0, 1, 5),
    "chat": ("vllm", 0.0, 0, None),  # the exporter cannot read it: source down, no depth
    "embed": ("redis", 1200.0, 1, 3),  # its exporter not scraped for 20 minutes: stale
}


def history(end: float) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"rightsizer_queue_source_up": [], "rightsizer_queue_depth": []}
    for queue, (kind, ago, up, depth) in QUEUES.items():
        labels = f'queue="{queue}",kind="{kind}",namespace="prod",instance="node-a:9400",job="rightsizer"'
        for k in range(int(SPAN / STEP) + 1):
            t = end - SPAN + k * STEP
            if t > end - ago:
                continue
            for name, value in (("rightsizer_queue_source_up", up), ("rightsizer_queue_depth", depth)):
                if value is not None:
                    out[name].append(f"{name}{{{labels}}} {value} {t:.3f}")
    return out


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    with engine_holding(request.param, history(time.time())) as url:
        yield url


@pytest.fixture
async def served(engine: str, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, PrometheusSource]]:
    cfg = load_config(None, {"prometheus": {"url": engine}}, environ={})
    metrics = AdapterMetrics()
    source = PrometheusSource(cfg.prometheus, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    yield client, cache, source
    await source.close()


def counter(cache: Cache, line: str) -> float:
    """The sum of the samples whose line starts with the regex ``line``."""
    text = generate_latest(cache.metrics.registry).decode()
    return sum(float(v) for v in re.findall(rf"^{line}\S* (\S+)$", text, re.M))


def as_set(series: Any) -> set[tuple[frozenset[tuple[str, str]], float]]:
    return {(frozenset(s.labels.items()), s.value) for s in series}


async def test_one_query_per_rule_per_refresh_with_source_states(served: Any) -> None:
    client, cache, source = served
    for _ in range(3):
        await cache.refresh_once()
    assert all(state.error is None for state in cache.states.values()), cache.states
    sent = counter(cache, r'rightsizer_adapter_upstream_queries_total\{outcome="success"')
    failed = counter(cache, r'rightsizer_adapter_upstream_queries_total\{outcome="error"')
    refreshes = counter(cache, "rightsizer_adapter_refreshes_total")
    rules = len(BUILTIN_RULES)
    assert (sent, failed, refreshes) == (3 * rules, 0, 3) and len(cache.rules) == rules
    for rule in cache.rules.values():  # the split answer is exactly what each query gives alone
        state = cache.states[rule.name]
        assert rule.query is not None
        alone, _, _ = await source.query(render(rule.query, rule.matchers), state.vector.timestamp)
        assert as_set(state.vector.series) == as_set(alone), rule.name
        if rule.up_query is not None:
            up, _, _ = await source.query(render(rule.up_query, rule.matchers), state.vector.timestamp)
            assert state.sources is not None and as_set(state.sources.series) == as_set(up), rule.name
            if rule.up_family == "rightsizer_queue_source_up":
                assert {s.labels["queue"]: s.value for s in up} == {"jobs": 1, "chat": 0, "embed": -1}
    code, body = await client_get(client, f"{EXT}?labelSelector=queue%3Djobs")
    assert code == 200 and [i["value"] for i in body["items"]] == ["5"], body
    down = await client_get(client, f"{EXT}?labelSelector=queue%3Dchat")
    assert_status(down, 503, "ServiceUnavailable")
    assert "source down" in down[1]["message"] and "'chat'" in down[1]["message"]
    stale = await client_get(client, f"{EXT}?labelSelector=queue%3Dembed")
    assert_status(stale, 503, "ServiceUnavailable")
    assert "no current sample" in stale[1]["message"] and "'embed'" in stale[1]["message"]
    assert_status(await client_get(client, f"{EXT}?labelSelector=queue%3Dghost"), 404, "NotFound")


UP_FAMILY = "rightsizer_queue_source_up"
JOBS, CHAT = {"queue": "jobs", "namespace": "prod"}, {"queue": "chat", "namespace": "prod"}
IN_FLIGHT = "/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/rightsizer_queue_in_flight"


def fake_answer(carrier: tuple[int, Any]) -> Any:
    """The fake Prometheus: ``carrier`` to the query carrying the states, the others as asked."""

    def answer(query: str) -> tuple[int, Any]:
        if MARKER in query:
            return carrier
        if query.startswith(f"max without (instance, job) ({UP_FAMILY}"):
            return vector([(JOBS, "1"), (CHAT, "0")])  # the up query asked alone
        return vector([(JOBS, "2")] if "rightsizer_queue_in_flight" in query else [])

    return answer


async def test_a_failed_carrier_costs_one_query_alone_and_no_availability(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    prom.answer = fake_answer((422, {"status": "error", "errorType": "bad_data", "error": "parse error"}))
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    alone = [q for q in prom.queries if q.startswith(f"max without (instance, job) ({UP_FAMILY}")]
    ups = {r.up_family for r in BUILTIN_RULES if r.up_family}  # each carrier fails: its up query alone
    assert len(prom.queries) == len(BUILTIN_RULES) + len(ups) and len(alone) == 1  # the queues' once
    assert "HTTP 422: bad_data: parse error" in (cache.states["rightsizer_queue_depth"].error or "")
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    code, body = await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Djobs")
    assert code == 200 and [i["value"] for i in body["items"]] == ["2"], body
    down = await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Dchat")
    assert_status(down, 503, "ServiceUnavailable")
    assert "source down" in down[1]["message"]
    assert_status(await client_get(client, f"{IN_FLIGHT}?labelSelector=queue%3Dghost"), 404, "NotFound")
    await source.close()


async def test_a_prometheus_that_fails_everything_gets_no_extra_query(prom: FakePrometheus) -> None:
    prom.answer = lambda query: (503, "unavailable")
    cache, source, _ = await cache_for(prom)
    await cache.refresh_once()
    ups = {r.up_family for r in BUILTIN_RULES if r.up_family}
    assert len(prom.queries) == len(BUILTIN_RULES) and sum(MARKER in q for q in prom.queries) == len(ups)
    assert all("HTTP 503" in (state.error or "") for state in cache.states.values())
    await source.close()


async def test_max_series_per_rule_bounds_values_and_states_each(prom: FakePrometheus) -> None:
    queues = [({"queue": f"q{i}", "namespace": "prod"}, "1") for i in range(3)]
    states = [({**labels, MARKER: "1"}, "1") for labels, _ in queues]
    prom.answer = fake_answer(vector(queues[:2] + states[:2]))
    cache, source, _ = await cache_for(prom, max_series_per_rule=2)
    await cache.refresh_once()
    depth = cache.states["rightsizer_queue_depth"]
    assert depth.error is None and depth.vector is not None and depth.sources is not None
    assert (len(depth.vector), len(depth.sources)) == (2, 2)
    assert all(MARKER not in s.labels for s in depth.sources.series)
    prom.answer = fake_answer(vector(queues[:2] + states))
    await cache.refresh_once()
    why = cache.states["rightsizer_queue_depth"].error or ""
    assert "3 source states, more than max_series_per_rule (2)" in why
    prom.answer = fake_answer(vector(queues + states[:2]))
    await cache.refresh_once()
    why = cache.states["rightsizer_queue_depth"].error or ""
    assert "3 series, more than max_series_per_rule (2)" in why
    await source.close()
