"""The control-plane rig shared by the whole test run (a pytest plugin, see conftest.py):
tests/control_plane.py's etcd + kube-apiserver + kube-controller-manager with the project's shipped
objects applied (the kustomize render of deploy/base, for 1.20), a simulated exporter on a fixed
loopback port reading a real Redis queue and a fake vLLM (its TTFT and inter-token histograms fed at
a chosen latency), and the adapter in direct mode on 127.0.0.1:443, authenticating and authorizing
every request against the apiserver with its ServiceAccount's token, as in a cluster. The
control plane alone (``kube_cluster``) serves the tests that need no adapter: the rig runs on it.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from adapter_support import start_adapter
from control_plane import Cluster, control_plane, port_443_free
from doc_blocks import blocks
from kube import DEPLOY, render
from latency_servers import ClientServer
from queue_servers import FakeHttpServer
from servers import ROOT, Process, free_port, http_get, redis_server, start_exporter, wait_for

SLOS_DOC = ROOT / "docs" / "slos.md"
# The simulated fleet: one GPU at 85 % utilization, used by pod gpu/gpu-worker-0 (a StatefulSet's
# first pod, so that the name is known before the pod exists).
SCENARIO = {
    "description": "One GPU serving at 85 % utilization, in pod gpu/gpu-worker-0",
    "seed": 1,
    "history_seconds": 60,
    "gpus": [
        {
            "name": "busy",
            "model": "H100-SXM-80GB",
            "workload": {"kind": "steady_inference", "activity": 0.7, "utilization": 0.85, "swing": 0},
            "pod": {"pod": "gpu-worker-0", "namespace": "gpu", "container": "server"},
        }
    ],
}


def for_1_20(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object as Kubernetes 1.20 serves it: autoscaling/v2 is v2beta2 there (same fields),
    policy/v1 is v1beta1 (less unhealthyPodEvictionPolicy, 1.26+); None for nothing else."""
    if obj["apiVersion"] == "autoscaling/v2":
        return {**obj, "apiVersion": "autoscaling/v2beta2"}
    if obj["apiVersion"] == "policy/v1" and obj["kind"] == "PodDisruptionBudget":
        spec = {k: v for k, v in obj["spec"].items() if k != "unhealthyPodEvictionPolicy"}
        return {**obj, "apiVersion": "policy/v1beta1", "spec": spec}
    return obj


def external_name(service: dict[str, Any]) -> dict[str, Any]:
    """The adapter's Service as the loopback rig needs it: ExternalName localhost, same ports."""
    ports = [{k: v for k, v in p.items() if k != "targetPort"} for p in service["spec"]["ports"]]
    return {**service, "spec": {"type": "ExternalName", "externalName": "localhost", "ports": ports}}


def shipped_objects() -> list[dict[str, Any]]:
    objects = []
    for obj in render(DEPLOY / "base"):
        if obj["kind"] == "Service" and obj["metadata"]["name"] == "rightsizer-adapter":
            obj = external_name(obj)
        converted = for_1_20(obj)
        if converted is not None:
            objects.append(converted)
    return objects


def slo_declaration() -> dict[str, Any]:
    """docs/slos.md's "Declaring an SLO" block, as a user would copy it."""
    (block,) = [d for d in doc_yaml(SLOS_DOC) if isinstance(d, dict) and "slos" in d and "queues" in d]
    return dict(block)


def doc_yaml(path: Path) -> list[Any]:
    """Every YAML block of a document, parsed."""
    return [yaml.safe_load(b.body) for b in blocks(path) if b.info == "yaml"]


class Feeder:
    """Requests observed on the fake vLLM, 20 every half second, at ``ttft`` and ``itl`` seconds;
    its page is what vLLM renders, or that text turned to garbage by ``spoil`` while it is set."""

    def __init__(self, vllm: ClientServer) -> None:
        self.vllm, self.ttft, self.itl = vllm, 0.03, 0.008
        self.spoil: Callable[[str], str] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self.vllm.observe("ttft", self.ttft, 20)
            self.vllm.observe("itl", self.itl, 20)

    def page(self) -> bytes:
        text, spoil = self.vllm.render().decode(), self.spoil
        return (spoil(text) if spoil is not None else text).encode()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@dataclass
