"""Bringing NVML up (and back up after a lifecycle error) and finding its GPUs.

Blocking; runs on the source's control worker thread, never on the event loop.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace

import pynvml

from rightsizer_core.snapshot import GpuIdentity

from .calls import CallTracker, Handle, describe, memory_info


@dataclass(frozen=True, slots=True)
class Enumerated:
    """One GPU found by enumeration: its identity and handle."""

    identity: GpuIdentity
    handle: Handle


@dataclass
class Enumeration:
    driver_version: str
    devices: list[Enumerated] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line per index that did not answer


def read_identity(tracker: CallTracker, handle: Handle, index: int, driver_version: str) -> GpuIdentity:
    """What identifies one GPU. Raises ``pynvml.NVMLError`` if the GPU does not answer."""
    tracker.mark("nvmlDeviceGetUUID")
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    tracker.mark("nvmlDeviceGetName")
    name = pynvml.nvmlDeviceGetName(handle)
    tracker.mark("nvmlDeviceGetPciInfo_v3")
    bus_id = pynvml.nvmlDeviceGetPciInfo(handle).busId
    bus_id = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    tracker.mark("nvmlDeviceGetMinorNumber")
    try:
        minor = int(pynvml.nvmlDeviceGetMinorNumber(handle))
    except pynvml.NVMLError_NotSupported:
        minor = index
    tracker.mark("nvmlDeviceGetMemoryInfo_v2")
    total, _used, _free, _reserved = memory_info(handle)
    return GpuIdentity(
        index=index,
        uuid=str(uuid),
        pci_bus_id=bus_id,
        model=str(name),
        minor_number=minor,
        driver_version=driver_version,
        memory_total_bytes=total,
    )


def initialise(tracker: CallTracker, shutdown_first: bool, known: dict[str, GpuIdentity]) -> Enumeration:
    """(Re-)initialise NVML and enumerate its GPUs; identities of ``known`` UUIDs are reused.

    Raises ``pynvml.NVMLError`` when NVML itself cannot be initialised or counted."""
    if shutdown_first:
        tracker.mark("nvmlShutdown")
        with contextlib.suppress(pynvml.NVMLError):  # already shut down after a failed re-init
            pynvml.nvmlShutdown()
    tracker.mark("nvmlInitWithFlags")
    pynvml.nvmlInit()
    tracker.mark("nvmlSystemGetDriverVersion")
    driver = str(pynvml.nvmlSystemGetDriverVersion())
    tracker.mark("nvmlDeviceGetCount_v2")
    count = pynvml.nvmlDeviceGetCount()
    out = Enumeration(driver)
    for index in range(count):
        try:
            tracker.mark("nvmlDeviceGetHandleByIndex_v2")
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            tracker.mark("nvmlDeviceGetUUID")
            uuid = str(pynvml.nvmlDeviceGetUUID(handle))
            old = known.get(uuid)
            if old is not None:
                identity = replace(old, index=index, driver_version=driver)
            else:
                identity = read_identity(tracker, handle, index, driver)
        except pynvml.NVMLError as exc:
            out.failures.append(f"GPU index {index}: {describe(exc)}")
            continue
        out.devices.append(Enumerated(identity, handle))
    tracker.mark("")
    return out


def shutdown(tracker: CallTracker) -> None:
    tracker.mark("nvmlShutdown")
    with contextlib.suppress(pynvml.NVMLError):
        pynvml.nvmlShutdown()
