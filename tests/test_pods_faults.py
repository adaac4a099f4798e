"""Pod attribution under faults: everything else is served, the pods collector says why, one log
line per change, recovery when the kubelet is back; scrapes never reach the kubelet; config."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pods_rig
import pytest
from aiohttp.test_utils import TestClient
from pods_fake_kubelet import FakeKubelet, set_mode
from pods_rig import Rig, pods_of, pods_success, series, start

from exporter.cli import make_extensions
from exporter.config import load_config
from exporter.server import create_app
from exporter.sources.pods.extension import PodAttribution
from rightsizer_core.settings import ConfigError

rig, kubelet = pods_rig.rig, pods_rig.kubelet

ALL_FREE = {"0": None, "1": None, "2": None}


def pods_api(sampler: Any) -> dict[str, Any]:
    return sampler.current.snapshot.api["pods"]  # type: ignore[no-any-return]


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "rightsizer.pods"]


async def test_missing_socket_serves_everything_else(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ext = PodAttribution(rig.settings(), rig.source.running_processes)
    sampler = await start(rig, ext)
    try:
        for _ in range(3):
            await ext.refresh()
        await sampler.cycle()
        assert pods_of(sampler) == ALL_FREE  # every GPU series is there, without pod labels
        assert series(sampler, "rightsizer_pod_gpu_memory_used_bytes") == []
        assert pods_success(sampler) == 0
        assert "kubelet.sock does not exist" in pods_api(sampler)["error"]
        assert messages(caplog) == ["pod attribution off"]  # once, not once per refresh
    finally:
        await sampler.stop()


@pytest.mark.parametrize(
    ("mode", "error"), [("hang", "did not answer within 0.3s"), ("garbage", "malformed")]
)
async def test_hung_or_malformed_kubelet(rig: Rig, kubelet: FakeKubelet, mode: str, error: str) -> None:
    set_mode(rig.answer, mode)
    sampler = await start(
        rig, PodAttribution(rig.settings(timeout_seconds=0.3), rig.source.running_processes)
    )
    try:
        assert pods_of(sampler) == ALL_FREE
        assert pods_success(sampler) == 0
        assert error in pods_api(sampler)["error"]
        assert len(series(sampler, "DCGM_FI_DEV_POWER_USAGE")) == 3
    finally:
        await sampler.stop()


async def test_kubelet_gone_then_back(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ext = PodAttribution(rig.settings(keep_last_seconds=0), rig.source.running_processes)
    async with FakeKubelet(rig.socket, rig.answer):
        sampler = await start(rig, ext)
    try:
        assert pods_of(sampler)["1"] == "ml/train/trainer"
        for _ in range(2):  # the kubelet is gone
            await ext.refresh()
            await sampler.cycle()
        assert pods_of(sampler) == ALL_FREE and pods_success(sampler) == 0
        assert series(sampler, "rightsizer_pod_gpu_memory_used_bytes") == []
        assert messages(caplog) == ["pod attribution on", "pod attribution off"]  # once while gone
        async with FakeKubelet(rig.socket, rig.answer):
            for _ in range(50):  # the next refresh reaches the new kubelet
                await ext.refresh()
                await sampler.cycle()
                if pods_success(sampler) == 1:
                    break
                await asyncio.sleep(0.1)
            assert pods_of(sampler)["1"] == "ml/train/trainer" and pods_success(sampler) == 1
            memory = series(sampler, "rightsizer_pod_gpu_memory_used_bytes")
            assert sorted(lbl["pod"] for _, lbl, _ in memory) == ["chat-a", "train"]
        logged = messages(caplog)
        assert logged[0] == logged[-1] == "pod attribution on" and logged.count("pod attribution on") == 2
    finally:
        await sampler.stop()


async def test_last_answer_is_kept_for_a_while(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    ext = PodAttribution(rig.settings(keep_last_seconds=60), rig.source.running_processes)
    async with FakeKubelet(rig.socket, rig.answer):
        sampler = await start(rig, ext)
    try:
        await ext.refresh()
        await ext.refresh()
        await sampler.cycle()
        assert pods_of(sampler)["1"] == "ml/train/trainer"  # labels kept: no series churn
        assert pods_success(sampler) == 0  # but the failure is visible
        assert pods_api(sampler)["phase"] == "keeping"
        assert messages(caplog) == [
            "pod attribution on",
            "kubelet pod-resources failing; labelling with its last answer",
        ]
    finally:
        await sampler.stop()


async def test_scrapes_never_reach_the_kubelet(rig: Rig, kubelet: FakeKubelet, aiohttp_client: Any) -> None:
    sampler = await start(rig, PodAttribution(rig.settings(), rig.source.running_processes))
    try:
        client: TestClient[Any, Any] = await aiohttp_client(create_app(sampler))
        calls = kubelet.lister.calls
        for _ in range(30):
            resp = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
            assert resp.status == 200 and 'pod="train"' in await resp.text()
        resp = await client.get("/api/v1/pods")
        doc = await resp.json()
        assert doc["pods"]["ok"] is True and doc["pods"]["devices"][rig.uuids[1]]["labelled"] is True
        assert kubelet.lister.calls == calls
    finally:
        await sampler.stop()


def config(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "rightsizer.yaml"
    path.write_text(text)
    return load_config(str(path), {}, environ={})


def test_auto_turns_attribution_on_only_where_the_socket_exists(rig: Rig, tmp_path: Path) -> None:
    def names(text: str) -> list[str]:
        extensions = make_extensions(config(tmp_path, text), rig.source)
        return [e.name for e in extensions if e.name == "pods"]

    assert config(tmp_path, "").pods.enabled == "auto"
    assert names(f"pods:\n  socket: {rig.socket}\n") == []  # auto, no socket: no pods collector at all
    assert names(f"pods:\n  enabled: true\n  socket: {rig.socket}\n") == ["pods"]
    rig.socket.write_text("")  # exists (make_extensions only looks; the client checks it is a socket)
    assert names(f"pods:\n  socket: {rig.socket}\n") == ["pods"]
    assert names(f"pods:\n  enabled: false\n  socket: {rig.socket}\n") == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pods:\n  enabled: maybe\n", "pods.enabled: must be true or false; got 'maybe'"),
        ("pods:\n  sokcet: /x\n", "pods: unknown key 'sokcet'"),
        ("pods:\n  refresh_interval_seconds: 0.1\n", "pods.refresh_interval_seconds: must be at least 1"),
        ("pods:\n  timeout_seconds: 5\n  refresh_interval_seconds: 5\n", "must be shorter than"),
        ("pods:\n  resource_names: nvidia.com/gpu\n", "pods.resource_names: must be a list"),
    ],
)
def test_bad_pods_config(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        config(tmp_path, text)
