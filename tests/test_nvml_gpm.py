"""GPM profiling ratios end to end: the exporter as a subprocess, nvidia-ml-py, the C double of
libnvidia-ml.so.1 (whose nvmlGpmMetricsGet refuses samples less than 100 ms apart). Published
values equal what the double's GPM reports, converted per PROTOCOLS §3; a GPU without GPM leaves
those series out and /api/v1/gpus says why; per-metric and per-call faults."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from nvmldouble import (
    NOT_SUPPORTED,
    UNKNOWN,
    NvmlDouble,
    Sample,
    api_gpus,
    exporter_args,
    gpu_values,
    scrape,
    scrape_until,
    value,
)
from servers import exporter, wait_for

from exporter.sources.nvml.gpm import GPM_FIELDS, GPM_METRICS, _request

MIB = 1_048_576
# GPM metric id -> (value in GPM's unit, published family, divisor or multiplier to DCGM's unit).
GPM = {
    1: (45.5, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    2: (37.25, "DCGM_FI_PROF_SM_ACTIVE"),
    3: (12.5, "DCGM_FI_PROF_SM_OCCUPANCY"),
    5: (8.75, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    10: (61.0, "DCGM_FI_PROF_DRAM_ACTIVE"),
    20: (1234.5, "DCGM_FI_PROF_PCIE_TX_BYTES"),
    21: (2345.25, "DCGM_FI_PROF_PCIE_RX_BYTES"),
    60: (40960.0, "rightsizer_gpu_nvlink_rx_bytes_per_second"),
    61: (20480.5, "rightsizer_gpu_nvlink_tx_bytes_per_second"),
}
PERCENT_IDS = {1, 2, 3, 5, 10}
PROF_RATIOS = {GPM[i][1] for i in PERCENT_IDS}


def published(metric_id: int, gpm_value: float) -> float:
    """PROTOCOLS §3: percent / 100 gives DCGM's ratios; MiB/s x 1,048,576 gives bytes/s."""
    return gpm_value / 100 if metric_id in PERCENT_IDS else gpm_value * MIB


def gpm_gpu(slot: int, scale: float = 1.0) -> dict[str, str | int | float]:
    values: dict[str, str | int | float] = {f"gpu.{slot}.gpm.supported": 1}
    values.update({f"gpu.{slot}.gpm.{i}": v * scale for i, (v, _) in GPM.items()})
    return values


