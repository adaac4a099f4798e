"""The metrics APIs' wire shapes (PROTOCOLS §5), served by the real app from a real exposition server."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

from adapter_support import EXT, Make, assert_status, client_get, exposition, hpa_desired_replicas, make
from servers import require_binary

__all__ = ["make"]  # the fixture


async def test_discovery(make: Make) -> None:
    client, cache, _ = await make()
    code, groups = await client_get(client, "/apis")
    assert code == 200 and groups["kind"] == "APIGroupList"
    names = {g["name"]: g for g in groups["groups"]}
    assert names["external.metrics.k8s.io"]["preferredVersion"]["version"] == "v1beta1"
    assert [v["version"] for v in names["custom.metrics.k8s.io"]["versions"]] == ["v1beta2", "v1beta1"]
    code, group = await client_get(client, "/apis/custom.metrics.k8s.io")
    assert code == 200 and group["kind"] == "APIGroup" and group["name"] == "custom.metrics.k8s.io"
    code, resources = await client_get(
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
    _, custom = await client_get(client, "/apis/custom.metrics.k8s.io/v1beta2")
    assert {"pods/rightsizer_gpu_utilization_ratio", "deployments/rightsizer_gpu_utilization_ratio"} <= {
        r["name"] for r in custom["resources"]
    }


async def test_external_values_one_item_per_series(make: Make) -> None:
    client, _, _ = await make()
    code, body = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
    )
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
    _, body = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert sorted(i["metricLabels"]["queue"] for i in body["items"]) == ["chat", "jobs", "shared"]
    assert hpa_desired_replicas(body["items"], target=4) == 3  # ceil(12 / 4)
    _, body = await client_get(
        client, f"{EXT}/namespaces/dev/rightsizer_queue_depth"
    )  # only the unlabelled queue
    assert [i["metricLabels"]["queue"] for i in body["items"]] == ["shared"]
    _, body = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=kind+in+(vllm),workload!=x"
    )
    assert [i["value"] for i in body["items"]] == ["3"]


async def test_queue_up_and_empty_is_zero_and_no_such_queue_is_not_found(make: Make) -> None:
    empty = {"queue": "idle", "kind": "redis", "namespace": "prod"}
    client, _, _ = await make(
        exposition({"rightsizer_queue_depth": [(empty, 0)], "rightsizer_queue_source_up": [(empty, 1)]})
    )
    _, body = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Didle"
    )
    assert [(i["metricLabels"], i["value"]) for i in body["items"]] == [(empty, "0")]
    assert hpa_desired_replicas(body["items"], target=5) == 0  # up and empty: scaling to 0 is right
    answer = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Dnone"
    )
    assert_status(answer, 404, "NotFound")
    assert "queue=none" in answer[1]["message"]
    answer = await client_get(client, f"{EXT}/namespaces/staging/rightsizer_gpu_utilization_ratio")
    assert_status(answer, 404, "NotFound")  # no exporter publishes a GPU there: unknown, not empty


async def test_gpu_values_quantities_workload_and_no_nan(make: Make) -> None:
    client, _, _ = await make()
    _, body = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_gpu_utilization_ratio?labelSelector=workload%3Dchat"
    )
    assert sorted(i["value"] for i in body["items"]) == ["400m", "800m"]
    assert {i["metricLabels"]["workload"] for i in body["items"]} == {"chat"}
    assert hpa_desired_replicas(body["items"], target=0.5) == 3  # ceil(1.2 / 0.5)
    # pod a's fit score is NaN: never left out of the namespace's answer (smaller), never sent
    answer = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_fit_score")
    assert_status(answer, 503, "ServiceUnavailable")
    assert "gave NaN for it: not a number" in answer[1]["message"] and "GPU-a" in answer[1]["message"]
    fit = f"{EXT}/namespaces/prod/rightsizer_gpu_fit_score"
    _, body = await client_get(client, f"{fit}?labelSelector=UUID%3DGPU-b")
    assert [i["value"] for i in body["items"]] == ["500m"]  # pod b's own is sound
    _, body = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_idle")
    assert {i["metricLabels"]["UUID"]: i["value"] for i in body["items"]} == {"GPU-a": "1", "GPU-b": "0"}
    _, body = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_gpu_busy")
    assert {i["metricLabels"]["UUID"]: i["value"] for i in body["items"]} == {"GPU-a": "0", "GPU-b": "1"}


async def test_errors_are_status_objects(make: Make) -> None:
    client, cache, srv = await make()
    answer = await client_get(client, f"{EXT}/namespaces/prod/no_such_metric")
    assert_status(answer, 404, "NotFound")
    assert "rightsizer_queue_depth" in answer[1]["message"]
    answer = await client_get(
        client, f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue+in+("
    )
    assert_status(answer, 400, "BadRequest")
    answer = await client_get(client, f"{EXT}/namespaces/Not_A%2FNamespace/rightsizer_queue_depth")
    assert_status(answer, 400, "BadRequest")
    assert "not a valid namespace name" in answer[1]["message"]
    for path in ("/openapi/v3", "/openapi/v3/apis/x", "/nowhere", "/apis/nope/v1"):
        assert_status(await client_get(client, path), 404, "NotFound")
    resp = await client.post(f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert_status((resp.status, json.loads(await resp.read())), 405, "MethodNotAllowed")
    srv.status = 500  # the backend goes away: values 503, discovery still 200
    await cache.refresh_once()
    answer = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth")
    assert_status(answer, 503, "ServiceUnavailable")
    assert "HTTP 500" in answer[1]["message"]
    assert (await client_get(client, EXT))[0] == 200
    srv.status = 200
    await cache.refresh_once()
    assert (await client_get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth"))[0] == 200


async def test_json_even_when_protobuf_is_preferred(make: Make) -> None:
    client, _, _ = await make()
    accept = "application/vnd.kubernetes.protobuf, */*"
    code, body = await client_get(client, f"{EXT}/namespaces/prod/rightsizer_queue_depth", Accept=accept)
    assert code == 200 and body["kind"] == "ExternalMetricValueList"
    code, body = await client_get(client, "/apis", Accept=accept)
    assert code == 200 and body["kind"] == "APIGroupList"


async def test_health_and_readiness(make: Make) -> None:
    client, cache, _ = await make(refresh=False)
    for path in ("/healthz", "/livez"):
        assert (await client.get(path)).status == 200
    assert (await client.get("/readyz")).status == 503  # no refresh yet
    assert (await client_get(client, EXT))[0] == 200  # discovery answers before the first refresh
    await cache.refresh_once()
    assert (await client.get("/readyz")).status == 200


async def test_answers_are_memoized_per_refresh(make: Make) -> None:
    client, cache, srv = await make()
    path = f"{EXT}/namespaces/prod/rightsizer_queue_depth?labelSelector=queue%3Djobs"
    await client.get(path)
    first = cache.answers[("external", "rightsizer_queue_depth", "prod", "queue=jobs")]
    await client.get(path)
    assert (
        cache.answers[("external", "rightsizer_queue_depth", "prod", "queue=jobs")] is first
    )
    srv.text = srv.text.replace('workload="worker"} 7', 'workload="worker"} 9')
    await cache.refresh_once()
    _, body = await client_get(client, path)
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


async def test_openapi_v2_is_a_document_the_aggregator_accepts(make: Make) -> None:
    """What kube-aggregator's OpenAPI downloader does (controllers/openapi/aggregator/downloader.go):
    GET /openapi/v2 with Accept: application/json; 200 must be a Swagger 2.0 object (its ETag
    kept), then the same GET with If-None-Match: that ETag is 304. A 404 is logged as an error."""
    client, _, _ = await make()
    resp = await client.get("/openapi/v2", headers={"Accept": "application/json"})
    assert resp.status == 200 and resp.content_type == "application/json"
    doc = json.loads(await resp.read(), parse_constant=_refuse)
    etag = resp.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 2
    assert doc["swagger"] == "2.0" and doc["info"]["title"] and doc["info"]["version"]
    assert f"{EXT}/namespaces/{{namespace}}/{{metric}}" in doc["paths"]
    assert any(p.startswith("/apis/custom.metrics.k8s.io/v1beta2/") for p in doc["paths"])
    for path, item in doc["paths"].items():  # every path template's parameters are declared
        declared = {p["name"] for p in item["get"]["parameters"] if p["in"] == "path" and p["required"]}
        assert declared == set(re.findall(r"{(\w+)}", path)), path
        assert "200" in item["get"]["responses"]
    again = await client.get("/openapi/v2", headers={"Accept": "application/json", "If-None-Match": etag})
    assert again.status == 304 and again.headers["ETag"] == etag
    other = await client.get("/openapi/v2", headers={"If-None-Match": '"something-else"'})
    assert other.status == 200 and json.loads(await other.read()) == doc


def _refuse(name: str) -> None:
    raise ValueError(f"not JSON: {name}")
