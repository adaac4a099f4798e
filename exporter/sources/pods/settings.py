"""The ``pods`` section of the exporter's configuration (pod attribution)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rightsizer_core.settings import setting

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


@dataclass(frozen=True)
class PodSettings:
    enabled: bool | Literal["auto"] = setting(
        "auto",
        "Pod attribution: true, false, or auto (on when the kubelet pod-resources socket exists at "
        "start; off on hosts without a kubelet, where no pods collector is reported).",
    )
    socket: str = setting(DEFAULT_SOCKET, "Path of the kubelet pod-resources gRPC unix socket.")
    refresh_interval_seconds: float = setting(
        10.0,
        "How often the kubelet is asked which container holds which GPU (never per scrape); new GPU "
        "processes trigger an earlier refresh, at most once a second.",
        minimum=1,
        maximum=3600,
    )
    timeout_seconds: float = setting(
        2.0,
        "Deadline of one kubelet List call (and of one /proc and checkpoint read).",
        minimum=0.1,
        maximum=60,
    )
    keep_last_seconds: float = setting(
        60.0,
        "While the kubelet fails, keep labelling with its last answer this long (pods cannot start "
        "or stop without a kubelet); 0 drops the labels at the first failure.",
        minimum=0,
        maximum=86400,
    )
    procfs_root: str = setting(
        "/proc", "Where the host's /proc is (e.g. /host/proc when the exporter does not run with hostPID)."
    )
    sysfs_root: str = setting(
        "/sys",
        "Where the host's /sys is: the GPUs' NUMA node (when NVML does not say) and each node's CPUs.",
    )
    cgroup_root: str = setting(
        "/sys/fs/cgroup", "Where the host's cgroup tree is: the GPU containers' cpusets (NUMA check)."
    )
    checkpoint: str = setting(
        DEFAULT_CHECKPOINT,
        "The kubelet's device-manager checkpoint, read to map pod UIDs to pods for per-process "
        "attribution on shared GPUs; empty: do not read it.",
    )
    resource_names: list[str] = setting(
        ["nvidia.com/gpu", "nvidia.com/gpu.shared"],
        "Extended resources that are whole or time-sliced GPUs; nvidia.com/mig-* is always included.",
    )

    max_answer_bytes: int = setting(
        4 * 2**20,
        "Largest kubelet List answer read, in bytes (gRPC's own default; a node with 110 pods answers a "
        "few tens of KiB); a larger one is refused and attribution is off until a smaller one comes.",
        minimum=65536,
        maximum=64 * 2**20,
    )
    max_pods: int = setting(
        5000,
        "Most pods a kubelet List answer may list (Kubernetes' default is 110 per node); an answer with "
        "more is refused, not read in part.",
        minimum=1,
        maximum=1_000_000,
    )

    def validate(self) -> None:
        if self.timeout_seconds >= self.refresh_interval_seconds:
            raise ValueError("timeout_seconds must be shorter than refresh_interval_seconds")
