"""One simulated GPU: its constants and noise, its activity at a time (in MIG mode, its instances'
combined), and its energy and NVLink counters.

The energy counter is the integral of the power over 10-second buckets from a fixed origin before
the replayable history, and the NVLink counter the same for NVLink traffic: whole buckets come from
a prefix-sum cache (each bucket computed once; only the recent part kept, older sums recomputed on
demand), the current bucket's share at its midpoint rate.
"""

from __future__ import annotations

import math
from array import array

from rightsizer_core.snapshot import GpuIdentity, PodRef

from .mig import PARENT_UNSUPPORTED, Instance, combined
from .physics import Board, nvlink_bytes_per_second, power_watts
from .scenario import Scenario, SimGpu
from .workloads import Activity, Noise, Workload, evaluate

ENERGY_BUCKET_SECONDS = 10.0
KEEP_EXTRA_BUCKETS = 720  # integrals cached beyond the replayable history: 2 h of 10 s buckets
MIB = 1024 * 1024


class Device:
    """One simulated GPU: constants, noise, and the cached energy / NVLink integrals."""

    __slots__ = (
        "base",
        "began",
        "board",
        "energy",
        "gpu",
        "identity",
        "instances",
        "keep",
        "last",
        "last_t",
        "noise",
        "nvlink",
        "origin_bucket",
        "pod",
        "rate",
        "rate_bucket",
        "unsupported",
        "uptime0",
    )

    def __init__(self, gpu: SimGpu, scenario: Scenario, start: float) -> None:
        self.gpu = gpu
        self.board = Board.of(gpu.spec)
        if gpu.pcie_link is not None:  # trained below its maximum: current values and capacity drop
            self.board = self.board.with_link(*gpu.pcie_link)
        self.noise = Noise(scenario.seed, gpu.index)
        self.identity = GpuIdentity(
            index=gpu.index,
            uuid=gpu.uuid,
            pci_bus_id=gpu.pci_bus_id,
            model=gpu.spec.nvml_names[0] if gpu.spec.nvml_names else gpu.spec.key,
            minor_number=gpu.index,
            driver_version=scenario.driver_version,
            memory_total_bytes=gpu.spec.usable_memory,
        )
        self.pod = PodRef(gpu.pod.pod, gpu.pod.namespace, gpu.pod.container) if gpu.pod else None
        origin = start - scenario.history_seconds - ENERGY_BUCKET_SECONDS
        self.instances = [
            Instance(gpu, m, self.identity, scenario.seed, gpu.spec.gpm_supported) for m in gpu.mig
        ]
        self.unsupported = self.board.unsupported | (PARENT_UNSUPPORTED if gpu.mig else frozenset())
        # A workload runs from start_after_seconds after the start, or since before the replayable past.
        self.began = [began(w.params["start_after_seconds"], start, scenario) for w in self._workloads()]
        self.origin_bucket = math.floor(origin / ENERGY_BUCKET_SECONDS)
        # Booted between 1 and 30 days before the origin; the counters start from that uptime.
        self.uptime0 = 86400.0 * (1 + 29 * self.noise.fixed("phase", 7))
        # energy[k - base], nvlink[k - base]: joules since boot and MiB over NVLink at the start of
        # bucket origin+k. Only the recent part is kept; older values are recomputed on demand.
        self.base = 0
        self.energy = array("d", [self.board.idle_watts * self.uptime0])
        self.nvlink = array("d", [0.0])
        self.keep = int(scenario.history_seconds / ENERGY_BUCKET_SECONDS) + KEEP_EXTRA_BUCKETS
        self.last_t: float | None = None
        self.last: Activity | None = None
        self.rate_bucket: int | None = None
        self.rate = (0.0, 0.0)

    def _workloads(self) -> list[Workload]:
        if self.gpu.workload is not None:
            return [self.gpu.workload]
        return [m.workload for m in self.gpu.mig]

    # -- activity -----------------------------------------------------------------------------------
    def instance_activities(self, t: float) -> list[Activity]:
        return [i.activity(t, b) for i, b in zip(self.instances, self.began, strict=True)]

    def activity(self, t: float) -> Activity:
        """The whole GPU's activity (in MIG mode, its instances' combined)."""
        if self.last_t == t and self.last is not None:  # collect, host CPU and queues ask the same t
            return self.last
        if self.gpu.workload is not None:
            a = evaluate(self.gpu.workload, self.noise, t, t - self.began[0])
        else:
            a = combined(self.instances, self.instance_activities(t), self.gpu.spec.memory_bytes)
        self.last_t, self.last = t, a
        return a

    # -- energy and NVLink counters -------------------------------------------------------------------
    def integrals(self, t: float) -> tuple[float, float]:
        """Energy (J since boot) and NVLink data (MiB) at ``t``: whole buckets from the cache plus
        the current bucket's share at its midpoint rate."""
        k = max(0, math.floor(t / ENERGY_BUCKET_SECONDS) - self.origin_bucket)
        if k < self.base:  # older than the cache: the same sums, recomputed (rare: deep history)
            e, n = self._from_origin(k)
        else:
            while self.base + len(self.energy) <= k:
                j = self.base + len(self.energy) - 1
                watts, link = self._rates((self.origin_bucket + j + 0.5) * ENERGY_BUCKET_SECONDS)
                self.energy.append(self.energy[-1] + watts * ENERGY_BUCKET_SECONDS)
                self.nvlink.append(self.nvlink[-1] + link * ENERGY_BUCKET_SECONDS)
            e, n = self.energy[k - self.base], self.nvlink[k - self.base]
            if len(self.energy) > 2 * self.keep:
                drop = len(self.energy) - self.keep
                del self.energy[:drop], self.nvlink[:drop]
                self.base += drop
        if self.rate_bucket != k:  # the current bucket's rate, once per bucket
            self.rate_bucket, self.rate = (
                k,
                self._rates((self.origin_bucket + k + 0.5) * ENERGY_BUCKET_SECONDS),
            )
        watts, link = self.rate
        part = t - (self.origin_bucket + k) * ENERGY_BUCKET_SECONDS
        return e + watts * part, n + link * part

    def _from_origin(self, k: int) -> tuple[float, float]:
        e, n = self.board.idle_watts * self.uptime0, 0.0
        for j in range(k):
            watts, link = self._rates((self.origin_bucket + j + 0.5) * ENERGY_BUCKET_SECONDS)
            e += watts * ENERGY_BUCKET_SECONDS
            n += link * ENERGY_BUCKET_SECONDS
        return e, n

    def _rates(self, t: float) -> tuple[float, float]:
        a = self.activity(t)
        return power_watts(self.board, a), nvlink_bytes_per_second(self.board, a) / MIB


def began(after: float, start: float, scenario: Scenario) -> float:
    return start + after if after > 0 else start - scenario.history_seconds
