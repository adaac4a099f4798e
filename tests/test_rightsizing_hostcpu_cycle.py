"""Host CPU is read once per sampling cycle by the right-sizing extension (no timer of its own):
each cycle's row is the busy share since the previous cycle, from the configured procfs root."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from exporter.rightsizing_live.extension import RightsizingExtension
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings

IDENT = GpuIdentity(0, "GPU-aaaa", "00000000:18:00.0", "NVIDIA H100 80GB HBM3", 0, "550", 80 * 2**30)
ROW = "rightsizer_host_cpu_busy_ratio"


def stat(root: Path, busy: int, idle: int) -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    (root / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")


def cycle(ext: RightsizingExtension, t: float) -> float | None:
    g = GpuSample(IDENT, True, {"sm_active_ratio": 0.3, "memory_used_bytes": 2.0**30})
    rows = ext.contribute(GpuReading(t, (g,), CollectorStatus("nvml", True, 0.0)), (g,)).rows
    found = rows.get(ROW, ())
    return found[0].value if found else None


async def test_each_cycle_reads_the_host_cpu_since_the_previous_cycle(tmp_path: Path) -> None:
    stat(tmp_path, 1000, 9000)
    ext = RightsizingExtension(RightsizingSettings(procfs_root=str(tmp_path)), load_catalog(), 1.0)
    tasks_before = asyncio.all_tasks()
    await ext.start()
    try:
        assert asyncio.all_tasks() == tasks_before  # no poller task: the cycle reads it
        stat(tmp_path, 1025, 9075)  # +25 busy of +100
        assert cycle(ext, 1000.0) == pytest.approx(0.25)
        stat(tmp_path, 1125, 9075)  # +100 busy of +100
        assert cycle(ext, 1001.0) == pytest.approx(1.0)
        assert cycle(ext, 1002.0) == pytest.approx(1.0)  # counters did not move: the last share stays
        (tmp_path / "stat").unlink()
        assert cycle(ext, 1003.0) is None  # unreadable: unknown, not 0
        stat(tmp_path, 1200, 9100)
        assert cycle(ext, 1004.0) is None  # one read after the gap is no interval yet
        stat(tmp_path, 1210, 9190)
        assert cycle(ext, 1005.0) == pytest.approx(0.1)
    finally:
        await ext.stop()
