"""The pod-attribution test rig: a real gRPC fake kubelet on a unix socket, the fixture /proc tree,
a device-manager checkpoint in the kubelet's JSON format, and FakeSource with per-process memory.

The node: GPU 0 time-sliced between serving/chat-a and serving/chat-b, GPU 1 whole to ml/train,
GPU 2 free. Processes: chat-a (fixture pid 1003, 2 GiB) and a host process (pid 1010) on GPU 0,
train (pid 1001, 7 GiB) on GPU 1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fakes import FakeSource
from pods_fake_kubelet import FakeKubelet, short_socket_dir, write_answer
from prometheus_client.parser import text_string_to_metric_families

from exporter.render import Renderer
from exporter.sampler import Sampler
from exporter.sources.pods.attribution import RunningProcess
from exporter.sources.pods.extension import PodAttribution
from exporter.sources.pods.settings import PodSettings

PROC = Path(__file__).parent / "fixtures" / "proc"
UID_A, UID_B, UID_C = (
    "4e074085-62be-4b8b-a0ce-05c1decfe3ad",  # fixture pid 1003
    "4b227777-d4dd-4fc6-ac6f-884f48641d02",  # fixture pid 1004
    "6b86b273-ff34-4ce1-ad6b-804eff5a3f57",  # fixture pid 1001
)
GIB = 2**30


class ProcessSource(FakeSource):
    """FakeSource plus the per-process hook pod attribution reads."""

    def __init__(self, gpus: int) -> None:
        super().__init__(gpus)
        self.processes: dict[str, list[RunningProcess]] = {}

    def running_processes(self) -> dict[str, list[RunningProcess]]:
        return self.processes


def pods_answer(g: list[str]) -> list[dict[str, Any]]:
    """GPU 0 time-sliced between chat-a and chat-b; GPU 1 whole to train; GPU 2 free."""

    def pod(name: str, ns: str, container: str, ids: list[str]) -> dict[str, Any]:
        devices = [{"resource_name": "nvidia.com/gpu", "device_ids": ids}]
        return {"name": name, "namespace": ns, "containers": [{"name": container, "devices": devices}]}

    return [
        pod("chat-a", "serving", "vllm", [f"{g[0]}::0"]),
        pod("chat-b", "serving", "vllm", [f"{g[0]}::1"]),
        pod("train", "ml", "trainer", [g[1]]),
        {"name": "web", "namespace": "default", "containers": [{"name": "nginx"}]},
    ]


def checkpoint(g: list[str]) -> str:
    def entry(uid: str, container: str, ids: list[str]) -> dict[str, Any]:
        return {"PodUID": uid, "ContainerName": container, "ResourceName": "nvidia.com/gpu",
                "DeviceIDs": {"0": ids}, "AllocResp": "CgA="}  # fmt: skip

    entries = [entry(UID_A, "vllm", [f"{g[0]}::0"]), entry(UID_B, "vllm", [f"{g[0]}::1"]),
               entry(UID_C, "trainer", [g[1]])]  # fmt: skip
    return json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 7})


@dataclass
class Rig:
    dir: Path
    socket: Path
    answer: Path
    source: ProcessSource
    uuids: list[str]

    def settings(self, **kw: Any) -> PodSettings:
        base: dict[str, Any] = {
            "enabled": True,
            "socket": str(self.socket),
            "refresh_interval_seconds": 600,
            "timeout_seconds": 0.5,
            "procfs_root": str(PROC),
            "checkpoint": str(self.dir / "kubelet_internal_checkpoint"),
        }
        return PodSettings(**{**base, **kw})


@pytest.fixture
def rig() -> Iterator[Rig]:
    d = short_socket_dir()
    source = ProcessSource(3)
    uuids = [s.identity.uuid for s in source.samples]
    write_answer(d / "answer.json", pods_answer(uuids))
    (d / "kubelet_internal_checkpoint").write_text(checkpoint(uuids))
    source.processes = {
        uuids[0]: [RunningProcess(1003, 2 * GIB), RunningProcess(1010, GIB // 2)],  # chat-a; a host process
        uuids[1]: [RunningProcess(1001, 7 * GIB)],  # train
    }
    yield Rig(d, d / "kubelet.sock", d / "answer.json", source, uuids)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
async def kubelet(rig: Rig) -> AsyncIterator[FakeKubelet]:
    async with FakeKubelet(rig.socket, rig.answer) as k:
        yield k


Series = list[tuple[str, dict[str, str], float]]


def series(sampler: Sampler, name: str | None = None) -> Series:
    assert sampler.current is not None
    text = sampler.current.exposition.text.decode()
    out = [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]
    return [s for s in out if name is None or s[0] == name]


def pods_of(sampler: Sampler, family: str = "DCGM_FI_DEV_GPU_TEMP") -> dict[str, str | None]:
    """gpu index -> "namespace/pod/container" on the family's series (None: no pod labels)."""
    out: dict[str, str | None] = {}
    for _, lbl, _ in series(sampler, family):
        out[lbl["gpu"]] = f"{lbl['namespace']}/{lbl['pod']}/{lbl['container']}" if "pod" in lbl else None
    return out


def pods_success(sampler: Sampler) -> float | None:
    found = [v for _, lbl, v in series(sampler, "rightsizer_collector_success") if lbl["collector"] == "pods"]
    return found[0] if found else None


async def start(rig: Rig, ext: PodAttribution) -> Sampler:
    sampler = Sampler(rig.source, Renderer(), 3600, "node-1", [ext])
    await sampler.start()  # the sampler's own loop waits an hour: the test drives the cycles
    return sampler
