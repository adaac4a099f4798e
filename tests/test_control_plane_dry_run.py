"""Every object the project renders, and every HPA and ScaledObject snippet of its docs and of the
chart's NOTES.txt, sent to a real kube-apiserver (1.20.2) with ``kubectl apply --dry-run=server``:
admission, defaulting and validation as a cluster runs them, and KEDA's and prometheus-operator's
CRD schemas (../shared/crds) for the custom resources (less the ``default: ""`` entries that 1.20
refuses in a CRD).

1.20 predates two API versions the renders use: ``autoscaling/v2`` is sent as ``autoscaling/v2beta2``
(the same fields) and ``policy/v1`` PodDisruptionBudgets as ``policy/v1beta1``. cert-manager's
kinds (deploy/examples/cert-manager, the KEDA client certificates) have no CRD here and are left
out, by name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm
import pytest
import yaml
from control_plane_rig import Rig, for_1_20
from doc_blocks import Block, all_blocks, kind
from kube import CRDS, DEPLOY, render

pytestmark = pytest.mark.control_plane

NO_CRD_HERE = {"cert-manager.io"}  # groups whose CRDs are not in ../shared/crds
KUSTOMIZATIONS = [
    "base",
    "monitoring",
    *sorted(str(p.parent.relative_to(DEPLOY)) for p in (DEPLOY / "examples").glob("*/kustomization.yaml")),
]
EXAMPLE_FILES = sorted(p.name for p in (DEPLOY / "examples").glob("*.yaml"))
NOTES = DEPLOY / "helm" / "rightsizer" / "templates" / "NOTES.txt"
TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"}


def without_empty_defaults(schema: Any) -> Any:
    """The schema less its ``default: ""`` entries, which 1.20's CRD validation reads as null and
    refuses (prometheus-operator's CRDs give every Secret and ConfigMap reference's name one)."""
    if isinstance(schema, dict):
        return {k: without_empty_defaults(v) for k, v in schema.items() if not (k == "default" and v == "")}
    if isinstance(schema, list):
        return [without_empty_defaults(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def cluster_with_crds(kube_rig: Rig) -> Rig:
    """The CRDs installed (created, not applied: prometheus-operator's exceed the size of
    kubectl apply's last-applied annotation) and established."""
    for path in sorted(CRDS.glob("*.yaml")):
        crd = without_empty_defaults(yaml.safe_load(path.read_text()))
        result = kube_rig.cluster.kubectl(
            "create", "--validate=false", "-f", "-", stdin=yaml.safe_dump(crd), check=False
        )
        assert result.returncode == 0 or "AlreadyExists" in result.stderr, result.stderr
    names = [yaml.safe_load(p.read_text())["metadata"]["name"] for p in sorted(CRDS.glob("*.yaml"))]
    kube_rig.cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names]
    )
    return kube_rig


def moved(value: Any, namespace: str) -> Any:
    """The objects with namespace ``rightsizer`` (the install the rig runs) renamed ``namespace``
    wherever it is named as one: each render is checked as a fresh install, not as an upgrade of
    the rig's own (a Helm install over a kustomize one is another question)."""
    if isinstance(value, dict):
        out = {
            k: namespace if k == "namespace" and v == "rightsizer" else moved(v, namespace)
            for k, v in value.items()
        }
        if out.get("kind") == "Namespace" and out["metadata"]["name"] == "rightsizer":
            out["metadata"] = {**out["metadata"], "name": namespace}
        return out
    if isinstance(value, list):
        return [moved(v, namespace) for v in value]
    return value


