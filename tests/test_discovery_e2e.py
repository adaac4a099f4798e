"""Discovery end to end: two nodes, each an exporter process with its kubelet (pod list over HTTPS
with a bearer token, pod-resources over its real gRPC protocol, the device-manager checkpoint),
vLLM and SGLang replicas on loopback aliases (one pod IP each, one shared port), and the adapter
in direct mode scraping both exporters.

Written from the pods before running:
- node A runs chat replicas x2x4z (127.0.0.11, GPU-a0, 3 waiting) and q9q9q (127.0.0.12, GPU-a1,
  5 waiting; also a static ``queues:`` entry ``chat-static`` for the same host:port), embed-0
  (SGLang told by its image, prometheus.io annotations, 127.0.0.13, GPU-a2, 2 waiting) and train-0
  (no annotation, GPU-a3); a canary pod (label tier=canary) and a pod of namespace dev are
  annotated but outside the selectors. Node B runs chat replica z7z7z (127.0.0.21, GPU-b0, 11).
- A polls x2x4z, chat-static and embed-0: three depth series (3, 5, 2), never a second one for
  127.0.0.12; B polls z7z7z only (11). Every replica's page is read by its own node's exporter.
- Links are the pods' own GPUs: GPU-a0 feeds x2x4z's queue only, GPU-a1 chat-static only (the
  workload labels of every chat queue match every chat pod: label links would give each GPU all
  three), GPU-a2 embed-0's, GPU-a3 none.
- The adapter answers workload chat in prod as three items summing to 3 + 5 + 11 = 19; with
  z7z7z's server stopped, 503 naming its queue, never 8.
- A pod that goes (removed, or terminating) loses its series; a new one is polled once Ready.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import ANONYMOUS, adapter, get_json, hpa_desired_replicas
from discovery_rig import TOKEN, KubeletPods, PodSpec, Replicas, checkpoint_json
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer
from prometheus_client.parser import text_string_to_metric_families
from queue_fakes import SglangMetrics, VllmMetrics
from servers import Process, exporter, http_get, wait_for

RS = ("ReplicaSet", "chat-6d4cf56db6")
HASH = {"pod-template-hash": "6d4cf56db6", "app": "chat"}
OPT_IN = {"rightsizer.io/scrape": "true", "rightsizer.io/kind": "vllm"}
EXT = "/apis/external.metrics.k8s.io/v1beta1/namespaces"


def shared_port() -> int:
    """A port free on every alias used here (pods of one Deployment share their port)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.11", 0))
            port = s.getsockname()[1]
        try:
            for last in (12, 13, 14, 15, 21):
                with socket.socket() as s:
                    s.bind((f"127.0.0.{last}", port))
            return port
        except OSError:
            continue


@dataclass
class Node:
    name: str
    dir: Path
    pods: list[PodSpec]
    kubelet: KubeletPods
    exporter: Process | None = None

    def publish(self) -> None:
        """Write what the kubelet's gRPC API and checkpoint say (its /pods reads ``pods`` live)."""
        held = [p for p in self.pods if p.gpus and not p.terminating]
        write_answer(self.dir / "answer.json", [p.pod_resources() for p in held])
        (self.dir / "checkpoint.json").write_text(checkpoint_json(held))

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        assert self.exporter is not None
        text = http_get(self.exporter.url + "/metrics")[2].decode()
        out: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith("rightsizer_queue_"):
                    out.setdefault(s.name, []).append((dict(s.labels), s.value))
        return out

    def api(self, section: str) -> Any:
        assert self.exporter is not None
        return json.loads(http_get(f"{self.exporter.url}/api/v1/{section}")[2])


def depths(node: Node) -> dict[str, float]:
    return {labels["queue"]: v for labels, v in node.metrics().get("rightsizer_queue_depth", [])}


def gpu_links(node: Node) -> dict[str, list[str]]:
    """GPU UUID -> the queues right-sizing links to it."""
    return {g["uuid"]: [q["name"] for q in g["rightsizing"]["queues"]] for g in node.api("gpus")["gpus"]}


