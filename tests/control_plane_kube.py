"""What the control-plane rig has instead of kubelets, and how the tests read an HPA: its
status and conditions, and the replicas of its target over time (for the report)."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from control_plane import Cluster


class Kubelet:
    """What the rig has instead of kubelets: every pod of ``namespace`` is marked Running and Ready
    (status subresource) soon after the ReplicaSet controller creates it, as HPA's Value targets
    count only ready pods."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Kubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            with contextlib.suppress(Exception):
                self.mark_ready()

    def mark_ready(self) -> None:
        pods = self.cluster.get(f"/api/v1/namespaces/{self.namespace}/pods")["items"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for pod in pods:
            status = pod.get("status", {})
            if status.get("phase") == "Running" or pod["metadata"].get("deletionTimestamp"):
                continue
            pod["status"] = {
                **status,
                "phase": "Running",
                "startTime": now,
                "conditions": [
                    {"type": t, "status": "True", "lastTransitionTime": now}
                    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
            }
            self.cluster.request(
                "PUT", f"/api/v1/namespaces/{self.namespace}/pods/{pod['metadata']['name']}/status", pod
            )


def hpa_status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    hpa = cluster.get(f"/apis/autoscaling/v2beta2/namespaces/{namespace}/horizontalpodautoscalers/{name}")
    return dict(hpa.get("status", {}))


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


class Timeline:
    """The replicas an HPA's target has over time, as the test observed them (for the report)."""

    def __init__(self, cluster: Cluster, namespace: str, name: str, kind: str = "deployments") -> None:
        self.cluster, self.path = cluster, f"/apis/apps/v1/namespaces/{namespace}/{kind}/{name}"
        self.start = time.monotonic()
        self.points: list[tuple[float, int]] = []

    def replicas(self) -> int:
        n = int(self.cluster.get(self.path)["spec"]["replicas"])
        t = round(time.monotonic() - self.start, 1)
        if not self.points or self.points[-1][1] != n:
            self.points.append((t, n))
        return n

    def __str__(self) -> str:
        return " -> ".join(f"{n} (t={t:.0f}s)" for t, n in self.points)
