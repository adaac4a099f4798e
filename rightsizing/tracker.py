"""One GPU's (or one pod's share of a GPU's) window: samples in, ``Evidence`` out."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rightsizer_core.snapshot import GpuSample

from .balance import LinkSeen
from .catalog import PCIE_LANE_BYTES_PER_SECOND
from .evidence import Evidence, QueueEvidence
from .numa import NumaPlacement
from .settings import RightsizingSettings
from .windows import Window

SIGNALS = (
    "activity",
    "utilization",
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "pcie_link",
    "memory",
    "host_cpu",
    "starved",
    "memory_copy",
    "nvlink",
    "host_stall",
)
(
    ACTIVITY, UTILIZATION, SM_ACTIVE, OCCUPANCY, TENSOR, DRAM, PCIE, MEMORY, HOST_CPU, STARVED, MEMORY_COPY,
    NVLINK, HOST_STALL,
) = range(len(SIGNALS))  # fmt: skip
MIB = 1048576.0


def activity_of(fields: Mapping[str, float]) -> tuple[str, float | None]:
    """(source, value): SM active when reported, else GR engine active, else GPU utilization."""
    get = fields.get
    v = get("sm_active_ratio")
    if v is not None:
        return "sm_active", v
    v = get("gr_engine_active_ratio")
    if v is not None:
        return "gr_engine_active", v
    return "gpu_utilization", get("gpu_utilization_ratio")


def pcie_link_ratio(fields: Mapping[str, float], link_fallback: float | None) -> float | None:
    """max(TX, RX) bytes/s over one direction's capacity of the link (generation x width)."""
    get = fields.get
    tx, rx = get("pcie_tx_bytes_per_second"), get("pcie_rx_bytes_per_second")
    if tx is None and rx is None:
        return None
    gen = get("pcie_link_gen") or get("pcie_link_gen_max")
    width = get("pcie_link_width") or get("pcie_link_width_max")
    capacity = (
        PCIE_LANE_BYTES_PER_SECOND.get(int(gen), 0.0) * width if gen and width else (link_fallback or 0.0)
    )
    if capacity <= 0:
        return None
    return max(tx or 0.0, rx or 0.0) / capacity


