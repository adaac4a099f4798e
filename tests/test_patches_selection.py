"""Node selection in each cloud's vocabulary, planner-level (tests/patches_units.py, no Prometheus):
what is rewritten to what, and what is left to a person with the label and the step named. The
end-to-end proof on kubectl kustomize is tests/test_patches_clouds.py."""

from __future__ import annotations

from typing import Any

import yaml
from patches_units import held, patch_set

from rightsizing.patches.manifests import Manifests
from rightsizing.patches.owners import OwnerSeries
from rightsizing.patches.requests import quantity

OWNERS = OwnerSeries(
    pods={("llm", "chat-7b9c4-x2k9q"): ("ReplicaSet", "chat-7b9c4")},
    replicasets={("llm", "chat-7b9c4"): ("Deployment", "chat")},
    present=True,
)


def deployment(spec: dict[str, Any], cpu: str = "3", memory: str = "12Gi") -> Manifests:
    container = {"name": "server", "resources": {"requests": {"cpu": cpu, "memory": memory},
                                                 "limits": {"nvidia.com/gpu": 1}}}  # fmt: skip
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "chat", "namespace": "llm"},
           "spec": {"template": {"spec": {**spec, "containers": [container]}}}}  # fmt: skip
    return Manifests([("chat.yaml", obj)])


def move(spec: dict[str, Any], target: str = "L4-24GB", current: str = "H100-SXM-80GB", **kw: str):  # type: ignore[no-untyped-def]
    ps = patch_set(
        [held("chat-7b9c4-x2k9q", current, target)], owners=OWNERS, manifests=deployment(spec, **kw)
    )
    (m,) = ps.moves
    return m, ps


def selection_of(ps) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return yaml.safe_load(ps.files["llm_deployment_chat.yaml"])["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_quantities_read_as_kubernetes_writes_them() -> None:
    assert [quantity(v) for v in ("500m", "24", "200Gi", "64G", "1e3", 2, "1.5Ki")] == [
        0.5, 24.0, 200 * 2**30, 64e9, 1000.0, 2.0, 1536.0]  # fmt: skip
    assert [quantity(v) for v in ("-1", "1x", "", None, True, "1Gi "[:3] + "z")] == [None] * 6


def test_each_vocabulary_is_rewritten_in_its_own_words() -> None:
    m, ps = move({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}})
    assert m.outcome == "patch" and selection_of(ps)["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-l4"
    }
    m, ps = move({"nodeSelector": {"eks.amazonaws.com/instance-gpu-name": "h100"}})
    assert selection_of(ps)["nodeSelector"] == {"eks.amazonaws.com/instance-gpu-name": "l4"}
    # An instance-type list: every L4 type whose share holds 3 CPUs and 12 GiB per GPU, smallest first.
    terms = [{"matchExpressions": [{"key": "node.kubernetes.io/instance-type", "operator": "In",
                                    "values": ["p5.48xlarge", "p5.4xlarge"]}]}]  # fmt: skip
    m, ps = move({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}}}})  # fmt: skip
    (expr,) = selection_of(ps)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]  # fmt: skip
    assert (
        expr["values"][:3] == ["g6.xlarge", "g6.2xlarge", "g6.4xlarge"] and "p5.4xlarge" not in expr["values"]
    )
    assert "g6.12xlarge" in expr["values"]  # 4 GPUs: a quarter of 47.81 CPUs and 174.7 GiB holds the pod


def test_a_gpu_name_two_gpus_share_takes_the_memory_beside_it() -> None:
    _, ps = move({"nodeSelector": {"karpenter.k8s.aws/instance-gpu-name": "h100"}}, "A100-SXM-80GB")
    # Karpenter's a100 is the 40 and the 80 GB A100 alike (p4d, p4de): instance-gpu-memory tells them apart.
    assert selection_of(ps)["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "a100",
                                                "karpenter.k8s.aws/instance-gpu-memory": "81920"}  # fmt: skip


def test_what_cannot_be_mapped_is_left_to_a_person_by_name() -> None:
    # GKE has no L40S accelerator.
    m, _ = move({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}, "L40S-48GB")
    assert m.outcome == "manual" and "Google Cloud offers no L40S-48GB host" in m.why
    # A managed node group: the group to create and the label to select it by.
    m, _ = move({"nodeSelector": {"eks.amazonaws.com/nodegroup": "h100-group"}})
    assert m.outcome == "manual"
    assert "eks.amazonaws.com/nodegroup=h100-group" in m.why and "create one of g6.xlarge" in m.why
    # An instance type outside the shape catalog.
    m, _ = move({"nodeSelector": {"node.kubernetes.io/instance-type": "p9.huge"}})
    assert m.outcome == "manual" and "p9.huge is not a shape of our catalog" in m.why
    # A manifest that selects another GPU than the one measured.
    m, _ = move({"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}})
    assert m.outcome == "manual" and "does not name the measured H100-SXM-80GB" in m.why


def test_requests_no_target_host_offers_are_named_with_the_most_it_offers() -> None:
    spec = {"nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}
    m, ps = move(spec, cpu="24", memory="200Gi")
    # The largest one-L4 GCE shape, g2-standard-32: 32 vCPUs, 128 GiB; none holds 200 GiB.
    assert m.outcome == "manual" and "llm_deployment_chat.yaml" not in ps.files
    assert (
        "request 24 CPUs and 200.0 GiB" in m.why
        and "g2-standard-32" in m.why
        and "lower the requests" in m.why
    )
    # On EKS the same pod fits the memory-heavy gr6.8xlarge (32 vCPUs, 256 GiB; 31.85 CPUs, 233.9 GiB
    # allocatable), smaller than the g6.16xlarge (64 vCPUs, 256 GiB): patched, and said.
    m, ps = move(
        {"nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"}}, cpu="24", memory="200Gi"
    )
    assert m.outcome == "patch" and selection_of(ps)["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "gr6.8xlarge"
    }
    assert "AWS gr6.8xlarge" in ps.files["llm_deployment_chat.yaml"]


def test_without_manifests_host_fit_is_said_unchecked() -> None:
    ps = patch_set([held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB")], owners=OWNERS)
    assert "host fit was not checked" in ps.files["llm_deployment_chat.yaml"]
    assert "host fit was not checked" in ps.files["README.md"]


def test_numbers_the_target_hosts_carry_are_kept_or_named() -> None:
    def term(*exprs: dict[str, Any]) -> dict[str, Any]:
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}}  # fmt: skip

    name = {"key": "karpenter.k8s.aws/instance-gpu-name", "operator": "In", "values": ["h100"]}
    one = {"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "In", "values": ["1"]}
    # One GPU per host: g6.xlarge carries one L4, so the requirement stays as written.
    m, ps = move(term(name, one))
    exprs = selection_of(ps)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]  # fmt: skip
    assert m.outcome == "patch" and exprs == [{**name, "values": ["l4"]}, one]
    # More than 40,000 MiB of GPU memory: an L4 has 22,888 MiB, so no L4 host meets it.
    big = {"key": "karpenter.k8s.aws/instance-gpu-memory", "operator": "Gt", "values": ["40000"]}
    m, _ = move(term(name, big))
    assert m.outcome == "manual" and "instance-gpu-memory Gt 40000: no L4-24GB host meets it" in m.why
