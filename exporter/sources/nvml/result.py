"""What one sampling job found on one GPU (``DeviceResult``): the fields of the call plan in ``calls``
plus the GPU's GPM and MIG readings. Apart from ``calls``, so ``gpm`` and ``mig`` can use the call
plan without an import cycle."""

from __future__ import annotations

from dataclasses import dataclass, field

from .calls import RunningProcess
from .gpm import GpmReading
from .mig import MigReading


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
    gpm: GpmReading | None = None  # filled by device.run_job
    mig: MigReading | None = None
