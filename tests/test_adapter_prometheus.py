"""Prometheus mode against a real HTTP server speaking the query API: one query per rule per refresh,
rendered templates, NaN/Inf refused (never served, never left out silently), every upstream fault
a 503 with its reason, auth sent."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from adapter_support import BUILTIN_QUERIES, assert_status, client_get
from aiohttp import web
from aiohttp.test_utils import TestServer
from prom_parts import carried, healthy

from adapter.cache import Cache
from adapter.config import AdapterConfig, load_config
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.gate import Gate
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources import TAINTED
from adapter.sources.evidence import target_parts
from adapter.sources.prometheus import PrometheusSource
from rightsizer_core.settings import ConfigError

EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces"


def vector(series: list[tuple[dict[str, str], str]]) -> tuple[int, Any]:
    result = [{"metric": labels, "value": [1700000000.5, value]} for labels, value in series]
    return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}


class FakePrometheus:
    """``POST /api/v1/query`` answering ``answer(query)``; records queries and request headers."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.forms: list[dict[str, str]] = []  # every form field of every query
        self.headers: list[dict[str, str]] = []
        self.delay = 0.0
        self.answer: Any = lambda query: vector([])
        app = web.Application()
        app.router.add_post("/prom/api/v1/query", self._query)
        self.server = TestServer(app, host="127.0.0.1")

    async def _query(self, request: web.Request) -> web.Response:
        form = await request.post()
        query = str(form["query"])
        self.queries.append(query)
        self.forms.append({k: str(v) for k, v in form.items()})
        self.headers.append(dict(request.headers))
        await asyncio.sleep(self.delay)
        code, body = self.answer(query)
        # compact, as Prometheus and VictoriaMetrics write it: the shape the adapter reads series by
        # series and label sets it has read before without decoding them (vectorjson, SeenTexts)
        text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        return web.Response(status=code, text=text, content_type="application/json")


@pytest.fixture
async def prom() -> AsyncIterator[FakePrometheus]:
    fake = FakePrometheus()
    await fake.server.start_server()
    yield fake
    await fake.server.close()


async def cache_for(prom: FakePrometheus, **prometheus: Any) -> tuple[Cache, PrometheusSource, AdapterConfig]:
    url = str(prom.server.make_url("/prom"))
    cfg = load_config(None, {"prometheus": {"url": url, **prometheus}}, environ={})
    metrics = AdapterMetrics()
    source = PrometheusSource(cfg.prometheus, metrics)
    await source.start()
    return Cache(cfg.effective_rules, source, metrics), source, cfg


