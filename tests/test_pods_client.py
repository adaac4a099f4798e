"""The pod-resources client against a fake kubelet speaking the real v1 gRPC API on a unix socket."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pods_fake_kubelet import FakeKubelet, set_mode, short_socket_dir, write_answer

from exporter.sources.pods.client import (
    ContainerDevices,
    KubeletAnswer,
    PodResourcesClient,
    PodResourcesError,
)
from rightsizer_core.snapshot import PodRef

GPUS = frozenset({"nvidia.com/gpu", "nvidia.com/gpu.shared"})

PODS = [
    {
        "name": "train-0",
        "namespace": "ml",
        "containers": [
            {
                "name": "trainer",
                "devices": [
                    {"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-aaaa"]},
                    {"resource_name": "example.com/nic", "device_ids": ["nic0"]},
                ],
            },
            {"name": "sidecar"},
        ],
    },
    {
        "name": "infer-1",
        "namespace": "serving",
        "containers": [
            {
                "name": "vllm",
                "devices": [
                    {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": ["MIG-1111"], "topology": {}},
                    {"resource_name": "nvidia.com/gpu.shared", "device_ids": ["GPU-bbbb::2"]},
                ],
                "cpu_ids": [3, 4],
            }
        ],
    },
    {"name": "web", "namespace": "default", "containers": [{"name": "nginx"}]},
]


async def list_pod_resources(socket: str, timeout: float, resources: frozenset[str]) -> KubeletAnswer:
    async with PodResourcesClient(socket, 16 * 2**20, 5000) as client:
        return await client.list(timeout, resources)


@pytest.fixture
def where() -> Iterator[tuple[Path, Path]]:
    d = short_socket_dir()
    answer = d / "answer.json"
    write_answer(answer, PODS)
    yield d / "kubelet.sock", answer
    shutil.rmtree(d, ignore_errors=True)


async def test_list_returns_gpu_allocations(where: tuple[Path, Path]) -> None:
    sock, answer = where
    async with FakeKubelet(sock, answer) as kubelet:
        got = await list_pod_resources(str(sock), 2.0, GPUS)
    assert kubelet.lister.calls == 1
    assert got.pods == 3
    assert got.skipped == ()
    assert got.devices == (
        ContainerDevices(PodRef("train-0", "ml", "trainer"), "nvidia.com/gpu", ("GPU-aaaa",)),
        ContainerDevices(PodRef("infer-1", "serving", "vllm"), "nvidia.com/mig-1g.10gb", ("MIG-1111",)),
        ContainerDevices(PodRef("infer-1", "serving", "vllm"), "nvidia.com/gpu.shared", ("GPU-bbbb::2",)),
    )


async def test_resource_filter_is_configurable(where: tuple[Path, Path]) -> None:
    sock, answer = where
    async with FakeKubelet(sock, answer):
        got = await list_pod_resources(str(sock), 2.0, frozenset({"nvidia.com/gpu"}))
    # gpu.shared is not asked for; MIG resources always are
    assert [d.resource for d in got.devices] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]


async def test_missing_socket(where: tuple[Path, Path]) -> None:
    sock, _ = where
    with pytest.raises(PodResourcesError, match=r"kubelet.sock does not exist$"):
        await list_pod_resources(str(sock), 2.0, GPUS)


async def test_path_that_is_not_a_socket(where: tuple[Path, Path]) -> None:
    _, answer = where
    with pytest.raises(PodResourcesError, match="is not a unix socket"):
        await list_pod_resources(str(answer), 2.0, GPUS)


async def test_socket_nobody_listens_on(where: tuple[Path, Path]) -> None:
    sock, _ = where
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sock))  # bound, never listening: what a dead kubelet leaves behind
    try:
        with pytest.raises(PodResourcesError, match="refuses connections"):
            await list_pod_resources(str(sock), 2.0, GPUS)
    finally:
        s.close()


async def test_hung_kubelet_hits_the_deadline(where: tuple[Path, Path]) -> None:
    sock, answer = where
    set_mode(answer, "hang")
    async with FakeKubelet(sock, answer) as kubelet:
        started = time.monotonic()
        with pytest.raises(PodResourcesError, match=r"did not answer within 0.3s"):
            await list_pod_resources(str(sock), 0.3, GPUS)
        elapsed = time.monotonic() - started
    assert kubelet.lister.calls == 1
    assert elapsed < 30  # ended by the deadline, not by the hour-long hang


async def test_malformed_answer(where: tuple[Path, Path]) -> None:
    sock, answer = where
    set_mode(answer, "garbage")
    async with FakeKubelet(sock, answer):
        with pytest.raises(PodResourcesError) as exc:
            await list_pod_resources(str(sock), 2.0, GPUS)
    assert "malformed answer" in str(exc.value)
    assert "\n" not in str(exc.value)


async def test_kubelet_without_v1(where: tuple[Path, Path]) -> None:
    sock, answer = where
    set_mode(answer, "unimplemented")
    async with FakeKubelet(sock, answer):
        with pytest.raises(PodResourcesError, match="does not serve pod-resources v1 List"):
            await list_pod_resources(str(sock), 2.0, GPUS)


async def test_incomplete_entries_are_skipped_with_a_reason(where: tuple[Path, Path]) -> None:
    sock, answer = where
    write_answer(
        answer,
        [
            {
                "name": "",
                "namespace": "ml",
                "containers": [
                    {"name": "c", "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-1"]}]}
                ],
            },
            {
                "name": "p",
                "namespace": "ml",
                "containers": [
                    {"name": "c", "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": []}]}
                ],
            },
            {
                "name": "ok",
                "namespace": "ml",
                "containers": [
                    {
                        "name": "c",
                        "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-2", ""]}],
                    }
                ],
            },
        ],
    )
    async with FakeKubelet(sock, answer):
        got = await list_pod_resources(str(sock), 2.0, GPUS)
    assert got.devices == (ContainerDevices(PodRef("ok", "ml", "c"), "nvidia.com/gpu", ("GPU-2",)),)
    assert got.skipped == (
        "ml/?/c: pod, namespace or container name is empty",
        "ml/p/c: nvidia.com/gpu lists no device ids",
    )


async def test_one_client_follows_a_kubelet_restart(where: tuple[Path, Path]) -> None:
    sock, answer = where
    async with PodResourcesClient(str(sock), 16 * 2**20, 5000) as client:
        async with FakeKubelet(sock, answer):
            assert (await client.list(2.0, GPUS)).pods == 3
        with pytest.raises(PodResourcesError, match="does not exist"):
            await client.list(2.0, GPUS)
        write_answer(answer, PODS[:1])
        async with FakeKubelet(sock, answer):  # a new socket at the same path
            deadline = time.monotonic() + 10
            while True:
                try:
                    got = await client.list(2.0, GPUS)
                    break
                except PodResourcesError:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            assert got.pods == 1
