"""The exporter's ``/api/v1/patches`` on every built-in scenario: each actionable recommendation
(``/api/v1/gpus``: overprovisioned or underprovisioned, to another catalog option) gets a patch of
its owner (from the pod's name: the exporter sees pods, not their owners) that applies with the
real ``kubectl kustomize`` to a manifest of that workload, validates strictly, and moves it exactly
where the recommendation says; idle workloads get a valid KEDA ScaledObject instead.

The node label values are GPU Feature Discovery's (nvidia.com/gpu.product: the NVML name with
spaces as '-'), written here from NVIDIA's documentation, not read from the catalog.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import kube
import pytest
import yaml
from patches_rig import kustomize, objects, pod_spec, products, validate_strictly
from servers import exporter, http_get

from rightsizer_core.workloads import workload_of

GFD = {
    "T4-16GB": "Tesla-T4", "L4-24GB": "NVIDIA-L4", "A10G-24GB": "NVIDIA-A10G", "L40S-48GB": "NVIDIA-L40S",
    "A100-SXM-40GB": "NVIDIA-A100-SXM4-40GB", "A100-SXM-80GB": "NVIDIA-A100-SXM4-80GB",
    "H100-SXM-80GB": "NVIDIA-H100-80GB-HBM3", "H200-SXM-141GB": "NVIDIA-H200",
    "B200-SXM-180GB": "NVIDIA-B200",
}  # fmt: skip
API = {"Deployment": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Job": "batch/v1"}


def where(option: str) -> tuple[str, str]:
    """(node label value, resource) of a catalog option under the "mixed" MIG strategy."""
    gpu, _, profile = option.partition("/")
    return GFD[gpu], f"nvidia.com/mig-{profile}" if profile else "nvidia.com/gpu"


def manifest(kind: str, namespace: str, name: str, containers: dict[str, dict[str, int]]) -> dict[str, Any]:
    pod = {"containers": [{"name": c, "image": "example/server:1", "resources": {"limits": limits}}
                          for c, limits in sorted(containers.items())]}  # fmt: skip
    if kind == "Job":
        pod["restartPolicy"] = "Never"
    spec: dict[str, Any] = {"template": {"metadata": {"labels": {"app": name}}, "spec": pod}}
    if kind != "Job":
        spec["selector"] = {"matchLabels": {"app": name}}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    meta = {"name": name, "namespace": namespace}
    return {"apiVersion": API[kind], "kind": kind, "metadata": meta, "spec": spec}


@pytest.mark.parametrize("scenario", ["default", "golden", "mig", "large64"])
def test_every_actionable_recommendation_gets_a_patch(scenario: str, tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text("patches: {include_estimated_prices: true}\n")
    with exporter(["--simulate", scenario, "--config", str(config)]) as exp:
        gpus = json.loads(http_get(exp.url + "/api/v1/gpus")[2])["gpus"]
        status, _, body = http_get(exp.url + "/api/v1/patches")
    assert status == 200
    moves = json.loads(body)["patches"]
    held: dict[tuple[str, str], dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    wanted: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)  # workload -> container -> option
    for g in gpus:
        r, pod = g.get("rightsizing"), g.get("pod")
        if r is None or pod is None:
            continue
        key = (pod["namespace"], workload_of(pod["pod"]))
        resource = where(r["current"])[1]
        limits = held[key][pod["container"]]
        limits[resource] = limits.get(resource, 0) + 1
        moving = r["verdict"] in ("overprovisioned", "underprovisioned")
        if moving and r["recommended"] not in (r["current"], "none"):
            assert not r["workload_change"], "the built-in scenarios hold no multi-GPU move"
            wanted[key][pod["container"]] = r["recommended"]
    by_key = {(m["namespace"], m["workload"]): m for m in moves["moves"]}
    assert wanted, f"{scenario}: no actionable recommendation to patch"
    files = {f["name"]: f["content"] for f in moves["files"]}
    (tmp_path / "patches").mkdir()
    for name, text in files.items():
        (tmp_path / "patches" / name).write_text(text)
    base = tmp_path / "base"
    base.mkdir()
    listed = []
    for namespace, workload in wanted:
        m = by_key[(namespace, workload)]
        assert m["outcome"] == "patch", m["why"]
        assert m["owner"]["assumed"] and "ASSUMED from the pod name" in files[m["file"]]
        obj = manifest(m["owner"]["kind"], namespace, workload, held[(namespace, workload)])
        listed.append(f"{namespace}-{workload}.yaml")
        (base / listed[-1]).write_text(json.dumps(obj))
    (base / "kustomization.yaml").write_text(yaml.safe_dump({"resources": listed}))
    (tmp_path / "overlay").mkdir()
    overlay = "resources: [../base]\ncomponents: [../patches]\n"
    (tmp_path / "overlay" / "kustomization.yaml").write_text(overlay)
    after = objects(kustomize(tmp_path / "overlay"))
    for (namespace, workload), containers in wanted.items():
        (obj,) = [o for (k, ns, n), o in after.items() if (ns, n) == (namespace, workload)]
        validate_strictly(obj)
        products_wanted = {where(option)[0] for option in containers.values()}
        assert products(obj) == [products_wanted], (workload, products(obj))
        for c in pod_spec(obj)["containers"]:
            if c["name"] in containers:
                count = sum(held[(namespace, workload)][c["name"]].values())
                assert c["resources"]["limits"] == {where(containers[c["name"]])[1]: count}, (workload, c)
    for m in moves["moves"]:
        if m["outcome"] == "idle":  # its ScaledObject, in the README
            section = files["README.md"].split(f"### {m['namespace']}/{m['workload']} (", 1)[1]
            kube.validate_custom(yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0]))