def dry_run(rig: Rig, objects: list[dict[str, Any]], namespace: str = "dry-run") -> list[str]:
    """``kubectl apply --dry-run=server`` of the objects (moved to ``namespace``), their namespaces
    created first; the kinds left out, named."""
    objects = moved(objects, namespace)
    left_out = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in objects
        if o["apiVersion"].split("/")[0] in NO_CRD_HERE
    ]
    sendable = [for_1_20(o) for o in objects if o["apiVersion"].split("/")[0] not in NO_CRD_HERE]
    namespaces = {o["metadata"].get("namespace") for o in sendable if o} - {None}
    if namespaces:
        rig.cluster.apply(
            [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in namespaces]
        )
    result = rig.cluster.apply([o for o in sendable if o], "--dry-run=server")
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert sendable and len(lines) == len(sendable), result.stdout
    assert all(line.endswith("(server dry run)") for line in lines), result.stdout
    return left_out


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_kustomize_render_is_accepted(cluster_with_crds: Rig, directory: str) -> None:
    left_out = dry_run(cluster_with_crds, render(DEPLOY / directory), "dry-" + directory.replace("/", "-"))
    print(f"{directory}: left out (no CRD here): {left_out}")


@pytest.mark.parametrize("name", EXAMPLE_FILES)
def test_example_file_is_accepted(cluster_with_crds: Rig, name: str) -> None:
    objects = [o for o in yaml.safe_load_all((DEPLOY / "examples" / name).read_text()) if o]
    left_out = dry_run(cluster_with_crds, objects, "dry-" + name.removesuffix(".yaml"))
    print(f"{name}: left out (no CRD here): {left_out}")


@pytest.mark.parametrize("values", [None, *helm.CI_VALUES], ids=lambda v: v or "defaults")
def test_helm_render_is_accepted(cluster_with_crds: Rig, values: str | None) -> None:
    namespace = "dry-helm-" + (values or "defaults").removeprefix("ci/").removesuffix(".yaml")
    left_out = dry_run(cluster_with_crds, helm.template(*helm.values_args(values)), namespace)
    print(f"helm {values or 'defaults'}: left out (no CRD here): {left_out}")


def hpa(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "worker", "namespace": "demo"},
        "spec": {"scaleTargetRef": TARGET, "minReplicas": 1, "maxReplicas": 10, "metrics": metrics},
    }


def scaled_object(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker", "namespace": "demo"},
        "spec": {"scaleTargetRef": {"name": "worker"}, **spec},
    }


def doc_snippets() -> list[Block]:
    return [b for b in all_blocks() if kind(b) in ("hpa-spec", "scaledobject-spec")]


@pytest.mark.parametrize("block", doc_snippets(), ids=lambda b: b.where)
def test_doc_snippet_is_accepted(cluster_with_crds: Rig, block: Block) -> None:
    fragment = yaml.safe_load(block.body)
    obj = hpa(fragment["metrics"]) if kind(block) == "hpa-spec" else scaled_object(fragment)
    if obj["kind"] == "ScaledObject" and "triggers" not in fragment:
        obj["spec"]["triggers"] = [
            {"type": "external-push", "metadata": {"metric": "rightsizer_queue_depth"}}
        ]
    dry_run(cluster_with_crds, [obj])


def notes_metrics(path: Path) -> list[dict[str, Any]]:
    """The HPA ``metrics:`` NOTES.txt prints (its placeholder queue filled in)."""
    text = path.read_text()
    match = re.search(r"^  metrics:\n((?:    .*\n)+)", text, re.M)
    assert match, "NOTES.txt shows no HPA metrics"
    return list(yaml.safe_load(match.group(1).replace("<queue name>", "jobs")))


def test_notes_hpa_is_accepted(cluster_with_crds: Rig) -> None:
    metrics = notes_metrics(NOTES)
    assert metrics[0]["external"]["target"]["type"] == "AverageValue"  # a queue depth: a total
    dry_run(cluster_with_crds, [hpa(metrics)])


def test_a_typo_is_refused(cluster_with_crds: Rig) -> None:
    """The dry run is a real check: a target type the API does not know is refused."""
    bad = hpa(
        [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "rightsizer_queue_depth"},
                    "target": {"type": "Averagevalue", "averageValue": "5"},
                },
            }
        ]
    )
    namespace = bad["metadata"]["namespace"]  # exists, so only the typo can be refused
    exists = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    cluster_with_crds.cluster.apply([exists])
    result = cluster_with_crds.cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(for_1_20(bad)), check=False
    )
    assert result.returncode != 0 and "Averagevalue" in result.stderr, result.stderr
