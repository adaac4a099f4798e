"""The report's patches, applied as a reviewer applies them, sent to a real kube-apiserver (1.20.2)
with ``kubectl apply --dry-run=server``: admission, defaulting and validation as a cluster runs
them, after kubectl's own validation against the server's OpenAPI document.

Both fixture sets: GPU Feature Discovery's vocabulary (tests/fixtures/patches: the fleet of
test_patches_report) and each managed cloud's (tests/fixtures/patches_clouds: a GKE accelerator,
an EKS managed node group's instance type, Karpenter's GPU name, an AKS VM size; see
test_patches_clouds). ``rightsizer report --format patches --manifests`` writes the patches, the
real ``kubectl kustomize`` applies them to the manifests, and every object of the patched render is
sent, each fixture namespace moved to ``patched-<namespace>``. Written before running: the server
accepts every one, the patched objects among them (GFD: llm/summarizer, search/ranker, llm/intent;
clouds: gke/chat, eks/summarizer, karpenter/summarizer, aks/embedder). The check is real: the GKE
patch with an accelerator value no label may hold is refused, naming the field.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import report_history
import yaml
from control_plane import Cluster
from patches_rig import FIXTURES, SCENARIO, applied, ksm_series, pod_spec
from test_patches_clouds import FIXTURES as CLOUD_FIXTURES
from test_patches_clouds import cloud_patches
from test_patches_report import HOUR, STEP, patches

pytestmark = pytest.mark.control_plane

Key = tuple[str, str, str]
Objects = dict[Key, Any]
PATCHED = {
    "gfd": {("Deployment", "llm", "summarizer"), ("StatefulSet", "search", "ranker"),
            ("Job", "llm", "intent")},
    "clouds": {("Deployment", "gke", "chat"), ("Deployment", "eks", "summarizer"),
               ("Deployment", "karpenter", "summarizer"), ("Deployment", "aks", "embedder")},
}  # fmt: skip


def gfd_patches(out: Path) -> None:
    """What the report writes for the fleet's last hour and the GFD fixture manifests."""
    extra = ksm_series(time.time())
    history = report_history.prometheus_with_history([SCENARIO], HOUR, STEP, True, extra=extra)
    with history as (url, fleets):
        patches(url, fleets[0].last + 1, out, "--manifests", str(FIXTURES))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Objects, Objects]]]:
    """Per fixture set: (the manifests, the manifests with the patches applied), as kustomize renders them."""
    gfd, clouds = tmp_path_factory.mktemp("gfd"), tmp_path_factory.mktemp("clouds")
    gfd_patches(gfd / "gpu-patches")
    cloud_patches(clouds / "gpu-patches")
    yield {
        "gfd": applied(gfd, gfd / "gpu-patches", FIXTURES),
        "clouds": applied(clouds, clouds / "gpu-patches", CLOUD_FIXTURES),
    }


def moved(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = "patched-" + (obj["metadata"].get("namespace") or "default")
    return out


def dry_run(cluster: Cluster, objects: list[dict[str, Any]]) -> Any:
    namespaces = sorted({o["metadata"]["namespace"] for o in objects})
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces])
    text = yaml.safe_dump_all(objects)
    return cluster.kubectl("apply", "--dry-run=server", "-f", "-", stdin=text, check=False)


@pytest.mark.parametrize("fixtures", ["gfd", "clouds"])
def test_every_patched_object_is_accepted_by_the_api_server(
    kube_cluster: Cluster, rendered: dict[str, Any], fixtures: str
) -> None:
    before, after = rendered[fixtures]
    changed = {key for key in after if after[key] != before.get(key)}
    assert changed == PATCHED[fixtures], changed  # the patches did move these, and only these
    objects = [moved(after[key]) for key in sorted(after)]
    result = dry_run(kube_cluster, objects)
    assert result.returncode == 0, f"refused by the API server:\n{result.stderr}{result.stdout}"
    lines = result.stdout.splitlines()
    assert len(lines) == len(objects) and all(line.endswith("(server dry run)") for line in lines), lines
    for kind, _, name in changed:  # each patched object, by name
        group = "batch" if kind == "Job" else "apps"
        assert f"{kind.lower()}.{group}/{name} created (server dry run)" in lines, lines


def test_a_node_selection_no_label_may_hold_is_refused(
    kube_cluster: Cluster, rendered: dict[str, Any]
) -> None:
    _, after = rendered["clouds"]
    chat = moved(after[("Deployment", "gke", "chat")])
    chat["metadata"]["name"] = "chat-broken"
    # a space: no label value may hold it
    pod_spec(chat)["nodeSelector"]["cloud.google.com/gke-accelerator"] = "nvidia l4"
    result = dry_run(kube_cluster, [chat])
    assert result.returncode != 0, result.stdout
    assert "nodeSelector" in result.stderr and "nvidia l4" in result.stderr, result.stderr
