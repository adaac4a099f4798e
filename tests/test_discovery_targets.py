"""Which pods discovery polls, and as what: owners, kinds, ports, paths, readiness, selectors,
bounds, and pod lists that are not what they should be (never an exception, a reason instead)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from discovery_rig import PodSpec
from hypothesis import given
from hypothesis import strategies as st

from exporter.sources.discovery.settings import DiscoverySettings
from exporter.sources.discovery.targets import Server, image_kind, owner, select, server_of
from rightsizer_core.selectors import EVERYTHING, parse

ON = DiscoverySettings(enabled=True)
VLLM = {"rightsizer.io/scrape": "true", "rightsizer.io/kind": "vllm"}


def pod(**kw: Any) -> PodSpec:
    base = PodSpec("chat-6d4cf56db6-x2x4z", "uid-1", "10.0.3.7", 8000, annotations=VLLM)
    return replace(base, **kw)


def judge(
    spec: PodSpec | dict[str, Any], settings: DiscoverySettings = ON, known: tuple[str, ...] = ()
) -> Any:
    item = spec.item() if isinstance(spec, PodSpec) else spec
    return server_of(item, settings, EVERYTHING, known)


def test_owner_is_the_controller_and_a_replicasets_deployment() -> None:
    hashed = {"pod-template-hash": "6d4cf56db6"}
    refs = [{"kind": "ReplicaSet", "name": "chat-6d4cf56db6", "controller": True}]
    assert owner({"ownerReferences": refs}, hashed, "p") == ("Deployment", "chat")
    # a ReplicaSet whose name does not end in the pod's template hash is its own workload
    assert owner({"ownerReferences": refs}, {"pod-template-hash": "other"}, "p") == (
        "ReplicaSet",
        "chat-6d4cf56db6",
    )
    assert owner({"ownerReferences": refs}, {}, "p") == ("ReplicaSet", "chat-6d4cf56db6")
    sts = [{"kind": "StatefulSet", "name": "embed", "controller": True}]
    assert owner({"ownerReferences": sts}, {}, "embed-0") == ("StatefulSet", "embed")
    # only the controller counts; without one the pod is its own workload, whatever its name says
    not_controller = [{"kind": "ReplicaSet", "name": "chat-6d4cf56db6"}]
    assert owner({"ownerReferences": not_controller}, hashed, "chat-6d4cf56db6-x2x4z") == (
        "Pod",
        "chat-6d4cf56db6-x2x4z",
    )
    for junk in ("x", [None, 3, "y"], [{"kind": 1, "name": "n", "controller": True}], {"kind": "Job"}):
        assert owner({"ownerReferences": junk}, {}, "p") == ("Pod", "p")


@pytest.mark.parametrize(
    ("images", "kind"),
    [
        (["vllm/vllm-openai:v0.8.5"], "vllm"),
        (["docker.io/lmsysorg/sglang:v0.4.6.post1-cu124"], "sglang"),
        (["ghcr.io/huggingface/text-generation-inference:3.0.1"], "tgi"),
        (["nvcr.io/nvidia/tritonserver:24.08-trtllm-python-py3"], "triton"),
        (["registry.local:5000/ml/vllm-openai@sha256:" + "a" * 64, "busybox:1.36"], "vllm"),
        (["myrepo/server:vllm-0.8"], None),  # a tag names nothing
        (["vllm/vllm-openai:v0.8.5", "lmsysorg/sglang:latest"], None),  # two kinds: not told
        (["busybox"], None),
        ([], None),
    ],
)
def test_kind_from_images(images: list[str], kind: str | None) -> None:
    assert image_kind(images) == kind


def test_an_annotated_ready_pod_is_a_server() -> None:
    server = judge(pod(labels={"pod-template-hash": "6d4cf56db6"}, owner=("ReplicaSet", "chat-6d4cf56db6")))
    assert server == Server(
        "uid-1", "prod", "chat-6d4cf56db6-x2x4z", "chat", "Deployment", "10.0.3.7", 8000, "/metrics", "vllm"
    )
    assert server.url == "http://10.0.3.7:8000/metrics" and server.name == "prod/chat-6d4cf56db6-x2x4z"
    assert server.labels == {"namespace": "prod", "workload": "chat", "pod": "chat-6d4cf56db6-x2x4z"}
    assert judge(pod(ip="fd00::7")).url == "http://[fd00::7]:8000/metrics"


def test_opting_in_and_out() -> None:
    prom = {"prometheus.io/scrape": "true", "prometheus.io/port": "9000", "prometheus.io/path": "/stats"}
    found = judge(pod(annotations=prom, image="vllm/vllm-openai:v0.8.5"))
    assert (found.kind, found.port, found.path) == ("vllm", 9000, "/stats")
    assert judge(pod(annotations=prom)).kind is None  # the page must tell
    assert judge(pod(annotations=prom), replace(ON, prometheus_annotations=False)) is None
    assert judge(pod(annotations={**prom, "rightsizer.io/scrape": "false"})) is None
    assert judge(pod(annotations={"rightsizer.io/kind": "vllm"})) is None  # no scrape annotation
    assert judge(pod(annotations={"rightsizer.io/scrape": "yes", "rightsizer.io/kind": "vllm"})) is None
    own = {
        **VLLM,
        "rightsizer.io/port": "8080",
        "rightsizer.io/path": "/v1/metrics",
        "prometheus.io/port": "1",
    }
    assert (judge(pod(annotations=own)).port, judge(pod(annotations=own)).path) == (8080, "/v1/metrics")


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        ({**VLLM, "rightsizer.io/kind": "ollama"}, "rightsizer.io/kind 'ollama' is not one of vllm, sglang"),
        ({**VLLM, "rightsizer.io/port": "80a"}, "rightsizer.io/port '80a' is not a port number"),
        ({**VLLM, "rightsizer.io/port": "70000"}, "rightsizer.io/port '70000' is not a port number"),
        ({**VLLM, "rightsizer.io/path": "metrics"}, "path 'metrics' is not a URL path"),
        ({**VLLM, "rightsizer.io/path": "/a b"}, "path '/a b' is not a URL path"),
    ],
)
def test_a_pod_that_cannot_be_polled_says_why(annotations: dict[str, str], why: str) -> None:
    found = judge(pod(annotations=annotations))
    assert isinstance(found, str) and found.startswith(why), found


def test_names_that_kubernetes_would_not_give_are_refused() -> None:
    for name, namespace in (("evil\nname", "prod"), ("Chat", "prod"), ("chat", "pr od"), ("chat", "x" * 64)):
        assert judge(pod(name=name, namespace=namespace)) == "namespace or name is not a Kubernetes name"
    assert judge(pod(name="c" * 254)) == "name or UID longer than Kubernetes allows"
    assert judge(pod(uid="u" * 65)) == "name or UID longer than Kubernetes allows"
    assert isinstance(judge(pod(name="chat-0.v2")), Server)


def test_the_port_when_no_annotation_names_it() -> None:
    item = pod().item()
    item["spec"]["containers"].append({"name": "sidecar", "ports": [{"containerPort": 9090}]})
    assert judge(item) == "no port: set rightsizer.io/port (the pod declares 2 container ports)"
    item["spec"]["containers"][1]["ports"] = [{"containerPort": 8000}]  # the same port twice is one
    assert judge(item).port == 8000


def test_readiness_deletion_and_phase() -> None:
    assert judge(pod(ready=False)) is None  # never Ready: not a replica yet
    assert judge(pod(ready=False), known=("uid-1",)).uid == "uid-1"  # was polled: stays, down if it fails
    assert judge(pod(terminating=True), known=("uid-1",)) is None  # leaving: gone
    item = pod().item()
    item["status"]["phase"] = "Succeeded"
    assert judge(item, known=("uid-1",)) is None
    item = pod().item()
    del item["status"]["podIP"]
    assert judge(item) == "no pod IP"
    item["status"]["podIP"] = "10.0.0.1/../x"
    assert judge(item) == "no pod IP"


def test_namespaces_and_label_selector_limit_what_is_considered() -> None:
    only_prod = replace(ON, namespaces=["prod"])
    assert judge(pod(namespace="dev"), only_prod) is None and judge(pod(), only_prod) is not None
    selector = parse("app in (chat,embed),tier!=canary").on_keys()
    ok = pod(labels={"app": "chat"}).item()
    canary = pod(labels={"app": "chat", "tier": "canary"}).item()
    other = pod(labels={"app": "train"}).item()
    assert server_of(ok, ON, selector, ()) is not None
    assert server_of(canary, ON, selector, ()) is None and server_of(other, ON, selector, ()) is None


def test_at_most_max_servers_and_those_polled_keep_their_places() -> None:
    pods = [pod(name=f"chat-{i}", uid=f"uid-{i}", ip=f"10.0.0.{i}").item() for i in range(5)]
    bounded = replace(ON, max_servers=2)
    first = select(pods, bounded, EVERYTHING, ())
    assert [s.pod for s in first.servers] == ["chat-0", "chat-1"]
    assert [p for p, _ in first.skipped] == ["prod/chat-2", "prod/chat-3", "prod/chat-4"]
    assert "discovery.max_servers" in first.skipped[0][1]
    # chat-4 was polled: a new chat-0 does not push it out
    later = select(pods, bounded, EVERYTHING, ("uid-4", "uid-1"))
    assert [s.pod for s in later.servers] == ["chat-1", "chat-4"]


junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(junk, max_size=5), st.dictionaries(st.sampled_from(["metadata", "spec", "status"]), junk))
def test_any_pod_list_gives_servers_or_reasons_never_an_exception(
    items: list[Any], part: dict[str, Any]
) -> None:
    base = pod().item()
    base.update(part)
    out = select([*items, base], ON, EVERYTHING, ())
    assert all(isinstance(s, Server) for s in out.servers)
    assert all(isinstance(why, str) for _, why in out.skipped)
