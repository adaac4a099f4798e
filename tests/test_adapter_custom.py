"""custom.metrics.k8s.io (pods and objects, v1beta1 and v1beta2) and KEDA's metrics-api endpoint."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
from adapter_support import Make, assert_status, client_get, make

from adapter.kubernetes.quantities import parse_quantity

__all__ = ["make"]  # the fixture
CUSTOM = "/apis/custom.metrics.k8s.io"
UTIL = "rightsizer_gpu_utilization_ratio"


def hpa_pods_desired(items: list[dict[str, Any]], ready_pods: int, target: float) -> int:
    """HPA's Pods-metric maths (PROTOCOLS §5): ceil(ready pods * mean / target)."""
    mean = sum(parse_quantity(i["value"]) for i in items) / len(items)
    return math.ceil(ready_pods * mean / target)


async def test_pods_v1beta1_shape(make: Make) -> None:
    client, _, _ = await make()
    code, body = await client_get(client, f"{CUSTOM}/v1beta1/namespaces/prod/pods/*/{UTIL}")
    assert code == 200
    assert (body["kind"], body["apiVersion"], body["metadata"]) == (
        "MetricValueList",
        "custom.metrics.k8s.io/v1beta1",
        {},
    )
    by_pod = {i["describedObject"]["name"]: i for i in body["items"]}
    assert set(by_pod) == {"chat-7d9c5b6f8b-x2x4z", "chat-7d9c5b6f8b-q9q9q"}
    item = by_pod["chat-7d9c5b6f8b-x2x4z"]
    assert item["describedObject"] == {
        "kind": "Pod",
        "namespace": "prod",
        "name": "chat-7d9c5b6f8b-x2x4z",
        "apiVersion": "v1",
    }
    assert item["metricName"] == UTIL and item["value"] == "800m" and item["selector"] is None
    assert hpa_pods_desired(body["items"], ready_pods=2, target=0.5) == 3  # ceil(2 * 0.6 / 0.5)


async def test_pods_v1beta2_shape_and_selectors(make: Make) -> None:
    client, _, _ = await make()
    path = f"{CUSTOM}/v1beta2/namespaces/prod/pods/*/{UTIL}?metricLabelSelector=UUID%3DGPU-b"
    code, body = await client_get(client, path)
    assert code == 200 and body["apiVersion"] == "custom.metrics.k8s.io/v1beta2"
    [item] = body["items"]
    assert item["metric"] == {"name": UTIL, "selector": {"matchLabels": {"UUID": "GPU-b"}}}
    assert item["value"] == "400m" and "metricName" not in item
    # labelSelector selects pods by their labels, which these series do not carry: nothing matches
    _, body = await client_get(
        client, f"{CUSTOM}/v1beta2/namespaces/prod/pods/*/{UTIL}?labelSelector=app%3Dx"
    )
    assert body["items"] == []
    _, body = await client_get(client, f"{CUSTOM}/v1beta2/namespaces/prod/pods/chat-7d9c5b6f8b-q9q9q/{UTIL}")
    assert [i["describedObject"]["name"] for i in body["items"]] == ["chat-7d9c5b6f8b-q9q9q"]
    assert_status(
        await client_get(client, f"{CUSTOM}/v1beta2/namespaces/prod/pods/ghost/{UTIL}"), 404, "NotFound"
    )
    assert_status(
        await client_get(client, f"{CUSTOM}/v1beta2/namespaces/prod/pods/*/{UTIL}?labelSelector=a+in"),
        400,
        "BadRequest",
    )


async def test_pods_label_selector_with_joined_pod_labels(make: Make) -> None:
    rule = {
        "name": "served_with_pod_labels",
        "apis": ["custom"],
        "direct": {
            "family": "DCGM_FI_DEV_GPU_UTIL",
            "aggregation": "avg",
            "by": ["namespace", "pod", "label_app"],
        },
        "pod_selector_prefix": "label_",
    }
    text = (
        'DCGM_FI_DEV_GPU_UTIL{pod="a-0",namespace="prod",label_app="chat"} 50\n'
        'DCGM_FI_DEV_GPU_UTIL{pod="b-0",namespace="prod",label_app="batch"} 10\n'
    )
    client, _, _ = await make(text=text, rules=[rule])
    path = f"{CUSTOM}/v1beta2/namespaces/prod/pods/*/served_with_pod_labels?labelSelector=app%3Dchat"
    _, body = await client_get(client, path)
    assert [(i["describedObject"]["name"], i["value"]) for i in body["items"]] == [("a-0", "50")]


