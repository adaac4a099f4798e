"""deploy/ is wired to the programs it runs: flags and config files the commands accept, ports they
listen on, probe paths they answer without credentials, selectors that select, names that
resolve (the checks tests/deploy_checks.py shares with the Helm chart's tests), metrics HPA and
KEDA ask for that the adapter serves, and a plain Prometheus scrape configuration that keeps
exactly our targets with their GPU labels.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deploy_checks as checks
import pytest
import yaml
from adapter_support import get
from kube import DEPLOY, named, render
from monitoring_stack import plain_prometheus
from prometheus_client.parser import text_string_to_metric_families
from servers import exporter, prom_query, wait_for

from adapter.rules import BUILTIN_RULES


def objects(name: str) -> list[dict[str, Any]]:
    return render(DEPLOY / name)


@pytest.mark.parametrize("overlay", ["base", "examples/demo"])
def test_exporter_accepts_its_arguments_and_config(overlay: str, tmp_path: Path) -> None:
    checks.exporter_accepts_its_arguments_and_config(objects(overlay), tmp_path)


def test_exporter_sees_the_kubelet_paths_it_is_configured_with(tmp_path: Path) -> None:
    checks.exporter_sees_the_kubelet_paths_it_is_configured_with(objects("base"), tmp_path)


def test_adapter_accepts_its_arguments_and_config(tmp_path: Path) -> None:
    checks.adapter_accepts_its_arguments_and_config(objects("base"), tmp_path)
    assert not [a for a in checks.container(objects("base"), "adapter")["args"] if a.startswith("--grpc-")]
    checks.adapter_accepts_its_arguments_and_config(objects("examples/keda-cluster"), tmp_path)
    assert "--grpc-listen=:9443" in checks.container(objects("examples/keda-cluster"), "adapter")["args"]


def test_exporter_answers_its_probes(tmp_path: Path) -> None:
    checks.exporter_answers_its_probes(objects("base"), tmp_path)


def test_adapter_answers_probes_and_authenticated_scrapes_only(tmp_path: Path) -> None:
    checks.adapter_answers_probes_and_authenticated_scrapes_only(objects("base"), tmp_path)


@pytest.mark.parametrize("overlay", ["base", "examples/demo", "examples/cert-manager",
                                     "examples/keda-cluster"])
def test_every_file_argument_lies_in_a_mounted_volume_holding_it(overlay: str) -> None:
    checks.every_file_argument_lies_in_a_mounted_volume_holding_it(objects(overlay))


def test_selectors_select_and_names_resolve() -> None:
    objs = objects("base") + objects("monitoring")
    checks.selectors_select_and_names_resolve(objs)
    (pdb,) = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    assert checks.component(objs, "Deployment", "adapter")["spec"]["replicas"] == 2
    assert pdb["spec"]["minAvailable"] == 1


def test_exporter_limits_are_far_under_dcgm_exporters() -> None:
    c = checks.container(objects("base"), "exporter")
    limit = c["resources"]["limits"]["memory"]
    assert limit.endswith("Mi") and int(limit[:-2]) <= 256  # dcgm-exporter: 512Mi


def served(name: str, api: str) -> bool:
    return any(r.name == name and api in r.apis for r in BUILTIN_RULES)


def test_examples_ask_for_metrics_the_adapter_serves_about_the_demo() -> None:
    demo = objects("examples/demo")
    config = named(demo, "ConfigMap", "rightsizer-exporter")["data"]["exporter.yaml"]
    queue = yaml.safe_load(config)["queues"][0]
    hpa = yaml.safe_load((DEPLOY / "examples/hpa-queue-depth.yaml").read_text())
    (metric,) = hpa["spec"]["metrics"]
    assert served(metric["external"]["metric"]["name"], "external")
    assert metric["external"]["metric"]["selector"]["matchLabels"] == {"queue": queue["name"]}
    target = named(demo, hpa["spec"]["scaleTargetRef"]["kind"], hpa["spec"]["scaleTargetRef"]["name"])
    assert target["metadata"]["namespace"] == hpa["metadata"]["namespace"] == queue["labels"]["namespace"]
    pods_hpa = yaml.safe_load((DEPLOY / "examples/hpa-pod-gpu.yaml").read_text())
    assert served(pods_hpa["spec"]["metrics"][0]["pods"]["metric"]["name"], "custom")

    base = objects("base")
    service = named(base, "Service", "rightsizer-adapter")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    push = next(o for o in yaml.safe_load_all((DEPLOY / "examples/keda-external-push.yaml").read_text())
                if o["kind"] == "ScaledObject")
    (trigger,) = push["spec"]["triggers"]
    assert trigger["metadata"]["scalerAddress"] == f"{host}:{ports['grpc']}"
    assert served(trigger["metadata"]["metric"], "external")
    assert trigger["metadata"]["labelSelector"] == f"queue={queue['name']}"
    assert push["spec"]["minReplicaCount"] == 0
    assert push["spec"]["scaleTargetRef"]["name"] == target["metadata"]["name"]
    api = next(o for o in yaml.safe_load_all((DEPLOY / "examples/keda-metrics-api.yaml").read_text())
               if o["kind"] == "ScaledObject")
    url = api["spec"]["triggers"][0]["metadata"]["url"]
    assert url.startswith(f"https://{host}/keda/v1/metrics/") and ports["https"] == 443
    assert f"namespace={queue['labels']['namespace']}" in url
    for scaled in (push, api):  # an outage errors the trigger: KEDA falls back, never to zero
        assert scaled["spec"]["fallback"]["replicas"] >= 1


def test_plain_scrape_configs_keep_our_targets_with_their_gpu_labels(tmp_path: Path) -> None:
    """Kubernetes discovery presents every endpoint of the namespace; the jobs keep only ours,
    and the exporter's pod labels (GPU attribution) survive the scrape."""
    with exporter(["--simulate"]) as exp:
        address = exp.url.removeprefix("http://")
        endpoints = [(address, "rightsizer-exporter", "metrics"), ("127.0.0.1:1", "redis", "metrics"),
                     ("127.0.0.1:2", "rightsizer-exporter", "http"),
                     ("127.0.0.1:3", "rightsizer-adapter", "grpc")]
        with plain_prometheus(endpoints) as prom:
            wait_for(lambda: prom_query(prom.url, 'DCGM_FI_DEV_GPU_UTIL{pod!=""}'), 60, what="GPU series")
            ups = {(s["metric"]["job"], s["metric"]["instance"]) for s in prom_query(prom.url, "up")}
            assert ups == {("rightsizer-exporter", address)}
            scraped = {s["metric"].get("pod") for s in prom_query(prom.url, "rightsizer_gpu_info")}
            text = get(exp.url + "/metrics")[2].decode()
            exposed = {s.labels.get("pod") for f in text_string_to_metric_families(text)
                       if f.name == "rightsizer_gpu_info" for s in f.samples}
            assert scraped == exposed and len(exposed - {None}) >= 1
    monitor = named(objects("monitoring"), "ServiceMonitor", "rightsizer-exporter")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_only_the_mig_overlay_gives_the_exporter_a_capability() -> None:
    checks.exporter_is_locked_down(objects("base"))
    assert "add" not in checks.container(objects("base"), "exporter")["securityContext"]["capabilities"]
    checks.exporter_is_locked_down(objects("examples/mig-monitor"))
    mig = checks.container(objects("examples/mig-monitor"), "exporter")
    assert mig["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
