"""What the NVML source reads from one GPU, and how each answer becomes SI-unit fields.

Everything here blocks (it calls the driver through nvidia-ml-py) and runs on a GPU's own worker
thread, never on the event loop. Functions return plain results; the source applies them on the
event loop, so a late answer from a call that hung is simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import pynvml

if TYPE_CHECKING:
    from .nvml_gpm import GpmReading
    from .nvml_mig import MigReading

Handle = Any  # pynvml's c_nvmlDevice_t

# Errors after which NVML must be shut down and initialised again (PROTOCOLS §3).
LIFECYCLE_ERRORS = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
    }
)

# nvmlDeviceGetPcieThroughput answers in KB/s with 1 KiB granularity.
KIB = 1024
CLOCK_EVENT_REASONS_KEY = "clock_event_reasons"
PROCESSES_CALL = "nvmlDeviceGetComputeRunningProcesses"
NO_INSTANCE = 0xFFFFFFFF  # NVML's "no GPU instance" id


class CallTracker(Protocol):
    def mark(self, call: str) -> None:
        """Record that ``call`` is about to run (so a hang can be reported by name)."""


def describe(exc: BaseException) -> str:
    """One line for an NVML error: its text and code."""
    if isinstance(exc, pynvml.NVMLError):
        return f"{exc} (NVML error {exc.value})"
    return f"{type(exc).__name__}: {exc}"


def _utilization(h: Handle) -> dict[str, float]:
    u = pynvml.nvmlDeviceGetUtilizationRates(h)
    return {"gpu_utilization_ratio": u.gpu / 100, "memory_copy_utilization_ratio": u.memory / 100}


def memory_info(h: Handle) -> tuple[int, int, int, int | None]:
    """(total, used, free, reserved) in bytes: memory v2, or v1 (no reserved) on older drivers."""
    try:
        m = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        return int(m.total), int(m.used), int(m.free), int(m.reserved)
    except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch):
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        return int(m.total), int(m.used), int(m.free), None


def _memory(h: Handle) -> dict[str, float]:
    total, used, free, reserved = memory_info(h)
    out = {
        "memory_total_bytes": float(total),
        "memory_used_bytes": float(used),
        "memory_free_bytes": float(free),
    }
    if reserved is not None:
        out["memory_reserved_bytes"] = float(reserved)
    return out


def _memory_temperature(h: Handle) -> dict[str, float]:
    (value,) = pynvml.nvmlDeviceGetFieldValues(h, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    if value.nvmlReturn != pynvml.NVML_SUCCESS:  # the call succeeds if any field did: check the entry
        raise pynvml.NVMLError(value.nvmlReturn)
    return {"memory_temperature_celsius": float(_field_number(value))}


def _field_number(value: Any) -> float:
    kinds = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    }
    member = kinds.get(value.valueType)
    if member is None:
        raise ValueError(f"field value of unexpected type {value.valueType}")
    return float(getattr(value.value, member))


@dataclass(frozen=True, slots=True)
class RunningProcess:
    """One compute process on a GPU (pod attribution's ``GpuProcess`` shape)."""

    pid: int
    used_memory_bytes: int | None
    gpu_instance_id: int | None = None  # on a MIG-enabled GPU: the GPU instance it runs in


class ProcessReading(dict[str, float]):
    """The running-processes fields, plus the processes themselves (pod attribution reads them)."""

    processes: tuple[RunningProcess, ...] = ()


def _processes(h: Handle) -> dict[str, float]:
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    used = sum(int(p.usedGpuMemory) for p in procs if p.usedGpuMemory is not None)
    out = ProcessReading(compute_processes=float(len(procs)), compute_processes_memory_bytes=float(used))
    out.processes = tuple(
        RunningProcess(
            int(p.pid),
            None if p.usedGpuMemory is None else int(p.usedGpuMemory),
            None if getattr(p, "gpuInstanceId", NO_INSTANCE) == NO_INSTANCE else int(p.gpuInstanceId),
        )
        for p in procs
    )
    return out


def _ecc(h: Handle) -> dict[str, float]:
    get = pynvml.nvmlDeviceGetTotalEccErrors
    return {
        "ecc_corrected_count": float(
            get(h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
        ),
        "ecc_uncorrected_count": float(
            get(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
        ),
    }


def _pcie_throughput(h: Handle) -> dict[str, float]:
    get = pynvml.nvmlDeviceGetPcieThroughput
    return {
        "pcie_tx_bytes_per_second": float(get(h, pynvml.NVML_PCIE_UTIL_TX_BYTES) * KIB),
        "pcie_rx_bytes_per_second": float(get(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) * KIB),
    }


@dataclass(frozen=True, slots=True)
class Read:
    """One NVML query: its name (as logged and as NVML calls it), the fields it fills, the reader."""

    call: str
    fields: tuple[str, ...]
    read: Callable[[Handle], dict[str, float]]
    slow: bool = False  # runs on the slow cadence; its last values are reused in between
    needs_ecc: bool = False  # only when ECC is on


def _one(call: str, key: str, read: Callable[[Handle], float], scale: float = 1.0) -> Read:
    """A query that fills one field: ``key = read(handle) * scale``. Scales below 1 divide by their
    exact inverse (1e-3 → ``/ 1000``), which converts integers with less rounding noise."""
    if scale >= 1:
        return Read(call, (key,), lambda h: {key: float(read(h)) * scale})
    divisor = round(1 / scale)
    return Read(call, (key,), lambda h: {key: float(read(h)) / divisor})


_SM, _MEM, _GPU_SENSOR = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU
_MEMORY_FIELDS = ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes")

READS: tuple[Read, ...] = (
    Read(
        "nvmlDeviceGetUtilizationRates",
        ("gpu_utilization_ratio", "memory_copy_utilization_ratio"),
        _utilization,
    ),
    Read("nvmlDeviceGetMemoryInfo_v2", _MEMORY_FIELDS, _memory),
    _one(
        "nvmlDeviceGetTemperatureV",
        "gpu_temperature_celsius",
        lambda h: pynvml.nvmlDeviceGetTemperatureV(h, _GPU_SENSOR),
    ),
    Read("nvmlDeviceGetFieldValues(MEMORY_TEMP)", ("memory_temperature_celsius",), _memory_temperature),
    _one("nvmlDeviceGetPowerUsage", "power_usage_watts", pynvml.nvmlDeviceGetPowerUsage, 1e-3),  # mW
    _one(
        "nvmlDeviceGetEnforcedPowerLimit", "power_limit_watts", pynvml.nvmlDeviceGetEnforcedPowerLimit, 1e-3
    ),
    _one("nvmlDeviceGetClockInfo(SM)", "sm_clock_hz", lambda h: pynvml.nvmlDeviceGetClockInfo(h, _SM), 1e6),
    _one(
        "nvmlDeviceGetClockInfo(MEM)",
        "memory_clock_hz",
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, _MEM),
        1e6,
    ),
    _one(
        "nvmlDeviceGetMaxClockInfo(SM)",
        "sm_clock_max_hz",
        lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, _SM),
        1e6,
    ),
    _one(
        "nvmlDeviceGetMaxClockInfo(MEM)",
        "memory_clock_max_hz",
        lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, _MEM),
        1e6,
    ),
    _one(
        "nvmlDeviceGetTotalEnergyConsumption",
        "energy_joules",
        pynvml.nvmlDeviceGetTotalEnergyConsumption,
        1e-3,
    ),
    _one("nvmlDeviceGetPcieReplayCounter", "pcie_replay_count", pynvml.nvmlDeviceGetPcieReplayCounter),
    _one(
        "nvmlDeviceGetEncoderUtilization",
        "encoder_utilization_ratio",
        lambda h: pynvml.nvmlDeviceGetEncoderUtilization(h)[0],
        0.01,
    ),
    _one(
        "nvmlDeviceGetDecoderUtilization",
        "decoder_utilization_ratio",
        lambda h: pynvml.nvmlDeviceGetDecoderUtilization(h)[0],
        0.01,
    ),
    _one("nvmlDeviceGetCurrPcieLinkGeneration", "pcie_link_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration),
    _one(
        "nvmlDeviceGetMaxPcieLinkGeneration", "pcie_link_gen_max", pynvml.nvmlDeviceGetMaxPcieLinkGeneration
    ),
    _one("nvmlDeviceGetCurrPcieLinkWidth", "pcie_link_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth),
    _one("nvmlDeviceGetMaxPcieLinkWidth", "pcie_link_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth),
    _one(
        "nvmlDeviceGetCurrentClocksEventReasons",
        CLOCK_EVENT_REASONS_KEY,
        pynvml.nvmlDeviceGetCurrentClocksEventReasons,
    ),
    Read(
        "nvmlDeviceGetTotalEccErrors", ("ecc_corrected_count", "ecc_uncorrected_count"), _ecc, needs_ecc=True
    ),
    Read(
        "nvmlDeviceGetComputeRunningProcesses",
        ("compute_processes", "compute_processes_memory_bytes"),
        _processes,
    ),
    Read(
        "nvmlDeviceGetPcieThroughput",
        ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"),
        _pcie_throughput,
        slow=True,
    ),
)

READS_BY_CALL = {r.call: r for r in READS}
ECC_MODE_CALL = "nvmlDeviceGetEccMode"


@dataclass
class DeviceResult:
    """What one sampling job found on one GPU."""

    fields: dict[str, float] = field(default_factory=dict)
    not_supported: set[str] = field(default_factory=set)  # calls that answered NOT_SUPPORTED
    errors: dict[str, str] = field(default_factory=dict)  # call -> message, for other errors
    succeeded: set[str] = field(default_factory=set)
    lifecycle: str | None = None  # set when a lifecycle error stopped the job
    processes: tuple[RunningProcess, ...] | None = None  # None: not read this cycle
    ecc_enabled: bool | None = None
    slow_read: bool = False
    gpm: GpmReading | None = None  # filled by nvml_device.run_job
    mig: MigReading | None = None


def sample_device(
    tracker: CallTracker, handle: Handle, skip: frozenset[str], ecc_enabled: bool | None, include_slow: bool
) -> DeviceResult:
    """Run every read not in ``skip`` (calls known NOT_SUPPORTED). Blocks; runs on a worker."""
    result = DeviceResult(ecc_enabled=ecc_enabled, slow_read=include_slow)
    if ecc_enabled is None and READS_BY_CALL["nvmlDeviceGetTotalEccErrors"].call not in skip:
        tracker.mark(ECC_MODE_CALL)
        try:
            current, _pending = pynvml.nvmlDeviceGetEccMode(handle)
            result.ecc_enabled = current == pynvml.NVML_FEATURE_ENABLED
            result.succeeded.add(ECC_MODE_CALL)
        except pynvml.NVMLError as exc:
            if exc.value in LIFECYCLE_ERRORS:
                result.lifecycle = f"{ECC_MODE_CALL}: {describe(exc)}"
                return result
            if exc.value != pynvml.NVML_ERROR_NOT_SUPPORTED:
                result.errors[ECC_MODE_CALL] = f"{ECC_MODE_CALL}: {describe(exc)}"
            else:
                result.ecc_enabled = False
    for read in READS:
        if read.call in skip or (read.slow and not include_slow):
            continue
        if read.needs_ecc and not result.ecc_enabled:
            if result.ecc_enabled is False:  # ECC off or not supported: NVML answers NOT_SUPPORTED
                result.not_supported.add(read.call)
            continue
        tracker.mark(read.call)
        try:
            values = read.read(handle)
        except pynvml.NVMLError as exc:
            if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                result.not_supported.add(read.call)
            elif exc.value in LIFECYCLE_ERRORS:
                result.lifecycle = f"{read.call}: {describe(exc)}"
                return result
            else:
                result.errors[read.call] = f"{read.call}: {describe(exc)}"
            continue
        except Exception as exc:  # a malformed answer: that field is left out, the rest go on
            result.errors[read.call] = f"{read.call}: {describe(exc)}"
            continue
        result.fields.update(values)
        result.succeeded.add(read.call)
        if isinstance(values, ProcessReading):
            result.processes = values.processes
    tracker.mark("")
    return result