async def test_one_query_per_rule_per_refresh_whatever_the_selectors(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    queues = [({"queue": f"q{i}", "namespace": "prod"}, str(i)) for i in range(1000)]
    provide = healthy({"rightsizer_queue_source_up": [labels for labels, _ in queues]})
    prom.answer = lambda q: vector(
        (queues if "rightsizer_queue_depth{" in q.split(" or ")[0] else []) + carried(q, provide)
    )
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    assert len(cache.rules) == len(BUILTIN_RULES)  # the source-state parts ride in the rules' own queries
    assert len(prom.queries) == BUILTIN_QUERIES  # and the targets' health in one evidence query
    up = target_parts(source.horizon)["up"]
    assert sum(up in q for q in prom.queries) == 1  # the targets' parts: asked once for all
    auth = Gate.off()
    client = await aiohttp_client(create_app(cache, auth, AdapterMetrics(), MetricsApiAuth(cfg.metrics_api)))
    for i in range(1000):
        code, body = await client_get(client, f"{EXT}/prod/rightsizer_queue_depth?labelSelector=queue%3Dq{i}")
        assert code == 200 and body["items"][0]["value"] == str(i)
    assert len(prom.queries) == BUILTIN_QUERIES  # a thousand selectors, no extra query
    await cache.refresh_once()
    assert len(prom.queries) == 2 * BUILTIN_QUERIES
    await source.close()


async def test_templates_are_rendered_with_the_rule_matchers(prom: FakePrometheus) -> None:
    cache, source, _ = await cache_for(prom)
    await cache.refresh_once()
    starts = {q.split(" or label_replace(")[0] for q in prom.queries}
    idle = 'rightsizer_gpu_verdict{pod!="",verdict="idle"}'
    # gpu_idle and gpu_busy: one query of the idle series' distinct values (flagpairs.py)
    keys = "namespace, pod, container, UUID"
    assert f'(count_values by ({keys}) ("rightsizer_adapter_value", {idle}))' in starts
    assert not any(f"1 - {idle}" in start or f"max by (namespace, pod, container, UUID) ({idle})" in start
                   for start in starts)  # fmt: skip
    assert "(max without (instance, job) (rightsizer_queue_in_flight{}))" in starts  # its own parts too
    assert '(avg by (namespace, pod, container, UUID) (DCGM_FI_DEV_GPU_UTIL{pod!=""}) * 0.01)' in starts
    everything = "\n".join(prom.queries)
    for part in (  # each rule's source family, with the rule's own matchers
        'timestamp(rightsizer_gpu_verdict{pod!="",verdict="idle"})',
        # every target up and current: no series needs the time it was last seen, one range read
        'present_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[3600s]) unless DCGM_FI_DEV_GPU_UTIL{pod!=""}',
        "timestamp(rightsizer_queue_source_up{}) < (time() - 60)",
        'label_replace(rightsizer_queue_source_up{}, "rightsizer_adapter_source_state"',
        "max by (instance, job) (max_over_time(((max_over_time(up[60s]) == 1) * time())[3600s:60s]))",
        "count_over_time(rightsizer_last_sample_timestamp_seconds[60s]) >= 2 unless "
        "changes(rightsizer_last_sample_timestamp_seconds[60s]) > 0",
    ):
        assert part in everything, part
    await source.close()


async def test_nan_and_inf_are_left_out_and_scalars_work(prom: FakePrometheus) -> None:
    series = [
        ({"queue": "a"}, "NaN"),
        ({"queue": "b"}, "+Inf"),
        ({"queue": "c"}, "-Inf"),
        ({"queue": "d"}, "4"),
    ]
    prom.answer = lambda q: vector(series)
    cache, source, _ = await cache_for(prom)
    await cache.refresh_once()
    state = cache.states["rightsizer_queue_depth"]
    vec = state.vector
    assert vec is not None and [(dict(s.labels), s.value) for s in vec.series] == [({"queue": "d"}, 4.0)]
    assert vec.timestamp == 1700000000.5
    # ... and never left out of a selection silently: their queues are refused, naming the value
    assert state.sources is not None
    refused = {s.labels["queue"]: s.labels["@why"] for s in state.sources.series if s.value == TAINTED}
    assert refused == {
        "a": "prometheus gave NaN for it: not a number",
        "b": "prometheus gave +Inf for it: not a number",
        "c": "prometheus gave -Inf for it: not a number",
    }
    prom.answer = lambda q: (
        200,
        {"status": "success", "data": {"resultType": "scalar", "result": [1.0, "3"]}},
    )
    await cache.refresh_once()
    vec = cache.states["rightsizer_queue_depth"].vector
    assert vec is not None and [s.value for s in vec.series] == [3.0]
    await source.close()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (
            (422, {"status": "error", "errorType": "execution", "error": "many-to-many matching"}),
            "HTTP 422: execution: many-to-many matching",
        ),
        ((200, "<html>proxy error</html>"), "not JSON"),
        ((200, {"status": "success", "data": {"resultType": "matrix", "result": []}}), "instant vector"),
        (
            (200, {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}}]}}),
            "malformed",
        ),
        ((502, "bad gateway"), "HTTP 502"),
    ],
)
async def test_upstream_faults_become_503_with_the_reason(
    prom: FakePrometheus, aiohttp_client: Any, answer: tuple[int, Any], reason: str
) -> None:
    prom.answer = lambda q: answer
    cache, source, cfg = await cache_for(prom)
    await cache.refresh_once()
    auth = Gate.off()
    client = await aiohttp_client(create_app(cache, auth, AdapterMetrics(), MetricsApiAuth(cfg.metrics_api)))
    status = await client_get(client, f"{EXT}/prod/rightsizer_queue_depth")
    assert_status(status, 503, "ServiceUnavailable")
    assert reason in status[1]["message"]
    assert (await client_get(client, "/apis/external.metrics.k8s.io/v1beta1"))[0] == 200
    await source.close()


