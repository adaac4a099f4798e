"""An in-process GpuSource whose readings the test sets directly (for core unit tests)."""

from __future__ import annotations

from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample

H100 = "NVIDIA H100 80GB HBM3"


def identity(i: int, model: str = H100) -> GpuIdentity:
    return GpuIdentity(
        index=i,
        uuid=f"GPU-{i:08x}-0000-4000-8000-00000000000{i % 10}",
        pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
        model=model,
        minor_number=i,
        driver_version="550.54.15",
        memory_total_bytes=80 * 2**30,
    )


def fields(**overrides: float) -> dict[str, float]:
    base = {
        "sm_clock_hz": 1_755e6,
        "memory_clock_hz": 2_619e6,
        "gpu_temperature_celsius": 41.0,
        "memory_temperature_celsius": 47.0,
        "power_usage_watts": 312.25,
        "energy_joules": 1234.5,
        "pcie_replay_count": 3,
        "gpu_utilization_ratio": 0.87,
        "memory_copy_utilization_ratio": 0.42,
        "memory_used_bytes": 40 * 2**30,
        "memory_free_bytes": 39 * 2**30,
        "memory_reserved_bytes": 2**30,
        "memory_total_bytes": 80 * 2**30,
        "power_limit_watts": 700.0,
    }
    base.update(overrides)
    return base


class FakeSource:
    name = "fake"

    def __init__(self, gpus: int = 2) -> None:
        self.samples = [GpuSample(identity(i), True, fields(), clock_event_reasons=0x4) for i in range(gpus)]
        self.timestamp = 1_700_000_000.0
        self.success = True
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def collect(self) -> GpuReading:
        self.timestamp += 1
        return GpuReading(
            self.timestamp,
            tuple(self.samples),
            CollectorStatus(self.name, self.success, 0.0015, None if self.success else "boom"),
        )
