"""Delegated authentication and authorization, driven through a real adapter process against a
fake API server over HTTPS (TokenReview, SubjectAccessReview, the ConfigMap and its watch)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import adapter, exporter_with_queues, get
from fake_apiserver import FakeApiServer, Identity, rbac
from servers import Process, wait_for

EXT = "/apis/external.metrics.k8s.io/v1beta1"
PROD = f"{EXT}/namespaces/prod/rightsizer_queue_depth"
DEV = f"{EXT}/namespaces/dev/rightsizer_queue_depth"
PODS = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/pods/*/rightsizer_gpu_utilization_ratio"
TOKENS = {
    "alice-token": Identity("alice", ["team-a"]),
    "bob-token": Identity("bob", ["team-b"]),
    "prom-token": Identity("system:serviceaccount:monitoring:prometheus", ["system:serviceaccounts"]),
    "hpa-token": Identity("system:serviceaccount:kube-system:horizontal-pod-autoscaler"),
    "admin-token": Identity("kubernetes-admin", ["kubeadm:cluster-admins", "system:masters"]),
}
POLICY = rbac(
    {
        "user": "alice",
        "verbs": ["list", "get"],
        "group": "external.metrics.k8s.io",
        "resources": ["*"],
        "namespaces": ["prod"],
    },
    {"group_name": "team-b", "verbs": ["get"], "group": "custom.metrics.k8s.io", "resources": ["pods"]},
    {"user": "system:serviceaccount:monitoring:prometheus", "paths": ["/metrics"]},
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def write_config(tmp: Path, api: FakeApiServer, **extra: Any) -> str:
    cfg = {
        "kubernetes": api.config(),
        "authentication": {"token_success_ttl_seconds": 3600, "token_failure_ttl_seconds": 0.2},
        "authorization": {"allowed_ttl_seconds": 3600, "denied_ttl_seconds": 0.2},
        "file_reload_interval_seconds": 0.1,
        **extra,
    }
    path = tmp / "adapter.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    # a queue in prod and in dev: queue rules answer 404 where there is none
    with exporter_with_queues(tmp_path_factory.mktemp("queues")) as p:
        yield p


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApiServer]:
    server = FakeApiServer(tmp_path, TOKENS, POLICY)
    yield server
    server.stop()


@pytest.fixture
def secured(tmp_path: Path, api: FakeApiServer, sim: Process) -> Iterator[Process]:
    with adapter(["--exporter", sim.url, "--config", write_config(tmp_path, api)]) as p:
        yield p


def code_and_message(p: Process, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    code, _, body = get(p.url + path, headers)
    if code == 200:
        return code, ""
    status = json.loads(body)
    assert status["kind"] == "Status" and status["code"] == code
    return code, status["message"]


def test_users_and_groups_are_authorized_per_namespace_and_resource(
    secured: Process, api: FakeApiServer
) -> None:
    assert "authz=delegated" in secured.log() and "tokenreview" in secured.log()
    assert code_and_message(secured, PROD, bearer("alice-token"))[0] == 200
    code, message = code_and_message(secured, DEV, bearer("alice-token"))
    assert code == 403
    assert (
        message == 'User "alice" cannot list resource "rightsizer_queue_depth" in API group '
        '"external.metrics.k8s.io" in the namespace "dev"'
    )
    assert code_and_message(secured, PROD, bearer("bob-token"))[0] == 403
    assert code_and_message(secured, PODS, bearer("bob-token"))[0] == 200  # through group team-b
    assert code_and_message(secured, PODS, bearer("alice-token"))[0] == 403
    assert code_and_message(secured, DEV, bearer("admin-token"))[0] == 200  # system:masters: no review
    assert not [s for s in api.access_reviews if s["user"] == "kubernetes-admin"]
    # the attributes sent are those kube-apiserver derives from the paths
    by_resource = {
        (s["user"], s["resourceAttributes"]["resource"], s["resourceAttributes"].get("namespace")): s
        for s in api.access_reviews
        if "resourceAttributes" in s
    }
    ext = by_resource[("alice", "rightsizer_queue_depth", "dev")]
    assert ext["resourceAttributes"] == {
        "namespace": "dev",
        "verb": "list",
        "group": "external.metrics.k8s.io",
        "version": "v1beta1",
        "resource": "rightsizer_queue_depth",
    }
    assert ext["groups"] == ["team-a", "system:authenticated"]
    pods = by_resource[("bob", "pods", "prod")]["resourceAttributes"]
    assert pods == {
        "namespace": "prod",
        "verb": "get",
        "group": "custom.metrics.k8s.io",
        "version": "v1beta2",
        "resource": "pods",
        "name": "*",
        "subresource": "rightsizer_gpu_utilization_ratio",
    }


def test_credentials_are_required_except_on_health_paths(secured: Process, api: FakeApiServer) -> None:
    for path in (PROD, EXT, "/apis", "/metrics", "/keda/v1/metrics/rightsizer_queue_depth?namespace=prod"):
        code, message = code_and_message(secured, path)
        assert code == 401 and "authentication required" in message, path
    for path in ("/healthz", "/livez", "/readyz"):
        assert get(secured.url + path)[0] == 200
    code, message = code_and_message(secured, PROD, bearer("stolen"))
    assert code == 401 and "not valid" in message
    assert code_and_message(secured, PROD, {"Authorization": "Basic YTpi"})[0] == 401
    # /metrics is a non-resource path: Prometheus's service account is allowed, alice is not
    assert get(secured.url + "/metrics", bearer("prom-token"))[0] == 200
    code, message = code_and_message(secured, "/metrics", bearer("alice-token"))
    assert code == 403 and message == 'User "alice" cannot get path "/metrics"'
    assert {"path": "/metrics", "verb": "get"} in [s.get("nonResourceAttributes") for s in api.access_reviews]


def test_reviews_are_cached_success_and_failure_separately(secured: Process, api: FakeApiServer) -> None:
    for _ in range(20):
        assert get(secured.url + PROD, bearer("alice-token"))[0] == 200
    assert [r["spec"]["token"] for r in api.token_reviews].count("alice-token") == 1
    assert len([s for s in api.access_reviews if s["user"] == "alice"]) == 1
    # success is kept for its TTL (an hour here): a revoked token still works until it expires
    del api.tokens["alice-token"]
    assert get(secured.url + PROD, bearer("alice-token"))[0] == 200
    # failure is kept for its own, short TTL: a token that becomes valid is accepted once it expires
    assert get(secured.url + PROD, bearer("carol-token"))[0] == 401
    api.tokens["carol-token"] = Identity("alice", ["team-a"])
    wait_for(
        lambda: get(secured.url + PROD, bearer("carol-token"))[0] == 200,
        timeout=10,
        what="failure TTL expiry",
    )
    # a denial expires too (short TTL here), an allow does not (an hour)
    assert get(secured.url + DEV, bearer("bob-token"))[0] == 403
    api.policy = rbac(
        {"user": "bob", "verbs": ["list"], "group": "external.metrics.k8s.io", "resources": ["*"]}
    )
    wait_for(
        lambda: get(secured.url + DEV, bearer("bob-token"))[0] == 200, timeout=10, what="denied TTL expiry"
    )
    assert get(secured.url + PROD, bearer("carol-token"))[0] == 200  # cached allow for alice


def test_api_server_down_is_503_never_allow(secured: Process, api: FakeApiServer) -> None:
    assert get(secured.url + PROD, bearer("alice-token"))[0] == 200
    api.down = True
    code, message = code_and_message(secured, PROD, bearer("bob-token"))  # token not reviewed yet
    assert code == 503 and "cannot check the bearer token" in message
    code, message = code_and_message(secured, DEV, bearer("alice-token"))  # access not reviewed yet
    assert code == 503 and "cannot check authorization" in message
    assert get(secured.url + PROD, bearer("alice-token"))[0] == 200  # cached answers still count
    assert get(secured.url + "/readyz")[0] == 200
    api.down = False
    assert code_and_message(secured, PROD, bearer("bob-token"))[0] == 403
    assert "Traceback" not in secured.log()


def test_metrics_api_bearer_tokens_are_reviewed_and_authorized(secured: Process) -> None:
    keda = "/keda/v1/metrics/rightsizer_queue_depth"
    code, _, body = get(secured.url + keda + "?namespace=prod", bearer("alice-token"))
    assert code == 200 and "value" in json.loads(body)
    code, message = code_and_message(secured, keda + "?namespace=dev", bearer("alice-token"))
    assert code == 403 and 'in the namespace "dev"' in message
    code, message = code_and_message(secured, keda, bearer("alice-token"))  # all namespaces
    assert code == 403 and "at the cluster scope" in message
    assert code_and_message(secured, keda + "?namespace=prod", bearer("nobody"))[0] == 401


def test_static_lists_replace_reviews_when_given(tmp_path: Path, api: FakeApiServer, sim: Process) -> None:
    config = write_config(tmp_path, api, authorization={"allowed_groups": ["team-b"]})
    with adapter(["--exporter", sim.url, "--config", config]) as p:
        assert "authz=static" in p.log()
        assert get(p.url + DEV, bearer("bob-token"))[0] == 200
        assert get(p.url + PROD, bearer("alice-token"))[0] == 403
        assert get(p.url + "/apis", bearer("admin-token"))[0] == 200  # system:masters, as kube-apiserver
        assert not api.access_reviews


def test_always_allow_paths_are_configurable(tmp_path: Path, api: FakeApiServer, sim: Process) -> None:
    config = write_config(tmp_path, api)
    args = ["--exporter", sim.url, "--config", config, "--authorization-always-allow-paths=/readyz,/metr*"]
    with adapter(args) as p:
        assert get(p.url + "/metrics")[0] == 200  # prefix match
        assert get(p.url + "/readyz")[0] == 200
        assert get(p.url + "/healthz")[0] == 401  # no longer in the list
        assert get(p.url + PROD)[0] == 401
