"""The NVML path end to end: the exporter as a subprocess, nvidia-ml-py, the C double of
libnvidia-ml.so.1. Published values and their unit conversions; NOT_SUPPORTED probed once and
left out; an error code injected per function and device."""

from __future__ import annotations

from pathlib import Path

import pytest
from nvmldouble import (
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    NvmlDouble,
    api_gpus,
    exporter_args,
    families_of,
    gpu_values,
    scrape,
    scrape_until,
    value,
)
from servers import exporter, wait_for

from exporter.sources.nvml.gpm import GPM_FIELDS

MIB = 2**20
# Fields a GPU without GPM lacks (GPM is off in the double unless a test turns it on); PCIe rates
# then come from nvmlDeviceGetPcieThroughput.
NO_GPM = GPM_FIELDS - {"pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"}
DRIVER = "555.42.06"


def two_gpus(double: NvmlDouble, **extra: str | int) -> list[dict[str, str | int]]:
    gpus = [gpu_values(0), gpu_values(1)]
    double.set({"gpus": 2, "driver_version": DRIVER, **gpus[0], **gpus[1], **extra})
    return [{k.split(".", 2)[2]: v for k, v in g.items()} for g in gpus]


def test_values_are_published_in_dcgm_units_with_identity_labels(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    gpus = two_gpus(nvml_double)
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape(proc.url)
        api = api_gpus(proc.url)
        for slot, g in enumerate(gpus):
            uuid = str(g["uuid"])
            labels = {
                "gpu": str(slot),
                "UUID": uuid,
                "pci_bus_id": str(g["pci_bus_id"]),
                "device": f"nvidia{g['minor']}",
                "modelName": str(g["name"]),
                "DCGM_FI_DRIVER_VERSION": DRIVER,
            }
            sample_labels = next(
                lbl for n, lbl, _ in samples if n == "DCGM_FI_DEV_GPU_TEMP" and lbl["UUID"] == uuid
            )
            assert {k: sample_labels[k] for k in labels} == labels

            def dcgm(name: str, uuid: str = uuid) -> float | None:
                return value(samples, name, UUID=uuid)

            n = {k: float(v) for k, v in g.items() if isinstance(v, int)}
            assert dcgm("DCGM_FI_DEV_SM_CLOCK") == n["clock.sm"]
            assert dcgm("DCGM_FI_DEV_MEM_CLOCK") == n["clock.mem"]
            assert dcgm("DCGM_FI_DEV_GPU_TEMP") == n["temp.gpu"]
            assert dcgm("DCGM_FI_DEV_MEMORY_TEMP") == n["temp.memory"]
            assert dcgm("DCGM_FI_DEV_POWER_USAGE") == pytest.approx(n["power_mw"] / 1000)
            assert dcgm("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION") == pytest.approx(n["energy_mj"])
            assert dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == n["pcie.replay"]
            assert dcgm("DCGM_FI_DEV_GPU_UTIL") == pytest.approx(n["util.gpu"])
            assert dcgm("DCGM_FI_DEV_MEM_COPY_UTIL") == pytest.approx(n["util.memory"])
            assert dcgm("DCGM_FI_DEV_ENC_UTIL") == pytest.approx(n["util.encoder"])
            assert dcgm("DCGM_FI_DEV_DEC_UTIL") == pytest.approx(n["util.decoder"])
            assert dcgm("DCGM_FI_DEV_FB_USED") == pytest.approx(n["memory.used"] / MIB)
            assert dcgm("DCGM_FI_DEV_FB_FREE") == pytest.approx(n["memory.free"] / MIB)
            assert dcgm("DCGM_FI_DEV_FB_RESERVED") == pytest.approx(n["memory.reserved"] / MIB)
            assert dcgm("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL") == n["ecc.corrected"]
            assert dcgm("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == n["ecc.uncorrected"]
            assert dcgm("DCGM_FI_PROF_PCIE_TX_BYTES") == n["pcie.tx_kbps"] * 1024
            assert dcgm("DCGM_FI_PROF_PCIE_RX_BYTES") == n["pcie.rx_kbps"] * 1024
            assert dcgm("rightsizer_gpu_up") == 1
            assert dcgm("rightsizer_gpu_memory_total_bytes") == n["memory.total"]
            assert dcgm("rightsizer_gpu_power_limit_watts") == pytest.approx(n["power_limit_mw"] / 1000)
            assert dcgm("rightsizer_gpu_sm_clock_max_hertz") == n["clock.sm_max"] * 1e6
            assert dcgm("rightsizer_gpu_memory_clock_max_hertz") == n["clock.mem_max"] * 1e6
            assert dcgm("rightsizer_gpu_pcie_link_generation") == n["pcie.gen"]
            assert dcgm("rightsizer_gpu_pcie_link_generation_max") == n["pcie.gen_max"]
            assert dcgm("rightsizer_gpu_pcie_link_width") == n["pcie.width"]
            assert dcgm("rightsizer_gpu_pcie_link_width_max") == n["pcie.width_max"]
            assert dcgm("rightsizer_gpu_compute_processes") == 2
            assert dcgm("rightsizer_gpu_compute_processes_memory_bytes") == 2**30 + 2**31
            reasons = {
                lbl["reason"]: v
                for name, lbl, v in samples
                if name == "rightsizer_gpu_clock_event_active" and lbl["UUID"] == uuid
            }
            assert {r for r, v in reasons.items() if v == 1} == {"sw_power_cap", "hw_thermal_slowdown"}

            entry = api[uuid]
            # GPM is off in the double unless a test turns it on (tests/test_nvml_gpm.py): its fields
            # are the only ones missing, and the API says why.
            assert entry["up"] is True and set(entry["unsupported"]) == NO_GPM
            assert set(entry["unsupported_reasons"]) == {"gpm"}
            assert (
                entry["index"] == slot and entry["model"] == g["name"] and entry["driver_version"] == DRIVER
            )
            assert entry["memory_total_bytes"] == g["memory.total"]
            assert entry["clock_event_reasons"] == g["clock_event_reasons"]
            fields = entry["fields"]
            assert fields["power_usage_watts"] == pytest.approx(n["power_mw"] / 1000)
            assert fields["energy_joules"] == pytest.approx(n["energy_mj"] / 1000)
            assert fields["gpu_utilization_ratio"] == pytest.approx(n["util.gpu"] / 100)
            assert fields["sm_clock_hz"] == n["clock.sm"] * 1e6
            assert fields["memory_reserved_bytes"] == n["memory.reserved"]
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1

        # A new reading reaches /metrics without a restart.
        nvml_double.gpu(1, power_mw=123_000, util__gpu=97)
        scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_DEV_POWER_USAGE", gpu="1") == 123,
            what="the new power reading",
        )
        assert value(scrape(proc.url), "DCGM_FI_DEV_GPU_UTIL", gpu="1") == pytest.approx(97)


def test_not_supported_is_probed_once_left_out_and_listed(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    gpus = two_gpus(
        nvml_double,
        **{
            "gpu.1.error.nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
            "gpu.1.error.field.82": NOT_SUPPORTED,  # NVML_FI_DEV_MEMORY_TEMP
            "gpu.1.error.nvmlDeviceGetPcieThroughput": NOT_SUPPORTED,
            "gpu.1.error.nvmlDeviceGetEccMode": NOT_SUPPORTED,
            "gpu.0.ecc.mode": 0,  # ECC off: its counters are not read at all
        },
    )
    uuid0, uuid1 = str(gpus[0]["uuid"]), str(gpus[1]["uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        # Let several cycles pass on both GPUs.
        wait_for(lambda: nvml_double.call_count("nvmlDeviceGetUtilizationRates", 1) >= 6, 20, what="6 cycles")
        samples = scrape(proc.url)
        api = api_gpus(proc.url)
        assert (
            value(samples, "rightsizer_collector_success", collector="nvml") == 1
        )  # NOT_SUPPORTED is normal

        ecc = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
        others = {
            "DCGM_FI_DEV_POWER_USAGE",
            "DCGM_FI_DEV_MEMORY_TEMP",
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "DCGM_FI_PROF_PCIE_RX_BYTES",
        }
        assert (ecc | others).isdisjoint(families_of(samples, uuid1))
        assert others <= families_of(samples, uuid0)
        assert ecc.isdisjoint(families_of(samples, uuid0))
        assert value(samples, "rightsizer_gpu_up", UUID=uuid1) == 1
        assert value(samples, "DCGM_FI_DEV_GPU_TEMP", UUID=uuid1) == gpus[1]["temp.gpu"]

        assert sorted(set(api[uuid1]["unsupported"]) - NO_GPM) == sorted(
            [
                "power_usage_watts",
                "memory_temperature_celsius",
                "pcie_tx_bytes_per_second",
                "pcie_rx_bytes_per_second",
                "ecc_corrected_count",
                "ecc_uncorrected_count",
            ]
        )
        assert sorted(set(api[uuid0]["unsupported"]) - NO_GPM) == [
            "ecc_corrected_count",
            "ecc_uncorrected_count",
        ]
        assert "power_usage_watts" not in api[uuid1]["supported"]

        # Probed once: the calls that answered NOT_SUPPORTED were never made again.
        assert nvml_double.call_count("nvmlDeviceGetPowerUsage", 1) == 1
        assert nvml_double.call_count("nvmlDeviceGetPcieThroughput", 1) == 1  # TX answered; RX never asked
        assert nvml_double.call_count("nvmlDeviceGetEccMode", 1) == 1
        assert nvml_double.call_count("nvmlDeviceGetEccMode", 0) == 1
        assert nvml_double.call_count("nvmlDeviceGetTotalEccErrors", 0) == 0
        assert nvml_double.call_count("nvmlDeviceGetPowerUsage", 0) >= 6
        # Logged once per GPU and call: 4 on GPU 1, ECC counters on GPU 0.
        assert proc.log().count("NVML call not supported") == 5


def test_error_injected_per_function_and_device_drops_that_field_only(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    gpus = two_gpus(nvml_double)
    uuid0, uuid1 = str(gpus[0]["uuid"]), str(gpus[1]["uuid"])
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        assert value(scrape(proc.url), "DCGM_FI_DEV_POWER_USAGE", UUID=uuid1) is not None
        nvml_double.set(
            {
                "gpu.1.error.nvmlDeviceGetPowerUsage": UNKNOWN,
                "gpu.0.error.nvmlDeviceGetTemperatureV": NO_PERMISSION,
            }
        )
        failing = scrape_until(
            proc.url,
            lambda s: (
                value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid1) is None
                and value(s, "DCGM_FI_DEV_GPU_TEMP", UUID=uuid0) is None
            ),
            what="the failing fields to drop",
        )
        assert value(failing, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid0) is not None
        assert value(failing, "DCGM_FI_DEV_GPU_TEMP", UUID=uuid1) is not None
        assert value(failing, "rightsizer_gpu_up", UUID=uuid0) == 1
        assert value(failing, "rightsizer_gpu_up", UUID=uuid1) == 1
        assert value(failing, "rightsizer_collector_success", collector="nvml") == 0
        api = api_gpus(proc.url)
        error = api["collector"]["error"]
        assert "nvmlDeviceGetPowerUsage: Unknown Error (NVML error 999)" in error
        assert "nvmlDeviceGetTemperatureV: Insufficient Permissions (NVML error 4)" in error
        # An error is not NOT_SUPPORTED: it is tried again (GPM is off in the double by default).
        assert set(api[uuid1]["unsupported"]) == NO_GPM

        # Logged once per change, not every cycle.
        calls = nvml_double.call_count("nvmlDeviceGetPowerUsage", 1)
        wait_for(
            lambda: nvml_double.call_count("nvmlDeviceGetPowerUsage", 1) >= calls + 5,
            10,
            what="5 more cycles",
        )
        assert proc.log().count("call=nvmlDeviceGetPowerUsage error=") == 1

        nvml_double.set(
            {"gpu.1.error.nvmlDeviceGetPowerUsage": None, "gpu.0.error.nvmlDeviceGetTemperatureV": None}
        )
        back = scrape_until(
            proc.url,
            lambda s: value(s, "rightsizer_collector_success", collector="nvml") == 1,
            what="the collector to succeed again",
        )
        assert value(back, "DCGM_FI_DEV_POWER_USAGE", UUID=uuid1) == pytest.approx(
            float(gpus[1]["power_mw"]) / 1000
        )
        assert value(back, "DCGM_FI_DEV_GPU_TEMP", UUID=uuid0) == gpus[0]["temp.gpu"]
        assert "NVML call answers again" in proc.log()


def test_pcie_throughput_runs_on_the_slow_cadence_and_is_reused(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    two_gpus(nvml_double)
    with exporter(
        exporter_args(tmp_path, interval=0.1, slow_interval_seconds=1), env=nvml_double.env()
    ) as proc:
        wait_for(
            lambda: nvml_double.call_count("nvmlDeviceGetUtilizationRates", 0) >= 25, 30, what="25 cycles"
        )
        for _ in range(5):  # every scrape has the value, read or reused
            assert value(scrape(proc.url), "DCGM_FI_PROF_PCIE_TX_BYTES", gpu="0") == 1000 * 1024
        cycles = nvml_double.call_count("nvmlDeviceGetUtilizationRates", 0)
        throughput_reads = nvml_double.call_count("nvmlDeviceGetPcieThroughput", 0) // 2  # TX and RX
        assert 1 <= throughput_reads < cycles / 3


def test_memory_info_falls_back_to_v1_without_reserved(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    gpus = two_gpus(nvml_double, **{"gpu.0.error.nvmlDeviceGetMemoryInfo_v2": 13})  # FUNCTION_NOT_FOUND
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape(proc.url)
        g = gpus[0]
        v1_used = float(g["memory.used"]) + float(g["memory.reserved"])  # v1 "used" includes reserved
        assert value(samples, "DCGM_FI_DEV_FB_USED", gpu="0") == pytest.approx(v1_used / MIB)
        assert value(samples, "DCGM_FI_DEV_FB_RESERVED", gpu="0") is None
        assert value(samples, "DCGM_FI_DEV_FB_RESERVED", gpu="1") == pytest.approx(
            float(g["memory.reserved"]) / MIB
        )
        assert value(samples, "rightsizer_gpu_memory_total_bytes", gpu="0") == g["memory.total"]
