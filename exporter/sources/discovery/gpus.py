"""Which GPUs each pod holds, by pod UID: the kubelet's pod-resources answer joined with its
device-manager checkpoint (the join ``sources/pods/checkpoint.py`` describes), so a server's queue
is linked to the devices of its own pod and no other. Without a readable checkpoint, pod-resources'
namespace and name (unique on a node at any moment) stand in for the UID.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from ..pods.attribution import device_key
from ..pods.checkpoint import CheckpointEntry, uid_index
from ..pods.client import KubeletAnswer


@dataclass(frozen=True)
class PodGpus:
    by_uid: Mapping[str, tuple[str, ...]]  # empty when the checkpoint could not be read
    by_name: Mapping[tuple[str, str], tuple[str, ...]]  # (namespace, pod) -> device UUIDs
    exact: bool  # joined by UID through the checkpoint

    def of(self, uid: str, namespace: str, pod: str) -> tuple[str, ...]:
        return self.by_uid.get(uid, ()) if self.exact else self.by_name.get((namespace, pod), ())


def pod_gpus(answer: KubeletAnswer, checkpoint: tuple[CheckpointEntry, ...] | None) -> PodGpus:
    """Device UUIDs (time-slicing suffixes off, MIG devices as their own UUIDs) per pod."""
    index = uid_index(checkpoint) if checkpoint is not None else {}
    by_uid: dict[str, list[str]] = defaultdict(list)
    by_name: dict[tuple[str, str], list[str]] = defaultdict(list)
    for dev in answer.devices:
        keys = [device_key(i) for i in dev.device_ids]
        named = by_name[(dev.pod.namespace, dev.pod.pod)]
        named.extend(k for k in keys if k not in named)
        uid = index.get((dev.pod.container, dev.resource, frozenset(dev.device_ids)))
        if uid is not None:
            held = by_uid[uid]
            held.extend(k for k in keys if k not in held)
    return PodGpus(
        {k: tuple(v) for k, v in by_uid.items()},
        {k: tuple(v) for k, v in by_name.items()},
        checkpoint is not None,
    )
