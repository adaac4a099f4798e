"""A discovered server's GPUs are its own pod's (by UID through the checkpoint, by namespace and name
without one), right-sizing links it to those GPUs only, and the kubelet is asked where it listens."""

from __future__ import annotations

import re

import pytest

from exporter.sources.discovery.gpus import pod_gpus
from exporter.sources.discovery.kubelet import kubelet_url
from exporter.sources.discovery.settings import DiscoverySettings
from exporter.sources.pods.checkpoint import CheckpointEntry
from exporter.sources.pods.client import ContainerDevices, KubeletAnswer
from rightsizer_core.snapshot import GpuIdentity, GpuSample, PodRef
from rightsizing.links import QueueReading, linked


def devices(pod: str, container: str, *ids: str, resource: str = "nvidia.com/gpu") -> ContainerDevices:
    return ContainerDevices(PodRef(pod, "llm", container), resource, ids)


ANSWER = KubeletAnswer(
    (
        devices("chat-0", "server", "GPU-a", "GPU-b"),
        devices("chat-0", "sidecar", "GPU-c::2", resource="nvidia.com/gpu.shared"),  # time-sliced
        devices("chat-1", "server", "MIG-1111"),
    ),
    pods=2,
    skipped=(),
)


def test_by_uid_through_the_checkpoint() -> None:
    checkpoint = (
        CheckpointEntry("uid-0", "server", "nvidia.com/gpu", frozenset({"GPU-a", "GPU-b"})),
        CheckpointEntry("uid-0", "sidecar", "nvidia.com/gpu.shared", frozenset({"GPU-c::2"})),
        CheckpointEntry("uid-1", "server", "nvidia.com/gpu", frozenset({"MIG-1111"})),
        CheckpointEntry("uid-gone", "server", "nvidia.com/gpu", frozenset({"GPU-z"})),  # a deleted pod's
    )
    found = pod_gpus(ANSWER, checkpoint)
    assert found.exact
    assert found.of("uid-0", "llm", "chat-0") == ("GPU-a", "GPU-b", "GPU-c")  # every container, no suffix
    assert found.of("uid-1", "llm", "chat-1") == ("MIG-1111",)
    # a pod recreated under the same name is another UID: not the old pod's devices
    assert found.of("uid-new", "llm", "chat-0") == ()


def test_by_name_without_a_checkpoint() -> None:
    found = pod_gpus(ANSWER, None)
    assert not found.exact
    assert found.of("any", "llm", "chat-0") == ("GPU-a", "GPU-b", "GPU-c")
    assert found.of("any", "other", "chat-0") == ()


def sample(uuid: str, pod: str) -> GpuSample:
    identity = GpuIdentity(0, uuid, "00000000:01:00.0", "L4", 0, "550.54", 24 * 2**30)
    return GpuSample(identity, True, pod=PodRef(pod, "llm", "server"))


def test_an_exact_queue_links_to_its_gpus_only() -> None:
    labels = {"namespace": "llm", "workload": "chat"}
    mine = QueueReading("llm/chat-0", 1.0, labels | {"pod": "chat-0"}, ("GPU-a",), exact=True)
    no_gpus = QueueReading("llm/chat-9", 1.0, labels | {"pod": "chat-9"}, (), exact=True)
    by_labels = QueueReading("chat", 1.0, labels)
    gpu_a, gpu_b = sample("GPU-a", "chat-0"), sample("GPU-b", "chat-1")
    assert linked(gpu_a, [mine, no_gpus, by_labels], []) == ["llm/chat-0", "chat"]
    assert linked(gpu_b, [mine, no_gpus, by_labels], []) == ["chat"]  # a static queue still links by labels


@pytest.mark.parametrize(
    ("node_ip", "url"),
    [
        ("10.0.4.17", "https://10.0.4.17:10250/pods"),
        ("fd00::17", "https://[fd00::17]:10250/pods"),
        ("", "https://127.0.0.1:10250/pods"),
    ],
)
def test_the_kubelet_is_asked_on_the_nodes_ip(
    monkeypatch: pytest.MonkeyPatch, node_ip: str, url: str
) -> None:
    monkeypatch.setenv("NODE_IP", node_ip)
    assert kubelet_url(DiscoverySettings(enabled=True)) == url
    given = DiscoverySettings(enabled=True, kubelet_url="https://kubelet.local:10250/pods")
    assert kubelet_url(given) == "https://kubelet.local:10250/pods"


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        ({"kubelet_url": "ftp://x/pods"}, "kubelet_url must be an http:// or https:// URL"),
        ({"label_selector": "app in (a"}, "label_selector:"),
        ({"timeout_seconds": 10.0}, "timeout_seconds must be shorter than refresh_interval_seconds"),
        ({"namespaces": [""]}, "namespaces: '' is not a namespace name"),
        ({"tls_ca_file": "/nonexistent/ca.pem"}, "tls_ca_file '/nonexistent/ca.pem' cannot be read"),
    ],
)
def test_a_wrong_setting_is_refused_with_its_name(settings: dict[str, object], why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        DiscoverySettings(**settings).validate()  # type: ignore[arg-type]
