"""A real HPA (kube-controller-manager 1.20.2) on the queue depth, as deploy/examples/hpa-queue-depth.yaml
writes it (AverageValue 5: desired = ceil(depth / 5)), through the aggregator and the adapter:
it scales up with the queue, holds its replicas while the metric cannot be read (the exporter
killed; the adapter's auth-delegator binding removed, so it can review no request and fails
closed) and follows the queue again once the cause is gone."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from control_plane import SYNC_SECONDS, Cluster
from control_plane_kube import Kubelet, Timeline, condition, hpa_status
from control_plane_rig import Rig, for_1_20, quantity, shipped_objects
from kube import DEPLOY
from servers import wait_for

pytestmark = pytest.mark.control_plane

EXAMPLE = DEPLOY / "examples" / "hpa-queue-depth.yaml"
DELEGATOR = "rightsizer-adapter:system:auth-delegator"
HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def workload(namespace: str, name: str, replicas: int) -> list[dict[str, Any]]:
    """A namespace and a Deployment for an HPA to scale (its pods never run: no kubelet)."""
    labels = {"app": name}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": "registry.invalid/worker:1"}]},
                },
            },
        },
    ]


def failing(cluster: Cluster, namespace: str, name: str) -> str | None:
    """The HPA's ScalingActive message while it is False with FailedGetExternalMetric."""
    active = condition(hpa_status(cluster, namespace, name), "ScalingActive")
    if active.get("status") == "False" and active.get("reason") == "FailedGetExternalMetric":
        return str(active.get("message"))
    return None


def held(timeline: Timeline, replicas: int, syncs: int = 4) -> None:
    """The replicas stay at ``replicas`` for ``syncs`` of the controller's sync periods."""
    end = time.monotonic() + syncs * SYNC_SECONDS
    while time.monotonic() < end:
        assert timeline.replicas() == replicas, f"moved while the metric was unreadable: {timeline}"
        time.sleep(0.5)


def test_queue_depth_hpa_scales_up_holds_while_unreadable_and_recovers(kube_rig: Rig) -> None:
    rig, cluster = kube_rig, kube_rig.cluster
    rig.set_depth("jobs", 0)
    cluster.apply(workload("demo", "worker", 1))
    (hpa,) = [for_1_20(o) for o in yaml.safe_load_all(EXAMPLE.read_text()) if o]
    assert hpa is not None and hpa["spec"]["metrics"][0]["external"]["target"]["type"] == "AverageValue"
    cluster.apply([hpa])
    timeline = Timeline(cluster, "demo", "worker")
    timeline.replicas()

    # 23 jobs, 5 per worker: ceil(23 / 5) = 5 (the example allows doubling every 15 s).
    rig.set_depth("jobs", 23)
    wait_for(lambda: timeline.replicas() == 5, 120, 0.5, what=f"5 workers for 23 jobs: {timeline}")

    # The adapter loses its auth-delegator binding: it can no longer ask TokenReview or
    # SubjectAccessReview, so once its cached answers expire (10 s) every request is 503 (never
    # allowed unchecked), and HPA holds while the queue grows.
    cluster.kubectl("delete", "clusterrolebinding", DELEGATOR)
    message = wait_for(lambda: failing(cluster, "demo", "worker"), 90, 0.5, what="FailedGetExternalMetric")
    print(f"auth-delegator removed: {message}")
    rig.set_depth("jobs", 48)  # would be 10 workers
    held(timeline, 5)
    # What HPA's controller gets (system:masters would pass without a review, as documented).
    code, body = cluster.request(
        "GET",
        "/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/"
        "rightsizer_queue_depth?labelSelector=queue%3Djobs",
        headers={"Impersonate-User": HPA_USER},
    )
    assert code == 503 and "subjectaccessreviews" in body["message"], body
    restored = time.monotonic()
    cluster.apply([o for o in shipped_objects() if o["metadata"]["name"] == DELEGATOR])
    wait_for(lambda: timeline.replicas() == 10, 120, 0.5, what=f"10 workers for 48 jobs: {timeline}")
    print(f"binding restored -> 10 replicas after {time.monotonic() - restored:.0f} s")

    # The exporter is killed: the adapter answers 503 (its source is gone), HPA holds at 10.
    cluster.kubectl(
        "-n", "demo", "patch", "hpa", "worker", "--type=merge", "-p", '{"spec":{"maxReplicas":20}}'
    )
    rig.kill_exporter()
    message = wait_for(lambda: failing(cluster, "demo", "worker"), 90, 0.5, what="FailedGetExternalMetric")
    print(f"exporter killed: {message}")
    rig.set_depth("jobs", 98)  # would be 20 workers
    held(timeline, 10)
    rig.restart_exporter()
    restarted = time.monotonic()
    wait_for(lambda: failing(cluster, "demo", "worker") is None, 90, 0.5, what="ScalingActive again")
    active = time.monotonic() - restarted
    wait_for(lambda: timeline.replicas() == 20, 120, 0.5, what=f"20 workers for 98 jobs: {timeline}")
    print(
        f"exporter restarted -> metric readable after {active:.0f} s, "
        f"20 replicas after {time.monotonic() - restarted:.0f} s"
    )
    print(f"queue-depth HPA replicas: {timeline}")
    cluster.kubectl("-n", "demo", "delete", "hpa", "worker")


