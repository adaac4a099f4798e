"""The simulated fleet end to end (the exporter as a subprocess with ``--simulate``): an H100 in MIG
mode shows per-instance memory and profiling ratios under dcgm-exporter's MIG labels; injected
XIDs appear as the gauge, the counter per XID and the last-seen time, at their simulated time."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from nvmldouble import Sample, scrape, scrape_until, value
from servers import exporter, http_get

MIB = 2**20
SCENARIO = """
description: An H100 in MIG mode next to a whole H100 with XIDs
seed: 5
speed: 1
history_seconds: 0
gpus:
  - name: mig-h100
    model: H100-SXM-80GB
    mig:
      - profile: 3g.40gb
        workload: {kind: steady_inference, memory_gib: 30, activity: 0.6, utilization: 0.8, noise: 0}
        pod: {pod: chat-0, namespace: llm, container: server}
      - profile: 1g.10gb
        workload: {kind: idle, memory_gib: 2}
  - name: launch-bound-h100
    model: H100-SXM-80GB
    workload: {kind: launch_overhead, memory_gib: 20}
    xids:
      - {after_seconds: -30, xid: 13}
      - {after_seconds: 4, xid: 79}
"""


def instances(samples: list[Sample], name: str) -> dict[str, tuple[str, float]]:
    """GPU_I_ID -> (GPU_I_PROFILE, value) of ``name`` on GPU 0's instances."""
    return {
        lbl["GPU_I_ID"]: (lbl["GPU_I_PROFILE"], v)
        for n, lbl, v in samples
        if n == name and lbl["gpu"] == "0" and "GPU_I_ID" in lbl
    }


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "mig-xid.yaml"
    path.write_text(SCENARIO)
    return path


def test_h100_in_mig_mode_shows_per_instance_memory_and_ratios(scenario: Path) -> None:
    with exporter(["--simulate", str(scenario), "--interval", "0.2"]) as proc:
        samples = scrape(proc.url)
        used = instances(samples, "DCGM_FI_DEV_FB_USED")
        free = instances(samples, "DCGM_FI_DEV_FB_FREE")
        assert {gi: p for gi, (p, _) in used.items()} == {"1": "3g.40gb", "2": "1g.10gb"}
        assert used["1"][1] == pytest.approx(30 * 1024, rel=0.02)
        # The profile's memory as nvidia-smi mig -lgip reports it (H100: 3g.40gb 39.5 GiB, 1g.10gb
        # 9.62 GiB in the catalog), not its nominal size.
        assert used["1"][1] + free["1"][1] == pytest.approx(39.5 * 1024, abs=1)
        assert used["2"][1] + free["2"][1] == pytest.approx(9.62 * 1024, abs=1)
        sm = instances(samples, "DCGM_FI_PROF_SM_ACTIVE")
        assert sm["1"][1] > 0.3 and sm["2"][1] < 0.05  # each instance its own workload
        assert set(instances(samples, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")) == {"1", "2"}
        assert instances(samples, "DCGM_FI_DEV_GPU_UTIL") == {}  # NVML has none for MIG devices
        assert value(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="0") is None  # nor for a MIG-enabled GPU
        # The instance's series carry the parent's UUID and index; the pod label rides on the instance.
        lbl = next(lbl for n, lbl, _ in samples if n == "DCGM_FI_DEV_FB_USED" and lbl.get("GPU_I_ID") == "1")
        parent = next(lbl for n, lbl, _ in samples if n == "DCGM_FI_DEV_POWER_USAGE" and lbl["gpu"] == "0")
        assert lbl["UUID"] == parent["UUID"] and "GPU_I_ID" not in parent
        assert (lbl["pod"], lbl["namespace"], lbl["container"]) == ("chat-0", "llm", "server")

        status, _, body = http_get(proc.url + "/api/v1/gpus")
        assert status == 200
        migs = [g for g in json.loads(body)["gpus"] if g.get("mig")]
        assert {g["mig"]["profile"] for g in migs} == {"3g.40gb", "1g.10gb"}
        assert all(g["uuid"].startswith("MIG-") and g["mig"]["parent_uuid"] == parent["UUID"] for g in migs)

        # A launch-overhead-bound job on the whole H100: busy by GPU_UTIL, little SM activity.
        util = value(samples, "DCGM_FI_DEV_GPU_UTIL", gpu="1")
        active = value(samples, "DCGM_FI_PROF_SM_ACTIVE", gpu="1")
        occupancy = value(samples, "DCGM_FI_PROF_SM_OCCUPANCY", gpu="1")
        assert util is not None and active is not None and occupancy is not None
        assert util / 100 > 2 * active and occupancy <= active


def test_injected_xids_appear_at_their_simulated_time(scenario: Path) -> None:
    started = time.time()
    with exporter(["--simulate", str(scenario), "--interval", "0.2"]) as proc:
        samples = scrape(proc.url)
        # The XID injected before the start is already there; the later one is not yet.
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 13
        assert value(samples, "rightsizer_xid_errors_total", gpu="1", xid="13") == 1
        assert value(samples, "rightsizer_xid_errors_total", gpu="1", xid="79") is None
        # XIDs count on the GPU, as NVML's events name it, not on its MIG instances.
        assert value(samples, "DCGM_FI_DEV_XID_ERRORS", gpu="0") == 0
        samples = scrape_until(
            proc.url, lambda s: value(s, "DCGM_FI_DEV_XID_ERRORS", gpu="1") == 79, what="XID 79", timeout=15
        )
        assert value(samples, "rightsizer_xid_errors_total", gpu="1", xid="79") == 1
        assert value(samples, "rightsizer_xid_errors_total", gpu="1", xid="13") == 1
        seen = value(samples, "rightsizer_xid_last_seen_timestamp_seconds", gpu="1")
        assert seen is not None and started <= seen <= time.time()
        assert value(samples, "rightsizer_xid_last_seen_timestamp_seconds", gpu="0") is None
        status, _, body = http_get(proc.url + "/api/v1/xid")
        assert status == 200 and json.loads(body)["xid"]["gpus"]