def scenario(path: Path, uuids: list[str]) -> Path:
    gpus = [{"name": u, "model": "L4", "uuid": u, "workload": {"kind": "steady_inference"}} for u in uuids]
    path.write_text(yaml.safe_dump({"description": "discovery", "seed": 7, "gpus": gpus}))
    return path


def config(node: Node, port: int, static: list[dict[str, Any]]) -> Path:
    d = node.dir
    (d / "token").write_text(TOKEN)
    pods = {"enabled": True, "socket": str(d / "kubelet.sock"), "checkpoint": str(d / "checkpoint.json")}
    discovery = {
        "enabled": True,
        "kubelet_url": node.kubelet.url,
        "tls_ca_file": str(node.kubelet.ca_file),
        "bearer_token_file": str(d / "token"),
        "refresh_interval_seconds": 1,
        "timeout_seconds": 0.5,
        "namespaces": ["prod"],
        "label_selector": "tier!=canary",
    }
    fast = {"refresh_interval_seconds": 1, "timeout_seconds": 0.5}
    doc = {"interval": 0.5, "pods": pods | fast, "discovery": discovery, "queues": static}
    (d / "exporter.yaml").write_text(yaml.safe_dump(doc))
    return d / "exporter.yaml"


@dataclass
class Rig:
    a: Node
    b: Node
    replicas: Replicas
    pages: dict[str, VllmMetrics | SglangMetrics]
    adapter: Process
    port: int

    def external(self, selector: str) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        return get_json(f"{self.adapter.url}{EXT}/prod/rightsizer_queue_depth?{query}")

    def keda(self, selector: str) -> tuple[int, Any]:
        """KEDA's metrics-api answer: one value for the selection."""
        query = urllib.parse.urlencode({"labelSelector": selector, "namespace": "prod"})
        return get_json(f"{self.adapter.url}/keda/v1/metrics/rightsizer_queue_depth?{query}")


def vllm(waiting: float) -> VllmMetrics:
    page = VllmMetrics()
    page.set([waiting], [1.0])
    return page


def sglang(waiting: float) -> SglangMetrics:
    page = SglangMetrics()
    page.set(waiting, 1.0)
    return page


def render(page: VllmMetrics | SglangMetrics) -> Callable[[], bytes]:
    return lambda: page.render()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    port = shared_port()
    chat = {"rightsizer.io/port": str(port)}
    pods_a = [
        PodSpec("chat-6d4cf56db6-x2x4z", "uid-a1", "127.0.0.11", port, ("GPU-a0",), annotations=OPT_IN,
                labels=HASH, owner=RS),
        PodSpec("chat-6d4cf56db6-q9q9q", "uid-a2", "127.0.0.12", port, ("GPU-a1",), annotations=OPT_IN,
                labels=HASH, owner=RS),
        PodSpec("embed-0", "uid-a3", "127.0.0.13", port, ("GPU-a2",), owner=("StatefulSet", "embed"),
                annotations={"prometheus.io/scrape": "true", "prometheus.io/port": str(port)},
                image="docker.io/lmsysorg/sglang:v0.4.6.post1-cu124"),
        PodSpec("train-0", "uid-a4", "127.0.0.16", port, ("GPU-a3",), owner=("Job", "train")),
        PodSpec("chat-canary-5f7d8c9b4d-k2k2k", "uid-a5", "127.0.0.14", port, annotations={**OPT_IN, **chat},
                labels={"tier": "canary"}, owner=("ReplicaSet", "chat-canary-5f7d8c9b4d")),
        PodSpec("chat-dev-0", "uid-a6", "127.0.0.14", port, annotations=OPT_IN, namespace="dev"),
    ]  # fmt: skip
    pods_b = [
        PodSpec("chat-6d4cf56db6-z7z7z", "uid-b1", "127.0.0.21", port, ("GPU-b0",), annotations=OPT_IN,
                labels=HASH, owner=RS),
    ]  # fmt: skip
    pages: dict[str, VllmMetrics | SglangMetrics] = {
        "127.0.0.11": vllm(3), "127.0.0.12": vllm(5), "127.0.0.13": sglang(2), "127.0.0.15": vllm(7),
        "127.0.0.21": vllm(11),
    }  # fmt: skip
    static = [{"name": "chat-static", "kind": "vllm", "url": f"http://127.0.0.12:{port}/metrics",
               "labels": {"namespace": "prod", "workload": "chat"}}]  # fmt: skip
    with contextlib.ExitStack() as stack:
        replicas = stack.enter_context(Replicas({ip: render(p) for ip, p in pages.items()}, port))
        nodes = []
        for name, pods, uuids, own_static in (
            ("a", pods_a, ["GPU-a0", "GPU-a1", "GPU-a2", "GPU-a3", "GPU-a4"], static),
            ("b", pods_b, ["GPU-b0"], []),
        ):
            d = short_socket_dir()
            stack.callback(shutil.rmtree, d, True)
            kubelet = stack.enter_context(KubeletPods(d, pods))
            node = Node(name, d, pods, kubelet)
            node.publish()
            stack.enter_context(kubelet_process(d / "kubelet.sock", d / "answer.json"))
            args = [
                "--simulate",
                str(scenario(d / "fleet.yaml", uuids)),
                "--config",
                str(config(node, port, own_static)),
            ]
            node.exporter = stack.enter_context(exporter(args))
            nodes.append(node)
        a, b = nodes
        adapter_config = tmp_path / "adapter.yaml"
        adapter_config.write_text("direct:\n  stale_after_seconds: 5\n")
        args = ["--exporter", a.exporter.url, "--exporter", b.exporter.url, "--config", str(adapter_config)]
        adapter_process = stack.enter_context(adapter(args, env=ANONYMOUS))
        yield Rig(a, b, replicas, pages, adapter_process, port)