def test_pods_metric_hpa_on_gpu_utilization_scales_up(kube_rig: Rig) -> None:
    """deploy/examples/hpa-pod-gpu.yaml's metric (custom.metrics Pods, AverageValue 700m) on a
    StatefulSet whose pod gpu-worker-0 holds the simulated GPU at 85 %: ceil(1 x 0.85 / 0.7) = 2.
    The new pod gpu-worker-1 has no GPU series, and HPA counts a pod without a metric as 0 when
    scaling up ((0.85 + 0) / 2 < 0.7): it stays at 2."""
    rig, cluster = kube_rig, kube_rig.cluster
    labels = {"app": "gpu-worker"}
    template = {
        "metadata": {"labels": labels},
        "spec": {"containers": [{"name": "server", "image": "registry.invalid/server:1"}]},
    }
    cluster.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu"}},
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "gpu-worker", "namespace": "gpu"},
                "spec": {
                    "replicas": 1,
                    "serviceName": "gpu-worker",
                    "selector": {"matchLabels": labels},
                    "template": template,
                },
            },
        ]
    )
    (example,) = [o for o in yaml.safe_load_all((DEPLOY / "examples" / "hpa-pod-gpu.yaml").read_text()) if o]
    hpa = for_1_20(example)
    assert hpa is not None
    hpa["metadata"] = {"name": "gpu-worker", "namespace": "gpu"}
    hpa["spec"]["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "gpu-worker"}
    with Kubelet(cluster, "gpu"):
        wait_for(
            lambda: cluster.request("GET", "/api/v1/namespaces/gpu/pods/gpu-worker-0")[0] == 200,
            60,
            0.5,
            what="pod gpu-worker-0",
        )
        path = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/gpu/pods/*/rightsizer_gpu_utilization_ratio"
        items = wait_for(
            lambda: cluster.get(path + "?labelSelector=app%3Dgpu-worker")["items"],
            60,
            0.5,
            what="gpu-worker-0's utilization through the aggregator",
        )
        assert [i["describedObject"]["name"] for i in items] == ["gpu-worker-0"], items
        exported = rig.exporter_value("DCGM_FI_DEV_GPU_UTIL", pod="gpu-worker-0")
        assert exported is not None and 0.7 < quantity(items[0]["value"]) <= 1.0, (items, exported)
        cluster.apply([hpa])
        timeline = Timeline(cluster, "gpu", "gpu-worker", kind="statefulsets")
        wait_for(lambda: timeline.replicas() == 2, 90, 0.5, what=f"2 replicas: {timeline}")
        held(timeline, 2)
        print(f"Pods-metric HPA replicas: {timeline}")
    cluster.kubectl("-n", "gpu", "delete", "hpa", "gpu-worker")
