"""What the NVML source reads from one GPU, and how each answer becomes SI-unit fields.

Everything here blocks (it calls the driver through nvidia-ml-py) and runs on the sampling thread
(``sampling``), never on the event loop. Functions return plain results; the source applies them on the
event loop, so a late answer from a call that hung is simply dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import pynvml

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


def field_number(value: Any) -> float:
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
    static: bool = False  # never changes: read once per NVML initialisation (and MIG layout)
    field_ids: tuple[int, ...] = ()  # one nvmlDeviceGetFieldValues entry per field, batched per cycle
    divisor: float = 1.0  # field value / divisor (field reads only)


def _one(call: str, key: str, read: Callable[[Handle], float], scale: float = 1.0) -> Read:
    """A query that fills one field: ``key = read(handle) * scale``. Scales below 1 divide by their
    exact inverse (1e-3 → ``/ 1000``), which converts integers with less rounding noise."""
    if scale >= 1:
        return Read(call, (key,), lambda h: {key: float(read(h)) * scale})
    divisor = round(1 / scale)
    return Read(call, (key,), lambda h: {key: float(read(h)) / divisor})


_SM, _MEM, _GPU_SENSOR = pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_MEM, pynvml.NVML_TEMPERATURE_GPU
_MEMORY_FIELDS = ("memory_total_bytes", "memory_used_bytes", "memory_free_bytes", "memory_reserved_bytes")


def _static(read: Read) -> Read:
    return replace(read, static=True)


def _slow(read: Read) -> Read:
    return replace(read, slow=True)


def _field(
    name: str, ids: tuple[int, ...], fields: tuple[str, ...], divisor: float = 1.0, **kw: bool
) -> Read:
    """Fields read through one batched nvmlDeviceGetFieldValues call per cycle (see ``_read_fields``)."""
    return Read(f"nvmlDeviceGetFieldValues({name})", fields, _no_reader, field_ids=ids, divisor=divisor, **kw)


def _no_reader(_h: Handle) -> dict[str, float]:
    raise AssertionError("field reads are batched by sample_device")


# The call plan of one GPU. Each cycle: the reads below that are neither static nor slow, with every
# field read in one nvmlDeviceGetFieldValues call. Static reads: once per NVML initialisation (and
# MIG layout change), their values reused. Slow reads: every ``slow_interval_seconds``.
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
    _field("MEMORY_TEMP", (pynvml.NVML_FI_DEV_MEMORY_TEMP,), ("memory_temperature_celsius",)),
    # Counters read on the slow cadence: on an H200 (driver 580) the energy counter costs 4 ms of CPU
    # per read (nvmlDeviceGetFieldValues and nvmlDeviceGetTotalEnergyConsumption alike), 2,000 times
    # a power reading, and the PCIe replay counter 0.15 ms; a counter read every 10 s still gives
    # exact rate() and increase() over any window a dashboard uses.
    _slow(
        _field(
            "TOTAL_ENERGY_CONSUMPTION",
            (pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,),
            ("energy_joules",),
            1000,
        )
    ),
    _slow(_field("PCIE_REPLAY_COUNTER", (pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER,), ("pcie_replay_count",))),
    _field(
        "ECC_VOL_TOTAL",
        (pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL, pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL),
        ("ecc_corrected_count", "ecc_uncorrected_count"),
        needs_ecc=True,
    ),
    _one("nvmlDeviceGetPowerUsage", "power_usage_watts", pynvml.nvmlDeviceGetPowerUsage, 1e-3),  # mW
    _one("nvmlDeviceGetClockInfo(SM)", "sm_clock_hz", lambda h: pynvml.nvmlDeviceGetClockInfo(h, _SM), 1e6),
    _one(
        "nvmlDeviceGetClockInfo(MEM)",
        "memory_clock_hz",
        lambda h: pynvml.nvmlDeviceGetClockInfo(h, _MEM),
        1e6,
    ),
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
    _one(
        "nvmlDeviceGetCurrentClocksEventReasons",
        CLOCK_EVENT_REASONS_KEY,
        pynvml.nvmlDeviceGetCurrentClocksEventReasons,
    ),
    Read(
        "nvmlDeviceGetComputeRunningProcesses",
        ("compute_processes", "compute_processes_memory_bytes"),
        _processes,
    ),
    _static(
        _one(
            "nvmlDeviceGetMaxClockInfo(SM)",
            "sm_clock_max_hz",
            lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, _SM),
            1e6,
        )
    ),
    _static(
        _one(
            "nvmlDeviceGetMaxClockInfo(MEM)",
            "memory_clock_max_hz",
            lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, _MEM),
            1e6,
        )
    ),
    _static(
        _one(
            "nvmlDeviceGetMaxPcieLinkGeneration",
            "pcie_link_gen_max",
            pynvml.nvmlDeviceGetMaxPcieLinkGeneration,
        )
    ),
    _static(
        _one("nvmlDeviceGetMaxPcieLinkWidth", "pcie_link_width_max", pynvml.nvmlDeviceGetMaxPcieLinkWidth)
    ),
    _static(_one("nvmlDeviceGetNumaNodeId", "numa_node", pynvml.nvmlDeviceGetNumaNodeId)),  # -1: none
    _slow(
        _one(
            "nvmlDeviceGetEnforcedPowerLimit",
            "power_limit_watts",
            pynvml.nvmlDeviceGetEnforcedPowerLimit,
            1e-3,
        )
    ),
    _slow(
        _one(
            "nvmlDeviceGetCurrPcieLinkGeneration", "pcie_link_gen", pynvml.nvmlDeviceGetCurrPcieLinkGeneration
        )
    ),
    _slow(_one("nvmlDeviceGetCurrPcieLinkWidth", "pcie_link_width", pynvml.nvmlDeviceGetCurrPcieLinkWidth)),
    Read(
        "nvmlDeviceGetPcieThroughput",
        ("pcie_tx_bytes_per_second", "pcie_rx_bytes_per_second"),
        _pcie_throughput,
        slow=True,
    ),
)

READS_BY_CALL = {r.call: r for r in READS}
ECC_MODE_CALL = "nvmlDeviceGetEccMode"
ECC_CALL = "nvmlDeviceGetFieldValues(ECC_VOL_TOTAL)"
FIELD_VALUES_CALL = "nvmlDeviceGetFieldValues"
STATIC_CALLS = frozenset(r.call for r in READS if r.static)
