"""MIG: the MIG devices of a MIG-enabled GPU, read in the GPU's job on the sampling thread.

The layout (which MIG devices exist, their UUIDs, GPU instance ids and profiles) is scanned when
the GPU is first sampled, then every ``scan_interval`` seconds, and at once when a MIG device
stops answering or answers with another UUID (it was destroyed): a changed layout is picked up
without a restart. Each cycle reads every MIG device's UUID and memory; GPM ratios per GPU
instance come from ``gpm``. NVML has no utilization for MIG devices, so instances publish no
GPU_UTIL.

Profile names (``GPU_I_PROFILE``, e.g. ``1g.10gb``) are NVML's GPU instance profile names without
their "MIG " prefix, found through the GPU instance's profile id (a privileged call); where that
is refused, the MIG device's attributes (slices, memory) are matched against the GPU's profiles,
and failing that the name is built from them as ``<slices>g.<GB>gb``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from .calls import (
    LIFECYCLE_ERRORS,
    PROCESSES_CALL,
    READS_BY_CALL,
    CallTracker,
    Handle,
    ProcessReading,
    RunningProcess,
    describe,
    memory_info,
)

T = TypeVar("T")
MODE_CALL = "nvmlDeviceGetMigMode"
MIG_UNSUPPORTED_FIELDS = frozenset({"gpu_utilization_ratio", "memory_copy_utilization_ratio"})
MIG_CALLS = frozenset(
    {
        MODE_CALL,
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetUUID(MIG)",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetMemoryInfo_v2(MIG)",
        "nvmlDeviceGetAttributes_v2",
    }
)


@dataclass(frozen=True, slots=True)
class MigDevice:
    index: int  # nvmlDeviceGetMigDeviceHandleByIndex's index
    handle: Handle
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int | None
    profile: str
    memory_total_bytes: int


@dataclass
class MigState:
    """One GPU's MIG layout as last scanned. The GPU's job only."""

    supported: bool | None = None  # None until asked; False: MIG mode answered NOT_SUPPORTED
    enabled: bool = False
    devices: list[MigDevice] = field(default_factory=list)
    scanned_at: float = float("-inf")
    rescan: bool = False
    profiles: dict[int, tuple[str, int, int]] | None = None  # profile id -> (name, slices, memory MB)
    processes_unsupported: bool = False  # MIG devices answered NOT_SUPPORTED for running processes


@dataclass(frozen=True, slots=True)
class InstanceReading:
    device: MigDevice
    fields: dict[str, float]
    error: str | None = None
    processes: tuple[RunningProcess, ...] | None = None  # None: not read


@dataclass
class MigReading:
    enabled: bool = False
    instances: list[InstanceReading] = field(default_factory=list)
    scanned: bool = False
    errors: dict[str, str] = field(default_factory=dict)
    lifecycle: str | None = None


def read_mig(
    tracker: CallTracker, handle: Handle, state: MigState, scan_interval: float, now: float
) -> MigReading:
    """The MIG devices of the GPU and their memory. Blocks; runs on the sampling thread."""
    out = MigReading()
    if state.supported is False:
        return out
    try:
        if state.rescan or now - state.scanned_at >= scan_interval:
            _scan(tracker, handle, state, now)
            out.scanned = True
        out.enabled = state.enabled
        out.instances = _memory(tracker, state)
        if state.rescan and not out.scanned:  # a MIG device is gone: the layout changed
            _scan(tracker, handle, state, now)
            out.scanned = True
            out.enabled = state.enabled
            out.instances = _memory(tracker, state)
        for reading in out.instances:
            if reading.error is not None:  # still failing after a fresh scan
                out.errors["nvmlDeviceGetMemoryInfo_v2(MIG)"] = f"{reading.device.uuid}: {reading.error}"
    except pynvml.NVMLError as exc:
        call = getattr(exc, "call", MODE_CALL)
        message = f"{call}: {describe(exc)}"
        if exc.value in LIFECYCLE_ERRORS:
            out.lifecycle = message
        else:
            out.errors[call] = message
            state.rescan = True
    tracker.mark("")
    return out


def _memory(tracker: CallTracker, state: MigState) -> list[InstanceReading]:
    """Each MIG device's memory; a device that no longer answers, or answers with another UUID
    (destroyed, and its index reused), asks for a new scan."""
    readings = []
    for dev in state.devices:
        call = "nvmlDeviceGetUUID(MIG)"
        try:
            tracker.mark(call)
            if str(pynvml.nvmlDeviceGetUUID(dev.handle)) != dev.uuid:
                state.rescan = True
                readings.append(InstanceReading(dev, {}, "the MIG device was replaced"))
                continue
            call = "nvmlDeviceGetMemoryInfo_v2(MIG)"
            tracker.mark(call)
            total, used, free, _reserved = memory_info(dev.handle)
        except pynvml.NVMLError as exc:
            if exc.value in LIFECYCLE_ERRORS:
                raise
            state.rescan = True
            readings.append(InstanceReading(dev, {}, f"{call}: {describe(exc)}"))
            continue
        fields = {
            "memory_total_bytes": float(total),
            "memory_used_bytes": float(used),
            "memory_free_bytes": float(free),
        }
        processes = _processes(tracker, dev, state)
        if processes is not None:
            fields.update(processes)
        readings.append(InstanceReading(dev, fields, None, processes.processes if processes else None))
    return readings


def _processes(tracker: CallTracker, dev: MigDevice, state: MigState) -> ProcessReading | None:
    """The MIG device's compute processes (NVML lists a MIG-enabled GPU's processes per MIG device
    to unprivileged callers); None when not available. Only a lifecycle error is raised."""
    if state.processes_unsupported:
        return None
    tracker.mark(f"{PROCESSES_CALL}(MIG)")
    try:
        reading = READS_BY_CALL[PROCESSES_CALL].read(dev.handle)
    except pynvml.NVMLError as exc:
        if exc.value in LIFECYCLE_ERRORS:
            raise
        state.processes_unsupported = exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED
        return None
    return reading if isinstance(reading, ProcessReading) else None


def _call(tracker: CallTracker, name: str, fn: Callable[..., T], *args: Any) -> T:
    """Run one NVML call by name; an NVMLError carries the call's name for the message."""
    tracker.mark(name)
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        exc.call = name
        raise


