"""Patches applied the way a reviewer applies them, and the series kube-state-metrics publishes.

``applied`` puts a base of manifests and a patch folder side by side, includes the folder as a
kustomize Component in an overlay of the base, and renders both with the real ``kubectl
kustomize``. ``ksm_series`` writes kube-state-metrics's owner series (``kube_pod_owner``,
``kube_replicaset_owner``, ``kube_job_owner``, with its label names) for Prometheus.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kube
import yaml
from k8s_tools import tool

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "patches"
SCENARIO = HERE / "scenarios" / "patches_fleet.yaml"

# Who owns the scenario's pods, as kube-state-metrics would say: (namespace, pod) -> (kind, name).
PODS = {
    ("llm", "summarizer-5c6d7-fghmj"): ("ReplicaSet", "summarizer-5c6d7"),
    ("llm", "summarizer-5c6d7-bcdfg"): ("ReplicaSet", "summarizer-5c6d7"),
    ("search", "ranker-0"): ("StatefulSet", "ranker"),
    ("llm", "intent-xk2vq"): ("Job", "intent"),
    ("research", "notebook-0"): ("StatefulSet", "notebook"),
    ("llm", "tiny-6b7c8-hjklm"): ("ReplicaSet", "tiny-6b7c8"),
    # default/scratch has no series: kube-state-metrics never saw it.
}
REPLICASETS = {
    ("llm", "summarizer-5c6d7"): ("Deployment", "summarizer"),
    ("llm", "tiny-6b7c8"): ("Deployment", "tiny"),
}
JOBS = {("llm", "intent"): ("<none>", "<none>")}
KSM = 'instance="10.0.4.7:8080",job="kube-state-metrics"'


def _q(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def ksm_series(
    end: float,
    pods: dict[tuple[str, str], tuple[str, str]] = PODS,
    replicasets: dict[tuple[str, str], tuple[str, str]] = REPLICASETS,
    jobs: dict[tuple[str, str], tuple[str, str]] = JOBS,
    seconds: float = 3600.0,
    step: float = 30.0,
) -> dict[str, list[str]]:
    """The owner series over the ``seconds`` before ``end`` (name -> OpenMetrics sample lines)."""
    series: dict[str, list[str]] = {"kube_pod_owner": [], "kube_replicaset_owner": [], "kube_job_owner": []}
    labelled = []
    def owner(kind: str, name: str) -> str:
        controller = "<none>" if kind == "<none>" else "true"
        return f'owner_kind="{_q(kind)}",owner_name="{_q(name)}",owner_is_controller="{controller}"'

    for i, ((ns, pod), ref) in enumerate(sorted(pods.items())):
        labels = f'namespace="{_q(ns)}",pod="{_q(pod)}",uid="0000-{i:04d}",{owner(*ref)}'
        labelled.append(("kube_pod_owner", labels))
    for (ns, rs), ref in replicasets.items():
        labels = f'namespace="{_q(ns)}",replicaset="{_q(rs)}",{owner(*ref)}'
        labelled.append(("kube_replicaset_owner", labels))
    for (ns, job), ref in jobs.items():
        labelled.append(("kube_job_owner", f'namespace="{_q(ns)}",job_name="{_q(job)}",{owner(*ref)}'))
    times = [end - seconds + k * step for k in range(int(seconds / step) + 1)]
    for family, labels in labelled:
        series[family] += [f"{family}{{{labels},{KSM}}} 1 {t:.3f}" for t in times]
    return {k: v for k, v in series.items() if v}


def kustomize(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, f"kubectl kustomize {directory}:\n{done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def objects(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def applied(
    root: Path, patches: Path, base: Path = FIXTURES
) -> tuple[dict[tuple[str, str, str], Any], dict[tuple[str, str, str], Any]]:
    """(base objects, objects with the patch folder applied), both rendered by kubectl kustomize."""
    if (root / "base").exists():
        shutil.rmtree(root / "base")
    shutil.copytree(base, root / "base")
    overlay = root / "overlay"
    overlay.mkdir(exist_ok=True)
    relative = Path("..") / patches.relative_to(root)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["../base"], "components": [str(relative)]})
    )
    return objects(kustomize(root / "base")), objects(kustomize(overlay))


def validate_strictly(obj: dict[str, Any]) -> None:
    """As the API server of every supported Kubernetes release would (unknown fields are errors)."""
    for version in kube.supported_versions():
        kube.validate_core(obj, version)


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj["spec"]
    if obj["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    return spec if obj["kind"] == "Pod" else spec["template"]["spec"]  # type: ignore[no-any-return]


def required_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod spec's required node-affinity terms (the list itself, to change in place)."""
    affinity = spec.get("affinity") or {}
    node = affinity.get("nodeAffinity") or {}
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return required.get("nodeSelectorTerms") or []  # type: ignore[no-any-return]


def products(obj: dict[str, Any]) -> list[set[str]]:
    """The GPU products the pod may land on: the nodeSelector's value, and each required
    node-affinity term's ``In`` values (a term without a product requirement: every product)."""
    spec = pod_spec(obj)
    out = []
    if "nvidia.com/gpu.product" in (spec.get("nodeSelector") or {}):
        out.append({spec["nodeSelector"]["nvidia.com/gpu.product"]})
    for term in required_terms(spec):
        values = [set(e["values"]) for e in term.get("matchExpressions") or []
                  if e["key"] == "nvidia.com/gpu.product" and e["operator"] == "In"]  # fmt: skip
        out.append(set.intersection(*values) if values else {"*"})
    return out
