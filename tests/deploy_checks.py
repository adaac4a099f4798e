"""The wiring checks of a rendered installation, whichever tool rendered it: kustomize's deploy/
(tests/test_deploy_wiring.py) and the Helm chart (tests/test_helm_chart.py) run the same ones.

Each check takes the rendered objects and finds Rightsizer's by their component label, so object
names (a Helm release's prefix) do not matter. Each asserts: flags and config files the programs
accept, ports they listen on, probe paths they answer without credentials, files in the volumes
that hold them, selectors that select, names that resolve, and no way in without credentials.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from adapter_support import adapter as running_adapter
from adapter_support import get
from fake_apiserver import FakeApiServer, Identity, rbac
from servers import ROOT, exporter, wait_for

from adapter.config import DEFAULT_PORT as ADAPTER_PORT
from exporter.config import DEFAULT_PORT as EXPORTER_PORT

Objects = list[dict[str, Any]]
# Secrets a user or cert-manager creates (docs/deploy.md), with the keys they must hold.
CREATED_ELSEWHERE = {"tls": {"tls.crt", "tls.key"},  # the adapter's serving certificate
                     "grpc-tls": {"tls.crt", "tls.key", "ca.crt"}}  # cert-manager, CA issuer: ca.crt too


def component(objs: Objects, kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` that is Rightsizer's ``name`` component (exporter, adapter)."""
    (obj,) = [o for o in objs if o["kind"] == kind
              and o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == name
              and o["metadata"]["labels"].get("app.kubernetes.io/part-of") == "rightsizer"]
    return obj


def pod_of(objs: Objects, name: str) -> dict[str, Any]:
    kind = "DaemonSet" if name == "exporter" else "Deployment"
    return dict(component(objs, kind, name)["spec"]["template"]["spec"])


def container(objs: Objects, name: str) -> dict[str, Any]:
    (c,) = pod_of(objs, name)["containers"]
    return dict(c)


def config_path(args: list[str]) -> str:
    joined = " ".join(args).replace("=", " ").split()
    return joined[joined.index("--config") + 1]


