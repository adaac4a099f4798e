"""XID errors end to end through nvidia-ml-py and the C double's NVML events: an injected XID
appears as dcgm-exporter's gauge (last XID) and as our counter per XID with a last-seen time; a
hung event wait never holds up sampling; the watch survives NVML being initialised again."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from nvmldouble import (
    NOT_SUPPORTED,
    NvmlDouble,
    api_gpus,
    exporter_args,
    gpu_values,
    scrape,
    scrape_until,
    value,
)
from servers import exporter, http_get, require_binary, wait_for

UUID0, UUID1 = str(gpu_values(0)["gpu.0.uuid"]), str(gpu_values(1)["gpu.1.uuid"])
FAST = {"event_wait_seconds": 0.2}


def two_gpus(double: NvmlDouble, **extra: str | int | None) -> None:
    double.set({"gpus": 2, **gpu_values(0), **gpu_values(1), **extra})


def registered(double: NvmlDouble, slot: int, times: int = 1) -> None:
    wait_for(
        lambda: double.call_count("nvmlDeviceRegisterEvents", slot) >= times,
        15,
        what=f"GPU {slot} registered for events ({times})",
    )


def xid_total(samples: list[tuple[str, dict[str, str], float]], uuid: str, xid: int) -> float | None:
    return value(samples, "rightsizer_xid_errors_total", UUID=uuid, xid=str(xid))


def test_injected_xid_appears_as_gauge_counter_and_timestamp(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    two_gpus(nvml_double)
    with exporter(exporter_args(tmp_path, **FAST), env=nvml_double.env()) as proc:
        registered(nvml_double, 0)
        before = scrape(proc.url)
        assert value(before, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 0  # watched, nothing yet
        assert not [n for n, _, _ in before if n.startswith("rightsizer_xid_")]

        injected_at = time.time()
        nvml_double.gpu(0, xids="79")
        samples = scrape_until(
            proc.url,
            lambda s: value(s, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 79,
            what="XID 79 as the gauge",
        )
        assert xid_total(samples, UUID0, 79) == 1
        seen = value(samples, "rightsizer_xid_last_seen_timestamp_seconds", UUID=UUID0)
        assert seen is not None and injected_at - 1 <= seen <= time.time()
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID1) == 0  # the other GPU
        assert xid_total(samples, UUID1, 79) is None

        # More events: the gauge holds the last XID, the counter counts each XID.
        nvml_double.gpu(0, xids="79,13,79,48")
        samples = scrape_until(proc.url, lambda s: xid_total(s, UUID0, 48) == 1, what="three more XIDs")
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 48
        assert (xid_total(samples, UUID0, 79), xid_total(samples, UUID0, 13)) == (2, 1)
        assert value(samples, "rightsizer_collector_success", collector="xid") == 1
        labels = next(lbl for n, lbl, _ in samples if n == "rightsizer_xid_errors_total")
        assert labels["gpu"] == "0" and "model_name" in labels  # own family: GPU labels, promtool-clean

        status, _, body = http_get(proc.url + "/api/v1/xid")
        assert status == 200 and b'"last_xid":48' in body and b'"79":2' in body
        assert "XID error" in proc.log() and "xid=48" in proc.log()

        # promtool finds nothing to say about our own XID families.
        _, _, text = http_get(proc.url + "/metrics")
        lint = subprocess.run(
            [require_binary("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=30
        )
        findings = (lint.stdout + lint.stderr).decode()
        assert "rightsizer_xid" not in findings and "rightsizer_gpu_nvlink" not in findings


def test_hung_event_wait_never_blocks_sampling(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    two_gpus(nvml_double, **{"hang.nvmlEventSetWait_v2": 1})
    with exporter(exporter_args(tmp_path, **FAST), env=nvml_double.env()) as proc:
        wait_for(lambda: nvml_double.call_count("nvmlEventSetWait_v2") >= 1, 15, what="the first wait")
        # Sampling goes on while the wait hangs: a new reading reaches /metrics.
        nvml_double.gpu(1, power_mw=123_000)
        samples = scrape_until(
            proc.url,
            lambda s: (
                value(s, "DCGM_FI_DEV_POWER_USAGE", UUID=UUID1) == 123
                and value(s, "rightsizer_collector_success", collector="xid") == 0
            ),
            what="new readings while the event wait hangs, and the hang reported",
        )
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1
        assert value(samples, "rightsizer_gpu_up", UUID=UUID0) == 1
        status, _, body = http_get(proc.url + "/api/v1/xid")
        assert status == 200 and b"nvmlEventSetWait_v2 has not returned" in body

        # The wait returns: the XID injected meanwhile is delivered, the collector is healthy again.
        nvml_double.set({"hang.nvmlEventSetWait_v2": None, "gpu.0.xids": "31"})
        samples = scrape_until(
            proc.url,
            lambda s: (
                value(s, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 31
                and value(s, "rightsizer_collector_success", collector="xid") == 1
            ),
            what="XID 31 after the hang",
        )
        assert xid_total(samples, UUID0, 31) == 1


def test_xid_watch_survives_nvml_reinitialisation(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    two_gpus(nvml_double)
    with exporter(exporter_args(tmp_path, **FAST), env=nvml_double.env()) as proc:
        registered(nvml_double, 0)
        nvml_double.gpu(0, xids="79")
        scrape_until(proc.url, lambda s: xid_total(s, UUID0, 79) == 1, what="the first XID")

        inits = nvml_double.call_count("nvmlInitWithFlags")
        registrations = nvml_double.call_count("nvmlDeviceRegisterEvents", 0)
        nvml_double.gpu(0, lost=1)  # GPU lost: the source shuts NVML down and initialises it again
        scrape_until(proc.url, lambda s: value(s, "rightsizer_gpu_up", UUID=UUID0) == 0, what="GPU 0 down")
        nvml_double.gpu(0, lost=None)
        scrape_until(proc.url, lambda s: value(s, "rightsizer_gpu_up", UUID=UUID0) == 1, what="GPU 0 back")
        assert nvml_double.call_count("nvmlInitWithFlags") > inits
        registered(nvml_double, 0, registrations + 1)

        nvml_double.gpu(0, xids="79,43")
        samples = scrape_until(proc.url, lambda s: xid_total(s, UUID0, 43) == 1, what="an XID after re-init")
        assert xid_total(samples, UUID0, 79) == 1  # the tally is kept, the old event not repeated
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 43


def test_xid_events_are_read_once_per_cycle_without_a_pending_wait(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    """No wait is left pending in NVML (whose waits poll inside some builds): each cycle reads the
    event set once with a zero timeout, and an XID is published by the next cycle."""
    two_gpus(nvml_double)
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        registered(nvml_double, 0)
        start_waits, start_cycles = nvml_double.call_count("nvmlEventSetWait_v2"), cycles(nvml_double)
        wait_for(lambda: cycles(nvml_double) >= start_cycles + 10, 20, what="10 cycles")
        waits = nvml_double.call_count("nvmlEventSetWait_v2") - start_waits
        done = cycles(nvml_double) - start_cycles
        assert done - 1 <= waits <= done + 1  # one read per cycle, none while idle
        nvml_double.gpu(1, xids="94,94")
        samples = scrape_until(proc.url, lambda s: xid_total(s, UUID1, 94) == 2, what="two XIDs in one read")
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID1) == 94
        assert proc.stop() == 0


def cycles(double: NvmlDouble) -> int:
    return double.call_count("nvmlDeviceGetUtilizationRates", 0)


def test_gpu_without_xid_events_is_left_out_and_explained(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    two_gpus(nvml_double, **{"gpu.1.error.nvmlDeviceRegisterEvents": NOT_SUPPORTED})
    with exporter(exporter_args(tmp_path, **FAST), env=nvml_double.env()) as proc:
        registered(nvml_double, 0)
        api = wait_for(
            lambda: (a := api_gpus(proc.url)) and "xid" in a[UUID1]["unsupported_reasons"] and a,
            10,
            what="GPU 1's XID watch explained",
        )
        assert "nvmlDeviceRegisterEvents: Not Supported" in api[UUID1]["unsupported_reasons"]["xid"]
        assert "xid_last" in api[UUID1]["unsupported"]
        samples = scrape(proc.url)
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID1) is None
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", UUID=UUID0) == 0
        assert value(samples, "rightsizer_collector_success", collector="xid") == 1


def test_xid_watch_can_be_turned_off(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    two_gpus(nvml_double, **{"gpu.0.xids": "79"})
    with exporter(exporter_args(tmp_path, xid_events=False), env=nvml_double.env()) as proc:
        wait_for(lambda: nvml_double.call_count("nvmlDeviceGetPowerUsage", 0) >= 3, 15, what="3 cycles")
        samples = scrape(proc.url)
        assert not [
            n for n, _, _ in samples if n == "DCGM_FI_DEV_XID_ERRORS" or n.startswith("rightsizer_xid")
        ]
        assert value(samples, "rightsizer_collector_success", collector="xid") is None
        assert nvml_double.call_count("nvmlEventSetCreate") == 0
