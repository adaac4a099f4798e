"""The SubjectAccessReview attributes of each adapter path, as kube-apiserver's RequestInfo
resolver derives them (``k8s.io/apiserver/pkg/endpoints/request/requestinfo.go``), and the
always-allow path patterns (``pkg/authorization/path``)."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request

from adapter.kubernetes.gate import always_allowed, attributes

EXT = "external.metrics.k8s.io"
CUSTOM = "custom.metrics.k8s.io"


def res(**kw: str) -> dict[str, Any]:
    return {"resourceAttributes": kw}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            f"/apis/{EXT}/v1beta1/namespaces/prod/queue_depth?labelSelector=a%3Db",
            res(namespace="prod", verb="list", group=EXT, version="v1beta1", resource="queue_depth"),
        ),
        (
            f"/apis/{CUSTOM}/v1beta2/namespaces/prod/pods/*/gpu_util",
            res(
                namespace="prod",
                verb="get",
                group=CUSTOM,
                version="v1beta2",
                resource="pods",
                subresource="gpu_util",
                name="*",
            ),
        ),
        (
            f"/apis/{CUSTOM}/v1beta1/namespaces/prod/deployments.apps/chat/gpu_util",
            res(
                namespace="prod",
                verb="get",
                group=CUSTOM,
                version="v1beta1",
                resource="deployments.apps",
                subresource="gpu_util",
                name="chat",
            ),
        ),
        (
            f"/apis/{CUSTOM}/v1beta2/namespaces/prod/metrics/gpu_util",  # the namespace object's metric
            res(
                namespace="prod",
                verb="get",
                group=CUSTOM,
                version="v1beta2",
                resource="metrics",
                name="gpu_util",
            ),
        ),
        (
            f"/apis/{CUSTOM}/v1beta2/nodes/gpu-node-1/gpu_util",
            res(
                verb="get",
                group=CUSTOM,
                version="v1beta2",
                resource="nodes",
                subresource="gpu_util",
                name="gpu-node-1",
            ),
        ),
        (
            "/keda/v1/metrics/queue_depth?namespace=demo&labelSelector=q%3Dj",
            res(namespace="demo", verb="list", group=EXT, version="v1beta1", resource="queue_depth"),
        ),
        (
            "/keda/v1/metrics/queue_depth",
            res(verb="list", group=EXT, version="v1beta1", resource="queue_depth"),
        ),
        (f"/apis/{EXT}/v1beta1", {"nonResourceAttributes": {"path": f"/apis/{EXT}/v1beta1", "verb": "get"}}),
        ("/apis", {"nonResourceAttributes": {"path": "/apis", "verb": "get"}}),
        ("/metrics", {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}}),
        ("/openapi/v2", {"nonResourceAttributes": {"path": "/openapi/v2", "verb": "get"}}),
    ],
)
def test_attributes_follow_kube_apiserver(path: str, expected: dict[str, Any]) -> None:
    assert attributes(make_mocked_request("GET", path)) == expected


def test_always_allow_patterns_are_exact_or_trailing_star_prefixes() -> None:
    default = ["/healthz", "/livez", "/readyz"]
    assert always_allowed("/healthz", default) and not always_allowed("/healthz/ping", default)
    assert not always_allowed("/metrics", default) and not always_allowed("/", default)
    assert always_allowed("/healthz/ping", ["/healthz*"]) and always_allowed("/healthz", ["/healthz*"])