class Rig:
    cluster: Cluster
    adapter: Process
    exporter: Process
    exporter_args: list[str]
    redis_port: int
    feeder: Feeder
    tmp: Path

    def set_depth(self, queue: str, depth: int) -> None:
        client = redis.Redis(host="127.0.0.1", port=self.redis_port, socket_timeout=5)
        with client.pipeline() as pipe:
            pipe.delete(queue)
            if depth:
                pipe.rpush(queue, *range(depth))
            pipe.execute()
        client.close()

    def kill_exporter(self) -> None:
        self.exporter.stop()

    def restart_exporter(self) -> None:
        self.exporter = start_exporter(self.exporter_args)

    def exporter_value(self, family: str, **labels: str) -> float | None:
        text = http_get(self.exporter.url + "/metrics")[2].decode()
        for line in text.splitlines():
            if line.startswith(family + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None


def _exporter_config(tmp: Path, vllm_url: str, redis_port: int) -> Path:
    config = slo_declaration()
    (chat,) = config["queues"]
    chat.update(url=vllm_url, backoff_max=1)
    config["queues"].append(
        {
            "name": "jobs",
            "kind": "redis",
            "url": f"redis://127.0.0.1:{redis_port}/0",
            "key": "jobs",
            "backoff_max": 1,
            "labels": {"namespace": "demo", "workload": "worker"},
        }
    )
    config["rightsizing"]["slo_scaling_window_seconds"] = 12  # a short window: the tests' minutes
    path = tmp / "exporter.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _adapter_config(tmp: Path, cluster: Cluster) -> Path:
    """The shipped ConfigMap's adapter.yaml, plus where the API is (in a cluster: in-pod files)."""
    (cm,) = [
        o
        for o in shipped_objects()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "rightsizer-adapter"
    ]
    config = yaml.safe_load(cm["data"]["adapter.yaml"]) or {}
    token = tmp / "adapter-token"
    token.write_text(cluster.token("rightsizer", "rightsizer-adapter"))
    # pod_labels: in a cluster "auto" reads pod labels from the API; here the adapter runs outside.
    config["kubernetes"] = {
        "api_url": cluster.url,
        "token_file": str(token),
        "ca_file": str(tmp / "ca.crt"),
        "pod_labels": "api",
    }
    config["authentication"] = {"delegated": "on"}
    config["authorization"] = {"delegated": "on"}
    path = tmp / "adapter.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


AGGREGATED = (
    "/apis/external.metrics.k8s.io/v1beta1",
    "/apis/custom.metrics.k8s.io/v1beta1",
    "/apis/custom.metrics.k8s.io/v1beta2",
)


def apiservices_available(cluster: Cluster) -> dict[str, str]:
    out = {}
    for svc in cluster.get("/apis/apiregistration.k8s.io/v1/apiservices")["items"]:
        if "metrics.k8s.io" in svc["metadata"]["name"]:
            cond = next(
                (c for c in svc.get("status", {}).get("conditions", []) if c["type"] == "Available"), {}
            )
            out[svc["metadata"]["name"]] = (
                f"{cond.get('status')} {cond.get('reason', '')} {cond.get('message', '')}"
            )
    return out


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The control plane alone (etcd + kube-apiserver + kube-controller-manager), for the tests
    that need no adapter on 127.0.0.1:443 (server-side dry runs); the rig runs on the same one."""
    with control_plane(tmp_path_factory.mktemp("control-plane")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kube_rig(request: pytest.FixtureRequest) -> Iterator[Rig]:
    port_443_free()  # before the cluster starts: skipped at no cost
    cluster: Cluster = request.getfixturevalue("kube_cluster")
    tmp = cluster.tmp  # the adapter reads the cluster's CA there
    vllm = ClientServer("vllm")
    with contextlib.ExitStack() as stack:
        rds = stack.enter_context(redis_server())
        http = stack.enter_context(FakeHttpServer())
        feeder = Feeder(vllm)
        http.route("/metrics", body=feeder.page)
        stack.callback(feeder.stop)
        cluster.apply(shipped_objects())
        scenario = tmp / "scenario.yaml"
        scenario.write_text(yaml.safe_dump(SCENARIO))
        args = [
            "--simulate",
            str(scenario),
            "--interval",
            "0.5",
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--config",
            str(_exporter_config(tmp, http.url("/metrics"), rds.extra["port"])),
        ]
        rig = Rig(cluster, None, start_exporter(args), args, rds.extra["port"], feeder, tmp)  # type: ignore[arg-type]
        stack.callback(lambda: rig.exporter.stop())
        config = _adapter_config(tmp, cluster)
        rig.adapter = start_adapter(
            ["--config", str(config), "--exporter", rig.exporter.url, "--listen", "127.0.0.1:443"]
        )
        stack.callback(rig.adapter.stop)
        try:
            wait_for(
                lambda: all(v.startswith("True") for v in apiservices_available(cluster).values()),
                90,
                0.5,
                what="the adapter's APIServices Available",
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\n{apiservices_available(cluster)}\n{rig.adapter.log()[-2000:]}"
            ) from None
        # Available is the availability controller's word; the aggregator's proxy for a group
        # version can still answer 503 "unable to handle the request" for a moment after it
        # (its discovery is fetched apart): wait until each one serves its own discovery.
        for path in AGGREGATED:
            wait_for(lambda path=path: cluster.request("GET", path)[0] == 200, 60, 0.5, what=f"{path} served")
        yield rig


def quantity(text: str) -> float:
    m = re.fullmatch(r"(-?[0-9.]+)([munkMG]?)", text)
    assert m, text
    scale = {"": 1, "m": 1e-3, "u": 1e-6, "n": 1e-9, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]
    return float(m.group(1)) * scale
