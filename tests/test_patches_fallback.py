"""Without kube-state-metrics in Prometheus, owners come from the pods' names, and every patch and
the README say which kind was assumed; a name that fits two kinds is refused unless the manifests
hold only one of them. The idle workload's ScaledObject is a valid KEDA object."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import kube
import pytest
import report_history
import yaml
from patches_rig import FIXTURES, SCENARIO, applied, pod_spec
from test_patches_report import HOUR, MIXED, STEP, check_applied, patches

SUMMARIZER = ("Deployment", "llm", "summarizer")
RANKER = ("StatefulSet", "search", "ranker")


@pytest.fixture(scope="module")
def history() -> Iterator[tuple[str, float]]:
    with report_history.prometheus_with_history([SCENARIO], HOUR, STEP, instances=True) as (url, fleets):
        yield url, fleets[0].last + 1


def test_owner_kinds_assumed_from_pod_names_are_said_and_checked(history, tmp_path: Path) -> None:
    url, at = history
    out = tmp_path / "patches"
    files = patches(url, at, out, "--manifests", str(FIXTURES))
    # intent-xk2vq fits a DaemonSet and a Job alike: the manifests hold only the Job "intent".
    patched = ("llm_deployment_summarizer.yaml", "search_statefulset_ranker.yaml", "llm_job_intent.yaml")
    assert set(patched) <= set(files)
    assumed = "ASSUMED from the pod name (no kube-state-metrics series (kube_pod_owner) to read)"
    for name in patched:
        assert assumed in files[name].split("\napiVersion:", 1)[0], name
    assert "only DaemonSet or Job so named in the manifests" in files["llm_job_intent.yaml"]
    assert "Owners: pod names \\(no kube-state-metrics series in Prometheus\\)" in files["README.md"]
    check_applied(tmp_path, out, MIXED)  # the same changes as with kube-state-metrics


def test_without_manifests_a_patch_says_what_it_assumed(history, tmp_path: Path) -> None:
    url, at = history
    out = tmp_path / "patches"
    files = patches(url, at, out)
    assert "llm_job_intent.yaml" not in files
    refused = r"llm/intent \| 2 underprovisioned \|.*fits a DaemonSet and a Job alike"
    assert re.search(refused, files["README.md"])
    ranker = files["search_statefulset_ranker.yaml"]
    assert "Note: no manifest was read (--manifests): nodes are selected by nodeSelector" in ranker
    before, after = applied(tmp_path, out)
    # The Deployment's own nodeSelector takes the new product: exactly the change made with manifests.
    want = yaml.safe_load(yaml.safe_dump(before[SUMMARIZER]))
    MIXED[SUMMARIZER](pod_spec(want))
    assert after[SUMMARIZER] == want
    # The StatefulSet (whole A100 -> whole L4: no resource renamed, so no container named) shows
    # what the note warns of: a nodeSelector beside its own affinity; its containers stay as written.
    spec = pod_spec(after[RANKER])
    assert [c["name"] for c in spec["containers"]] == ["metrics", "server"]
    assert spec["containers"][1]["resources"] == {"requests": {"cpu": "2", "nvidia.com/gpu": 1},
                                                  "limits": {"nvidia.com/gpu": 1}}  # fmt: skip
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-L4"}


def test_the_idle_workloads_scaled_object_is_a_valid_keda_object(history, tmp_path: Path) -> None:
    url, at = history
    readme = patches(url, at, tmp_path / "p", "--manifests", str(FIXTURES))["README.md"]
    section = readme.split("### research/notebook (StatefulSet)", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    obj = yaml.safe_load(block)
    kube.validate_custom(obj)
    target = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "notebook"}
    assert obj["spec"]["scaleTargetRef"] == target
    assert obj["spec"]["minReplicaCount"] == 0
    (trigger,) = obj["spec"]["triggers"]  # no queue is linked to the notebook
    assert trigger["metadata"]["metric"] == "rightsizer_gpu_busy"
    assert trigger["metadata"]["labelSelector"] == "workload=notebook"
