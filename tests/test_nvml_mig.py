"""MIG end to end through nvidia-ml-py and the C double: MIG devices of a MIG-enabled GPU published
as their own samples (memory, GPM ratios) under dcgm-exporter's MIG labels, no GPU_UTIL on them, a
layout changed at run time picked up without a restart, profile names without privileges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nvmldouble import (
    NO_PERMISSION,
    NvmlDouble,
    Sample,
    api_gpus,
    exporter_args,
    gpu_values,
    scrape,
    scrape_until,
    value,
)
from servers import ROOT, exporter, wait_for

MIB = 2**20
GIB = 2**30
PARENT = str(gpu_values(0)["gpu.0.uuid"])
# Profile ids of the double's table (an 80 GB H100's): 9 = 3g.40gb, 14 = 2g.20gb, 19 = 1g.10gb.
PROFILES = {9: "3g.40gb", 14: "2g.20gb", 19: "1g.10gb"}


def mig(k: int, gi: int, profile_id: int, used_gib: float, sm_percent: float) -> dict[str, str | int | float]:
    """Control keys of MIG device ``k`` of GPU 0 (its GPU instance ``gi``)."""
    total = {9: 40, 14: 20, 19: 10}[profile_id] * GIB
    keys: dict[str, str | int | float] = {
        "uuid": f"MIG-{gi:08x}-aaaa-bbbb-cccc-{k:012x}",
        "gi_id": gi,
        "ci_id": 0,
        "profile_id": profile_id,
        "memory.total": total,
        "memory.used": int(used_gib * GIB),
        "gpm.2": sm_percent,
        "gpm.1": sm_percent + 10,
        "gpm.5": sm_percent / 2,
    }
    return {f"gpu.0.mig.{k}.{key}": v for key, v in keys.items()}


def removed(k: int) -> dict[str, str | int | float | None]:
    return {f"gpu.0.mig.{k}.{key}": None for key in mig(k, 0, 19, 0, 0)}


def instance(samples: list[Sample], name: str, gi: int) -> float | None:
    return value(samples, name, UUID=PARENT, GPU_I_ID=str(gi))


def labels_of(samples: list[Sample], name: str, gi: int) -> dict[str, str]:
    return next(lbl for n, lbl, _ in samples if n == name and lbl.get("GPU_I_ID") == str(gi))


def layout(samples: list[Sample]) -> dict[str, str]:
    """GPU_I_ID -> GPU_I_PROFILE of GPU 0's instances in /metrics."""
    return {
        lbl["GPU_I_ID"]: lbl["GPU_I_PROFILE"]
        for n, lbl, _ in samples
        if n == "DCGM_FI_DEV_FB_USED" and lbl.get("UUID") == PARENT and "GPU_I_ID" in lbl
    }


def start(double: NvmlDouble, **extra: str | int | float) -> None:
    double.set(
        {"gpus": 2, **gpu_values(0), **gpu_values(1), "gpu.0.gpm.supported": 1, "gpu.0.mig.mode": 1, **extra}
    )


