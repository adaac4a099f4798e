"""Pod UID and container id from /proc/<pid>/cgroup, over a fixture /proc tree of every layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.sources.pods.cgroup import CgroupRef, parse_cgroup, parse_cgroup_path, read_cgroup

PROC = Path(__file__).parent / "fixtures" / "proc"

EXPECTED = {
    # v1 cgroupfs, containerd (every hierarchy names the same cgroup; "0::/" on hybrid hosts)
    1001: CgroupRef(
        "6b86b273-ff34-4ce1-ad6b-804eff5a3f57",
        "d0f631ca1ddba8db3bcfcb9e057cdc98d0379f1bee00e75a545147a27dadd982",
        None,
    ),
    # v1 systemd driver, containerd, Guaranteed QoS (no QoS slice)
    1002: CgroupRef(
        "d4735e3a-265e-46ee-a03f-59718b9b5d03",
        "9c0abe51c6e6655d81de2d044d4fb194931f058c0426c67c7285d8f5657ed64a",
        "cri-containerd",
    ),
    # v2 systemd, containerd
    1003: CgroupRef(
        "4e074085-62be-4b8b-a0ce-05c1decfe3ad",
        "7c1c97df17c066924822b0af09a65251554962c61e23329aed04cd19020dc3b8",
        "cri-containerd",
    ),
    # v2 systemd, CRI-O
    1004: CgroupRef(
        "4b227777-d4dd-4fc6-ac6f-884f48641d02",
        "0012a3fa000c5dc26ee658c3c58e12cecd58d6455cec3d5621f0c787675b38aa",
        "crio",
    ),
    # v1 systemd, CRI-O
    1005: CgroupRef(
        "ef2d127d-e37b-442b-aad0-6145e54b0c61",
        "d0bf3e6ee1d668de18c9ca200a4f152062f345283ee68cadfe41204f215d75e9",
        "crio",
    ),
    # v2 cgroupfs
    1006: CgroupRef(
        "e7f6c011-776e-4db7-ad33-0b54174fd76f",
        "6db53c9d5a2ca72a85ddf3a681c0d9567899f4c48632a2e9b0beeba0d6938485",
        None,
    ),
    # v1 systemd, docker through cri-dockerd
    1007: CgroupRef(
        "7902699b-e42c-4a8e-a6fb-bb4501726517",
        "f28d5b0d6f8be0da8446dabe79044cb9ed0ffa3150a003936155409fe778b885",
        "docker",
    ),
    # v2 read from inside another cgroup namespace ("/../..")
    1008: CgroupRef(
        "2c624232-cdd2-4177-a294-dfbb310aca00",
        "7ed6a8377b92b49472195f1201af304341daf4abb3643f837eafb38066111f6d",
        "cri-containerd",
    ),
    # static pod: the UID is the config hash, 32 hex digits without dashes
    1009: CgroupRef(
        "0c4e3b2a1f0d9e8c7b6a5f4e3d2c1b0a",
        "95144b44f2a5ff5aa796af152bc61f599db54b2d1b7ecbc5c593ed4aeb47ba13",
        "cri-containerd",
    ),
    1010: None,  # host process (v2)
    1011: CgroupRef("4fc82b26-aecb-47d2-a68c-4efbe3581732", None, None),  # in the pod's own cgroup
    1012: CgroupRef("6b51d431-df5d-4f14-acbe-ceccf79edf3d", None, None),  # CRI-O's conmon, not a container
    # kind: the kubelet's tree under kubelet.slice
    1013: CgroupRef(
        "3fdba35f-04dc-4c46-a986-c992bcf87554",
        "74dda5282c81de22f5c8cc9e637b115f3666eaf03e57ae606ed60bcf5e5e3e1c",
        "cri-containerd",
    ),
    1014: None,  # host process (v1)
}


@pytest.mark.parametrize("pid", sorted(EXPECTED))
def test_fixture_tree(pid: int) -> None:
    assert read_cgroup(PROC, pid) == EXPECTED[pid]


def test_fixture_tree_is_fully_covered() -> None:
    assert {int(p.name) for p in PROC.iterdir() if p.name.isdigit()} == set(EXPECTED)


def test_exited_process_is_not_an_error(tmp_path: Path) -> None:
    assert read_cgroup(tmp_path, 4242) is None


def test_unreadable_cgroup_file_raises_for_the_caller_to_report(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "cgroup").mkdir()  # a directory where the file should be: read fails
    with pytest.raises(OSError):
        read_cgroup(tmp_path, 77)


def test_unified_line_wins_over_stale_v1_hierarchies() -> None:
    text = (
        "4:memory:/kubepods/besteffort/pod11111111-2222-4333-8444-555555555555/" + "a" * 64 + "\n"
        "0::/kubepods.slice/kubepods-pod66666666_7777_4888_9999_000000000000.slice/crio-"
        + "b" * 64
        + ".scope\n"
    )
    assert parse_cgroup(text) == CgroupRef("66666666-7777-4888-9999-000000000000", "b" * 64, "crio")


def test_container_reference_preferred_over_pod_level_line() -> None:
    text = (
        "3:cpu:/kubepods/pod11111111-2222-4333-8444-555555555555\n"
        "2:memory:/kubepods/pod11111111-2222-4333-8444-555555555555/" + "c" * 64 + "\n"
    )
    ref = parse_cgroup(text)
    assert ref is not None and ref.container_id == "c" * 64


@pytest.mark.parametrize(
    "path",
    [
        "/kubepods/burstable",  # QoS level, no pod
        "/kubepods/podnotauid/" + "a" * 64,  # "pod" followed by something that is not a UID
        "/user.slice/user-1000.slice/user@1000.service/app.slice",
        "/kubepods/burstable/pod11111111-2222-4333-8444-55555555555",  # one digit short
    ],
)
def test_paths_outside_pods(path: str) -> None:
    assert parse_cgroup_path(path) is None


def test_garbage_file_yields_none() -> None:
    assert parse_cgroup("not a cgroup file\n\x00\xff:::\n") is None
