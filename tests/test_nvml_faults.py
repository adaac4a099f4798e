"""The NVML path under faults, end to end through nvidia-ml-py and the C double: a GPU lost at
run time and back, a GPU gone from the bus (re-matched by UUID), NVML itself failing, a hung
call. The exporter keeps running throughout; nothing here restarts it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvmldouble import (
    DRIVER_NOT_LOADED,
    NvmlDouble,
    Sample,
    api_gpus,
    exporter_args,
    families_of,
    gpu_values,
    scrape,
    scrape_until,
    value,
)
from servers import exporter, wait_for

from exporter.metrics import FAMILIES

# The families the GPU source feeds; of these a down GPU keeps only up (0) and info. (Extensions
# such as right-sizing publish their own per-GPU rows, over their own windows.)
SOURCE_FAMILIES = {f.name for f in FAMILIES if f.scope in ("gpu", "gpu_up", "gpu_info", "gpu_clock_events")}
DOWN_FAMILIES = {"rightsizer_gpu_up", "rightsizer_gpu_info"}


def source_families(samples: list[Sample], uuid: str) -> set[str]:
    return families_of(samples, uuid) & SOURCE_FAMILIES


def three_gpus(double: NvmlDouble) -> list[str]:
    double.set({"gpus": 3, **gpu_values(0), **gpu_values(1), **gpu_values(2)})
    return [str(gpu_values(i)[f"gpu.{i}.uuid"]) for i in range(3)]


def up(samples: list[Sample], uuid: str) -> float | None:
    return value(samples, "rightsizer_gpu_up", UUID=uuid)


def test_gpu_lost_at_run_time_is_published_down_then_comes_back(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    uuids = three_gpus(nvml_double)
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        first = scrape(proc.url)
        assert all(up(first, u) == 1 for u in uuids)
        healthy_families = source_families(first, uuids[2])
        assert "DCGM_FI_DEV_POWER_USAGE" in healthy_families

        nvml_double.gpu(2, lost=1)
        lost = scrape_until(proc.url, lambda s: up(s, uuids[2]) == 0, what="GPU 2 down")
        assert source_families(lost, uuids[2]) == DOWN_FAMILIES  # no stale series, but named as down
        labels = next(lbl for n, lbl, _ in lost if n == "rightsizer_gpu_up" and lbl["UUID"] == uuids[2])
        assert labels["gpu"] == "2" and labels["pci_bus_id"] == gpu_values(2)["gpu.2.pci_bus_id"]
        assert up(lost, uuids[0]) == 1 and up(lost, uuids[1]) == 1
        assert source_families(lost, uuids[0]) == source_families(first, uuids[0])
        api = api_gpus(proc.url)
        assert api[uuids[2]]["up"] is False and "GPU is lost" in api[uuids[2]]["error"]
        assert api[uuids[2]]["fields"] == {}
        assert "GPU is lost" in api["collector"]["error"]
        # NVML is shut down and initialised again (more than once: it keeps trying with backoff).
        wait_for(
            lambda: nvml_double.call_count("nvmlInitWithFlags") >= 3, 10, what="repeated re-initialisation"
        )
        assert nvml_double.call_count("nvmlShutdown") >= 2
        assert up(scrape(proc.url), uuids[2]) == 0

        nvml_double.gpu(2, lost=None, power_mw=99_000)
        back = scrape_until(proc.url, lambda s: up(s, uuids[2]) == 1, what="GPU 2 back")
        assert source_families(back, uuids[2]) == healthy_families
        assert value(back, "DCGM_FI_DEV_POWER_USAGE", UUID=uuids[2]) == 99
        assert value(back, "rightsizer_collector_success", collector="nvml") == 1
        assert proc.proc.poll() is None  # never restarted
        assert "NVML re-initialised" in proc.log()


def test_gpu_gone_from_the_bus_is_rematched_by_uuid(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    uuids = three_gpus(nvml_double)
    power = [float(gpu_values(i)[f"gpu.{i}.power_mw"]) / 1000 for i in range(3)]
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        nvml_double.gpu(0, present=0)  # enumeration now lists slots 1 and 2 as indices 0 and 1

        s = scrape_until(
            proc.url,
            lambda s: value(s, "rightsizer_gpu_up", UUID=uuids[1], gpu="0") == 1 and up(s, uuids[0]) == 0,
            what="GPUs re-matched by UUID after re-enumeration",
        )
        # Each GPU's values stay with its UUID whatever index it has now.
        assert value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=uuids[1], gpu="0") == pytest.approx(power[1])
        assert value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=uuids[2], gpu="1") == pytest.approx(power[2])
        assert source_families(s, uuids[0]) == DOWN_FAMILIES
        assert api_gpus(proc.url)[uuids[0]]["up"] is False

        nvml_double.gpu(0, present=None)
        s = scrape_until(proc.url, lambda s: up(s, uuids[0]) == 1, what="GPU 0 back")
        for i, uuid in enumerate(uuids):
            assert value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid, gpu=str(i)) == pytest.approx(power[i])


def test_nvml_failing_at_run_time_takes_every_gpu_down_until_it_initialises(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    uuids = three_gpus(nvml_double)
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        assert all(up(scrape(proc.url), u) == 1 for u in uuids)
        # The driver goes away: calls and nvmlInit answer DRIVER_NOT_LOADED.
        nvml_double.set(
            {
                "error.nvmlDeviceGetUtilizationRates": DRIVER_NOT_LOADED,
                "error.nvmlInitWithFlags": DRIVER_NOT_LOADED,
            }
        )
        s = scrape_until(proc.url, lambda s: all(up(s, u) == 0 for u in uuids), what="every GPU down")
        assert value(s, "rightsizer_collector_success", collector="nvml") == 0
        wait_for(
            lambda: (
                "re-initialisation failed: Driver Not Loaded"
                in (api_gpus(proc.url)["collector"]["error"] or "")
            ),
            10,
            what="the collector error to say why",
        )
        assert all(source_families(s, u) == DOWN_FAMILIES for u in uuids)

        nvml_double.set({"error.nvmlDeviceGetUtilizationRates": None, "error.nvmlInitWithFlags": None})
        s = scrape_until(proc.url, lambda s: all(up(s, u) == 1 for u in uuids), what="every GPU back")
        assert all("DCGM_FI_DEV_GPU_UTIL" in source_families(s, u) for u in uuids)


def test_hung_call_marks_only_that_gpu_down_and_it_returns(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    uuids = three_gpus(nvml_double)
    with exporter(exporter_args(tmp_path, call_timeout_seconds=0.3), env=nvml_double.env()) as proc:
        nvml_double.gpu(0, hang__nvmlDeviceGetPowerUsage=1)
        s = scrape_until(proc.url, lambda s: up(s, uuids[0]) == 0, what="GPU 0 hung")
        assert source_families(s, uuids[0]) == DOWN_FAMILIES
        api = api_gpus(proc.url)
        assert "GPU is hung: nvmlDeviceGetPowerUsage has not returned" in api[uuids[0]]["error"]

        # The other GPUs keep updating while GPU 0's call hangs, and /metrics keeps answering.
        nvml_double.gpu(1, temp__gpu=77)
        nvml_double.gpu(2, temp__gpu=78)
        s = scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_DEV_GPU_TEMP", UUID=uuids[2]) == 78,
            what="the other GPUs to update",
        )
        assert value(s, "DCGM_FI_DEV_GPU_TEMP", UUID=uuids[1]) == 77
        assert up(s, uuids[0]) == 0
        # The hung GPU's worker gets no new work while its call hangs.
        hung_calls = nvml_double.call_count("nvmlDeviceGetUtilizationRates", 0)
        others = nvml_double.call_count("nvmlDeviceGetUtilizationRates", 1)
        wait_for(
            lambda: nvml_double.call_count("nvmlDeviceGetUtilizationRates", 1) >= others + 5,
            10,
            what="5 more cycles",
        )
        assert nvml_double.call_count("nvmlDeviceGetUtilizationRates", 0) == hung_calls
        assert nvml_double.call_count("nvmlDeviceGetPowerUsage", 0) == hung_calls  # the one that hangs

        nvml_double.gpu(0, hang__nvmlDeviceGetPowerUsage=None)
        s = scrape_until(proc.url, lambda s: up(s, uuids[0]) == 1, what="GPU 0 back")
        assert "DCGM_FI_DEV_POWER_USAGE" in source_families(s, uuids[0])
        assert 'msg="GPU back"' in proc.log()


def test_stop_returns_while_a_call_is_hung(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    uuids = three_gpus(nvml_double)
    with exporter(exporter_args(tmp_path, call_timeout_seconds=0.3), env=nvml_double.env()) as proc:
        nvml_double.gpu(1, hang__nvmlDeviceGetTemperatureV=1)
        wait_for(lambda: up(scrape(proc.url), uuids[1]) == 0, 10, what="GPU 1 hung")
        code = proc.stop()  # SIGTERM; Process.stop kills (-9) if the exporter does not exit by itself
        assert code == 0, proc.log()
        assert "msg=stopping" in proc.log()


def test_gpu_lost_before_start_is_reported_and_found_when_it_answers(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    uuids = three_gpus(nvml_double)
    nvml_double.gpu(1, lost=1)  # NVML counts it but cannot give a handle: its UUID is unknown
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        s = scrape(proc.url)
        assert up(s, uuids[0]) == 1 and up(s, uuids[2]) == 1
        assert up(s, uuids[1]) is None
        assert value(s, "rightsizer_collector_success", collector="nvml") == 0
        assert "GPU index 1: GPU is lost" in api_gpus(proc.url)["collector"]["error"]

        nvml_double.gpu(1, lost=None)
        s = scrape_until(proc.url, lambda s: up(s, uuids[1]) == 1, what="GPU 1 found")
        assert value(s, "DCGM_FI_DEV_GPU_TEMP", UUID=uuids[1]) == gpu_values(1)["gpu.1.temp.gpu"]
        assert value(s, "rightsizer_collector_success", collector="nvml") == 1
        assert proc.log().count("GPU did not answer enumeration") == 1  # not once per retry
