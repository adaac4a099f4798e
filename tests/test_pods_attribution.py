"""Attribution rules: device ids -> holders, labels, checkpoint join, per-process owners, memory rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from fakes import fields, identity

from exporter.sources.pods.attribution import (
    RunningProcess,
    attribute_processes,
    device_key,
    holders_from,
    label_gpus,
    memory_rows,
    owners_from,
    pods_by_uid,
    with_pod,
)
from exporter.sources.pods.cgroup import read_cgroup
from exporter.sources.pods.checkpoint import CheckpointError, parse_checkpoint, read_checkpoint, uid_index
from exporter.sources.pods.client import ContainerDevices, KubeletAnswer
from rightsizer_core.snapshot import GpuIdentity, GpuSample, PodRef

PROC = Path(__file__).parent / "fixtures" / "proc"
UID_A = "4e074085-62be-4b8b-a0ce-05c1decfe3ad"  # fixture pid 1003 (containerd, v2)
UID_B = "4b227777-d4dd-4fc6-ac6f-884f48641d02"  # fixture pid 1004 (CRI-O, v2)
UID_C = "6b86b273-ff34-4ce1-ad6b-804eff5a3f57"  # fixture pid 1001 (v1)

A = PodRef("chat-a", "serving", "vllm")
B = PodRef("chat-b", "serving", "vllm")
C = PodRef("train", "ml", "trainer")
G0, G1, G2 = identity(0), identity(1), identity(2)
MIG = GpuIdentity(
    index=3,
    uuid="MIG-5c3a9e1d-7b2f-5e8a-9c4d-1a2b3c4d5e6f",
    pci_bus_id="00000000:13:00.0",
    model="NVIDIA H100 80GB HBM3",
    minor_number=3,
    driver_version="550.54.15",
    memory_total_bytes=10 * 2**30,
    mig_profile="1g.10gb",
    mig_instance_id=9,
    parent_uuid=identity(3).uuid,
)


def answer(*devices: ContainerDevices) -> KubeletAnswer:
    return KubeletAnswer(devices, len({d.pod for d in devices}), ())


FLEET = answer(
    ContainerDevices(A, "nvidia.com/gpu", (f"{G0.uuid}::0",)),  # G0 time-sliced between A and B
    ContainerDevices(B, "nvidia.com/gpu", (f"{G0.uuid}::3",)),
    ContainerDevices(C, "nvidia.com/gpu", (G1.uuid,)),  # G1 whole to C
    ContainerDevices(C, "nvidia.com/mig-1g.10gb", (MIG.uuid,)),
)


def sample(ident: GpuIdentity, up: bool = True, pod: PodRef | None = None) -> GpuSample:
    return GpuSample(ident, up, fields() if up else {}, pod=pod)


def checkpoint_json(entries: list[dict[str, object]]) -> bytes:
    return json.dumps(
        {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 1}
    ).encode()


CHECKPOINT = checkpoint_json(
    [
        {"PodUID": UID_A, "ContainerName": "vllm", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"0": [f"{G0.uuid}::0"]}, "AllocResp": "CgA="},
        {"PodUID": UID_B, "ContainerName": "vllm", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"-1": [f"{G0.uuid}::3"]}, "AllocResp": "CgA="},
        {"PodUID": UID_C, "ContainerName": "trainer", "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": [G1.uuid], "AllocResp": "CgA="},  # v1 format: a plain list
        {"PodUID": UID_C, "ContainerName": "trainer", "ResourceName": "nvidia.com/mig-1g.10gb",
         "DeviceIDs": {"0": [MIG.uuid]}, "AllocResp": "CgA="},
    ]
)  # fmt: skip


def test_device_key_strips_the_replica_suffix() -> None:
    assert device_key("GPU-abc::7") == "GPU-abc"
    assert device_key("MIG-abc::2") == "MIG-abc"
    assert device_key("GPU-abc") == "GPU-abc"


def test_labels_only_where_one_container_holds_the_device() -> None:
    holders = holders_from(FLEET)
    assert holders.of(G0) == (A, B)
    gpus = (sample(G0), sample(G1), sample(G2, pod=B), sample(MIG))
    out = label_gpus(gpus, holders)
    assert [g.pod for g in out] == [None, C, None, C]  # shared: none; unheld: stale label cleared
    assert out[0] is gpus[0]  # unchanged samples are not copied


def test_one_container_with_several_replicas_is_still_exclusive() -> None:
    holders = holders_from(answer(ContainerDevices(A, "nvidia.com/gpu", (f"{G0.uuid}::0", f"{G0.uuid}::1"))))
    assert holders.single(G0) == A


def test_old_style_mig_ids_match_parent_and_instance() -> None:
    old = f"MIG-{MIG.parent_uuid}/{MIG.mig_instance_id}/0"
    holders = holders_from(answer(ContainerDevices(C, "nvidia.com/mig-1g.10gb", (old,))))
    assert holders.single(MIG) == C
    other = dataclasses.replace(MIG, uuid="MIG-other", mig_instance_id=10)
    assert holders.single(other) is None


def test_checkpoint_formats_and_join() -> None:
    entries = parse_checkpoint(CHECKPOINT)
    assert len(entries) == 4 and entries[2].device_ids == frozenset({G1.uuid})
    assert pods_by_uid(FLEET, uid_index(entries)) == {UID_A: (A,), UID_B: (B,), UID_C: (C,)}


def test_checkpoint_join_needs_the_exact_allocation() -> None:
    index = uid_index(parse_checkpoint(CHECKPOINT))
    moved = answer(ContainerDevices(A, "nvidia.com/gpu", (f"{G0.uuid}::1",)))  # another replica
    assert pods_by_uid(moved, index) == {}


def test_empty_checkpoint() -> None:
    assert parse_checkpoint(b'{"Data":{"PodDeviceEntries":null,"RegisteredDevices":null},"Checksum":1}') == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not JSON"),
        (b'{"Checksum": 1}', "no Data.PodDeviceEntries list"),
        (b'{"Data": {"PodDeviceEntries": 3}}', "no Data.PodDeviceEntries list"),
        (checkpoint_json([{"PodUID": "u", "ContainerName": "c", "ResourceName": "r", "DeviceIDs": 5}]),
         "DeviceIDs is neither"),
    ],
)  # fmt: skip
def test_malformed_checkpoint(data: bytes, message: str) -> None:
    with pytest.raises(CheckpointError, match=message):
        parse_checkpoint(data)


def test_unreadable_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"cannot read .*: No such file"):
        read_checkpoint(tmp_path / "kubelet_internal_checkpoint")


def cgroups(*pids: int) -> dict[int, object]:
    return {pid: read_cgroup(PROC, pid) for pid in pids}


IDENTITIES = {g.uuid: g for g in (G0, G1, G2, MIG)}


def test_processes_on_a_shared_gpu_go_to_their_own_pods() -> None:
    holders = holders_from(FLEET)
    uid_pods = pods_by_uid(FLEET, uid_index(parse_checkpoint(CHECKPOINT)))
    processes = {
        G0.uuid: [RunningProcess(1003, 10), RunningProcess(1004, 20), RunningProcess(1010, 30)],
        G1.uuid: [RunningProcess(1001, 40)],
        G2.uuid: [RunningProcess(1001, 50), RunningProcess(1006, 60)],  # C's process off its GPU; unknown pod
    }
    got = {
        (v.device_uuid, v.pid): (v.pod, v.reason)
        for v in attribute_processes(
            holders, IDENTITIES, processes, cgroups(1001, 1003, 1004, 1006, 1010), uid_pods
        )
    }
    assert got[(G0.uuid, 1003)] == (A, None)
    assert got[(G0.uuid, 1004)] == (B, None)
    assert got[(G0.uuid, 1010)] == (None, "process is not in a pod (or has exited)")
    assert got[(G1.uuid, 1001)] == (C, None)
    assert got[(G2.uuid, 1001)] == (C, None)  # its memory is still its pod's
    assert got[(G2.uuid, 1006)][0] is None and "holds no GPU" in str(got[(G2.uuid, 1006)][1])


def test_without_checkpoint_only_exclusive_devices_attribute() -> None:
    holders = holders_from(FLEET)
    processes = {G0.uuid: [RunningProcess(1003, 10)], G1.uuid: [RunningProcess(1001, 40)]}
    got = {
        v.device_uuid: v
        for v in attribute_processes(holders, IDENTITIES, processes, cgroups(1001, 1003), None)
    }
    assert got[G1.uuid].pod == C
    assert got[G0.uuid].pod is None and "needs the kubelet device-manager checkpoint" in str(
        got[G0.uuid].reason
    )


def test_memory_rows_sum_per_container_with_gpu_and_mig_labels() -> None:
    gpus = (sample(G0), sample(G1, pod=C), sample(G2, up=False), sample(MIG))
    processes = {
        G0.uuid: [RunningProcess(1, 2**30), RunningProcess(2, 2**29), RunningProcess(3, 5)],
        G1.uuid: [RunningProcess(4, 7 * 2**30), RunningProcess(5, None)],  # None: NVML did not say
        G2.uuid: [RunningProcess(6, 99)],  # GPU down: left out
        MIG.uuid: [RunningProcess(7, 3 * 2**30)],
    }
    owners = {(G0.uuid, 1): A, (G0.uuid, 2): A, (G0.uuid, 3): B, (G1.uuid, 4): C, (G1.uuid, 5): C,
              (G2.uuid, 6): C, (MIG.uuid, 7): C}  # fmt: skip
    rows = memory_rows(gpus, processes, owners_from(owners, IDENTITIES))
    summary = [(r.gpu.identity.uuid if r.gpu else None, dict(r.labels)["pod"], r.value) for r in rows]
    assert summary == [
        (G0.uuid, "chat-a", 1.5 * 2**30),
        (G0.uuid, "chat-b", 5.0),
        (G1.uuid, "train", 7.0 * 2**30),
        (MIG.uuid, "train", 3.0 * 2**30),
    ]
    assert all(r.gpu is not None and r.gpu.pod is None for r in rows)  # pod labels come from the row
    assert rows[0].labels == (("pod", "chat-a"), ("namespace", "serving"), ("container", "vllm"))


def test_with_pod_copies_every_field() -> None:
    full = GpuSample(MIG, True, fields(), frozenset({"energy_joules"}), "slow", B, 0x44)
    assert with_pod(full, A) == dataclasses.replace(full, pod=A)
    assert with_pod(full, None) == dataclasses.replace(full, pod=None)