async def test_object_queries_return_exactly_one_item(make: Make) -> None:
    client, _, _ = await make()
    code, body = await client_get(client, f"{CUSTOM}/v1beta2/namespaces/prod/deployments.apps/chat/{UTIL}")
    assert code == 200
    [item] = body["items"]
    assert item["describedObject"] == {
        "kind": "Deployment",
        "name": "chat",
        "apiVersion": "apps/v1",
        "namespace": "prod",
    }
    assert item["value"] == "600m"  # the workload's GPUs averaged
    _, body = await client_get(
        client, f"{CUSTOM}/v1beta1/namespaces/prod/deployments/worker/rightsizer_queue_depth"
    )
    assert [i["value"] for i in body["items"]] == ["7"]
    idle = f"{CUSTOM}/v1beta1/namespaces/prod/deployments/idle/rightsizer_queue_depth"
    assert_status(await client_get(client, idle), 404, "NotFound")  # no such queue is not 0
    _, body = await client_get(client, f"{CUSTOM}/v1beta2/namespaces/prod/metrics/rightsizer_queue_depth")
    [item] = body["items"]
    assert item["describedObject"] == {"kind": "Namespace", "name": "prod", "apiVersion": "v1"}
    assert item["value"] == "12"  # jobs 7 + chat 3 + the unlabelled shared queue 2
    for path in (
        f"{CUSTOM}/v1beta2/namespaces/prod/deployments/ghost/{UTIL}",
        f"{CUSTOM}/v1beta2/namespaces/prod/services/chat/{UTIL}",
        f"{CUSTOM}/v1beta2/nodes/node-1/{UTIL}",
        f"{CUSTOM}/v1beta2/namespaces/prod/deployments/chat/no_such_metric",
        f"{CUSTOM}/v1beta3/namespaces/prod/deployments/chat/{UTIL}",
    ):
        assert_status(await client_get(client, path), 404, "NotFound")


async def test_metrics_api_values(make: Make) -> None:
    client, cache, srv = await make()
    base = "/keda/v1/metrics/rightsizer_queue_depth"
    code, body = await client_get(client, f"{base}?labelSelector=queue%3Djobs&namespace=prod")
    assert code == 200 and body["value"] == 7 and body["timestamp"].endswith("Z")
    assert (await client_get(client, base))[1]["value"] == 12  # no namespace: every queue
    assert_status(await client_get(client, f"{base}?labelSelector=queue%3Dnone"), 404, "NotFound")
    assert_status(await client_get(client, "/keda/v1/metrics/nope"), 404, "NotFound")
    assert_status(await client_get(client, f"{base}?labelSelector=%21"), 400, "BadRequest")
    typo = await client_get(client, f"{base}?labelselector=queue%3Djobs&namespace=prod")  # not 12
    assert_status(typo, 400, "BadRequest")
    assert typo[1]["message"] == (
        "the query has unknown keys: 'labelselector' (did you mean 'labelSelector'?); "
        "known: labelSelector, namespace"
    )
    srv.status = 503
    await cache.refresh_once()
    assert_status(await client_get(client, base), 503, "ServiceUnavailable")


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        ({}, 401),
        ({"X-API-KEY": "wrong"}, 401),
        ({"X-API-KEY": "k3y"}, 200),
        ({"Authorization": "Bearer t0k"}, 200),
        ({"Authorization": "Bearer nope"}, 401),
        ({"Authorization": "Basic k3y"}, 401),
        ({"Authorization": "Basic a2VkYTpwNHNz"}, 200),  # keda:p4ss
        ({"Authorization": "Basic a2VkYTpwNHN6"}, 401),  # keda:p4sz
    ],
)
async def test_metrics_api_auth(make: Make, tmp_path: Path, headers: dict[str, str], code: int) -> None:
    (tmp_path / "key").write_text("k3y\n")
    (tmp_path / "token").write_text("t0k")
    (tmp_path / "password").write_text("p4ss\n")
    settings = {"api_key_file": str(tmp_path / "key"), "bearer_token_file": str(tmp_path / "token"),
                "basic_username": "keda", "basic_password_file": str(tmp_path / "password")}
    client, _, _ = await make(metrics_api=settings)
    answer = await client_get(client, "/keda/v1/metrics/rightsizer_queue_depth", **headers)
    assert answer[0] == code
    if code != 200:
        assert_status(answer, code, "Unauthorized" if code == 401 else "Forbidden")


@pytest.mark.parametrize(
    "header",
    [
        b"X-API-KEY: k\xc3\xa9y",
        b"X-API-KEY: \xff\xfe",
        b"Authorization: Bearer t\xe9k",
        b"Authorization: Basic \xff",
    ],
)
async def test_metrics_api_non_ascii_credentials_are_401(make: Make, tmp_path: Path, header: bytes) -> None:
    """Raw non-ASCII bytes in a key or token (aiohttp hands them over as surrogates) are refused
    with a 401 Status, not a 500 from encoding them."""
    (tmp_path / "key").write_text("k3y")
    (tmp_path / "token").write_text("t0k")
    settings = {"api_key_file": str(tmp_path / "key"), "bearer_token_file": str(tmp_path / "token")}
    client, _, _ = await make(metrics_api=settings)
    assert client.server.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
    writer.write(b"GET /keda/v1/metrics/rightsizer_queue_depth HTTP/1.1\r\nHost: x\r\n" + header
                 + b"\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 401 "), head
    assert json.loads(body)["reason"] == "Unauthorized"