async def test_slow_prometheus_hits_the_deadline(prom: FakePrometheus) -> None:
    prom.delay = 2.0
    cache, source, _ = await cache_for(prom, timeout_seconds=0.2)
    await cache.refresh_once()
    assert "timed out after 0.2s" in (cache.states["rightsizer_queue_depth"].error or "")
    await source.close()


@pytest.mark.parametrize(
    ("settings", "deadline", "refresh"),
    [
        ({}, 10.0, 60.0),  # the defaults: twice the 5 s refresh interval
        ({"refresh_interval_seconds": 30}, 60.0, 360.0),
        ({"refresh_interval_seconds": 1}, 5.0, 30.0),  # never under 5 s by default
        ({"refresh_interval_seconds": 300}, 120.0, 1200.0),  # nor over the setting's bound
        ({"refresh_interval_seconds": 30, "timeout_seconds": 3}, 3.0, 120.0),  # as set
    ],
)
async def test_the_query_deadline_is_twice_the_refresh_interval_unless_set(
    prom: FakePrometheus, settings: dict[str, float], deadline: float, refresh: float
) -> None:
    """What the engine is told (its own ``timeout``) and what the adapter waits for: a query cut at
    one interval lost whole refreshes at 40,000 GPUs (docs/fleet-scale.md). The whole refresh is
    cut only past six of them (its evidence query, rounds of rule queries, one round asked late),
    at least 30 s and four intervals."""
    prom.delay = 0.3
    cache, source, _ = await cache_for(prom, **settings)
    assert cache.deadline == refresh
    await cache.refresh_once()
    assert {form["timeout"] for form in prom.forms} == {str(deadline)}
    assert all(state.error is None for state in cache.states.values()), cache.states
    await source.close()
    if deadline <= 5:  # and the adapter's own wait ends there: a query slower than it fails alone
        prom.delay, prom.forms = deadline + 0.5, []
        cache, source, _ = await cache_for(prom, **settings)
        await cache.refresh_once()
        assert f"timed out after {deadline}s" in (cache.states["rightsizer_queue_depth"].error or "")
        await source.close()


