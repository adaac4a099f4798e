"""The Helm chart and deploy/'s kustomizations install the same thing: the chart's defaults render
the objects of ``kubectl kustomize deploy/base`` (same kinds and names, containers, images,
arguments, ports, probes, environment, mounts and volumes, RBAC rules and bindings, APIServices,
configuration files), and each of the chart's switches the objects of the overlay it stands for.
Only what Helm adds is normalised away: its labels and the pods' config checksum; selectors are
compared as they are (an install moves between the two without an immutable ``spec.selector``
changing), and a release installed when the chart's selectors also held
``app.kubernetes.io/instance`` keeps its own on upgrade; configuration files are
compared as YAML (the chart renders them from values, without comments). A difference fails with
a diff of the two objects. The prometheus-operator objects are compared with deploy/monitoring,
and the PrometheusRule's rules are read from the same file.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_discovery import discovery_server
from helm import CHART, helm, template
from kube import DEPLOY, key, render

HELM_ONLY_ANNOTATIONS = {"checksum/config"}


def normalised(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` less what Helm adds (see the module's docstring); configuration files parsed."""
    out = yaml.safe_load(yaml.safe_dump(obj))

    def walk(node: Any, path: tuple[str, ...]) -> Any:
        if isinstance(node, dict):
            result = {}
            for k, v in node.items():
                if k == "labels" and path[-1:] in (("metadata",),):
                    continue  # an object's or a pod template's own labels
                if k == "annotations":
                    v = {a: b for a, b in v.items() if a not in HELM_ONLY_ANNOTATIONS}
                    if not v:
                        continue
                result[k] = walk(v, (*path, k))
            return result
        if isinstance(node, list):
            return [walk(v, path) for v in node]
        return node

    out = walk(out, ())
    if out["kind"] == "ConfigMap":
        out["data"] = {k: yaml.safe_load(v) for k, v in out["data"].items()}
    return dict(out)


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {key(o): normalised(o) for o in objs}


def differences(helm_objs: list[dict[str, Any]], kustomize_objs: list[dict[str, Any]], what: str) -> str:
    chart, kustomize = by_key(helm_objs), by_key(kustomize_objs)
    lines = [f"only in the chart: {k}" for k in sorted(chart.keys() - kustomize.keys())]
    lines += [f"only in {what}: {k}" for k in sorted(kustomize.keys() - chart.keys())]
    for k in sorted(chart.keys() & kustomize.keys()):
        if chart[k] != kustomize[k]:
            lines += difflib.unified_diff(yaml.safe_dump(kustomize[k]).splitlines(),
                                          yaml.safe_dump(chart[k]).splitlines(),
                                          f"{what} {k}", f"chart {k}", lineterm="")
    return "\n".join(lines)


def without_namespace(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] != "Namespace"]


def test_defaults_install_what_deploy_base_installs() -> None:
    """The one difference: deploy/base creates the namespace, a Helm release is installed into one
    (``--create-namespace``, or namespace.create, compared below)."""
    assert differences(template(), without_namespace(render(DEPLOY / "base")), "deploy/base") == ""


