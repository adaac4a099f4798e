"""The immutable data that one sampling cycle produces and everything published is rendered from.

Field values are kept in SI base units (bytes, watts, joules, hertz, degrees Celsius, ratios 0-1);
the metric table (``exporter.metrics``) converts them to each published family's unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What identifies one GPU (or one MIG instance) and never changes while it is present."""

    index: int
    uuid: str
    pci_bus_id: str
    model: str
    minor_number: int
    driver_version: str
    memory_total_bytes: int
    # MIG instances only: the profile name (e.g. "1g.10gb") and the GPU instance id.
    mig_profile: str | None = None
    mig_instance_id: int | None = None
    parent_uuid: str | None = None

    @property
    def device(self) -> str:
        return f"nvidia{self.minor_number}"

    @property
    def key(self) -> str:
        """Stable key of this device across cycles (UUID; MIG instances keep their own UUID)."""
        return self.uuid


@dataclass(frozen=True, slots=True)
class PodRef:
    pod: str
    namespace: str
    container: str


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One device's reading in one cycle.

    ``up`` is False when the device failed this cycle (lost, hung, erroring): its identity is
    still known so ``rightsizer_gpu_up`` can say which GPU is down, but ``fields`` is empty.
    ``unsupported`` names the fields the device answered NOT_SUPPORTED for (probed once).
    """

    identity: GpuIdentity
    up: bool
    fields: Mapping[str, float] = field(default_factory=dict)
    unsupported: frozenset[str] = frozenset()
    error: str | None = None
    pod: PodRef | None = None
    # Bitmask of active clock-event (throttle) reasons, NVML's nvmlClocksEventReason* bits.
    clock_event_reasons: int | None = None
    # Why a group of fields is missing, for /api/v1/gpus (e.g. {"gpm": "GPM needs Hopper or newer"}).
    unsupported_reasons: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    name: str
    success: bool
    duration_seconds: float
    error: str | None = None


@dataclass(frozen=True, slots=True)
class GpuReading:
    """What a GPU source returns for one cycle."""

    timestamp: float
    gpus: tuple[GpuSample, ...]
    status: CollectorStatus


@dataclass(frozen=True, slots=True)
class Row:
    """One series of an extension family: optional GPU identity labels, then its own labels."""

    value: float
    labels: tuple[tuple[str, str], ...] = ()
    gpu: GpuSample | None = None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one cycle measured. Immutable; replaced, never mutated, each cycle."""

    timestamp: float
    hostname: str
    gpus: tuple[GpuSample, ...]
    collectors: tuple[CollectorStatus, ...]
    # Rows of "extension" families (queues, right-sizing scores), keyed by family name.
    rows: Mapping[str, tuple[Row, ...]] = field(default_factory=dict)
    # Subsystem data for the JSON API (e.g. "queues", "scores"), keyed by subsystem.
    api: Mapping[str, object] = field(default_factory=dict)