def _settled(rig: Rig) -> bool:
    return depths(rig.a) == {"prod/chat-6d4cf56db6-x2x4z": 3, "chat-static": 5, "prod/embed-0": 2} and depths(
        rig.b
    ) == {"prod/chat-6d4cf56db6-z7z7z": 11}


def test_each_replica_is_polled_on_its_own_node_and_linked_to_its_own_gpus(rig: Rig) -> None:
    wait_for(lambda: _settled(rig), 30, what="the discovered replicas' depths")
    a_series = {labels["queue"]: labels for labels, _ in rig.a.metrics()["rightsizer_queue_depth"]}
    assert a_series["prod/chat-6d4cf56db6-x2x4z"] == {
        "queue": "prod/chat-6d4cf56db6-x2x4z", "kind": "vllm", "namespace": "prod", "workload": "chat",
        "pod": "chat-6d4cf56db6-x2x4z",
    }  # fmt: skip
    assert a_series["prod/embed-0"]["kind"] == "sglang" and a_series["prod/embed-0"]["workload"] == "embed"
    # 127.0.0.12 is polled once, as the static entry; the other exporter polls none of node A's pods
    assert len(rig.a.metrics()["rightsizer_queue_source_up"]) == 3
    assert all(
        rig.replicas.requests[ip] > 0 for ip in ("127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.21")
    )
    assert rig.replicas.requests["127.0.0.15"] == 0  # no pod there yet

    view = rig.a.api("discovery")["discovery"]
    assert view["ok"] is True and view["gpu_links"] == "pod_uid", view
    servers = {s["queue"]: s for s in view["servers"]}
    assert {
        q: (s["gpus"], s["workload"], s["workload_kind"], s["polled_as"]) for q, s in servers.items()
    } == {
        "prod/chat-6d4cf56db6-x2x4z": (["GPU-a0"], "chat", "Deployment", "prod/chat-6d4cf56db6-x2x4z"),
        "prod/chat-6d4cf56db6-q9q9q": (["GPU-a1"], "chat", "Deployment", "chat-static"),
        "prod/embed-0": (["GPU-a2"], "embed", "StatefulSet", "prod/embed-0"),
    }
    static = rig.a.api("queues")["queues"][0]
    assert (static["name"], static["origin"], static["gpus"]) == ("chat-static", "static", ["GPU-a1"])

    links = gpu_links(rig.a)
    assert links == {
        "GPU-a0": ["prod/chat-6d4cf56db6-x2x4z"], "GPU-a1": ["chat-static"], "GPU-a2": ["prod/embed-0"],
        "GPU-a3": [], "GPU-a4": [],
    }  # fmt: skip

    # the adapter: workload chat is the sum of its three replicas across both nodes
    wait_for(lambda: rig.external("workload=chat")[0] == 200, 30, what="the adapter's answer")
    code, body = rig.external("workload=chat")
    values = sorted(float(i["value"]) for i in body["items"])
    assert code == 200 and values == [3, 5, 11], body
    assert hpa_desired_replicas(body["items"], 1) == 19
    code, keda = rig.keda("workload=chat")
    assert code == 200 and float(keda["value"]) == 19, keda

    # one replica's server stops: the workload is unavailable, never the other two's 8
    rig.replicas.stop("127.0.0.21")
    wait_for(lambda: rig.external("workload=chat")[0] == 503, 30, what="the stopped replica seen")
    code, body = rig.external("workload=chat")
    assert "prod/chat-6d4cf56db6-z7z7z" in body["message"], body
    assert rig.keda("workload=chat")[0] == 503
    up = {labels["queue"]: v for labels, v in rig.b.metrics()["rightsizer_queue_source_up"]}
    assert up == {"prod/chat-6d4cf56db6-z7z7z": 0} and "rightsizer_queue_depth" not in rig.b.metrics()
    rig.replicas.start("127.0.0.21")
    wait_for(lambda: rig.external("workload=chat")[0] == 200, 30, what="the replica back")