def selectors(objs: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """Every selector of ``objs``: workloads', PodDisruptionBudgets' and the monitors' matchLabels,
    Services' selector, the pod anti-affinity's."""
    out: dict[tuple[str, str], Any] = {}
    for o in objs:
        spec = o.get("spec") or {}
        name = (o["kind"], o["metadata"]["name"])
        if o["kind"] == "Service":
            out[name] = spec.get("selector")
        elif isinstance(spec.get("selector"), dict):
            out[name] = spec["selector"].get("matchLabels")
        pod = (spec.get("template") or {}).get("spec") or {}
        affinity = (pod.get("affinity") or {}).get("podAntiAffinity")
        for term in (affinity or {}).get("preferredDuringSchedulingIgnoredDuringExecution", []):
            out[(*name[:1], name[1] + " anti-affinity")] = term["podAffinityTerm"]["labelSelector"]
    return out


@pytest.mark.parametrize("overlay", ["base", "monitoring"])
def test_selectors_are_deploy_s_exactly(overlay: str) -> None:
    """Selectors are immutable on Deployments and DaemonSets: a release and a kustomize install of
    the same objects must select with the same labels, no more (app.kubernetes.io/instance stays a
    label of every object, never a selector)."""
    chart = template("--set", "monitoring.serviceMonitors.enabled=true")
    kustomize = render(DEPLOY / overlay)
    theirs, ours = selectors(kustomize), selectors(chart)
    assert theirs and set(theirs) <= set(ours)
    assert {k: ours[k] for k in theirs} == theirs
    for labels in ours.values():
        assert "app.kubernetes.io/instance" not in labels
    for o in chart:
        if o["kind"] in ("Deployment", "DaemonSet"):
            assert o["metadata"]["labels"]["app.kubernetes.io/instance"] == "rightsizer"
            pod_labels = o["spec"]["template"]["metadata"]["labels"]
            assert pod_labels["app.kubernetes.io/instance"] == "rightsizer"


def test_an_upgraded_release_keeps_its_workloads_immutable_selectors(tmp_path: Path) -> None:
    """A release installed when the chart's selectors also held app.kubernetes.io/instance: the
    chart reads the workload in the cluster (``lookup``, here through ``helm template
    --dry-run=server`` against a fake API server that holds the old DaemonSet and no adapter) and
    keeps its selector, which the new pods still satisfy; objects not there get deploy/'s."""
    old = {"app.kubernetes.io/name": "rightsizer", "app.kubernetes.io/instance": "rightsizer",
           "app.kubernetes.io/component": "exporter"}  # fmt: skip
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "rightsizer-exporter",
            "namespace": "rightsizer",
            "labels": {"app.kubernetes.io/managed-by": "Helm", **old},
            "annotations": {
                "meta.helm.sh/release-name": "rightsizer",
                "meta.helm.sh/release-namespace": "rightsizer",
            },
        },
        "spec": {"selector": {"matchLabels": old}},
    }
    with discovery_server(tmp_path, [daemonset]) as kubeconfig:
        result = helm("template", "rightsizer", str(CHART), "--namespace", "rightsizer", "--dry-run=server",
                      "--disable-openapi-validation", "--kubeconfig", str(kubeconfig))  # fmt: skip
    assert result.returncode == 0, result.stderr
    objs = [d for d in yaml.safe_load_all(result.stdout) if d]
    (exporter,) = [o for o in objs if o["kind"] == "DaemonSet"]
    assert exporter["spec"]["selector"]["matchLabels"] == old
    assert old.items() <= exporter["spec"]["template"]["metadata"]["labels"].items()
    (adapter,) = [o for o in objs if o["kind"] == "Deployment"]
    (base_adapter,) = [o for o in render(DEPLOY / "base") if o["kind"] == "Deployment"]
    assert adapter["spec"]["selector"] == base_adapter["spec"]["selector"]
    services = {k: v for k, v in selectors(objs).items() if k[0] == "Service"}
    assert services == {k: v for k, v in selectors(render(DEPLOY / "base")).items() if k[0] == "Service"}


def test_namespace_create_renders_deploy_bases_namespace() -> None:
    (chart,) = [o for o in template("--set", "namespace.create=true") if o["kind"] == "Namespace"]
    (base,) = [o for o in render(DEPLOY / "base") if o["kind"] == "Namespace"]
    assert chart["metadata"]["name"] == base["metadata"]["name"]
    security = {k: v for k, v in chart["metadata"]["labels"].items() if k.startswith("pod-security.")}
    assert security == {k: v for k, v in base["metadata"]["labels"].items() if k.startswith("pod-security.")}


