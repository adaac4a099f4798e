"""Pod UIDs of device allocations, from the kubelet's device-manager checkpoint.

The pod-resources ``List`` answer names each pod and container but carries no pod UID, while
``/proc/<pid>/cgroup`` gives a process's pod UID but no name. The kubelet's device manager
persists every allocation, with the pod UID, in
``/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint`` (JSON; format in
``k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/checkpoint``; read the same way by the SR-IOV,
Multus/kuryr and Ascend device plugins). An entry there and a container in the ``List`` answer
are the same allocation when container name, resource name and the set of device ids agree;
device ids are unique on a node (time-sliced replicas carry their ``::N`` suffix), so the join is
exact. That gives pod UID -> (pod, namespace, container) without asking the API server.

Format (v2, Kubernetes 1.20+; v1 kept ``DeviceIDs`` as a plain list, also accepted)::

    {"Data": {"PodDeviceEntries": [{"PodUID": "...", "ContainerName": "...",
      "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": ["GPU-..."]}, "AllocResp": "..."}],
      "RegisteredDevices": {...}}, "Checksum": 123}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rightsizer_core.files import read_bytes

_MAX_BYTES = 64 * 1024 * 1024


class CheckpointError(Exception):
    """The checkpoint cannot be read or is not in the expected format (one-line message)."""


# (container name, resource name, device ids) identifies one allocation.
AllocationKey = tuple[str, str, frozenset[str]]


@dataclass(frozen=True, slots=True)
class CheckpointEntry:
    pod_uid: str
    container: str
    resource: str
    device_ids: frozenset[str]


def _device_ids(raw: Any, where: str) -> frozenset[str]:
    if isinstance(raw, list):  # v1 format
        ids = raw
    elif isinstance(raw, Mapping):  # v2: NUMA node -> ids
        ids = [i for per_node in raw.values() if isinstance(per_node, list) for i in per_node]
    elif raw is None:
        ids = []
    else:
        raise CheckpointError(f"{where}: DeviceIDs is neither a list nor a mapping")
    return frozenset(str(i) for i in ids)


def parse_checkpoint(data: bytes, where: str = "checkpoint") -> tuple[CheckpointEntry, ...]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{where}: not JSON: {exc}") from None
    body = doc.get("Data") if isinstance(doc, dict) else None
    entries = body.get("PodDeviceEntries") if isinstance(body, dict) else None
    if entries is None and isinstance(body, dict):
        return ()  # a kubelet with no device allocations writes null
    if not isinstance(entries, list):
        raise CheckpointError(f"{where}: no Data.PodDeviceEntries list")
    out = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        uid, container, resource = entry.get("PodUID"), entry.get("ContainerName"), entry.get("ResourceName")
        if not (isinstance(uid, str) and isinstance(container, str) and isinstance(resource, str) and uid):
            continue
        out.append(CheckpointEntry(uid, container, resource, _device_ids(entry.get("DeviceIDs"), where)))
    return tuple(out)


def read_checkpoint(path: str | Path) -> tuple[CheckpointEntry, ...]:
    """Blocking file I/O: call it off the event loop."""
    try:
        data = read_bytes(path, _MAX_BYTES)
    except OSError as exc:
        raise CheckpointError(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_checkpoint(data, str(path))


def uid_index(entries: tuple[CheckpointEntry, ...]) -> dict[AllocationKey, str]:
    """Allocation -> pod UID."""
    return {(e.container, e.resource, e.device_ids): e.pod_uid for e in entries}