class GpuTracker:
    __slots__ = (
        "activity_source",
        "busy_at",
        "identity",
        "link",
        "link_fallback",
        "nvlink_capacity",
        "nvlink_last",
        "settings",
        "stall_at",
        "starved_below",
        "window",
    )

    def __init__(
        self,
        sample: GpuSample,
        settings: RightsizingSettings,
        link_fallback: float | None,
        nvlink_capacity: float | None = None,
    ) -> None:
        self.identity = sample.identity
        self.nvlink_capacity = nvlink_capacity  # bytes/s of all the GPU's NVLinks (catalog)
        self.nvlink_last: tuple[float, float] | None = None  # (t, MiB counter)
        self.settings = settings
        self.link_fallback = link_fallback
        self.window = Window(settings.window_seconds, SIGNALS, settings.window_buckets)
        self.link = LinkSeen(settings.window_seconds / settings.window_buckets, settings.window_buckets)
        self.activity_source = "gpu_utilization"
        self.starved_below = settings.bottlenecks.starved_activity_ratio
        self.busy_at = settings.bottlenecks.host_cpu_busy_ratio
        self.stall_at = settings.bottlenecks.starved_host_stall_ratio

    def add(
        self, t: float, sample: GpuSample, host_cpu: float | None, host_stall: float | None = None
    ) -> None:
        """Add a sample. One not newer than the newest kept (a repeated reading, e.g. frozen
        simulated time) adds nothing; one older than the whole window restarts it."""
        last = self.window.last_timestamp
        if last is not None and last - self.window.length_seconds <= t <= last:
            return
        f = sample.fields
        source, activity = activity_of(f)
        if activity is not None:
            self.activity_source = source
        total = self.identity.memory_total_bytes or f.get("memory_total_bytes") or 0
        used = f.get("memory_used_bytes")
        get = f.get
        self.link.add(t, get("pcie_link_gen"), get("pcie_link_width"), get("pcie_link_gen_max"),
                      get("pcie_link_width_max"))  # fmt: skip
        starved = None
        if activity is not None and (host_cpu is not None or host_stall is not None):
            # The host is what the GPU waits on: its CPU busy, or (PSI) its tasks stalled on memory or I/O.
            loaded = (host_cpu is not None and host_cpu >= self.busy_at) or (
                host_stall is not None and host_stall >= self.stall_at
            )
            starved = 1.0 if activity < self.starved_below and loaded else 0.0
        self.window.add(
            t,
            (
                activity,
                f.get("gpu_utilization_ratio"),
                f.get("sm_active_ratio"),
                f.get("sm_occupancy_ratio"),
                f.get("tensor_active_ratio"),
                f.get("dram_active_ratio"),
                pcie_link_ratio(f, self.link_fallback),
                used / total if used is not None and total else None,
                host_cpu,
                starved,
                f.get("memory_copy_utilization_ratio"),
                self._nvlink_share(t, f),
                host_stall,
            ),
        )

    def _nvlink_share(self, t: float, f: Mapping[str, float]) -> float | None:
        """NVLink traffic over the link's bandwidth: GPM's rates when reported, else the counter's
        change since the previous sample."""
        capacity = self.nvlink_capacity
        if not capacity:
            return None
        rx, tx = f.get("nvlink_rx_bytes_per_second"), f.get("nvlink_tx_bytes_per_second")
        if rx is not None or tx is not None:
            return ((rx or 0.0) + (tx or 0.0)) / capacity
        count = f.get("nvlink_bandwidth_count")
        if count is None:
            return None
        last, self.nvlink_last = self.nvlink_last, (t, count)
        if last is None or t <= last[0] or count < last[1]:
            return None
        return (count - last[1]) * MIB / (t - last[0]) / capacity

    def evidence(
        self, queues: Sequence[QueueEvidence] = (), details: bool = True, numa: NumaPlacement | None = None
    ) -> Evidence:
        """What the window says. Without ``details`` the percentiles no decision reads (memory p95,
        occupancy, tensor) are left out: scoring skips them, the API adds
        them when asked (``with_details``)."""
        w, s = self.window, self.settings
        high = s.bottlenecks.percentile
        total = float(self.identity.memory_total_bytes)
        peak = w.maximum(MEMORY)
        a99, a95, a50 = w.percentiles(ACTIVITY, (0.99, 0.95, 0.5))
        sm_high, sm50 = w.percentiles(SM_ACTIVE, (high, 0.5))
        qs = (0.99, max(high, 0.95), min(high, 0.95))  # descending, as ``percentiles`` reads them
        copy = dict(zip(qs, w.percentiles(MEMORY_COPY, qs), strict=True))
        copy95, copy_high = copy[0.95], copy[high]
        dram = dict(zip(qs, w.percentiles(DRAM, qs), strict=True))
        ident = self.identity
        best, maximum = self.link.best(), self.link.maximum
        ev = Evidence(
            samples=w.samples,
            history_seconds=w.history_seconds,
            window_seconds=w.length_seconds,
            model=ident.model,
            mig_profile=ident.mig_profile,
            memory_total_bytes=total,
            memory_peak_bytes=None if peak is None else peak * total,
            memory_p95_bytes=None,
            activity_source=self.activity_source,
            activity_p50=a50,
            activity_p95=a95,
            activity_p99=a99,
            activity_recent_max=w.maximum(ACTIVITY, s.idle_after_seconds),
            utilization_p50=w.percentile(UTILIZATION, 0.5),
            sm_active_p50=sm50,
            sm_active_high=sm_high,
            dram_active_high=dram[high],
            pcie_link_high=w.percentile(PCIE, high),
            dram_active_p95=dram[0.95],
            memory_copy_p95=copy95,
            memory_copy_high=copy_high,
            nvlink_high=w.percentile(NVLINK, high),
            host_cpu_high=w.percentile(HOST_CPU, high),
            host_stall_high=w.percentile(HOST_STALL, high),
            starved_share=w.fraction_at_least(STARVED, 1.0),
            queues=tuple(queues),
            pcie_link_generation=best[0] if best else None,
            pcie_link_generation_max=maximum[0] if maximum else None,
            pcie_link_width=best[1] if best else None,
            pcie_link_width_max=maximum[1] if maximum else None,
            utilization_recent_max=w.maximum(UTILIZATION, s.idle_after_seconds),
            dram_active_p99=dram[0.99],
            memory_copy_p99=copy[0.99],
            numa=numa,
        )
        return self.with_details(ev) if details else ev

    def with_details(self, ev: Evidence) -> Evidence:
        """``ev`` with the informational percentiles read from the window now."""
        w = self.window
        memory = w.percentile(MEMORY, 0.95)
        return dataclasses.replace(
            ev,
            memory_p95_bytes=None if memory is None else memory * ev.memory_total_bytes,
            sm_occupancy_p50=w.percentile(OCCUPANCY, 0.5),
            tensor_active_p95=w.percentile(TENSOR, 0.95),
        )