# Each switch of the chart against the overlay of deploy/ that does the same.
OVERLAYS = [
    (["adapter.tls.source=certManager"], "examples/cert-manager"),
    (["adapter.kedaGrpcTls.enabled=true", "adapter.apiServices.external=false"], "examples/keda-cluster"),
    (["exporter.migMonitor=true"], "examples/mig-monitor"),
]


@pytest.mark.parametrize(("switches", "overlay"), OVERLAYS, ids=[o for _, o in OVERLAYS])
def test_switches_install_what_their_overlay_installs(switches: list[str], overlay: str) -> None:
    args = [a for s in switches for a in ("--set", s)]
    assert differences(template(*args), without_namespace(render(DEPLOY / overlay)), overlay) == ""


def test_monitoring_objects_are_deploy_monitorings() -> None:
    objs = template("--set", "monitoring.serviceMonitors.enabled=true",
                    "--set", "monitoring.prometheusRule.enabled=true")
    monitoring = [o for o in objs if o["apiVersion"].startswith("monitoring.coreos.com/")]
    assert differences(monitoring, render(DEPLOY / "monitoring"), "deploy/monitoring") == ""


def test_pod_monitor_scrapes_the_exporter_as_its_service_monitor_does() -> None:
    objs = template("--set", "monitoring.serviceMonitors.enabled=true",
                    "--set", "monitoring.podMonitor.enabled=true")
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objs
                   if o["apiVersion"].startswith("monitoring."))
    assert kinds == [("PodMonitor", "rightsizer-exporter"), ("ServiceMonitor", "rightsizer-adapter")]
    (pod_monitor,) = [o for o in objs if o["kind"] == "PodMonitor"]
    (service_monitor,) = [o for o in render(DEPLOY / "monitoring")
                          if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == "rightsizer-exporter"]
    assert pod_monitor["spec"]["podMetricsEndpoints"] == service_monitor["spec"]["endpoints"]


def test_rules_come_from_deploy_monitorings_one_file() -> None:
    link = CHART / "files" / "prometheusrule.yaml"
    assert link.is_symlink() and link.resolve() == (DEPLOY / "monitoring" / "prometheusrule.yaml").resolve()
    (rule,) = [o for o in template("--set", "monitoring.prometheusRule.enabled=true")
               if o["kind"] == "PrometheusRule"]
    assert rule["spec"] == yaml.safe_load(link.read_text())["spec"]


def test_demo_values_run_the_demo_as_deploy_examples_demo_does() -> None:
    chart = template("-f", str(CHART / "ci" / "demo-values.yaml"))
    demo = render(DEPLOY / "examples" / "demo")

    def exporter(objs: list[dict[str, Any]]) -> tuple[Any, ...]:
        (ds,) = [o for o in objs if o["kind"] == "DaemonSet"]
        pod = ds["spec"]["template"]["spec"]
        (cm,) = [o for o in objs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"] == "rightsizer-exporter"]
        queues = yaml.safe_load(cm["data"]["exporter.yaml"])["queues"]
        return pod["containers"][0]["args"], pod.get("nodeSelector"), pod.get("runtimeClassName"), queues

    assert exporter(chart) == exporter(demo)
    assert exporter(chart)[1:3] == (None, None)  # any node, no NVIDIA runtime


def test_a_difference_fails_with_a_diff(tmp_path: Path) -> None:
    """What the tests above print when the chart and deploy/ drift apart."""
    base = without_namespace(render(DEPLOY / "base"))
    drifted = template("--set", "exporter.extraArgs[0]=--interval=5", "--set", "adapter.podReader=false")
    text = differences(drifted, base, "deploy/base")
    assert "only in deploy/base: ('rbac.authorization.k8s.io/v1', 'ClusterRole', '', " \
        "'rightsizer-adapter:pod-reader')" in text
    assert "--- deploy/base ('apps/v1', 'DaemonSet', 'rightsizer', 'rightsizer-exporter')" in text
    assert [line for line in text.splitlines() if line.startswith("+") and line.endswith("- --interval=5")]