def test_gpm_values_published_equal_the_double_converted(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 2, **gpu_values(0), **gpu_values(1), **gpm_gpu(0)})
    uuid0, uuid1 = str(gpu_values(0)["gpu.0.uuid"]), str(gpu_values(1)["gpu.1.uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid0) is not None,
            what="GPM ratios of GPU 0",
        )
        for metric_id, (gpm_value, family) in GPM.items():
            assert value(samples, family, UUID=uuid0) == pytest.approx(
                published(metric_id, gpm_value), rel=1e-12
            )
        # The NVLink counter integrates RX + TX (MiB) over the time between samples: it grows.
        first = value(samples, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", UUID=uuid0)
        assert first is not None
        scrape_until(
            proc.url,
            lambda s: (value(s, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", UUID=uuid0) or 0) > first,
            what="the NVLink counter to grow",
        )

        # GPU 1 has no GPM: no profiling ratios, no NVLink rates; PCIe rates come from
        # nvmlDeviceGetPcieThroughput (KB/s) instead; the API says why GPM is missing.
        samples = scrape(proc.url)
        assert all(value(samples, f, UUID=uuid1) is None for f in PROF_RATIOS)
        assert value(samples, "rightsizer_gpu_nvlink_rx_bytes_per_second", UUID=uuid1) is None
        assert (
            value(samples, "DCGM_FI_PROF_PCIE_TX_BYTES", UUID=uuid1)
            == gpu_values(1)["gpu.1.pcie.tx_kbps"] * 1024
        )
        api = api_gpus(proc.url)
        assert GPM_FIELDS - {"pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"} <= set(
            api[uuid1]["unsupported"]
        )
        assert "Hopper" in api[uuid1]["unsupported_reasons"]["gpm"]
        assert "gpm" not in api[uuid0]["unsupported_reasons"]
        assert api[uuid0]["fields"]["sm_active_ratio"] == pytest.approx(0.3725)
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1

        # GPM measures PCIe on GPU 0, so the 20 ms nvmlDeviceGetPcieThroughput is no longer called
        # there while GPU 1 (slow cadence 1 s) keeps calling it.
        before0 = nvml_double.call_count("nvmlDeviceGetPcieThroughput", 0)
        before1 = nvml_double.call_count("nvmlDeviceGetPcieThroughput", 1)
        wait_for(
            lambda: nvml_double.call_count("nvmlDeviceGetPcieThroughput", 1) >= before1 + 4,
            15,
            what="two more slow cycles",
        )
        assert nvml_double.call_count("nvmlDeviceGetPcieThroughput", 0) == before0
        assert nvml_double.call_count("nvmlGpmQueryDeviceSupport", 0) == 1  # probed once

        # A new GPM reading reaches /metrics without a restart.
        nvml_double.set(gpm_gpu(0, scale=0.5))
        scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", UUID=uuid0) == pytest.approx(0.2275),
            what="the new GPM reading",
        )


def test_samples_stay_100ms_apart_when_cycles_are_faster(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    # Cycles every 50 ms; the double answers INVALID_ARGUMENT for samples under 100 ms apart, which
    # would drop the ratios and fail the collector.
    nvml_double.set({"gpus": 1, **gpu_values(0), **gpm_gpu(0)})
    uuid = str(gpu_values(0)["gpu.0.uuid"])
    with exporter(exporter_args(tmp_path, interval=0.05), env=nvml_double.env()) as proc:
        scrape_until(
            proc.url, lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid) is not None, what="ratios"
        )
        wait_for(lambda: nvml_double.call_count("nvmlGpmMetricsGet", 0) >= 10, 20, what="10 GPM pairs")
        samples = scrape(proc.url)
        assert value(samples, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid) == pytest.approx(0.3725)
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1
        cycles = nvml_double.call_count("nvmlDeviceGetPowerUsage", 0)
        pairs = nvml_double.call_count("nvmlGpmMetricsGet", 0)
        assert pairs < cycles  # some cycles reused the last pair instead of sampling too soon
        assert "GPM" not in proc.log()


def test_driver_without_gpm_is_probed_once_and_explained(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set(
        {"gpus": 1, **gpu_values(0), **gpm_gpu(0), "gpu.0.error.nvmlGpmQueryDeviceSupport": NOT_SUPPORTED}
    )
    uuid = str(gpu_values(0)["gpu.0.uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        wait_for(lambda: nvml_double.call_count("nvmlDeviceGetPowerUsage", 0) >= 5, 15, what="5 cycles")
        samples = scrape(proc.url)
        assert all(value(samples, f, UUID=uuid) is None for f in PROF_RATIOS)
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1  # normal, not a fault
        reason = api_gpus(proc.url)[uuid]["unsupported_reasons"]["gpm"]
        assert "nvmlGpmQueryDeviceSupport: Not Supported" in reason
        assert nvml_double.call_count("nvmlGpmQueryDeviceSupport", 0) == 1
        assert nvml_double.call_count("nvmlGpmSampleGet", 0) == 0


def test_one_metric_not_supported_leaves_only_that_series_out(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    nvml_double.set({"gpus": 1, **gpu_values(0), **gpm_gpu(0), "gpu.0.error.gpm.60": NOT_SUPPORTED})
    uuid = str(gpu_values(0)["gpu.0.uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape_until(
            proc.url, lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid) is not None, what="ratios"
        )
        assert value(samples, "rightsizer_gpu_nvlink_rx_bytes_per_second", UUID=uuid) is None
        assert value(samples, "rightsizer_gpu_nvlink_tx_bytes_per_second", UUID=uuid) == pytest.approx(
            20480.5 * MIB
        )
        assert (
            value(samples, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", UUID=uuid) is None
        )  # needs both directions
        api = api_gpus(proc.url)[uuid]
        assert "nvlink_rx_bytes_per_second" in api["unsupported"]
        assert "sm_active_ratio" not in api["unsupported"]


def test_gpus_asking_for_different_metrics_each_get_their_own_values(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    """The sampling thread reads every GPU through one request: GPU 1 does not support NVLink RX,
    GPU 0 and 2 do, and each keeps its own set and values (the three differ by their scale)."""
    scales = (1.0, 0.5, 0.25)
    nvml_double.set({
        "gpus": 3, **gpu_values(0), **gpu_values(1), **gpu_values(2),
        **gpm_gpu(0), **gpm_gpu(1, scales[1]), **gpm_gpu(2, scales[2]), "gpu.1.error.gpm.60": NOT_SUPPORTED,
    })  # fmt: skip
    uuids = [str(gpu_values(i)[f"gpu.{i}.uuid"]) for i in range(3)]

    def own_values(samples: list[Sample]) -> bool:
        for gpu, uuid in enumerate(uuids):
            for metric_id, (gpm_value, family) in GPM.items():
                got = value(samples, family, UUID=uuid)
                if (gpu, metric_id) == (1, 60):
                    assert got is None
                elif got is None:
                    return False  # the first cycles have one GPM sample only
                else:
                    assert got == pytest.approx(published(metric_id, gpm_value * scales[gpu]), rel=1e-12)
        return True

    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        stamp = "rightsizer_last_sample_timestamp_seconds"
        last = value(scrape_until(proc.url, own_values, what="ratios of the three GPUs"), stamp)
        assert last is not None
        # Cycles later, after GPU 1 asked for one metric fewer than GPU 0 and 2 every cycle.
        scrape_until(proc.url, lambda s: own_values(s) and (value(s, stamp) or 0) > last + 1, what="2 cycles")


def test_one_metrics_request_per_thread_whatever_the_targets() -> None:
    """``nvmlGpmMetricsGet``'s argument is 19 KB: a thread reuses one for every target it reads, and
    asks each for its own metrics; another thread (one left in a hung call) has its own."""
    everything, fewer = list(GPM_METRICS), [m for m in GPM_METRICS if m.field != "nvlink_rx_bytes_per_second"]
    first = _request(everything)
    assert _request(fewer) is first and first.numMetrics == len(fewer)
    assert [first.metrics[i].metricId for i in range(len(fewer))] == [m.metric_id for m in fewer]
    assert _request(everything) is first and first.numMetrics == len(everything)
    other: list[object] = []
    worker = threading.Thread(target=lambda: other.append(_request(everything)))
    worker.start()
    worker.join()
    assert other[0] is not first


def test_gpm_call_error_drops_the_ratios_then_they_return(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    nvml_double.set({"gpus": 2, **gpu_values(0), **gpu_values(1), **gpm_gpu(0), **gpm_gpu(1, 2.0)})
    uuid0, uuid1 = str(gpu_values(0)["gpu.0.uuid"]), str(gpu_values(1)["gpu.1.uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        scrape_until(
            proc.url, lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid0) is not None, what="ratios"
        )
        nvml_double.set({"gpu.0.error.nvmlGpmSampleGet": UNKNOWN})
        failing = scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid0) is None,
            what="GPU 0's ratios to drop",
        )
        assert value(failing, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid1) == pytest.approx(0.745)  # the other GPU
        assert value(failing, "rightsizer_gpu_up", UUID=uuid0) == 1  # a GPM error is not a GPU fault
        assert value(failing, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid0) is not None
        assert value(failing, "rightsizer_collector_success", collector="nvml") == 0
        assert "nvmlGpmSampleGet: Unknown Error (NVML error 999)" in api_gpus(proc.url)["collector"]["error"]
        nvml_double.set({"gpu.0.error.nvmlGpmSampleGet": None})
        scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_PROF_SM_ACTIVE", UUID=uuid0) == pytest.approx(0.3725),
            what="GPU 0's ratios back",
        )
        assert proc.log().count("NVML call failed") == 1
        wait_for(lambda: "NVML call answers again" in proc.log(), 5, what="the recovery log line")