def config_file(objs: Objects, name: str, tmp_path: Path) -> Path:
    """A local copy of the file the component's ``--config`` names, from the ConfigMap mounted there."""
    pod = pod_of(objs, name)
    path = config_path(pod["containers"][0]["args"])
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    configmap = [o for o in objs if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"] == volume["configMap"]["name"]]
    local = tmp_path / f"{name}.yaml"
    local.write_text(configmap[0]["data"][path.removeprefix(mount["mountPath"] + "/")])
    return local


def with_config(args: list[str], config: Path) -> list[str]:
    """The container's arguments with its mounted config file replaced by a local copy."""
    out = [f"--config={config}" if a.startswith("--config=") else a for a in args]
    if "--config" in out:
        out[out.index("--config") + 1] = str(config)
    return out


def run(module: str, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def exporter_accepts_its_arguments_and_config(objs: Objects, tmp_path: Path) -> None:
    c = container(objs, "exporter")
    assert c["command"] == ["rightsizer-exporter"]
    config = config_file(objs, "exporter", tmp_path)
    result = run("exporter", [*with_config(c["args"], config), "--check-config"])
    assert result.returncode == 0, result.stderr
    assert c["ports"][0]["containerPort"] == EXPORTER_PORT


def exporter_sees_the_kubelet_paths_it_is_configured_with(objs: Objects, tmp_path: Path) -> None:
    """Pod attribution reads the pod-resources socket and the device checkpoint: each must sit in
    a read-only mount of the host's directory, and procfs must be the host's (hostPID)."""
    from exporter.config import load_config

    pod = pod_of(objs, "exporter")
    cfg = load_config(str(config_file(objs, "exporter", tmp_path)), {})
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    host_paths = {v["hostPath"]["path"] for v in volumes.values() if "hostPath" in v}
    if cfg.pods.enabled is False:  # no attribution: nothing of the kubelet's is mounted
        assert not {str(Path(cfg.pods.socket).parent), str(Path(cfg.pods.checkpoint).parent)} & host_paths
        return
    for path in (cfg.pods.socket, cfg.pods.checkpoint):
        directory = str(Path(path).parent)
        assert mounts[directory]["readOnly"] is True, path
        assert volumes[mounts[directory]["name"]]["hostPath"]["path"] == directory, path
    assert cfg.pods.procfs_root == "/proc" and pod["hostPID"] is True
    # The NUMA check reads the containers' cpusets from the host's cgroup tree, not the exporter's own.
    if cfg.pods.cgroup_root != "/sys/fs/cgroup":
        assert mounts[cfg.pods.cgroup_root]["readOnly"] is True
        assert volumes[mounts[cfg.pods.cgroup_root]["name"]]["hostPath"]["path"] == "/sys/fs/cgroup"


def adapter_accepts_its_arguments_and_config(objs: Objects, tmp_path: Path) -> None:
    c = container(objs, "adapter")
    assert c["command"] == ["rightsizer-adapter"]
    config = config_file(objs, "adapter", tmp_path)
    # the certificates, CAs and secrets it names are mounted in the cluster, not here
    result = run("adapter", [*with_config(c["args"], config), "--check-config", "--no-file-checks"])
    assert result.returncode == 0, result.stderr
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert f"--listen=:{ports['https']}" in c["args"] and ports["https"] == ADAPTER_PORT
    grpc = [a for a in c["args"] if a.startswith("--grpc-listen")]
    assert grpc in ([], [f"--grpc-listen=:{ports['grpc']}"])
    if grpc:  # gRPC only with client certificates
        assert any(a.startswith("--grpc-client-ca-file=") for a in c["args"])
    else:
        assert not [a for a in c["args"] if a.startswith("--grpc-")]


def exporter_answers_its_probes(objs: Objects, tmp_path: Path) -> None:
    c = container(objs, "exporter")
    args = [a for a in with_config(c["args"], config_file(objs, "exporter", tmp_path)) if a != "--simulate"]
    with exporter([*args, "--simulate"]) as exp:
        for probe in ("livenessProbe", "readinessProbe"):
            assert c[probe]["httpGet"]["port"] == "metrics"
            assert get(exp.url + c[probe]["httpGet"]["path"])[0] == 200, probe


def adapter_answers_probes_and_authenticated_scrapes_only(objs: Objects, tmp_path: Path) -> None:
    """As deployed (in a cluster: the ConfigMap, TokenReview and SubjectAccessReview), the
    kubelet's probes get in without credentials; Prometheus's token gets /metrics; nothing else
    gets anything without credentials."""
    c = container(objs, "adapter")
    config = config_file(objs, "adapter", tmp_path)
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


def every_file_argument_lies_in_a_mounted_volume_holding_it(objs: Objects) -> None:
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
            keys = set(rendered[0]["data"]) if rendered else CREATED_ELSEWHERE[mount["name"]]
            assert path.removeprefix(mount["mountPath"] + "/") in keys, (workload["metadata"]["name"], path)


def selectors_select_and_names_resolve(objs: Objects) -> None:
    by_kind: dict[str, Objects] = {}
    for o in objs:
        by_kind.setdefault(o["kind"], []).append(o)
    workloads = by_kind.get("Deployment", []) + by_kind.get("DaemonSet", [])
    for svc in by_kind["Service"]:
        selector = svc["spec"]["selector"].items()
        chosen = [w for w in workloads if selector <= w["spec"]["template"]["metadata"]["labels"].items()]
        assert len(chosen) == 1, svc["metadata"]["name"]
        port_names = {p["name"] for p in chosen[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= port_names
    for workload in workloads:
        assert workload["spec"]["selector"]["matchLabels"].items() <= \
            workload["spec"]["template"]["metadata"]["labels"].items()
    for monitor in by_kind.get("ServiceMonitor", []) + by_kind.get("PodMonitor", []):
        namespaces = monitor["spec"]["namespaceSelector"]["matchNames"]
        wanted = monitor["spec"]["selector"]["matchLabels"].items()
        if monitor["kind"] == "PodMonitor":
            endpoint = monitor["spec"]["podMetricsEndpoints"][0]
            chosen = [w for w in workloads if w["metadata"]["namespace"] in namespaces
                      and wanted <= w["spec"]["template"]["metadata"]["labels"].items()]
            ports = [{p["name"] for p in w["spec"]["template"]["spec"]["containers"][0]["ports"]}
                     for w in chosen]
        else:
            endpoint = monitor["spec"]["endpoints"][0]
            chosen = [s for s in by_kind["Service"] if s["metadata"]["namespace"] in namespaces
                      and wanted <= s["metadata"]["labels"].items()]
            ports = [{p["name"] for p in s["spec"]["ports"]} for s in chosen]
        assert len(chosen) == 1, monitor["metadata"]["name"]
        assert endpoint["port"] in ports[0], monitor["metadata"]["name"]
    for pdb in by_kind.get("PodDisruptionBudget", []):
        (target,) = [w for w in workloads if pdb["spec"]["selector"]["matchLabels"].items()
                     <= w["spec"]["template"]["metadata"]["labels"].items()]
        if isinstance(pdb["spec"]["minAvailable"], int):
            assert target["spec"]["replicas"] > pdb["spec"]["minAvailable"], "a PDB that blocks every drain"
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"])
                for o in by_kind.get("ServiceAccount", [])}
    for binding in by_kind.get("RoleBinding", []) + by_kind.get("ClusterRoleBinding", []):
        assert {(s["namespace"], s["name"]) for s in binding["subjects"]} <= accounts
        role = binding["roleRef"]
        if role["kind"] == "ClusterRole" and not role["name"].startswith("system:"):
            assert [r for r in by_kind["ClusterRole"] if r["metadata"]["name"] == role["name"]], role
    for pod in (w["spec"]["template"]["spec"] for w in workloads):
        assert pod.get("serviceAccountName", "default") in {name for _, name in accounts} | {"default"}
    for api in by_kind.get("APIService", []):
        ref = api["spec"]["service"]
        (svc,) = [s for s in by_kind["Service"] if s["metadata"]["name"] == ref["name"]]
        assert svc["metadata"]["namespace"] == ref["namespace"]
        assert ref["port"] in {p["port"] for p in svc["spec"]["ports"]}


def no_adapter_data_endpoint_answers_without_authentication(objs: Objects) -> None:
    """Every way in needs credentials: no plain HTTP, no anonymous, gRPC only with client
    certificates, and the CAs come from the cluster (no hand-copied front-proxy CA)."""
    args = container(objs, "adapter")["args"]
    assert not [a for a in args if a.startswith(("--insecure-http", "--requestheader-client-ca-file"))]
    if any(a.startswith("--grpc-listen") for a in args):
        assert any(a.startswith("--grpc-client-ca-file=") for a in args)
    configmap = component(objs, "ConfigMap", "adapter")
    settings = yaml.safe_load(configmap["data"]["adapter.yaml"]) or {}
    assert not (settings.get("authentication") or {}).get("anonymous")
    assert not settings.get("insecure_http")


def exporter_is_locked_down(objs: Objects) -> None:
    """Nothing writable, no privilege escalation, every capability dropped; the one capability ever
    added back is SYS_ADMIN, and only for NVML's view of MIG instances (the driver demands it);
    privileged only with the host's driver mounted (GKE's driver install)."""
    c = container(objs, "exporter")
    security = c["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["capabilities"]["drop"] == ["ALL"]
    # Where no NVIDIA runtime hands the container the driver (GKE), it is mounted from the host and
    # the container is privileged, as nothing else gives it the GPUs' device files; only then.
    host_driver = any(m["mountPath"] == "/usr/local/nvidia" for m in c.get("volumeMounts", []))
    assert security.get("privileged", False) is host_driver, security
    assert security["allowPrivilegeEscalation"] is host_driver  # the API demands it with privileged
    mig = {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in c["env"]
    assert security["capabilities"].get("add", []) == (["SYS_ADMIN"] if mig else [])