async def test_credentials_and_headers_are_sent(prom: FakePrometheus, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    cache, source, _ = await cache_for(
        prom, bearer_token_file=str(tmp_path / "token"), headers={"X-Scope-OrgID": "team-a"}
    )
    await cache.refresh_once()
    assert all(h["Authorization"] == "Bearer s3cret" and h["X-Scope-OrgID"] == "team-a" for h in prom.headers)
    await source.close()
    (tmp_path / "pw").write_text("hunter2")
    prom.headers.clear()
    cache, source, _ = await cache_for(prom, username="ops", password_file=str(tmp_path / "pw"))
    await cache.refresh_once()
    assert prom.headers and all(h["Authorization"] == "Basic b3BzOmh1bnRlcjI=" for h in prom.headers)
    await source.close()
    cache, source, _ = await cache_for(prom, bearer_token_file=str(tmp_path / "missing"))
    await cache.refresh_once()
    assert "cannot read bearer token file" in (cache.states["rightsizer_queue_depth"].error or "")
    await source.close()


async def test_a_rotated_token_of_two_lines_fails_the_rules_instead_of_freezing_them(
    prom: FakePrometheus, tmp_path: Path, aiohttp_client: Any
) -> None:
    """The token is read at every refresh; one that cannot be sent fails every rule (503 naming the
    file), never leaves the last answer (52) served as if current."""
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    provide = healthy({"rightsizer_queue_source_up": [{"queue": "jobs", "namespace": "prod"}]})
    prom.answer = lambda q: vector(
        ([({"queue": "jobs", "namespace": "prod"}, "52")] if "rightsizer_queue_depth{" in q.split(" or ")[0]
         else []) + carried(q, provide)
    )  # fmt: skip
    cache, source, cfg = await cache_for(prom, bearer_token_file=str(token))
    app = create_app(cache, Gate.off(), AdapterMetrics(), MetricsApiAuth(cfg.metrics_api))
    client = await aiohttp_client(app)
    path = f"{EXT}/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
    await cache.refresh_once()
    code, body = await client_get(client, path)
    assert code == 200 and body["items"][0]["value"] == "52"
    token.write_text("s3cret\nother-token\n")
    asked = len(prom.queries)
    await cache.refresh_once()
    assert len(prom.queries) == asked  # nothing sent
    code, body = await client_get(client, path)
    assert_status((code, body), 503, "ServiceUnavailable")
    assert "bearer token file" in body["message"] and "line break" in body["message"]
    await source.close()


@pytest.mark.parametrize(
    "headers",
    [{"X-Scope-OrgID": "team-a\r\nX-Injected: 1"}, {"X-Scope-OrgID": "team-a\n"}, {"Bad Name": "x"}],
)
def test_headers_that_cannot_be_sent_are_refused_by_the_configuration(headers: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=r"prometheus\.headers"):
        load_config(None, {"prometheus": {"url": "http://p:9090", "headers": headers}}, environ={})


def test_a_refresh_slower_than_its_interval_is_followed_by_a_pause_as_long() -> None:
    """One refresh every interval while refreshes are quick; past half the interval, every twice
    the refresh's time, so that a replica leaves the engine free at least half of the time."""
    cfg = load_config(None, {"prometheus": {"url": "http://127.0.0.1:9"}}, environ={})
    source = PrometheusSource(cfg.prometheus, AdapterMetrics())
    assert cfg.prometheus.refresh_interval_seconds == 5.0
    delays = {elapsed: source.next_delay(elapsed) for elapsed in (0.05, 2.0, 2.5, 3.0, 8.0, 20.0)}
    assert delays == pytest.approx({0.05: 4.95, 2.0: 3.0, 2.5: 2.5, 3.0: 3.0, 8.0: 8.0, 20.0: 20.0})


def test_the_pause_is_shortened_to_keep_answers_within_twice_the_interval() -> None:
    """Answers put in ``age`` seconds after their queries were answered are replaced by the next
    refresh (taking as long) at most twice the interval later, by a shorter pause, if the refresh
    then takes at most 60 % of the replica's time; past that, the pause stays as long as the
    refresh (computed here from the interval, 5 s: the longest pause is 10 - elapsed - age)."""
    cfg = load_config(None, {"prometheus": {"url": "http://127.0.0.1:9"}}, environ={})
    source = PrometheusSource(cfg.prometheus, AdapterMetrics())
    cases = {  # (elapsed, age): (pause, answers replaced within 10 s)
        (2.0, 0.5): (3.0, True),  # within half the interval: one refresh every interval
        (4.5, 0.5): (4.5, True),  # 4.5 + 4.5 + 0.5 <= 10: the pause as long as the refresh
        (4.9, 0.5): (4.6, True),  # 4.9 + 4.9 + 0.5 > 10: shortened to 10 - 4.9 - 0.5
        (5.5, 0.5): (4.0, True),  # the refresh 5.5 s of 9.5 (58 %)
        (6.0, 0.0): (4.0, True),  # 60 % exactly
        (6.5, 0.0): (6.5, False),  # 3.5 s would be 65 %: as long as the refresh, freshness missed
        (8.0, 0.5): (8.0, False),
    }
    for (elapsed, age), (pause, fresh) in cases.items():
        delay = source.next_delay(elapsed, age)
        assert delay == pytest.approx(pause), (elapsed, age)
        assert (elapsed + delay + age <= 10.0 + 1e-9) == fresh, (elapsed, age)
