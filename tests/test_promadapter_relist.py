"""Discovery on the relist interval, against a fake Prometheus speaking /api/v1/series and
/api/v1/query: new series become metrics (and discovery entries) at the next relist, a failed
relist keeps the metrics found before, and every refresh asks one query per rule."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from adapter_support import client_get
from aiohttp import web
from aiohttp.test_utils import TestServer

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.gate import Gate
from adapter.promadapter.schema import parse
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app

FILE = parse(
    {
        "externalRules": [
            {
                "seriesQuery": '{__name__=~"^queue_.*",name!=""}',
                "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (name)",
                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
            }
        ]
    }
)


class FakePrometheus:
    def __init__(self) -> None:
        self.series: list[dict[str, str]] = [{"__name__": "queue_depth", "name": "a", "namespace": "prod"}]
        self.series_status = 200
        self.series_asked = 0
        self.matches: list[str] = []
        self.queries: list[str] = []
        app = web.Application()
        app.router.add_post("/api/v1/series", self._series)
        app.router.add_post("/api/v1/query", self._query)
        self.server = TestServer(app, host="127.0.0.1")

    async def _series(self, request: web.Request) -> web.Response:
        form = await request.post()
        assert "start" in form and "end" in form
        self.matches.append(str(form["match[]"]))
        self.series_asked += 1
        if self.series_status != 200:
            return web.json_response({"status": "error", "error": "boom"}, status=self.series_status)
        return web.json_response({"status": "success", "data": self.series})

    async def _query(self, request: web.Request) -> web.Response:
        query = str((await request.post())["query"])
        self.queries.append(query)
        result = []
        for branch in query.split(" or "):  # one rule's metrics: label_replace(...) or label_replace(...)
            named = re.fullmatch(r'label_replace\((.*), "(\w+)", "(\w+)", "", ""\)', branch)
            inner = named.group(1) if named else branch
            extra = {named.group(2): named.group(3)} if named else {}
            result += [{**item, "metric": {**item["metric"], **extra}} for item in self._evaluate(inner)]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.Response(text=json.dumps(body), content_type="application/json")

    def _evaluate(self, query: str) -> list[dict[str, Any]]:
        """``sum by (labels) (name{k="v"})`` over the series, each sample worth 3."""
        name = re.search(r"(queue_\w+)\{", query).group(1)  # type: ignore[union-attr]
        wanted = dict(re.findall(r'(\w+)="([^"]*)"', query.split("{", 1)[1].split("}")[0]))
        by = re.search(r"by \(([^)]*)\)", query)
        keep = [label.strip() for label in by.group(1).split(",")] if by else ["name", "namespace"]
        sums: dict[tuple[tuple[str, str], ...], float] = {}
        for s in self.series:
            if s["__name__"] == name and all(s.get(k) == v for k, v in wanted.items()):
                key = tuple((k, s[k]) for k in keep if k in s)
                sums[key] = sums.get(key, 0.0) + 3
        return [{"metric": dict(key), "value": [1700000000, str(v)]} for key, v in sums.items()]


def relist_due(source: PromAdapterSource) -> None:
    """As if the relist interval had passed since the last discovery."""
    assert source._listed_at is not None
    source._listed_at -= source.relist_seconds


@pytest.fixture
async def prom() -> AsyncIterator[FakePrometheus]:
    fake = FakePrometheus()
    await fake.server.start_server()
    yield fake
    await fake.server.close()


async def test_relist_finds_new_metrics_and_keeps_old_ones_when_it_fails(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    url = str(prom.server.make_url("")).rstrip("/")
    cfg = load_config(
        None, {"prometheus": {"url": url}, "prometheus_adapter": {"config_file": "x"}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, FILE, relist_seconds=600, metrics=metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    auth = Gate.off()
    client = await aiohttp_client(create_app(cache, auth, metrics, None))
    ext = "/apis/external.metrics.k8s.io/v1beta1"

    await cache.refresh_once()
    assert list(cache.rules) == ["queue_depth"] and prom.queries == [
        "sum by (name, namespace) (queue_depth{})"
    ]
    code, body = await client_get(client, ext)
    assert [r["name"] for r in body["resources"]] == ["queue_depth"]

    prom.series.append({"__name__": "queue_lag", "name": "b", "namespace": "prod"})
    await cache.refresh_once()  # relist not due yet: same metrics
    assert list(cache.rules) == ["queue_depth"] and prom.series_asked == 1
    relist_due(source)
    await cache.refresh_once()
    assert sorted(cache.rules) == ["queue_depth", "queue_lag"] and prom.series_asked == 2
    code, body = await client_get(client, ext)
    assert sorted(r["name"] for r in body["resources"]) == ["queue_depth", "queue_lag"]
    code, body = await client_get(client, f"{ext}/namespaces/prod/queue_lag")
    assert code == 200 and [(i["metricLabels"], i["value"]) for i in body["items"]] == [({"name": "b"}, "3")]

    prom.series_status = 500
    relist_due(source)
    before = len(prom.queries)
    await cache.refresh_once()
    assert prom.series_asked == 3 and sorted(cache.rules) == ["queue_depth", "queue_lag"]
    assert prom.queries[before:] == [  # one query per rule per refresh, whatever the names it exposes
        'label_replace(sum by (name, namespace) (queue_depth{}), "rightsizer_promadapter_metric", '
        '"queue_depth", "", "") or label_replace(sum by (name, namespace) (queue_lag{}), '
        '"rightsizer_promadapter_metric", "queue_lag", "", "")'
    ]
    code, body = await client_get(client, f"{ext}/namespaces/prod/queue_depth")
    assert code == 200 and body["items"][0]["value"] == "3"
    await source.close()


async def test_documented_namespaced_false_selector_is_rendered_like_upstream(
    prom: FakePrometheus, aiohttp_client: Any
) -> None:
    """docs/externalmetrics.md: with namespaced: false an HPA in `default` selects namespace `queue`
    through its metricSelector; `namespace` is not kept by `by (name)`, so the request gets its own
    query, rendered as prometheus-adapter renders it (selector matchers, no namespace added)."""
    documented = parse(
        {
            "externalRules": [
                {
                    "seriesQuery": '{__name__="queue_depth",name!=""}',
                    "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (name)",
                    "resources": {"namespaced": False},
                }
            ]
        }
    )
    prom.series = [
        {"__name__": "queue_depth", "name": "my-sample-queue", "namespace": "queue"},
        {"__name__": "queue_depth", "name": "my-sample-queue", "namespace": "other"},
    ]
    url = str(prom.server.make_url("")).rstrip("/")
    cfg = load_config(
        None, {"prometheus": {"url": url}, "prometheus_adapter": {"config_file": "x"}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, documented, relist_seconds=600, metrics=metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    client = await aiohttp_client(
        create_app(cache, Gate.off(), metrics, None)
    )
    await cache.refresh_once()
    assert prom.queries == ["sum by (name) (queue_depth{})"]  # no namespace added: namespaced false
    ext = "/apis/external.metrics.k8s.io/v1beta1/namespaces/default/queue_depth"
    code, body = await client_get(client, ext + "?labelSelector=name%3Dmy-sample-queue")
    # `name` is kept: answered from the batch, both namespaces summed as upstream's query would
    assert code == 200 and [i["value"] for i in body["items"]] == ["6"]
    assert len(prom.queries) == 1
    code, body = await client_get(client, ext + "?labelSelector=name%3Dmy-sample-queue,namespace%3Dqueue")
    assert code == 200, body
    assert prom.queries[1:] == ['sum(queue_depth{name="my-sample-queue",namespace="queue"}) by (name)']
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [({"name": "my-sample-queue"}, "3")]
    await source.close()
