"""deploy/ is wired to the programs it runs: flags and config files the commands accept, ports they
listen on, probe paths they answer without credentials, selectors that select, names that
resolve, metrics HPA and KEDA ask for that the adapter serves, and a plain Prometheus scrape
configuration that keeps exactly our targets with their GPU labels.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import adapter as running_adapter
from adapter_support import get
from fake_apiserver import FakeApiServer, Identity, rbac
from kube import DEPLOY, named, render
from monitoring_stack import plain_prometheus
from prometheus_client.parser import text_string_to_metric_families
from servers import ROOT, exporter, prom_query, wait_for

from adapter.config import DEFAULT_PORT as ADAPTER_PORT
from adapter.rules import BUILTIN_RULES
from exporter.config import DEFAULT_PORT as EXPORTER_PORT


def objects(name: str) -> list[dict[str, Any]]:
    return render(DEPLOY / name)


def container(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (c,) = named(objs, kind, name)["spec"]["template"]["spec"]["containers"]
    return dict(c)


def config_data(objs: list[dict[str, Any]], name: str, key: str, tmp_path: Path) -> Path:
    path = tmp_path / key
    path.write_text(named(objs, "ConfigMap", name)["data"][key])
    return path


def with_config(args: list[str], config: Path) -> list[str]:
    """The container's arguments with its mounted config file replaced by a local copy."""
    out = [f"--config={config}" if a.startswith("--config=") else a for a in args]
    if "--config" in out:
        out[out.index("--config") + 1] = str(config)
    return out


def run(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.parametrize("overlay", ["base", "examples/demo"])
def test_exporter_accepts_its_arguments_and_config(overlay: str, tmp_path: Path) -> None:
    objs = objects(overlay)
    c = container(objs, "DaemonSet", "rightsizer-exporter")
    assert c["command"] == ["rightsizer-exporter"]
    config = config_data(objs, "rightsizer-exporter", "exporter.yaml", tmp_path)
    result = run("exporter", [*with_config(c["args"], config), "--check-config"])
    assert result.returncode == 0, result.stderr
    assert c["ports"][0]["containerPort"] == EXPORTER_PORT


def test_exporter_sees_the_kubelet_paths_it_is_configured_with(tmp_path: Path) -> None:
    """Pod attribution reads the pod-resources socket and the device checkpoint: each must sit in
    a read-only mount of the host's directory, and procfs must be the host's (hostPID)."""
    from exporter.config import load_config

    objs = objects("base")
    pod = named(objs, "DaemonSet", "rightsizer-exporter")["spec"]["template"]["spec"]
    cfg = load_config(str(config_data(objs, "rightsizer-exporter", "exporter.yaml", tmp_path)), {})
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    for path in (cfg.pods.socket, cfg.pods.checkpoint):
        directory = str(Path(path).parent)
        assert mounts[directory]["readOnly"] is True, path
        assert volumes[mounts[directory]["name"]]["hostPath"]["path"] == directory, path
    assert cfg.pods.procfs_root == "/proc" and pod["hostPID"] is True
    # The NUMA check reads the containers' cpusets from the host's cgroup tree, not the exporter's own.
    assert mounts[cfg.pods.cgroup_root]["readOnly"] is True
    assert volumes[mounts[cfg.pods.cgroup_root]["name"]]["hostPath"]["path"] == "/sys/fs/cgroup"


def test_adapter_accepts_its_arguments_and_config(tmp_path: Path) -> None:
    objs = objects("base")
    c = container(objs, "Deployment", "rightsizer-adapter")
    assert c["command"] == ["rightsizer-adapter"]
    config = config_data(objs, "rightsizer-adapter", "adapter.yaml", tmp_path)
    result = run("adapter", [*with_config(c["args"], config), "--check-config"])
    assert result.returncode == 0, result.stderr
    assert "prometheus mode" in result.stdout
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert f"--listen=:{ports['https']}" in c["args"] and ports["https"] == ADAPTER_PORT
    assert not [a for a in c["args"] if a.startswith("--grpc-")]  # gRPC only with client certificates
    keda = container(objects("examples/keda-cluster"), "Deployment", "rightsizer-adapter")
    assert f"--grpc-listen=:{ports['grpc']}" in keda["args"]


def test_exporter_answers_its_probes(tmp_path: Path) -> None:
    objs = objects("base")
    c = container(objs, "DaemonSet", "rightsizer-exporter")
    config = config_data(objs, "rightsizer-exporter", "exporter.yaml", tmp_path)
    with exporter([*with_config(c["args"], config), "--simulate"]) as exp:
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"]["port"] == "metrics"
            assert get(exp.url + c[probe]["httpGet"]["path"])[0] == 200, probe


def test_adapter_answers_probes_and_authenticated_scrapes_only(tmp_path: Path) -> None:
    """As deployed (in a cluster: the ConfigMap, TokenReview and SubjectAccessReview), the
    kubelet's probes get in without credentials; Prometheus's token gets /metrics; nothing else
    gets anything without credentials."""
    objs = objects("base")
    c = container(objs, "Deployment", "rightsizer-adapter")
    config = config_data(objs, "rightsizer-adapter", "adapter.yaml", tmp_path)
    args = [a for a in with_config(c["args"], config) if not a.startswith(("--listen=", "--prometheus-url="))]
    prometheus = Identity("system:serviceaccount:monitoring:kps-prometheus", ["system:serviceaccounts"])
    api = FakeApiServer(tmp_path, {"prom-token": prometheus}, rbac({"user": prometheus.username,
                                                                     "paths": ["/metrics"]}))
    env = {f"RIGHTSIZER_ADAPTER_KUBERNETES_{k.upper()}": v for k, v in api.config().items()}
    try:
        with exporter(["--simulate"]) as exp, running_adapter([*args, "--exporter", exp.url], env=env) as adp:
            for probe in ("livenessProbe", "readinessProbe"):
                http = c[probe]["httpGet"]
                assert (http["scheme"], http["port"]) == ("HTTPS", "https")
                assert get(adp.url + http["path"])[0] == 200, probe
            assert get(adp.url + "/metrics", {"Authorization": "Bearer prom-token"})[0] == 200
            external = "/apis/external.metrics.k8s.io/v1beta1/namespaces/demo/rightsizer_queue_depth"
            for path in ("/metrics", external, "/keda/v1/metrics/rightsizer_queue_depth?namespace=demo"):
                assert get(adp.url + path)[0] == 401, path
            assert "authz=delegated" in adp.log() and "without authentication" not in adp.log()
            wait_for(lambda: api.watches >= 1, 10, what="the ConfigMap watch")
    finally:
        api.stop()


# ConfigMaps and Secrets a user creates by hand (README "Deploy"), with the keys they must hold.
CREATED_BY_HAND = {"rightsizer-adapter-tls": {"tls.crt", "tls.key"},
                   # written by cert-manager (deploy/components/keda-grpc-tls), CA issuer: with ca.crt
                   "rightsizer-adapter-grpc-tls": {"tls.crt", "tls.key", "ca.crt"}}


@pytest.mark.parametrize("overlay", ["base", "examples/demo", "examples/cert-manager",
                                     "examples/keda-cluster"])
def test_every_file_argument_lies_in_a_mounted_volume_holding_it(overlay: str) -> None:
    objs = objects(overlay)
    for workload in (o for o in objs if o["kind"] in ("Deployment", "DaemonSet")):
        pod = workload["spec"]["template"]["spec"]
        if "volumes" not in pod:
            continue
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = pod["containers"][0]["volumeMounts"]
        paths = [m["mountPath"] for m in mounts]
        assert not [a for a in paths for b in paths if a != b and a.startswith(b + "/")], "nested mounts"
        args = " ".join(pod["containers"][0]["args"]).replace("=", " ").split()
        for path in (a for a in args if a.startswith("/etc/rightsizer/")):
            (mount,) = [m for m in mounts if path.startswith(m["mountPath"] + "/")]
            volume = volumes[mount["name"]]
            source = volume.get("configMap") or volume["secret"]
            name = source.get("name") or source.get("secretName")
            rendered = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == name]
            keys = set(rendered[0]["data"]) if rendered else CREATED_BY_HAND[name]
            assert path.removeprefix(mount["mountPath"] + "/") in keys, (workload["metadata"]["name"], path)


