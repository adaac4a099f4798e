"""The metrics APIs' wire shapes (PROTOCOLS §5), served by the real app from a real exposition server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from adapter_support import ExpositionServer, exposition, hpa_desired_replicas
from aiohttp.test_utils import TestClient
from servers import require_binary

from adapter.cache import Cache
from adapter.config import load_config
from adapter.keda.metrics_api import MetricsApiAuth
from adapter.kubernetes.auth import Authenticator
from adapter.selfmetrics import AdapterMetrics
from adapter.server import create_app
from adapter.sources.scrape import ScrapeSource

EXT = "/apis/external.metrics.k8s.io/v1beta1"
POD_A = {"gpu": "0", "UUID": "GPU-a", "pod": "chat-7d9c5b6f8b-x2x4z", "namespace": "prod", "container": "srv"}
POD_B = {"gpu": "1", "UUID": "GPU-b", "pod": "chat-7d9c5b6f8b-q9q9q", "namespace": "prod", "container": "srv"}
FLEET = {
    "rightsizer_queue_depth": [
        ({"queue": "jobs", "kind": "redis", "namespace": "prod", "workload": "worker"}, 7),
        ({"queue": "chat", "kind": "vllm", "namespace": "prod", "workload": "chat"}, 3),
        ({"queue": "shared", "kind": "redis"}, 2),
    ],
    "DCGM_FI_DEV_GPU_UTIL": [(POD_A, 80), (POD_B, 40), ({"gpu": "2", "UUID": "GPU-c"}, 10)],
    "rightsizer_gpu_fit_score": [(POD_A, float("nan")), (POD_B, 0.5)],
    "rightsizer_gpu_verdict": [
        ({**POD_A, "verdict": "idle"}, 1),
        ({**POD_A, "verdict": "rightsized"}, 0),
        ({**POD_B, "verdict": "idle"}, 0),
        ({**POD_B, "verdict": "rightsized"}, 1),
    ],
}
Make = Callable[..., Awaitable[tuple[TestClient, Cache, ExpositionServer]]]


@pytest.fixture
async def make(aiohttp_client: Any) -> AsyncIterator[Make]:
    servers: list[ExpositionServer] = []

    async def build(text: str = exposition(FLEET), refresh: bool = True, **settings: Any):
        srv = await ExpositionServer(text).__aenter__()
        servers.append(srv)
        flags = {
            "direct": {"exporters": [srv.url], "stale_after_seconds": 0},
            "insecure_http": True,
            "listen": "127.0.0.1:0",
            **settings,
        }
        cfg = load_config(None, flags, environ={})
        metrics = AdapterMetrics()
        source = ScrapeSource(cfg.direct, metrics)
        await source.start()
        cache = Cache(cfg.effective_rules, source, metrics)
        if refresh:
            await cache.refresh_once()
        app = create_app(
            cache,
            Authenticator(cfg.requestheader, cfg.authorization, False),
            metrics,
            MetricsApiAuth(cfg.metrics_api),
        )
        app.on_cleanup.append(lambda _: source.close())
        return await aiohttp_client(app), cache, srv

    yield build
    for srv in servers:
        await srv.__aexit__()


async def get(client: TestClient, path: str, **headers: str) -> tuple[int, Any]:
    resp = await client.get(path, headers=headers)
    assert resp.content_type == "application/json", (path, resp.content_type)
    return resp.status, json.loads(await resp.read())


def assert_status(answer: tuple[int, Any], code: int, reason: str) -> None:
    status, body = answer
    assert status == code
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert (body["code"], body["reason"]) == (code, reason) and body["message"]


async def test_discovery(make: Make) -> None:
    client, cache, _ = await make()
    code, groups = await get(client, "/apis")
    assert code == 200 and groups["kind"] == "APIGroupList"
    names = {g["name"]: g for g in groups["groups"]}
    assert names["external.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta1"
    assert [v["version"] for v in names["custom.metrics.k8s.io"]["versions"]] == ["v1beta2", "v1beta1"]
    code, group = await get(client, "/apis/custom.metrics.k8s.io")
    assert code == 200 and group["kind"] == "APIGroup" and group["name"] == "custom.metrics.k8s.io"
    code, resources = await get(
        client, EXT, Accept="application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    )
    assert code == 200 and resources["kind"] == "APIResourceList" and resources["groupVersion"] == EXT[6:]
    assert {
        "name": "rightsizer_queue_depth",
        "singularName": "",
        "namespaced": True,
        "kind": "ExternalMetricValueList",
        "verbs": ["get"],
    } in resources["resources"]
    assert {r["name"] for r in resources["resources"]} == set(cache.rules)
    _, custom = await get(client, "/apis/custom.metrics.k8s.io/v1beta2")
    assert {"pods/rightsizer_gpu_utilization_ratio", "deployments/rightsizer_gpu_utilization_ratio"} <= {
        r["name"] for r in custom["resources"]
    }


async def test_external_values_one_item_per_series(make: Make) -> None:
    client, _, _ = await make()
    code, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs")
    assert code == 200
    assert (
        body["kind"] == "ExternalMetricValueList" and body["apiVersion"] == "external.metrics.k8s.io/v1beta1"
    )
    assert body["metadata"] == {}
    [item] = body["items"]
    assert item["metricName"] == "rightsizer_queue_depth" and item["value"] == "7"
    assert item["metricLabels"] == {
        "queue": "jobs",
        "kind": "redis",
        "namespace": "prod",
        "workload": "worker",
    }
    assert item["timestamp"].endswith("Z") and "T" in item["timestamp"]
    _, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert sorted(i["metricLabels"]["queue"] for i in body["items"]) == ["chat", "jobs", "shared"]
    assert hpa_desired_replicas(body["items"], target=4) == 3  # ceil(12 / 4)
    _, body = await get(client, f"{EXT}/namespaces/dev/rightsizer_queue_depth")  # only the unlabelled queue
    assert [i["metricLabels"]["queue"] for i in body["items"]] == ["shared"]
    _, body = await get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=kind+in+(vllm),workload!=x"
    )
    assert [i["value"] for i in body["items"]] == ["3"]


async def test_queue_like_metric_answers_zero_not_empty(make: Make) -> None:
    client, _, _ = await make()
    _, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Dnone")
    assert body["items"] == [
        {
            "metricName": "rightsizer_queue_depth",
            "metricLabels": {"queue": "none"},
            "timestamp": body["items"][0]["timestamp"],
            "value": "0",
        }
    ]
    assert hpa_desired_replicas(body["items"], target=5) == 0
    _, body = await get(client, f"{EXT}/namespaces/staging/rightsizer_gpu_utilization_ratio")
    assert body["items"] == []  # not queue-like: no series is no items


async def test_gpu_values_quantities_workload_and_no_nan(make: Make) -> None:
    client, _, _ = await make()
    _, body = await get(
        client, f"{EXT}/namespaces/prod/rightsizer_gpu_utilization_ratio?labelSelector=workload%3Dchat"
    )
    assert sorted(i["value"] for i in body["items"]) == ["400m", "800m"]
    assert {i["metricLabels"]["workload"] for i in body["items"]} == {"chat"}
    assert hpa_desired_replicas(body["items"], target=0.5) == 3  # ceil(1.2 / 0.5)
    _, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_fit_score")
    assert [i["value"] for i in body["items"]] == ["500m"]  # the NaN series is left out
    _, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_idle")
    assert {i["metricLabels"]["UUID"]: i["value"] for i in body["items"]} == {"GPU-a": "1", "GPU-b": "0"}
    _, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_busy")
    assert {i["metricLabels"]["UUID"]: i["value"] for i in body["items"]} == {"GPU-a": "0", "GPU-b": "1"}


async def test_errors_are_status_objects(make: Make) -> None:
    client, cache, srv = await make()
    answer = await get(client, f"{EXT}/namespaces/prod/no_such_metric")
    assert_status(answer, 404, "NotFound")
    assert "rightsizer_queue_depth" in answer[1]["message"]
    answer = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue+in+(")
    assert_status(answer, 400, "BadRequest")
    for path in ("/openapi/v2", "/openapi/v3", "/openapi/v3/apis/x", "/nowhere", "/apis/nope/v1"):
        assert_status(await get(client, path), 404, "NotFound")
    resp = await client.post(f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert_status((resp.status, json.loads(await resp.read())), 405, "MethodNotAllowed")
    srv.status = 500  # the backend goes away: values 503, discovery still 200
    await cache.refresh_once()
    answer = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert_status(answer, 503, "ServiceUnavailable")
    assert "HTTP 500" in answer[1]["message"]
    assert (await get(client, EXT))[0] == 200
    srv.status = 200
    await cache.refresh_once()
    assert (await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth"))[0] == 200


async def test_json_even_when_protobuf_is_preferred(make: Make) -> None:
    client, _, _ = await make()
    accept = "application/vnd.kubernetes.protobuf, */*"
    code, body = await get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth", Accept=accept)
    assert code == 200 and body["kind"] == "ExternalMetricValueList"
    code, body = await get(client, "/apis", Accept=accept)
    assert code == 200 and body["kind"] == "APIGroupList"


async def test_health_and_readiness(make: Make) -> None:
    client, cache, _ = await make(refresh=False)
    for path in ("/healthz", "/livez"):
        assert (await client.get(path)).status == 200
    assert (await client.get("/readyz")).status == 503  # no refresh yet
    assert (await get(client, EXT))[0] == 200  # discovery answers before the first refresh
    await cache.refresh_once()
    assert (await client.get("/readyz")).status == 200


async def test_answers_are_memoized_per_refresh(make: Make) -> None:
    client, cache, srv = await make()
    path = f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
    await client.get(path)
    first = cache.answers[("external", "rightsizer_queue_depth", "prod", "labelSelector=queue%3Djobs")]
    await client.get(path)
    assert (
        cache.answers[("external", "rightsizer_queue_depth", "prod", "labelSelector=queue%3Djobs")] is first
    )
    srv.text = srv.text.replace('workload="worker"} 7', 'workload="worker"} 9')
    await cache.refresh_once()
    _, body = await get(client, path)
    assert body["items"][0]["value"] == "9"


async def test_own_metrics_lint_clean(make: Make, tmp_path: Any) -> None:
    client, _, _ = await make()
    await client.get(f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    await client.get(f"{EXT}/namespaces/prod/unknown")
    text = await (await client.get("/metrics")).text()
    assert 'rightsizer_adapter_requests_total{code="200",endpoint="external"} 1.0' in text
    assert 'rightsizer_adapter_requests_total{code="404",endpoint="external"} 1.0' in text
    assert 'rightsizer_adapter_cache_age_seconds{rule="rightsizer_queue_depth"}' in text
    assert 'rightsizer_adapter_upstream_queries_total{outcome="success",source="direct"} 1.0' in text
    lint = subprocess.run(
        [require_binary("promtool"), "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