def _scan(tracker: CallTracker, handle: Handle, state: MigState, now: float) -> None:
    state.rescan = False
    try:
        current, _pending = _call(tracker, MODE_CALL, pynvml.nvmlDeviceGetMigMode, handle)
    except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):  # no MIG (or too old a driver)
        state.supported, state.enabled, state.devices = False, False, []
        return
    state.supported, state.scanned_at = True, now
    state.enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
    if not state.enabled:
        state.devices = []
        return
    count = int(
        _call(tracker, "nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
    )
    known = {d.uuid: d for d in state.devices}
    devices = []
    for index in range(count):
        try:
            mig = _call(tracker, "nvmlDeviceGetMigDeviceHandleByIndex",
                        pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, index)  # fmt: skip
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            continue  # no MIG device at this index
        uuid = str(_call(tracker, "nvmlDeviceGetUUID(MIG)", pynvml.nvmlDeviceGetUUID, mig))
        old = known.get(uuid)
        if old is not None and old.index == index:
            devices.append(MigDevice(index, mig, uuid, old.gpu_instance_id, old.compute_instance_id,
                                     old.profile, old.memory_total_bytes))  # fmt: skip
            continue
        gi = int(_call(tracker, "nvmlDeviceGetGpuInstanceId", pynvml.nvmlDeviceGetGpuInstanceId, mig))
        ci: int | None = None
        with contextlib.suppress(pynvml.NVMLError_NotSupported):
            ci = int(_call(tracker, "nvmlDeviceGetComputeInstanceId",
                           pynvml.nvmlDeviceGetComputeInstanceId, mig))  # fmt: skip
        total = _call(tracker, "nvmlDeviceGetMemoryInfo_v2(MIG)", memory_info, mig)[0]
        devices.append(MigDevice(index, mig, uuid, gi, ci, _profile(tracker, handle, mig, gi, state), total))
    state.devices = devices


def profile_name(name: object, slices: int, memory_mb: int) -> str:
    """NVML's profile name without "MIG " ("MIG 1g.10gb" -> "1g.10gb"), or ``<slices>g.<GB>gb``."""
    text = name.decode(errors="replace") if isinstance(name, bytes) else str(name or "")
    text = text.strip().removeprefix("MIG ").strip()
    return text or f"{slices}g.{round(memory_mb / 1024)}gb"


def _profiles(tracker: CallTracker, handle: Handle, state: MigState) -> dict[int, tuple[str, int, int]]:
    if state.profiles is None:
        table: dict[int, tuple[str, int, int]] = {}
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            tracker.mark("nvmlDeviceGetGpuInstanceProfileInfoV")
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)
            except pynvml.NVMLError as exc:
                if exc.value in LIFECYCLE_ERRORS:
                    raise
                continue  # not a profile of this GPU
            slices, memory = int(info.sliceCount), int(info.memorySizeMB)
            table.setdefault(int(info.id), (profile_name(info.name, slices, memory), slices, memory))
        state.profiles = table
    return state.profiles


def _profile(tracker: CallTracker, handle: Handle, mig: Handle, gi: int, state: MigState) -> str:
    table = _profiles(tracker, handle, state)
    try:  # exact: the GPU instance's profile id (needs a privileged user)
        instance = _call(
            tracker, "nvmlDeviceGetGpuInstanceById", pynvml.nvmlDeviceGetGpuInstanceById, handle, gi
        )
        info = _call(tracker, "nvmlGpuInstanceGetInfo", pynvml.nvmlGpuInstanceGetInfo, instance)
        found = table.get(int(info.profileId))
        if found is not None:
            return found[0]
    except pynvml.NVMLError as exc:
        if exc.value in LIFECYCLE_ERRORS:
            raise
    attrs = _call(tracker, "nvmlDeviceGetAttributes_v2", pynvml.nvmlDeviceGetAttributes_v2, mig)
    slices, memory = int(attrs.gpuInstanceSliceCount), int(attrs.memorySizeMB)
    matches = sorted(name for name, s, m in table.values() if s == slices and m == memory)
    plain = [n for n in matches if "+" not in n]  # "1g.10gb" rather than "1g.10gb+me"
    return (plain or matches or [profile_name("", slices, memory)])[0]
