"""A real queue outage on loopback: redis-server, the exporter, the adapter, KEDA's gRPC client.

The exporter (simulated fleet) polls two Redis queues: ``jobs`` on a real redis-server, which a
test can stop mid-run, and ``dead`` on a closed port. ``Answers`` reads one queue selection from
every adapter endpoint an autoscaler uses: external metrics API, KEDA metrics-api, KEDA
GetMetrics and IsActive over real gRPC with the project's proto.
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from adapter_support import get_json
from servers import Process, exporter, free_port, prom_query, prometheus, wait_for
from victoria_metrics import victoria_metrics

from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc

EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces"
METRIC = "rightsizer_queue_depth"


def source_args(stack: contextlib.ExitStack, mode: str, nodes: Sequence[Process]) -> list[str]:
    """The adapter's arguments to read ``nodes``: each exporter (``direct``), or a real Prometheus
    or VictoriaMetrics (``mode``) scraping them every second, started on ``stack``."""
    targets = [node.url.removeprefix("http://") for node in nodes]
    if mode == "direct":
        return [arg for node in nodes for arg in ("--exporter", node.url)]
    if mode == "victoria-metrics":
        jobs = (f"  - job_name: rightsizer-exporter\n    scrape_interval: 1s\n    static_configs:\n"
                f"      - targets: {json.dumps(targets)}")  # fmt: skip
        engine = stack.enter_context(victoria_metrics(jobs))
    else:
        engine = stack.enter_context(prometheus({"rightsizer-exporter": targets}))
    # Every target scraped once (an exporter never reached has its ``up`` 0): until then the engine
    # knows nothing of the targets not yet scraped, and neither can the adapter.
    wait_for(
        lambda: len(prom_query(engine.url, 'up{job="rightsizer-exporter"}')) == len(targets),
        60,
        what="the engine to have scraped every exporter once",
    )
    return ["--prometheus-url", engine.url, "--refresh-interval", "0.5"]


def exporter_config(path: Path, redis_port: int) -> Path:
    closed = free_port()  # nothing listens there: connection refused on every poll
    path.write_text(
        "queues:\n"
        f"  - {{name: jobs, kind: redis, url: 'redis://127.0.0.1:{redis_port}/0', key: jobs,"
        " backoff_max: 1, labels: {namespace: prod, workload: worker}}\n"
        f"  - {{name: dead, kind: redis, url: 'redis://127.0.0.1:{closed}/0', key: dead,"
        " backoff_max: 1, labels: {namespace: prod, workload: dead}}\n"
    )
    return path


@contextlib.contextmanager
def queue_exporter(tmp: Path, redis_port: int) -> Iterator[Process]:
    with exporter(["--simulate", "--config", str(exporter_config(tmp / "exporter.yaml", redis_port))]) as p:
        yield p


@dataclass(frozen=True)
class Grpc:
    """A gRPC outcome: the status code's name and the value or the error's details."""

    code: str
    value: Any


@dataclass
class Answers:
    adapter: Process
    channel: grpc.Channel

    def external(self, selector: str, namespace: str = "prod") -> tuple[int, Any]:
        query = urllib.parse.urlencode({"labelSelector": selector}) if selector else ""
        return get_json(f"{self.adapter.url}{EXT}/{urllib.parse.quote(namespace)}/{METRIC}?{query}")

    def metrics_api(self, selector: str, namespace: str = "prod") -> tuple[int, Any]:
        query = urllib.parse.urlencode({"labelSelector": selector, "namespace": namespace})
        return get_json(f"{self.adapter.url}/keda/v1/metrics/{METRIC}?{query}")

    def _call(self, method: str, request: Any) -> Grpc:
        stub = pb_grpc.ExternalScalerStub(self.channel)
        try:
            answer = getattr(stub, method)(request, timeout=5)
        except grpc.RpcError as exc:
            return Grpc(exc.code().name, exc.details())
        return Grpc("OK", answer)

    def get_metrics(self, selector: str, namespace: str = "prod") -> Grpc:
        ref = scaled_object(selector, namespace)
        out = self._call("GetMetrics", pb.GetMetricsRequest(scaledObjectRef=ref, metricName="m"))
        return Grpc(out.code, out.value.metricValues[0].metricValueFloat) if out.code == "OK" else out

    def is_active(self, selector: str, namespace: str = "prod") -> Grpc:
        out = self._call("IsActive", scaled_object(selector, namespace))
        return Grpc(out.code, out.value.result) if out.code == "OK" else out

    def metric_spec(self, target: str) -> Grpc:
        out = self._call("GetMetricSpec", scaled_object("queue=jobs", "prod", target=target))
        return Grpc(out.code, out.value.metricSpecs[0].targetSizeFloat) if out.code == "OK" else out

    def everywhere(self, selector: str) -> dict[str, Any]:
        """What each endpoint answers for ``selector`` in namespace prod: (code, value or reason)."""
        ext_code, ext = self.external(selector)
        api_code, api = self.metrics_api(selector)
        return {
            "external": (ext_code, [i["value"] for i in ext["items"]] if ext_code == 200 else ext["message"]),
            "metrics_api": (api_code, api["value"] if api_code == 200 else api["message"]),
            "get_metrics": self.get_metrics(selector),
            "is_active": self.is_active(selector),
        }


def scaled_object(selector: str, namespace: str, **meta: str) -> pb.ScaledObjectRef:
    metadata = {"metric": METRIC, "labelSelector": selector, **meta}
    return pb.ScaledObjectRef(name="worker", namespace=namespace, scalerMetadata=metadata)


def assert_unavailable(seen: dict[str, Any], queue: str, why: str) -> None:
    """Every endpoint refuses with 'unavailable' (503 / UNAVAILABLE), naming ``queue`` and ``why``."""
    assert seen["external"][0] == 503 and seen["metrics_api"][0] == 503, json.dumps(seen, default=str)
    assert seen["get_metrics"].code == seen["is_active"].code == "UNAVAILABLE", seen
    for message in (seen["external"][1], seen["metrics_api"][1], seen["get_metrics"].value):
        assert repr(queue) in message and why in message, message


def assert_not_found(seen: dict[str, Any]) -> None:
    assert seen["external"][0] == seen["metrics_api"][0] == 404, seen
    assert seen["get_metrics"].code == seen["is_active"].code == "NOT_FOUND", seen


def assert_empty(seen: dict[str, Any]) -> None:
    """Up and empty: a real 0 everywhere (scaling to zero is legitimate then)."""
    assert seen["external"] == (200, ["0"]) and seen["metrics_api"] == (200, 0), seen
    assert seen["get_metrics"] == Grpc("OK", 0.0) and seen["is_active"] == Grpc("OK", False), seen
