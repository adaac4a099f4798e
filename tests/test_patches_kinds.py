"""Each owner kind's pod template where kustomize finds it: a CronJob's under its job template, a
bare Pod's at its spec (both applied with the real ``kubectl kustomize`` and validated strictly);
idle workloads: a ScaledObject for what scales, and deletion for what does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kube
import pytest
import yaml
from patches_rig import kustomize, objects, pod_spec, products, validate_strictly
from patches_units import evidence, held, patch_set

from rightsizing.patches.owners import OwnerSeries

CONTAINER = {"name": "server", "image": "example/server:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
CRONJOB = {
    "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "nightly", "namespace": "batch"},
    "spec": {"schedule": "0 2 * * *", "jobTemplate": {"spec": {"template": {"spec": {
        "restartPolicy": "OnFailure", "containers": [CONTAINER]}}}}},
}  # fmt: skip
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "debug", "namespace": "batch"},
       "spec": {"containers": [CONTAINER]}}  # fmt: skip
OWNERS = OwnerSeries(
    pods={
        ("batch", "nightly-29123456-x2k9q"): ("Job", "nightly-29123456"),
        ("batch", "debug"): ("<none>", "<none>"),
    },
    jobs={("batch", "nightly-29123456"): ("CronJob", "nightly")},
    present=True,
)


KINDS = [(CRONJOB, "nightly-29123456-x2k9q"), (POD, "debug")]


@pytest.mark.parametrize(("obj", "pod"), KINDS, ids=["cronjob", "pod"])
def test_the_patch_finds_the_pod_template_of_its_kind(obj: dict[str, Any], pod: str, tmp_path: Path) -> None:
    ps = patch_set([held(pod, "H100-SXM-80GB", "H100-SXM-80GB/1g.20gb", namespace="batch")], owners=OWNERS)
    (m,) = ps.moves
    assert (m.outcome, m.owner.kind) == ("patch", obj["kind"]), m.why
    for d in ("base", "patches", "overlay"):
        (tmp_path / d).mkdir()
    (tmp_path / "base" / "obj.json").write_text(json.dumps(obj))
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [obj.json]\n")
    for name, text in ps.files.items():
        (tmp_path / "patches" / name).write_text(text)
    overlay = "resources: [../base]\ncomponents: [../patches]\n"
    (tmp_path / "overlay" / "kustomization.yaml").write_text(overlay)
    (after,) = objects(kustomize(tmp_path / "overlay")).values()
    validate_strictly(after)
    assert products(after) == [{"NVIDIA-H100-80GB-HBM3"}]
    (container,) = pod_spec(after)["containers"]
    slice_ = {"nvidia.com/mig-1g.20gb": 1}
    assert container["resources"] == {"limits": slice_, "requests": slice_}
    if obj["kind"] == "Pod":
        assert "a Pod's pod template cannot change in place" in ps.files[m.file]


def test_an_idle_deployment_gets_a_scaled_object_woken_by_its_queue() -> None:
    idle = held("chat-7b9c4-x2k9q", "L4-24GB", "release", evidence=evidence(queues=("chat-requests",)))
    readme = patch_set([idle]).files["README.md"]
    obj = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    kube.validate_custom(obj)
    assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "chat"}
    busy, queue = obj["spec"]["triggers"]
    for trigger, metric, selector in ((busy, "rightsizer_gpu_busy", "workload=chat"),
                                      (queue, "rightsizer_queue_depth", "queue=chat-requests")):  # fmt: skip
        assert (trigger["metadata"]["metric"], trigger["metadata"]["labelSelector"]) == (metric, selector)


def test_an_idle_daemonset_or_cronjob_is_deleted_not_scaled() -> None:
    series = OwnerSeries(pods={("batch", "agent-x2k9q"): ("DaemonSet", "agent")}, present=True)
    agent = held("agent-x2k9q", "L4-24GB", "release", namespace="batch")
    readme = patch_set([agent], owners=series).files["README.md"]
    assert "Delete it: a DaemonSet does not scale to zero." in readme and "```yaml" not in readme
    nightly = held("nightly-29123456-x2k9q", "L4-24GB", "release", namespace="batch")
    assert "(or suspend it: `spec.suspend: true`)" in patch_set([nightly], owners=OWNERS).files["README.md"]
