"""Pod attribution end to end on the simulated fleet: ``rightsizer-exporter --simulate`` as a real
subprocess, its config pointing at a fake kubelet process. With attribution on, the kubelet's
answer decides the labels (replacing the scenario's own ``pod:`` entries); with it off (kubelet
gone), the scenario's labels are what the source says."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from nvmldouble import Sample, scrape_until, value
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer
from servers import exporter, http_get


@pytest.fixture
def where() -> Iterator[Path]:
    d = short_socket_dir()
    write_answer(d / "answer.json", [])
    (d / "exporter.yaml").write_text(
        yaml.safe_dump(
            {
                "interval": 0.2,
                "pods": {
                    "enabled": True,
                    "socket": str(d / "kubelet.sock"),
                    "refresh_interval_seconds": 1,
                    "timeout_seconds": 0.5,
                    "keep_last_seconds": 0,
                },
            }
        )
    )
    yield d
    shutil.rmtree(d, ignore_errors=True)


def pods(samples: list[Sample]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for n, lbl, _ in samples:
        if n == "DCGM_FI_DEV_GPU_TEMP":
            out[lbl["gpu"]] = f"{lbl['namespace']}/{lbl['pod']}/{lbl['container']}" if "pod" in lbl else None
    return out


def pods_ok(samples: list[Sample]) -> float | None:
    return value(samples, "rightsizer_collector_success", collector="pods")


def test_kubelet_labels_the_simulated_fleet(where: Path) -> None:
    def pod(name: str, ids: list[str]) -> dict[str, object]:
        devices = [{"resource_name": "nvidia.com/gpu", "device_ids": ids}]
        return {"name": name, "namespace": "team", "containers": [{"name": "c", "devices": devices}]}

    with (
        kubelet_process(where / "kubelet.sock", where / "answer.json") as kubelet,
        exporter(["--simulate", "default", "--config", str(where / "exporter.yaml")]) as proc,
    ):
        first = scrape_until(proc.url, lambda s: pods_ok(s) == 1, what="pods collector up")
        assert set(pods(first).values()) == {None}  # nobody holds a GPU in the kubelet's answer
        uuids = [g["uuid"] for g in json.loads(http_get(proc.url + "/api/v1/gpus")[2])["gpus"]]

        write_answer(
            where / "answer.json",
            [pod("solo", [uuids[0]]), pod("share-a", [f"{uuids[1]}::0"]), pod("share-b", [f"{uuids[1]}::1"])],
        )
        s = scrape_until(proc.url, lambda s: pods(s).get("0") == "team/solo/c", what="the kubelet's labels")
        assert pods(s)["1"] is None  # time-sliced between two pods: no pod labels on its series
        assert all(p is None for gpu, p in pods(s).items() if gpu not in ("0",))

        kubelet.send_signal(signal.SIGKILL)
        kubelet.wait(10)
        off = scrape_until(proc.url, lambda s: pods_ok(s) == 0, what="pods collector down")
        assert pods(off)["0"] == "llm/chat-legacy-7d9f8-gbcdm/vllm"  # the scenario's own pod again
        assert len(pods(off)) == 8
