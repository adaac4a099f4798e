"""Pod attribution inside the sampler: labels, per-pod memory, refresh cadence (rig: ``pods_rig``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pods_rig
from pods_fake_kubelet import FakeKubelet, write_answer
from pods_rig import GIB, Rig, pods_answer, pods_of, pods_success, series, start

from exporter.sources.pods.attribution import RunningProcess
from exporter.sources.pods.extension import PodAttribution

# The rig's fixtures, used by name.
rig, kubelet = pods_rig.rig, pods_rig.kubelet


async def test_exclusive_gpu_carries_pod_labels_shared_and_free_do_not(
    rig: Rig, kubelet: FakeKubelet
) -> None:
    sampler = await start(rig, PodAttribution(rig.settings(), rig.source.running_processes))
    try:
        assert pods_of(sampler) == {"0": None, "1": "ml/train/trainer", "2": None}
        assert pods_success(sampler) == 1
        labels = next(lbl for _, lbl, _ in series(sampler, "DCGM_FI_DEV_FB_USED") if lbl["gpu"] == "1")
        assert list(labels)[-3:] == ["pod", "namespace", "container"]  # dcgm-exporter's order, last
    finally:
        await sampler.stop()


async def test_per_pod_memory_on_a_shared_gpu(rig: Rig, kubelet: FakeKubelet) -> None:
    rig.source.processes[rig.uuids[0]].append(RunningProcess(1004, GIB))  # chat-b, CRI-O layout
    sampler = await start(rig, PodAttribution(rig.settings(), rig.source.running_processes))
    try:
        got = {
            (lbl["gpu"], lbl["UUID"], lbl["namespace"], lbl["pod"], lbl["container"]): v
            for _, lbl, v in series(sampler, "rightsizer_pod_gpu_memory_used_bytes")
        }
        g = rig.uuids
        assert got == {
            ("0", g[0], "serving", "chat-a", "vllm"): 2 * GIB,
            ("0", g[0], "serving", "chat-b", "vllm"): GIB,
            ("1", g[1], "ml", "train", "trainer"): 7 * GIB,
        }
        order = [
            (lbl["gpu"], lbl["pod"]) for _, lbl, _ in series(sampler, "rightsizer_pod_gpu_memory_used_bytes")
        ]
        assert order == [
            ("0", "chat-a"),
            ("0", "chat-b"),
            ("1", "train"),
        ]  # GPU order from the first cycle on
        api: Any = sampler.current.snapshot.api["pods"]  # type: ignore[union-attr]
        host = next(p for p in api["processes"] if p["pid"] == 1010)
        assert host["owner"] is None and "not in a pod" in host["reason"]
        # memory follows the source every cycle, from the cached attribution
        rig.source.processes[rig.uuids[1]] = [RunningProcess(1001, 9 * GIB)]
        await sampler.cycle()
        assert [
            v for _, lbl, v in series(sampler, "rightsizer_pod_gpu_memory_used_bytes") if lbl["gpu"] == "1"
        ] == [9 * GIB]
    finally:
        await sampler.stop()


async def test_without_checkpoint_shared_gpu_memory_is_left_unattributed(
    rig: Rig, kubelet: FakeKubelet
) -> None:
    sampler = await start(rig, PodAttribution(rig.settings(checkpoint=""), rig.source.running_processes))
    try:
        rows = series(sampler, "rightsizer_pod_gpu_memory_used_bytes")
        assert [(lbl["gpu"], lbl["pod"]) for _, lbl, _ in rows] == [("1", "train")]
        assert pods_success(sampler) == 1  # the kubelet answered: attribution itself is fine
    finally:
        await sampler.stop()


async def test_a_new_process_is_attributed_before_the_next_full_interval(
    rig: Rig, kubelet: FakeKubelet
) -> None:
    sampler = await start(rig, PodAttribution(rig.settings(), rig.source.running_processes))
    try:
        calls = kubelet.lister.calls
        rig.source.processes[rig.uuids[0]].append(RunningProcess(1004, GIB))
        for _ in range(100):  # refresh interval is 600 s; the new PID wakes it within ~1 s
            await sampler.cycle()
            if any(
                lbl["pod"] == "chat-b"
                for _, lbl, _ in series(sampler, "rightsizer_pod_gpu_memory_used_bytes")
            ):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("chat-b's process was never attributed")
        assert kubelet.lister.calls == calls + 1
    finally:
        await sampler.stop()


async def test_background_refresh_follows_the_kubelet(rig: Rig, kubelet: FakeKubelet) -> None:
    ext = PodAttribution(rig.settings(refresh_interval_seconds=1), rig.source.running_processes)
    sampler = await start(rig, ext)
    try:
        pods = pods_answer(rig.uuids)
        pods[2]["containers"][0]["devices"][0]["device_ids"] = [rig.uuids[2]]  # train moves to GPU 2
        write_answer(rig.answer, pods)
        for _ in range(100):
            await sampler.cycle()
            if pods_of(sampler) == {"0": None, "1": None, "2": "ml/train/trainer"}:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"labels never followed the kubelet: {pods_of(sampler)}")
    finally:
        await sampler.stop()
