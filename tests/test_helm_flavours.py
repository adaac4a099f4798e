"""Each cluster flavour's values put the exporter on that cloud's GPU nodes and nowhere else, with
the runtime and driver that cloud gives it, and NOTES.txt names the flavour assumed; discovery's
values grant what the kubelet checks and nothing more. (Linting, strict validation for every
supported release and the programs' --check-config of each file run in test_helm_chart.py.)

Written from the clouds' documents: GPU Operator nodes carry nvidia.com/gpu.present=true and the
nvidia RuntimeClass; GKE labels GPU nodes cloud.google.com/gke-accelerator, taints them
nvidia.com/gpu=present:NoSchedule and keeps the driver in /home/kubernetes/bin/nvidia; Karpenter
labels karpenter.k8s.aws/instance-gpu-manufacturer=nvidia, Auto Mode
eks.amazonaws.com/instance-gpu-manufacturer=nvidia, and managed node groups only say their
instance type; AKS labels kubernetes.azure.com/accelerator=nvidia and its documentation taints GPU
pools sku=gpu:NoSchedule. EKS and AKS GPU images make NVIDIA's runtime containerd's default.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from helm import CHART, NAMESPACE, RELEASE, errors, helm, template

FLAVOURS = {
    "gpu-operator": None,
    "gke": "values-gke.yaml",
    "eks": "values-eks.yaml",
    "aks": "values-aks.yaml",
}


def pod_spec(*args: str) -> dict[str, Any]:
    (ds,) = [o for o in template(*args) if o["kind"] == "DaemonSet"]
    return dict(ds["spec"]["template"]["spec"])


def args_of(flavour: str) -> tuple[str, ...]:
    file = FLAVOURS[flavour]
    return ("-f", str(CHART / file)) if file else ()


def lands_on(spec: dict[str, Any], labels: dict[str, str], taints: list[dict[str, str]]) -> bool:
    """Whether the scheduler may place the pod on a node with these labels and taints."""
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = (
        (spec.get("affinity") or {})
        .get("nodeAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution")
    )
    if required:

        def term_matches(term: dict[str, Any]) -> bool:
            for e in term.get("matchExpressions", []):
                value = labels.get(e["key"])
                if e["operator"] == "Exists" and value is None:
                    return False
                if e["operator"] == "In" and value not in e["values"]:
                    return False
            return True

        if not any(term_matches(t) for t in required["nodeSelectorTerms"]):
            return False
    tolerations = spec.get("tolerations") or []

    def tolerated(taint: dict[str, str]) -> bool:
        return any(
            t.get("key") == taint["key"]
            and t.get("effect", taint["effect"]) == taint["effect"]
            and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            for t in tolerations
        )

    return all(tolerated(t) for t in taints if t["effect"] in ("NoSchedule", "NoExecute"))


GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NODES = {
    "gpu-operator": ({"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-L4"}, [GPU_TAINT]),
    "gke": ({"cloud.google.com/gke-accelerator": "nvidia-l4", "cloud.google.com/gke-nodepool": "gpu"},
            [GPU_TAINT]),
    "eks-karpenter": ({"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia",
                       "node.kubernetes.io/instance-type": "g7e.2xlarge"}, []),
    "eks-auto-mode": ({"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia"}, [GPU_TAINT]),
    "eks-node-group": ({"node.kubernetes.io/instance-type": "g6e.12xlarge",
                       "eks.amazonaws.com/nodegroup": "gpu"}, []),
    "eks-node-group-p5": ({"node.kubernetes.io/instance-type": "p5.48xlarge"}, []),
    "aks": ({"kubernetes.azure.com/accelerator": "nvidia",
             "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4"},
            [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}]),
}  # fmt: skip
CPU_NODES = [
    ({"node.kubernetes.io/instance-type": "m5.large", "eks.amazonaws.com/nodegroup": "system"}, []),
    ({"cloud.google.com/gke-nodepool": "default-pool"}, []),
    ({"kubernetes.azure.com/agentpool": "system"}, []),
    ({"karpenter.k8s.aws/instance-gpu-manufacturer": "none"}, []),
]


@pytest.mark.parametrize(
    ("flavour", "nodes"),
    [
        ("gpu-operator", ["gpu-operator"]),
        ("gke", ["gke"]),
        ("eks", ["eks-karpenter", "eks-auto-mode", "eks-node-group", "eks-node-group-p5"]),
        ("aks", ["aks"]),
    ],
)
def test_each_flavour_lands_on_its_gpu_nodes_only(flavour: str, nodes: list[str]) -> None:
    spec = pod_spec(*args_of(flavour))
    for name, (labels, taints) in NODES.items():
        assert lands_on(spec, labels, taints) is (name in nodes), (flavour, name)
    for labels, taints in CPU_NODES:
        assert not lands_on(spec, labels, taints), (flavour, labels)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_runtime_and_driver_of_each_flavour(flavour: str) -> None:
    spec = pod_spec(*args_of(flavour))
    (c,) = spec["containers"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    if flavour == "gpu-operator":
        assert spec["runtimeClassName"] == "nvidia"
    else:
        assert "runtimeClassName" not in spec  # GKE has none; EKS and AKS make NVIDIA's the default
    if flavour == "gke":
        driver = mounts["/usr/local/nvidia"]
        assert driver["readOnly"] is True and host_paths[driver["name"]] == "/home/kubernetes/bin/nvidia"
        assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert c["securityContext"]["privileged"] is True
    else:
        assert "/usr/local/nvidia" not in mounts and "LD_LIBRARY_PATH" not in env
        assert c["securityContext"].get("privileged") is False


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_notes_say_which_flavour_was_assumed(flavour: str) -> None:
    result = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *args_of(flavour)
    )
    assert result.returncode == 0, errors(result)
    notes = result.stdout.split("NOTES:\n", 1)[1]
    assert f"Cluster flavour assumed: {flavour} (" in notes
    where = {"gpu-operator": "labelled nvidia.com/gpu.present=true (RuntimeClass nvidia)",
             "gke": "its affinity selects", "eks": "its affinity selects",
             "aks": "labelled kubernetes.azure.com/accelerator=nvidia,"}[flavour]  # fmt: skip
    assert where in notes, notes


def test_eks_instance_types_are_every_nvidia_type_and_only_those() -> None:
    spec = pod_spec(*args_of("eks"))
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    (types,) = [
        e["values"]
        for t in terms
        for e in t["matchExpressions"]
        if e["key"] == "node.kubernetes.io/instance-type"
    ]
    families = {t.split(".")[0] for t in types}
    # §18's table (g4dn T4, g5 A10G, g6/gr6 L4, g6e L40S, p4d/p4de A100, p5 H100, p5e/p5en H200, p6-b200)
    assert {"g4dn", "g5", "g6", "gr6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200"} <= families
    assert not families & {"m5", "c5", "inf2", "trn1", "g4ad"}  # no CPU, Neuron or AMD GPU type
    assert len(types) == len(set(types))


def test_discovery_grants_what_the_kubelet_checks() -> None:
    objs = template("--set", "exporter.discovery.enabled=true", "--set-json",
                    'exporter.config.discovery={"namespaces": ["llm"], "max_servers": 16}')  # fmt: skip
    (role,) = [o for o in objs if o["kind"] == "ClusterRole" and "exporter" in o["metadata"]["name"]]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes/pods"], "verbs": ["get"]}]
    (binding,) = [
        o
        for o in objs
        if o["kind"] == "ClusterRoleBinding" and o["roleRef"]["name"] == role["metadata"]["name"]
    ]
    (ds,) = [o for o in objs if o["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": NAMESPACE}
    ]
    assert spec["automountServiceAccountToken"] is True
    (c,) = spec["containers"]
    (node_ip,) = [e for e in c["env"] if e["name"] == "NODE_IP"]
    assert node_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == ds["metadata"]["name"]]
    config = yaml.safe_load(cm["data"]["exporter.yaml"])
    assert config["discovery"] == {"enabled": True, "tls_insecure_skip_verify": True, "namespaces": ["llm"],
                                   "max_servers": 16}  # fmt: skip

    proxy = template(
        "--set", "exporter.discovery.enabled=true", "--set", "exporter.discovery.grantNodesProxy=true"
    )
    (role,) = [o for o in proxy if o["kind"] == "ClusterRole" and "exporter" in o["metadata"]["name"]]
    assert role["rules"][0]["resources"] == ["nodes/pods", "nodes/proxy"]

    off = template()
    assert not [o for o in off if o["kind"] == "ClusterRole" and "exporter" in o["metadata"]["name"]]
    (ds,) = [o for o in off if o["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "NODE_IP" not in {e["name"] for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