def test_selectors_select_and_names_resolve() -> None:
    objs = objects("base") + objects("monitoring")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    for svc in by_kind["Service"]:
        selector = svc["spec"]["selector"].items()
        workloads = [w for w in by_kind["Deployment"] + by_kind["DaemonSet"]
                     if selector <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(workloads) == 1, svc["metadata"]["name"]
        port_names = {p["name"] for p in workloads[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
    for monitor in by_kind["ServiceMonitor"]:
        services = [s for s in by_kind["Service"]
                    if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
        assert len(services) == 1, monitor["metadata"]["name"]
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in services[0]["spec"]["ports"]}
    (pdb,) = by_kind["PodDisruptionBudget"]
    deployment = named(objs, "Deployment", "rightsizer-adapter")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"].items()
    assert deployment["spec"]["replicas"] == 2 and pdb["spec"]["minAvailable"] == 1
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in by_kind["ServiceAccount"]}
    for binding in by_kind["RoleBinding"] + by_kind["ClusterRoleBinding"]:
        assert {(s["namespace"], s["name"]) for s in binding["subjects"]} <= accounts
    for api in by_kind["APIService"]:
        ref = api["spec"]["service"]
        svc = named(objs, "Service", ref["name"])
        assert svc["metadata"]["namespace"] == ref["namespace"]
        assert ref["port"] in {p["port"] for p in svc["spec"]["ports"]}


def test_exporter_limits_are_far_under_dcgm_exporters() -> None:
    c = container(objects("base"), "DaemonSet", "rightsizer-exporter")
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
    base = container(objects("base"), "DaemonSet", "rightsizer-exporter")["securityContext"]
    assert base["capabilities"] == {"drop": ["ALL"]} and base["allowPrivilegeEscalation"] is False
    assert base["readOnlyRootFilesystem"] is True and base["privileged"] is False
    mig = container(objects("examples/mig-monitor"), "DaemonSet", "rightsizer-exporter")
    assert mig["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
    assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in mig["env"]
