"""Pure attribution logic: kubelet allocations + process cgroups -> pod labels and per-pod memory.

No I/O here; ``extension.py`` gathers the inputs on its own cadence.

Rules:

- Device ids are GPU UUIDs or MIG device UUIDs (``MIG-<uuid>``; the old ``MIG-GPU-<uuid>/<gi>/<ci>``
  form is matched by parent UUID and GPU instance id). A time-sliced id's ``::N`` suffix is
  stripped before matching.
- A device held by exactly one container gets that container's ``pod``, ``namespace`` and
  ``container`` labels on all its series. A device held by several containers (time-slicing)
  gets none: one series cannot carry several pods, and picking one would be wrong. Their
  per-pod memory is ``rightsizer_pod_gpu_memory_used_bytes`` instead.
- A process (NVML running processes: PID and used memory per device) belongs to the container
  whose pod UID its cgroup names (``cgroup.py``); pod UID -> pod comes from joining the kubelet's
  device-manager checkpoint with the ``List`` answer (``checkpoint.py``). Without the checkpoint,
  a process on a device held by exactly one container is that container's; on a shared device it
  stays unattributed (and ``/api/v1/pods`` says why).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rightsizer_core.snapshot import GpuIdentity, GpuSample, PodRef, Row

from .cgroup import CgroupRef
from .checkpoint import AllocationKey
from .client import KubeletAnswer

MEMORY_FAMILY = "rightsizer_pod_gpu_memory_used_bytes"
_OLD_MIG_ID = re.compile(r"^MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)$")


class GpuProcess(Protocol):
    """One process on one device, as NVML's running-processes calls report it."""

    @property
    def pid(self) -> int: ...

    @property
    def used_memory_bytes(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """A plain ``GpuProcess`` for sources to return."""

    pid: int
    used_memory_bytes: int | None


# What a GPU source gives for per-process attribution: device UUID (``GpuIdentity.uuid``: the MIG
# device UUID for a process in a MIG instance) -> processes, as of the source's latest cycle.
# Called on the event loop every cycle: it must return cached data and do no I/O.
ProcessLister = Callable[[], Mapping[str, Sequence[GpuProcess]]]


def device_key(device_id: str) -> str:
    """A device id without its time-slicing replica suffix (``GPU-…::3`` -> ``GPU-…``)."""
    return device_id.split("::", 1)[0]


@dataclass(frozen=True)
class Holders:
    """Which containers hold each device, from one kubelet answer."""

    by_id: Mapping[str, tuple[PodRef, ...]]
    by_mig_instance: Mapping[tuple[str, int], tuple[PodRef, ...]]

    def of(self, identity: GpuIdentity) -> tuple[PodRef, ...]:
        found = self.by_id.get(identity.uuid)
        if found is None and identity.parent_uuid and identity.mig_instance_id is not None:
            found = self.by_mig_instance.get((identity.parent_uuid, identity.mig_instance_id))
        return found or ()

    def single(self, identity: GpuIdentity) -> PodRef | None:
        refs = self.of(identity)
        return refs[0] if len(refs) == 1 else None


def holders_from(answer: KubeletAnswer) -> Holders:
    by_id: dict[str, list[PodRef]] = defaultdict(list)
    by_mig: dict[tuple[str, int], list[PodRef]] = defaultdict(list)
    for dev in answer.devices:
        for raw in dev.device_ids:
            key = device_key(raw)
            old = _OLD_MIG_ID.match(key)
            target = by_mig[(old.group(1), int(old.group(2)))] if old else by_id[key]
            if dev.pod not in target:
                target.append(dev.pod)
    return Holders({k: tuple(v) for k, v in by_id.items()}, {k: tuple(v) for k, v in by_mig.items()})


def pods_by_uid(answer: KubeletAnswer, index: Mapping[AllocationKey, str]) -> dict[str, tuple[PodRef, ...]]:
    """Pod UID -> its GPU-holding containers, by joining the answer with the checkpoint."""
    out: dict[str, list[PodRef]] = defaultdict(list)
    for dev in answer.devices:
        uid = index.get((dev.pod.container, dev.resource, frozenset(dev.device_ids)))
        if uid is not None and dev.pod not in out[uid]:
            out[uid].append(dev.pod)
    return {k: tuple(v) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class ProcessVerdict:
    device_uuid: str
    pid: int
    pod: PodRef | None
    reason: str | None = None  # why ``pod`` is None
    pod_uid: str | None = None


def _verdict(
    holders: tuple[PodRef, ...], cg: CgroupRef | None, uid_pods: Mapping[str, tuple[PodRef, ...]] | None
) -> tuple[PodRef | None, str | None]:
    if cg is None:
        return None, "process is not in a pod (or has exited)"
    if uid_pods is None:
        if len(holders) == 1:
            return holders[0], None
        if not holders:
            return None, "no container holds this GPU in the kubelet's answer"
        return None, (
            f"GPU shared by {len(holders)} containers: per-process attribution needs the kubelet "
            "device-manager checkpoint (pods.checkpoint)"
        )
    pods = uid_pods.get(cg.pod_uid, ())
    if not pods:
        return None, f"pod {cg.pod_uid} holds no GPU in the kubelet's allocations"
    candidates = [p for p in pods if p in holders]
    if len(candidates) == 1:
        return candidates[0], None
    if not candidates and len(pods) == 1:
        return pods[0], None  # the pod's process runs on a GPU it was not allocated: still its memory
    first = pods[0]
    return None, f"several containers of pod {first.namespace}/{first.pod} could own this process"


def attribute_processes(
    holders: Holders,
    identities: Mapping[str, GpuIdentity],
    processes: Mapping[str, Sequence[GpuProcess]],
    cgroups: Mapping[int, CgroupRef | None],
    uid_pods: Mapping[str, tuple[PodRef, ...]] | None,
) -> tuple[ProcessVerdict, ...]:
    out = []
    for uuid, procs in processes.items():
        identity = identities.get(uuid)
        device_holders = holders.of(identity) if identity is not None else holders.by_id.get(uuid, ())
        for proc in procs:
            cg = cgroups.get(proc.pid)
            pod, reason = _verdict(device_holders, cg, uid_pods)
            out.append(ProcessVerdict(uuid, proc.pid, pod, reason, cg.pod_uid if cg else None))
    return tuple(out)


_SAMPLE_FIELDS = tuple(f.name for f in dataclasses.fields(GpuSample))
_set = object.__setattr__


def with_pod(sample: GpuSample, pod: PodRef | None) -> GpuSample:
    """``dataclasses.replace(sample, pod=pod)`` at half the cost (this runs for every device, every
    cycle): a field-by-field copy of the frozen sample, then the new pod."""
    new = object.__new__(GpuSample)
    for name in _SAMPLE_FIELDS:
        _set(new, name, getattr(sample, name))
    _set(new, "pod", pod)
    return new


def label_gpus(gpus: tuple[GpuSample, ...], holders: Holders) -> tuple[GpuSample, ...]:
    """The samples with ``pod`` set where exactly one container holds the device, else cleared."""
    out = []
    for g in gpus:
        ref = holders.single(g.identity)
        out.append(g if g.pod == ref else with_pod(g, ref))
    return tuple(out)


@dataclass(frozen=True)
class Owners:
    """Who owns each process, prepared at refresh so that a cycle only adds numbers up.

    ``slot_of`` maps (device UUID, PID) to a slot; a slot is one (device, container) row of
    ``rightsizer_pod_gpu_memory_used_bytes``, already in output order (GPU, MIG instance, pod).
    """

    slot_of: Mapping[tuple[str, int], int]
    slots: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]


def owners_from(owners: Mapping[tuple[str, int], PodRef], identities: Mapping[str, GpuIdentity]) -> Owners:
    def order(key: tuple[str, PodRef]) -> tuple[int, int, str, str, str]:
        ident = identities.get(key[0])
        index = ident.index if ident is not None else 1 << 30
        mig = ident.mig_instance_id if ident is not None and ident.mig_instance_id is not None else -1
        return index, mig, key[1].namespace, key[1].pod, key[1].container

    pairs = sorted({(uuid, ref) for (uuid, _), ref in owners.items()}, key=order)
    slot = {pair: i for i, pair in enumerate(pairs)}
    slots = tuple(
        (uuid, (("pod", ref.pod), ("namespace", ref.namespace), ("container", ref.container)))
        for uuid, ref in pairs
    )
    return Owners({(uuid, pid): slot[(uuid, ref)] for (uuid, pid), ref in owners.items()}, slots)


def memory_rows(
    gpus: tuple[GpuSample, ...], processes: Mapping[str, Sequence[GpuProcess]], owners: Owners
) -> tuple[Row, ...]:
    """``rightsizer_pod_gpu_memory_used_bytes`` rows: used memory summed per device and container."""
    by_uuid = {g.identity.uuid: g for g in gpus if g.up}
    slot_of = owners.slot_of
    totals: list[float | None] = [None] * len(owners.slots)
    for uuid, procs in processes.items():
        if uuid not in by_uuid:
            continue
        for proc in procs:
            slot = slot_of.get((uuid, proc.pid))
            used = proc.used_memory_bytes
            if slot is not None and used is not None:
                total = totals[slot]
                totals[slot] = float(used) if total is None else total + used
    rows = []
    for slot, total in enumerate(totals):
        if total is not None:
            uuid, labels = owners.slots[slot]
            g = by_uuid[uuid]
            rows.append(Row(total, labels, gpu=g if g.pod is None else with_pod(g, None)))
    return tuple(rows)
