"""One workload on two nodes, for outage tests on every interface an autoscaler reads.

Two simulated exporters, one GPU each, both attributed to pods of Deployment ``worker`` in
namespace ``prod``: node a's pod is idle (an idle workload holding 90 % of its memory: verdict
``idle``), node b's busy (steady inference, activity 0.6, utilisation 0.7: not idle). So,
written before running: ``rightsizer_gpu_busy`` is 0 for pod a and 1 for pod b, the workload's
sum 1 (KEDA active); ``rightsizer_gpu_utilization_ratio`` is about 0 for a and 0.7 for b.

``Reads`` asks one metric and selection of every interface: the external metrics API, the custom
metrics API (``pods/*`` and one pod), KEDA's metrics-api, and KEDA's gRPC GetMetrics, IsActive and
StreamIsActive (real gRPC client, the project's proto).
"""

from __future__ import annotations

import contextlib
import queue
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from adapter_support import get_json
from servers import Process, exporter

from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc

POD_A, POD_B = "worker-7d9c5b6f8b-x2x4z", "worker-7d9c5b6f8b-q9q9q"
WORKLOADS = {
    "a": (POD_A, {"kind": "idle", "memory_fraction": 0.9}),
    "b": (POD_B, {"kind": "steady_inference", "memory_gib": 18, "activity": 0.6, "utilization": 0.7}),
}


def scenario(tmp: Path, node: str) -> Path:
    pod, workload = WORKLOADS[node]
    path = tmp / f"node-{node}.yaml"
    gpu = {"name": f"worker-{node}", "model": "L4-24GB", "workload": workload,
           "pod": {"pod": pod, "namespace": "prod", "container": "srv"}}  # fmt: skip
    data = {"description": f"node {node}", "seed": 100 + ord(node), "history_seconds": 3600, "gpus": [gpu]}
    path.write_text(yaml.safe_dump(data))
    return path


@contextlib.contextmanager
def two_nodes(tmp: Path) -> Iterator[tuple[Process, Process]]:
    with (
        exporter(["--simulate", str(scenario(tmp, "a"))]) as a,
        exporter(["--simulate", str(scenario(tmp, "b"))]) as b,
    ):
        yield a, b


@dataclass(frozen=True)
class Grpc:
    code: str
    value: Any


@dataclass
class Reads:
    adapter: Process
    channel: grpc.Channel
    metric: str = "rightsizer_gpu_busy"

    def external(self, selector: str) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"labelSelector": selector}) if selector else ""
        code, body = get_json(f"{self.adapter.url}/apis/external.metrics.k8s.io/v1beta1/namespaces/prod/"
                              f"{self.metric}?{query}")  # fmt: skip
        return code, sorted(i["value"] for i in body["items"]) if code == 200 else body["message"]

    def pods(self, pod: str = "*") -> tuple[int, Any]:
        code, body = get_json(f"{self.adapter.url}/apis/custom.metrics.k8s.io/v1beta2/namespaces/prod/pods/"
                              f"{pod}/{self.metric}")  # fmt: skip
        if code != 200:
            return code, body["message"]
        return code, {i["describedObject"]["name"]: i["value"] for i in body["items"]}

    def metrics_api(self, selector: str) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"labelSelector": selector, "namespace": "prod"})
        code, body = get_json(f"{self.adapter.url}/keda/v1/metrics/{self.metric}?{query}")
        return code, body["value"] if code == 200 else body["message"]

    def ref(self, selector: str) -> pb.ScaledObjectRef:
        meta = {"metric": self.metric, "labelSelector": selector, "target": "1"}
        return pb.ScaledObjectRef(name="worker", namespace="prod", scalerMetadata=meta)

    def _call(self, method: str, request: Any) -> Grpc:
        try:
            return Grpc("OK", getattr(pb_grpc.ExternalScalerStub(self.channel), method)(request, timeout=5))
        except grpc.RpcError as exc:
            return Grpc(exc.code().name, exc.details())

    def get_metrics(self, selector: str) -> Grpc:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(selector), metricName="m")
        out = self._call("GetMetrics", request)
        return Grpc("OK", out.value.metricValues[0].metricValueFloat) if out.code == "OK" else out

    def is_active(self, selector: str) -> Grpc:
        out = self._call("IsActive", self.ref(selector))
        return Grpc("OK", out.value.result) if out.code == "OK" else out

    def everywhere(self, selector: str) -> dict[str, Any]:
        return {
            "external": self.external(selector),
            "metrics_api": self.metrics_api(selector),
            "get_metrics": self.get_metrics(selector),
            "is_active": self.is_active(selector),
        }

    @contextlib.contextmanager
    def stream(self, selector: str) -> Iterator[queue.Queue[Any]]:
        """StreamIsActive held open: every message it pushes lands in the queue."""
        pushed: queue.Queue[Any] = queue.Queue()
        call = pb_grpc.ExternalScalerStub(self.channel).StreamIsActive(self.ref(selector))

        def read() -> None:
            with contextlib.suppress(grpc.RpcError):
                for message in call:
                    pushed.put(message.result)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            yield pushed
        finally:
            call.cancel()
            reader.join(10)


def unavailable(seen: dict[str, Any], *fragments: str) -> None:
    """Every interface refuses: 503 / UNAVAILABLE, each message holding every fragment."""
    assert seen["external"][0] == 503 and seen["metrics_api"][0] == 503, seen
    assert seen["get_metrics"].code == seen["is_active"].code == "UNAVAILABLE", seen
    for message in (seen["external"][1], seen["metrics_api"][1], seen["get_metrics"].value):
        assert all(f in message for f in fragments), (fragments, message)
