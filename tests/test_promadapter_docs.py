"""prometheus-adapter's documented example (docs/config.md, "Querying"), served unchanged.

A series ``http_requests_total`` with labels ``service``, ``pod``, ``ingress``, ``namespace`` and
``verb`` is exposed as ``http_requests_per_second`` (``matches: "^(.*)_total$"``,
``as: "${1}_per_second"``); a request for pods ``pod1`` and ``pod2`` in ``somens`` becomes
``LabelMatchers: pod=~"pod1|pod2",namespace="somens"`` and ``GroupBy: pod``. A real Prometheus
scrapes growing counters; each answer is compared with that per-request query evaluated at the
adapter's refresh instant.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from adapter_support import client_get
from servers import Process, prom_query, prometheus, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.gate import Gate
from adapter.kubernetes.quantities import format_quantity
from adapter.promadapter.schema import parse
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app

DOCUMENTED = parse(
    {
        "rules": [
            {
                "seriesQuery": '{__name__=~"^http_requests_.*",namespace!="",pod!=""}',
                "resources": {"template": "<<.Resource>>"},
                "name": {"matches": "^(.*)_total$", "as": "${1}_per_second"},
                "metricsQuery": (
                    'sum(rate(<<.Series>>{<<.LabelMatchers>>,container_name!="POD"}[2m])) by (<<.GroupBy>>)'
                ),
            }
        ]
    }
)
# (namespace, pod, service, ingress, verb) -> requests per scrape
SERIES = {
    ("somens", "pod1", "web", "front", "GET"): 3,
    ("somens", "pod1", "web", "front", "POST"): 1,
    ("somens", "pod2", "web", "front", "GET"): 5,
    ("somens", "pod3", "api", "back", "GET"): 2,
    ("otherns", "pod1", "web", "front", "GET"): 7,
}
CUSTOM = "/apis/custom.metrics.k8s.io/v1beta2/namespaces"
METRIC = "http_requests_per_second"


class Counters(BaseHTTPRequestHandler):
    scrapes = 0

    def do_GET(self) -> None:
        Counters.scrapes += 1
        lines = ["# TYPE http_requests_total counter"]
        for (ns, pod, service, ingress, verb), step in SERIES.items():
            labels = f'namespace="{ns}",pod="{pod}",service="{service}",ingress="{ingress}",verb="{verb}"'
            lines.append(f"http_requests_total{{{labels}}} {step * Counters.scrapes}")
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def prom() -> Iterator[Process]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Counters)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with prometheus({"app": [f"127.0.0.1:{server.server_address[1]}"]}) as p:
            wait_for(lambda: len(prom_query(p.url, "rate(http_requests_total[2m])")) == 5, 30, what="rates")
            yield p
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def served(prom: Process, aiohttp_client: Any) -> AsyncIterator[tuple[Any, Cache, Process]]:
    cfg = load_config(
        None, {"prometheus": {"url": prom.url}, "prometheus_adapter": {"config_file": "-"}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, DOCUMENTED, 600, metrics)
    await source.start()
    cache = Cache(cfg.effective_rules, source, metrics)
    await cache.refresh_once()
    auth = Gate.off()
    yield await aiohttp_client(create_app(cache, auth, metrics, None)), cache, prom
    await source.close()


def upstream(prom: Process, cache: Cache, matchers: str, group_by: str) -> dict[str, str]:
    """prometheus-adapter's query for this request, at the instant the adapter's values are from."""
    vector = cache.states[METRIC].vector
    assert vector is not None
    query = f'sum(rate(http_requests_total{{{matchers},container_name!="POD"}}[2m])) by ({group_by})'
    return {
        s["metric"][group_by]: format_quantity(float(s["value"][1]))
        for s in prom_query(prom.url, query, vector.timestamp)
    }


async def test_the_documented_name_and_resources(served: Any) -> None:
    client, cache, _ = served
    assert list(cache.rules) == [METRIC]
    code, body = await client_get(client, "/apis/custom.metrics.k8s.io/v1beta2")
    assert code == 200
    # Every label the template maps to a resource the cluster knows (Prometheus adds `job`, a batch
    # Job under <<.Resource>>; `verb` and `instance` name none), with its API group, namespaced but
    # for the namespace itself: what prometheus-adapter lists (Kubernetes' GroupResource names).
    assert {(r["name"], r["namespaced"]) for r in body["resources"]} == {
        (f"pods/{METRIC}", True),
        (f"services/{METRIC}", True),
        (f"ingresses.networking.k8s.io/{METRIC}", True),
        (f"jobs.batch/{METRIC}", True),
        (f"namespaces/{METRIC}", False),
    }


async def test_pods_in_somens_as_the_documentation_renders_them(served: Any) -> None:
    client, cache, prom = served
    expected = upstream(prom, cache, 'pod=~"pod1|pod2|pod3",namespace="somens"', "pod")
    code, body = await client_get(client, f"{CUSTOM}/somens/pods/*/{METRIC}")
    assert code == 200, body
    assert {i["describedObject"]["name"]: i["value"] for i in body["items"]} == expected
    assert len(expected) == 3 and expected["pod1"] != "0"
    code, body = await client_get(client, f"{CUSTOM}/somens/pods/pod1/{METRIC}")
    assert [i["value"] for i in body["items"]] == [expected["pod1"]]


@pytest.mark.parametrize(
    ("resource", "label", "name", "kind"),
    [
        ("services", "service", "web", ("Service", "v1")),
        ("ingresses", "ingress", "back", ("Ingress", "networking.k8s.io/v1")),
        ("ingresses.networking.k8s.io", "ingress", "back", ("Ingress", "networking.k8s.io/v1")),
    ],
)
async def test_other_resources_of_the_same_series(
    served: Any, resource: str, label: str, name: str, kind: tuple[str, str]
) -> None:
    client, cache, prom = served
    expected = upstream(prom, cache, f'{label}="{name}",namespace="somens"', label)
    code, body = await client_get(client, f"{CUSTOM}/somens/{resource}/{name}/{METRIC}")
    assert code == 200, body
    assert [i["value"] for i in body["items"]] == [expected[name]]
    described = body["items"][0]["describedObject"]
    assert (described["kind"], described["apiVersion"]) == kind  # what the REST mapper says


async def test_the_namespace_itself(served: Any) -> None:
    client, cache, prom = served
    expected = upstream(prom, cache, 'namespace="somens"', "namespace")
    code, body = await client_get(client, f"{CUSTOM}/somens/metrics/{METRIC}")
    assert code == 200, body
    assert [i["value"] for i in body["items"]] == [expected["somens"]]


async def test_a_metric_label_selector_selects_before_aggregating(served: Any) -> None:
    """The batched vector has no verb label: such a request is asked of Prometheus on its own, at
    its own instant, so its rate is compared within 10 %: POST alone is a quarter of pod1's total."""
    client, _, prom = served
    post = 'sum(rate(http_requests_total{verb="POST",namespace="somens",pod="pod1"}[2m])) by (pod)'
    everything = 'sum(rate(http_requests_total{namespace="somens",pod="pod1"}[2m])) by (pod)'
    code, body = await client_get(
        client, f"{CUSTOM}/somens/pods/pod1/{METRIC}?metricLabelSelector=verb%3DPOST"
    )
    assert code == 200, body
    [item] = body["items"]
    assert item["metric"]["selector"] == {"matchLabels": {"verb": "POST"}}
    value = float(item["value"].removesuffix("m")) / (1000 if item["value"].endswith("m") else 1)
    expected = float(prom_query(prom.url, post)[0]["value"][1])
    assert abs(value - expected) <= 0.1 * expected
    assert float(prom_query(prom.url, everything)[0]["value"][1]) > 3 * expected > 0