def test_mig_instances_carry_their_memory_ratios_and_dcgm_labels(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    start(nvml_double, **mig(0, 1, 9, 30.5, 80), **mig(1, 5, 14, 12.25, 40), **mig(2, 13, 19, 2, 5))
    nvml_double.gpu(0, processes=f"100:{GIB}@1,101:{2 * GIB}@1,200:{3 * GIB}@5")
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape_until(
            proc.url, lambda s: instance(s, "DCGM_FI_PROF_SM_ACTIVE", 13) is not None, what="instance ratios"
        )
        assert layout(samples) == {"1": "3g.40gb", "5": "2g.20gb", "13": "1g.10gb"}
        for gi, total_gib, used_gib, sm in ((1, 40, 30.5, 80), (5, 20, 12.25, 40), (13, 10, 2, 5)):
            assert instance(samples, "DCGM_FI_DEV_FB_USED", gi) == pytest.approx(used_gib * 1024)
            assert instance(samples, "DCGM_FI_DEV_FB_FREE", gi) == pytest.approx(
                (total_gib - used_gib) * 1024
            )
            assert instance(samples, "DCGM_FI_PROF_SM_ACTIVE", gi) == pytest.approx(sm / 100)
            assert instance(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", gi) == pytest.approx((sm + 10) / 100)
            assert instance(samples, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", gi) == pytest.approx(sm / 200)
            assert instance(samples, "rightsizer_gpu_up", gi) == 1
            assert instance(samples, "DCGM_FI_DEV_POWER_USAGE", gi) is None  # the GPU's, not the instance's
        # Each instance's compute processes, as its MIG device handle lists them.
        assert [instance(samples, "rightsizer_gpu_compute_processes", gi) for gi in (1, 5, 13)] == [2, 1, 0]
        assert instance(samples, "rightsizer_gpu_compute_processes_memory_bytes", 1) == 3 * GIB
        # dcgm-exporter's labels: gpu = the GPU's index, UUID = the GPU's UUID, then the MIG labels.
        lbl = labels_of(samples, "DCGM_FI_DEV_FB_USED", 5)
        assert list(lbl)[:7] == [
            "gpu",
            "UUID",
            "pci_bus_id",
            "device",
            "modelName",
            "GPU_I_PROFILE",
            "GPU_I_ID",
        ]
        assert lbl["gpu"] == "0" and lbl["device"] == f"nvidia{gpu_values(0)['gpu.0.minor']}"
        # No GPU_UTIL on instances, nor on the MIG-enabled GPU (NVML answers NOT_SUPPORTED); GPU 1 has it.
        util = [lbl for n, lbl, _ in samples if n == "DCGM_FI_DEV_GPU_UTIL"]
        assert [lbl["gpu"] for lbl in util] == ["1"]
        # The GPU itself is still published, without MIG labels.
        assert value(samples, "DCGM_FI_DEV_POWER_USAGE", UUID=PARENT) is not None
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1

        # /api/v1/gpus: each instance under its MIG device UUID (what pod attribution keys on).
        api = api_gpus(proc.url)
        mig_uuid = str(mig(2, 13, 19, 2, 5)["gpu.0.mig.2.uuid"])
        entry = api[mig_uuid]
        assert entry["mig"] == {"profile": "1g.10gb", "instance_id": 13, "parent_uuid": PARENT}
        assert entry["index"] == 0 and entry["memory_total_bytes"] == 10 * GIB
        assert {"gpu_utilization_ratio", "memory_copy_utilization_ratio"} <= set(entry["unsupported"])
        assert "utilization" in entry["unsupported_reasons"]
        assert "gpu_utilization_ratio" in api[PARENT]["unsupported"]
        assert proc.log().count('msg="MIG layout"') == 1


def test_changed_layout_is_picked_up_without_restart(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    # A long rescan interval: destroying an instance is noticed at once (its handle stops answering).
    start(nvml_double, **mig(0, 1, 9, 30, 80), **mig(1, 5, 14, 10, 40))
    with exporter(exporter_args(tmp_path, mig_scan_interval_seconds=300), env=nvml_double.env()) as proc:
        scrape_until(
            proc.url, lambda s: layout(s) == {"1": "3g.40gb", "5": "2g.20gb"}, what="the first layout"
        )
        # 2g.20gb (GI 5) destroyed; two 1g.10gb instances (GI 6, 7) created in its place.
        nvml_double.set({**removed(1), **mig(1, 6, 19, 1, 20), **mig(3, 7, 19, 3, 30)})
        samples = scrape_until(
            proc.url,
            lambda s: (
                layout(s) == {"1": "3g.40gb", "6": "1g.10gb", "7": "1g.10gb"}
                and instance(s, "DCGM_FI_PROF_SM_ACTIVE", 7) is not None
            ),
            what="the new layout",
        )
        assert instance(samples, "DCGM_FI_DEV_FB_USED", 7) == pytest.approx(3 * 1024)
        assert instance(samples, "DCGM_FI_PROF_SM_ACTIVE", 6) == pytest.approx(0.2)
        assert instance(samples, "rightsizer_gpu_up", 5) is None  # the destroyed instance is gone
        scrape_until(
            proc.url,
            lambda s: value(s, "rightsizer_collector_success", collector="nvml") == 1,
            what="the collector healthy on the new layout",
        )
        assert proc.log().count('msg="MIG layout"') == 2


def test_instances_added_or_mig_turned_off_show_at_the_next_scan(
    nvml_double: NvmlDouble, tmp_path: Path
) -> None:
    start(nvml_double, **mig(0, 1, 9, 30, 80))
    with exporter(exporter_args(tmp_path, mig_scan_interval_seconds=0.5), env=nvml_double.env()) as proc:
        scrape_until(proc.url, lambda s: layout(s) == {"1": "3g.40gb"}, what="the first layout")
        nvml_double.set(mig(4, 2, 14, 4, 10))
        scrape_until(
            proc.url, lambda s: layout(s) == {"1": "3g.40gb", "2": "2g.20gb"}, what="the added instance"
        )
        nvml_double.set({"gpu.0.mig.mode": 0})
        samples = scrape_until(proc.url, lambda s: layout(s) == {}, what="MIG off: no instances")
        assert value(samples, "rightsizer_gpu_up", UUID=PARENT) == 1
        assert not [lbl for n, lbl, _ in samples if "GPU_I_ID" in lbl]


def test_profile_names_without_a_privileged_user(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    # nvmlDeviceGetGpuInstanceById needs privileges: the MIG device's attributes name the profile.
    start(
        nvml_double,
        **mig(0, 1, 9, 30, 80),
        **mig(1, 13, 19, 2, 5),
        **{"error.nvmlDeviceGetGpuInstanceById": NO_PERMISSION},
    )
    with exporter(exporter_args(tmp_path), env=nvml_double.env()) as proc:
        samples = scrape_until(proc.url, lambda s: len(layout(s)) == 2, what="both instances")
        assert layout(samples) == {"1": "3g.40gb", "13": "1g.10gb"}  # not "1g.10gb+me", same size
        assert nvml_double.call_count("nvmlDeviceGetAttributes_v2", 0) >= 2
        assert scrape(proc.url)  # still serving


SCRIPT = """
import asyncio, json
from exporter.config import NvmlSettings
from exporter.sources.nvml.source import NvmlSource

async def main():
    source = NvmlSource(NvmlSettings())
    await source.start()
    await source.collect()
    listed = source.running_processes()
    print(json.dumps({uuid: sorted(p.pid for p in procs) for uuid, procs in listed.items()}))
    await source.stop()

asyncio.run(main())
"""


def test_running_processes_of_a_mig_instance_are_listed_under_its_mig_uuid(nvml_double: NvmlDouble) -> None:
    """Pod attribution keys MIG instances on their MIG device UUID (the kubelet's device id)."""
    start(nvml_double, **mig(0, 1, 9, 30, 80), **mig(1, 13, 19, 2, 5))
    nvml_double.gpu(0, processes=f"100:{GIB}@1,200:{GIB}@13,201:{GIB}@13,300:{GIB}")
    done = subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, **nvml_double.env()}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = json.loads(done.stdout)
    mig1, mig13 = (str(mig(k, gi, 19, 0, 0)[f"gpu.0.mig.{k}.uuid"]) for k, gi in ((0, 1), (1, 13)))
    uuid1 = str(gpu_values(1)["gpu.1.uuid"])
    assert listed == {PARENT: [300], mig1: [100], mig13: [200, 201], uuid1: [1001, 2001]}


def test_gpus_without_mig_are_asked_once(nvml_double: NvmlDouble, tmp_path: Path) -> None:
    # GPU 1 has no MIG (NOT_SUPPORTED); GPU 2's driver lacks the call (FUNCTION_NOT_FOUND, 13).
    nvml_double.set({"gpus": 3, **gpu_values(0), **gpu_values(1), **gpu_values(2), "gpu.1.mig.mode": -1})
    nvml_double.set({"gpu.2.error.nvmlDeviceGetMigMode": 13})
    with exporter(exporter_args(tmp_path, mig_scan_interval_seconds=0.2), env=nvml_double.env()) as proc:
        wait_for(
            lambda: nvml_double.call_count("nvmlDeviceGetMigMode", 0) >= 5, 20, what="5 MIG scans of GPU 0"
        )
        assert nvml_double.call_count("nvmlDeviceGetMigMode", 1) == 1
        assert nvml_double.call_count("nvmlDeviceGetMigMode", 2) == 1
        samples = scrape(proc.url)
        assert value(samples, "rightsizer_collector_success", collector="nvml") == 1
        assert len([1 for n, _, _ in samples if n == "DCGM_FI_DEV_GPU_UTIL"]) == 3
