"""DCGM's profiling ratios without DCGM: NVML GPM (GPU Performance Monitoring, Hopper and newer).

GPM gives metrics over two samples taken at least 100 ms apart. Each GPU's job keeps, per
target (the whole GPU, and each MIG GPU instance), two sample buffers that it rolls: every cycle
it takes a new sample and computes the metrics over the previous cycle's sample and this one, so
the ratios cover the whole interval between cycles. A new sample is taken only once ``spacing``
seconds have passed since the last; until then the last values are published again. The first
cycle has one sample only and publishes no GPM values.

Conversions (PROTOCOLS §3): percentages / 100 → DCGM's ratios; MiB/s x 1,048,576 → bytes/s.
NVLink RX + TX rates are also integrated into ``nvlink_bandwidth_count`` (MiB since the exporter
started), the counter behind DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL.

Everything here blocks and runs in the GPU's job on the sampling thread; the state is touched by
that job only (a GPU's jobs never overlap).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pynvml

from .calls import LIFECYCLE_ERRORS, CallTracker, Handle, describe

MIB = 1024 * 1024
SUPPORT_CALL = "nvmlGpmQueryDeviceSupport"
GPM_CALLS = frozenset(
    {SUPPORT_CALL, "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet"}
)
NVLINK_COUNT = "nvlink_bandwidth_count"


@dataclass(frozen=True, slots=True)
class GpmMetric:
    metric_id: int
    field: str
    scale: float  # GPM unit → snapshot unit


GPM_METRICS: tuple[GpmMetric, ...] = (
    GpmMetric(pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, "gr_engine_active_ratio", 0.01),
    GpmMetric(pynvml.NVML_GPM_METRIC_SM_UTIL, "sm_active_ratio", 0.01),
    GpmMetric(pynvml.NVML_GPM_METRIC_SM_OCCUPANCY, "sm_occupancy_ratio", 0.01),
    GpmMetric(pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, "tensor_active_ratio", 0.01),
    GpmMetric(pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, "dram_active_ratio", 0.01),
    GpmMetric(pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC, "pcie_tx_bytes_per_second", MIB),
    GpmMetric(pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC, "pcie_rx_bytes_per_second", MIB),
    GpmMetric(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, "nvlink_rx_bytes_per_second", MIB),
    GpmMetric(pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, "nvlink_tx_bytes_per_second", MIB),
)
GPM_FIELDS = frozenset(m.field for m in GPM_METRICS) | {NVLINK_COUNT}
_NVLINK = ("nvlink_rx_bytes_per_second", "nvlink_tx_bytes_per_second")


def convert(metric: GpmMetric, value: float) -> float:
    """A GPM value in the snapshot's unit: percent / 100 (an exact division), MiB/s x 2**20."""
    return value / 100 if metric.scale == 0.01 else value * metric.scale


class GpmUnsupported(Exception):
    """GPM cannot run on this GPU (or GPU instance); the message says why."""


@dataclass
class GpmSeries:
    """The rolling sample pair of one target (the whole GPU, or one GPU instance)."""

    previous: Any = None  # c_nvmlGpmSample_t
    current: Any = None
    previous_at: float | None = None  # monotonic time of ``previous``; None: no sample yet
    # Monotonic clock read just after ``previous`` was taken: the cycle's ``now`` can be older than the
    # moment a job really runs (a busy sampling thread), so spacing is also checked on this clock.
    previous_taken: float = 0.0
    unsupported: set[str] = field(default_factory=set)  # fields whose metric answered NOT_SUPPORTED
    values: dict[str, float] = field(default_factory=dict)  # the last metrics computed
    nvlink_mib: float = 0.0
    not_supported: str | None = None  # why sampling this target answered NOT_SUPPORTED (not retried)

    def buffers(self) -> list[Any]:
        return [s for s in (self.previous, self.current) if s is not None]


