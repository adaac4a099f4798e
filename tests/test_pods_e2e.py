"""Pod attribution end to end: the exporter as a real subprocess on NVML (nvidia-ml-py against the
C double), a fake kubelet in its own process on a unix socket. Labels and per-pod memory through
the real NVML path; the kubelet is killed mid-run and comes back while a scraper keeps scraping."""

from __future__ import annotations

import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from nvmldouble import NvmlDouble, Sample, gpu_values, scrape, scrape_until, value
from pods_fake_kubelet import kubelet_process, short_socket_dir, write_answer
from pods_rig import checkpoint, pods_answer
from servers import exporter

PROC = Path(__file__).parent / "fixtures" / "proc"
GIB = 2**30


@pytest.fixture
def node(nvml_double: NvmlDouble) -> Iterator[tuple[Path, list[str], NvmlDouble]]:
    """Three GPUs on the double; the kubelet's answer and checkpoint for them in a short dir."""
    nvml_double.set({"gpus": 3, **gpu_values(0), **gpu_values(1), **gpu_values(2)})
    uuids = [str(gpu_values(i)[f"gpu.{i}.uuid"]) for i in range(3)]
    nvml_double.gpu(0, processes=f"1003:{2 * GIB},1004:{GIB},1010:{GIB // 2}")  # chat-a, chat-b, host
    nvml_double.gpu(1, processes=f"1001:{7 * GIB}")  # train
    nvml_double.gpu(2, processes="")
    d = short_socket_dir()
    write_answer(d / "answer.json", pods_answer(uuids))
    (d / "kubelet_internal_checkpoint").write_text(checkpoint(uuids))
    yield d, uuids, nvml_double
    shutil.rmtree(d, ignore_errors=True)


def config(d: Path) -> list[str]:
    path = d / "exporter.yaml"
    settings = {
        "interval": 0.2,
        "nvml": {"call_timeout_seconds": 0.5, "slow_interval_seconds": 1, "init_timeout_seconds": 5},
        "pods": {
            "enabled": True,
            "socket": str(d / "kubelet.sock"),
            "refresh_interval_seconds": 1,
            "timeout_seconds": 0.5,
            "keep_last_seconds": 0,
            "procfs_root": str(PROC),
            "checkpoint": str(d / "kubelet_internal_checkpoint"),
        },
    }
    path.write_text(yaml.safe_dump(settings))
    return ["--config", str(path)]


def pod_of(samples: list[Sample], gpu: str) -> str | None:
    lbl = next(lbl for n, lbl, _ in samples if n == "DCGM_FI_DEV_GPU_TEMP" and lbl["gpu"] == gpu)
    return f"{lbl['namespace']}/{lbl['pod']}/{lbl['container']}" if "pod" in lbl else None


def pods_ok(samples: list[Sample]) -> float | None:
    return value(samples, "rightsizer_collector_success", collector="pods")


def test_kubelet_killed_mid_run_scrape_undisturbed_then_recovery(
    node: tuple[Path, list[str], NvmlDouble],
) -> None:
    d, uuids, double = node
    with (
        kubelet_process(d / "kubelet.sock", d / "answer.json") as kubelet,
        exporter(config(d), env=double.env()) as proc,
    ):
        s = scrape_until(proc.url, lambda s: pods_ok(s) == 1, what="pods collector up")
        assert [pod_of(s, g) for g in "012"] == [None, "ml/train/trainer", None]
        assert (
            value(s, "DCGM_FI_DEV_FB_USED", gpu="1", pod="train", namespace="ml", container="trainer")
            == 11 * 1024
        )

        kubelet.send_signal(signal.SIGKILL)
        kubelet.wait(10)
        down = scrape_until(proc.url, lambda s: pods_ok(s) == 0, what="pods collector down")
        assert [pod_of(down, g) for g in "012"] == [None, None, None]  # keep_last_seconds: 0
        for _ in range(10):  # the scrape is undisturbed while the kubelet is gone
            s = scrape(proc.url)
            assert len([1 for n, _, _ in s if n == "DCGM_FI_DEV_POWER_USAGE"]) == 3
            assert all(value(s, "rightsizer_gpu_up", UUID=u) == 1 for u in uuids)

        with kubelet_process(d / "kubelet.sock", d / "answer.json"):
            back = scrape_until(proc.url, lambda s: pods_ok(s) == 1, what="pods collector back")
            assert pod_of(back, "1") == "ml/train/trainer"
        log = proc.log()
    assert log.count('msg="pod attribution off"') == 1
    assert log.count('msg="pod attribution on"') == 2
    assert "Traceback" not in log


def test_per_pod_memory_through_nvml(node: tuple[Path, list[str], NvmlDouble]) -> None:
    d, _, double = node
    with (
        kubelet_process(d / "kubelet.sock", d / "answer.json"),
        exporter(config(d), env=double.env()) as proc,
    ):

        def memory(s: list[Sample]) -> dict[tuple[str, str], float]:
            rows = [(lbl, v) for n, lbl, v in s if n == "rightsizer_pod_gpu_memory_used_bytes"]
            return {(lbl["gpu"], lbl["pod"]): v for lbl, v in rows}

        s = scrape_until(proc.url, lambda s: len(memory(s)) == 3, what="per-pod memory")
        assert memory(s) == {("0", "chat-a"): 2 * GIB, ("0", "chat-b"): GIB, ("1", "train"): 7 * GIB}
