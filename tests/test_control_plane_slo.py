"""The SLO autoscaling recipe of docs/slos.md, applied as written to a real HPA controller
(kube-controller-manager 1.20.2): the workload's latency ratio with a ``Value`` target scales up
while the SLO is missed and down while it is met with room. The ``AverageValue`` target the
docs warn against is applied beside it and shown to scale the wrong way.

The numbers, from the declaration in docs/slos.md (TTFT target 0.5 s, inter-token 50 ms,
objective 0.95) and vLLM's bucket layouts, with every request of the fake vLLM at one latency:
- missed: TTFT 0.9 s lies in the (0.75, 1] bucket, its p95 reads 0.75 + 0.25 x 0.95 = 0.9875 s,
  ratio 1.975; inter-token 8 ms reads 9.5 ms (ratio 0.19); the workload's ratio is 1.975.
  Value 0.8: desired = ceil(ready x 1.975 / 0.8) = ceil(2.47 x ready): 2 -> 5 -> 10 (max).
  AverageValue 0.8: desired = ceil(1.975 / 0.8) = 3 whatever the count: 6 -> 3.
- met with room: TTFT 30 ms reads 39 ms (ratio 0.078); the ratio is inter-token's 0.19.
  desired = ceil(ready x 0.19 / 0.8): 10 -> 3 -> 1 (min).
"""

from __future__ import annotations

from typing import Any

import pytest
from control_plane_kube import Kubelet, Timeline, condition, hpa_status
from control_plane_rig import SLOS_DOC, Rig, doc_yaml, quantity
from servers import wait_for
from test_control_plane_hpa import workload

pytestmark = pytest.mark.control_plane

RATIO = "rightsizer_workload_slo_latency_ratio"
FAST_BEHAVIOR = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 10, "periodSeconds": 3}],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 3}],
    },
}


def documented_metrics() -> list[dict[str, Any]]:
    """The ``metrics:`` block of docs/slos.md that scales on the latency ratio, as written."""
    (metrics,) = [d["metrics"] for d in doc_yaml(SLOS_DOC) if isinstance(d, dict) and "metrics" in d]
    assert metrics[0]["external"]["metric"]["name"] == RATIO
    return list(metrics)


def hpa(name: str, metrics: list[dict[str, Any]], max_replicas: int = 10) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2beta2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": "chat"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": max_replicas,
            "metrics": metrics,
            "behavior": FAST_BEHAVIOR,
        },
    }


def exported_ratio(rig: Rig) -> float | None:
    return rig.exporter_value("rightsizer_workload_slo_scaling_latency_ratio", workload="llama3-8b")


def served_ratio(rig: Rig) -> float:
    path = f"/apis/external.metrics.k8s.io/v1beta1/namespaces/chat/{RATIO}?labelSelector=workload%3Dllama3-8b"
    [item] = rig.cluster.get(path)["items"]
    return quantity(item["value"])


def test_the_documented_slo_hpa_scales_up_while_missed_and_down_while_met(kube_rig: Rig) -> None:
    rig, cluster = kube_rig, kube_rig.cluster
    metrics = documented_metrics()
    assert metrics[0]["external"]["target"] == {"type": "Value", "value": "0.8"}
    wrong = [
        {
            **metrics[0],
            "external": {**metrics[0]["external"], "target": {"type": "AverageValue", "averageValue": "0.8"}},
        }
    ]
    cluster.apply(workload("chat", "llama3-8b", 2) + workload("chat", "wrong-way", 6)[1:])

    with Kubelet(cluster, "chat"):
        # Missed: every request's first token at 0.9 s against 0.5 s.
        rig.feeder.ttft, rig.feeder.itl = 0.9, 0.008
        wait_for(
            lambda: exported_ratio(rig) == pytest.approx(1.975, abs=1e-3),
            60,
            0.5,
            what="the exporter's ratio 1.975",
        )
        wait_for(lambda: served_ratio(rig) == pytest.approx(1.975, abs=1e-3), 30, 0.5, what="ratio served")
        right, wrong_way = Timeline(cluster, "chat", "llama3-8b"), Timeline(cluster, "chat", "wrong-way")
        right.replicas(), wrong_way.replicas()
        cluster.apply([hpa("llama3-8b", metrics), hpa("wrong-way", wrong)])

        wait_for(lambda: right.replicas() == 10, 120, 0.5, what=f"up to 10 while missed: {right}")
        steps = [n for _, n in right.points]
        # ceil(2.47 x 2 ready) = 5 first; then up only (ready pods count, as the Kubelet marks them).
        assert steps[:2] == [2, 5] and steps == sorted(steps), f"ceil(2.47 x ready): {right}"
        wait_for(lambda: wrong_way.replicas() == 3, 120, 0.5, what=f"AverageValue: 6 -> 3: {wrong_way}")
        print(f"missed, Value 0.8 (docs/slos.md): {right}")
        print(f"missed, AverageValue 0.8 (the wrong way): {wrong_way}")
        status = hpa_status(cluster, "chat", "llama3-8b")
        assert condition(status, "ScalingActive").get("status") == "True", status
        current = status["currentMetrics"][0]["external"]["current"]
        assert quantity(current["value"]) == pytest.approx(1.975, abs=1e-3), current

        # Met with room: first tokens at 30 ms; the ratio becomes inter-token's 0.19.
        rig.feeder.ttft = 0.03
        wait_for(
            lambda: exported_ratio(rig) == pytest.approx(0.19, abs=1e-3),
            60,
            0.5,
            what="the exporter's ratio 0.19",
        )
        wait_for(lambda: right.replicas() == 1, 120, 0.5, what=f"down to 1 while met with room: {right}")
        print(f"then met with room: {right}")
        assert right.points[-1][1] == 1 and max(n for _, n in right.points) == 10
    cluster.kubectl("-n", "chat", "delete", "hpa", "llama3-8b", "wrong-way")