@dataclass
class GpmReading:
    """What one job read through GPM, per target (None = whole GPU, else a GPU instance id)."""

    fields: dict[int | None, dict[str, float]] = field(default_factory=dict)
    unsupported: dict[int | None, frozenset[str]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    lifecycle: str | None = None


class GpmState:
    """One GPU's GPM state: support, and a rolling sample pair per target. The GPU's job only."""

    def __init__(self, spacing: float, retired: list[Any] | None = None) -> None:
        self.spacing = spacing
        self.supported: bool | None = None  # None until probed
        self.reason: str | None = None  # why GPM is not available
        self.series: dict[int | None, GpmSeries] = {}
        self.call = ""  # the GPM call running now, for error messages
        self._retired = retired or []  # buffers of a previous NVML initialisation, freed on first use

    def retire(self) -> GpmState:
        """A fresh state for after NVML was initialised again (the old buffers are freed by it)."""
        return GpmState(self.spacing, [b for s in self.series.values() for b in s.buffers()] + self._retired)

    def probe(self, tracker: CallTracker, handle: Handle) -> None:
        """Ask NVML once whether the GPU supports GPM. Raises ``pynvml.NVMLError`` for other errors."""
        self._free_retired()
        tracker.mark(SUPPORT_CALL)
        try:
            supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as exc:
            self.supported, self.reason = False, f"{SUPPORT_CALL}: {describe(exc)} (driver without GPM)"
            return
        self.supported = supported
        if not supported:
            self.reason = "GPM is not supported on this GPU (NVML GPM needs Hopper or newer)"

    def drop_except(self, targets: set[int | None]) -> None:
        """Free the series of GPU instances that are gone."""
        for target in [t for t in self.series if t not in targets]:
            for buf in self.series.pop(target).buffers():
                with contextlib.suppress(pynvml.NVMLError):
                    pynvml.nvmlGpmSampleFree(buf)

    def read(
        self, tracker: CallTracker, handle: Handle, target: int | None, now: float, out: GpmReading
    ) -> None:
        """Fill ``out`` with ``target``'s GPM fields. NVML errors go in ``out``; never raises."""
        series = self.series.get(target)
        if series is None:
            series = self.series[target] = GpmSeries()
        if series.not_supported is not None:
            out.unsupported[target] = GPM_FIELDS
            return
        try:
            self._read(tracker, handle, target, series, now)
        except GpmUnsupported as exc:
            series.not_supported = str(exc)
            if target is None:
                self.reason = str(exc)
            out.unsupported[target] = GPM_FIELDS
            return
        except pynvml.NVMLError as exc:
            message = f"{self.call}: {describe(exc)}"
            if exc.value in LIFECYCLE_ERRORS:
                out.lifecycle = message
            else:
                out.errors[self.call] = message
                series.previous_at = None  # start a fresh pair
            return
        out.fields[target] = dict(series.values)
        out.unsupported[target] = frozenset(series.unsupported)

    def _read(
        self, tracker: CallTracker, handle: Handle, target: int | None, s: GpmSeries, now: float
    ) -> None:
        if s.previous_at is not None and (
            now - s.previous_at < self.spacing or time.monotonic() - s.previous_taken < self.spacing
        ):
            return  # too soon for a new pair: the last values stand
        if s.previous is None:
            self._mark(tracker, "nvmlGpmSampleAlloc")
            s.previous, s.current = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
        call = tracker_call(target)
        self._mark(tracker, call)
        try:
            if target is None:
                pynvml.nvmlGpmSampleGet(handle, s.current)
            else:
                pynvml.nvmlGpmMigSampleGet(handle, target, s.current)
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound) as exc:
            raise GpmUnsupported(f"{call}: {describe(exc)}") from None
        if s.previous_at is not None:
            self._metrics(tracker, s, now - s.previous_at)
        s.previous, s.current = s.current, s.previous
        s.previous_at = now
        s.previous_taken = time.monotonic()

    def _metrics(self, tracker: CallTracker, s: GpmSeries, seconds: float) -> None:
        wanted = [m for m in GPM_METRICS if m.field not in s.unsupported]
        req = _request(wanted)
        req.sample1, req.sample2 = s.previous, s.current
        self._mark(tracker, "nvmlGpmMetricsGet")
        pynvml.nvmlGpmMetricsGet(req)
        values: dict[str, float] = {}
        for i, m in enumerate(wanted):
            entry = req.metrics[i]
            if entry.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED:
                s.unsupported.add(m.field)
            elif entry.nvmlReturn == pynvml.NVML_SUCCESS and math.isfinite(entry.value):
                values[m.field] = convert(m, float(entry.value))
        if all(k in values for k in _NVLINK):
            s.nvlink_mib += (values[_NVLINK[0]] + values[_NVLINK[1]]) / MIB * seconds
            values[NVLINK_COUNT] = float(math.floor(s.nvlink_mib))
        if all(k in s.unsupported for k in _NVLINK):
            s.unsupported.add(NVLINK_COUNT)
        s.values = values

    def _mark(self, tracker: CallTracker, call: str) -> None:
        self.call = call
        tracker.mark(call)

    def _free_retired(self) -> None:
        while self._retired:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(self._retired.pop())


class _ThreadRequest(threading.local):
    """The thread's ``nvmlGpmMetricsGet`` argument (19 KB: room for every metric NVML knows), shared
    by the targets its jobs read one after another instead of one per target; a thread left in a
    hung call keeps its own. ``ids``: the metrics it asks for now."""

    request: Any = None
    ids: tuple[int, ...] = ()


_thread_request = _ThreadRequest()


def _request(wanted: list[GpmMetric]) -> Any:
    """This thread's request, asking for ``wanted`` (metric ids written only when they change)."""
    mine = _thread_request
    req = mine.request
    if req is None:
        req = mine.request = pynvml.c_nvmlGpmMetricsGet_t()
        req.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    ids = tuple(m.metric_id for m in wanted)
    if ids != mine.ids:
        req.numMetrics = len(ids)
        for i, metric_id in enumerate(ids):
            req.metrics[i].metricId = metric_id
        mine.ids = ids
    return req


def tracker_call(target: int | None) -> str:
    return "nvmlGpmSampleGet" if target is None else "nvmlGpmMigSampleGet"


def read_gpm(
    tracker: CallTracker, handle: Handle, state: GpmState, instances: list[int], now: float
) -> GpmReading:
    """GPM fields of the whole GPU and of each GPU instance in ``instances``. Blocks; sampling thread only."""
    out = GpmReading()
    if state.supported is None:
        try:
            state.probe(tracker, handle)
        except pynvml.NVMLError as exc:
            message = f"{SUPPORT_CALL}: {describe(exc)}"
            if exc.value in LIFECYCLE_ERRORS:
                out.lifecycle = message
            else:
                out.errors[SUPPORT_CALL] = message
            return out
    if not state.supported:
        out.unsupported[None] = GPM_FIELDS
        return out
    state.drop_except({None, *instances})
    for target in (None, *instances):
        state.read(tracker, handle, target, now, out)
        if out.lifecycle is not None:
            break
    return out