def test_pods_come_and_go_without_a_restart(rig: Rig) -> None:
    wait_for(lambda: _settled(rig), 30, what="the discovered replicas' depths")
    a = rig.a
    new = PodSpec("chat-6d4cf56db6-d8d8d", "uid-a7", "127.0.0.15", rig.port, ("GPU-a4",), annotations=OPT_IN,
                  labels=HASH, owner=RS, ready=False)  # fmt: skip
    a.pods.append(new)
    a.publish()
    seen = a.api("discovery")["discovery"]["refreshes"]
    wait_for(lambda: a.api("discovery")["discovery"]["refreshes"] >= seen + 2, 10, what="two refreshes")
    assert "prod/chat-6d4cf56db6-d8d8d" not in depths(a)  # not Ready: not a replica yet
    assert rig.replicas.requests["127.0.0.15"] == 0
    a.pods[-1] = replace(new, ready=True)
    wait_for(lambda: depths(a).get("prod/chat-6d4cf56db6-d8d8d") == 7, 30, what="the new replica polled")
    links = gpu_links(a)
    assert links["GPU-a4"] == ["prod/chat-6d4cf56db6-d8d8d"]

    # x2x4z is deleted, embed-0 starts terminating: both leave, series and all
    a.pods[:] = [p for p in a.pods if p.name != "chat-6d4cf56db6-x2x4z"]
    a.pods[:] = [replace(p, terminating=True) if p.name == "embed-0" else p for p in a.pods]
    a.publish()

    def gone() -> bool:
        queues = {labels["queue"] for labels, _ in a.metrics().get("rightsizer_queue_source_up", [])}
        return queues == {"chat-static", "prod/chat-6d4cf56db6-d8d8d"}

    wait_for(gone, 30, what="the deleted and terminating pods' series removed")
    assert set(depths(a)) == {"chat-static", "prod/chat-6d4cf56db6-d8d8d"}

    def three_items() -> bool:
        code, body = rig.external("workload=chat")
        return code == 200 and len(body["items"]) == 3

    wait_for(three_items, 30, what="the adapter following the pods")
    values = sorted(float(i["value"]) for i in rig.external("workload=chat")[1]["items"])
    assert values == [5, 7, 11]
    assert rig.replicas.requests["127.0.0.15"] > 0
