"""What the NVML source remembers about one GPU, and how a sampling job's result becomes a sample.

Lives on the event loop: worker threads return ``DeviceResult`` values and never touch this state,
so the late answer of a call that hung cannot change anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..logs import event
from ..snapshot import GpuIdentity, GpuSample
from .nvml_calls import CLOCK_EVENT_REASONS_KEY, READS, READS_BY_CALL, DeviceResult, Handle, RunningProcess
from .nvml_worker import NvmlWorker

log = logging.getLogger("rightsizer.nvml")

_SLOW_FIELDS = frozenset(f for r in READS if r.slow for f in r.fields)


@dataclass
class Device:
    identity: GpuIdentity
    worker: NvmlWorker
    handle: Handle | None = None  # None while the GPU is down after a lifecycle error
    down: str | None = None  # why it is down
    unsupported: set[str] = field(default_factory=set)  # calls that answered NOT_SUPPORTED
    ecc_enabled: bool | None = None
    call_errors: dict[str, str] = field(default_factory=dict)  # call -> last error, to log changes only
    slow_fields: dict[str, float] = field(default_factory=dict)  # last values of slow calls
    slow_at: float = float("-inf")
    processes: tuple[RunningProcess, ...] = ()  # as of the last cycle it answered

    def unsupported_fields(self) -> frozenset[str]:
        return frozenset(f for call in self.unsupported for f in READS_BY_CALL[call].fields)

    def forget_probe(self) -> None:
        """NVML was re-initialised for this GPU: probe it again, as after a fresh start."""
        self.unsupported.clear()
        self.ecc_enabled = None
        self.call_errors.clear()
        self.slow_fields.clear()
        self.slow_at = float("-inf")

    def down_sample(self, error: str, problems: list[str]) -> GpuSample:
        """Published with its identity (so ``rightsizer_gpu_up 0`` names it) and no fields."""
        problems.append(f"GPU {self.identity.index} ({self.identity.uuid}): {error}")
        self.processes = ()
        return GpuSample(self.identity, False, error=error)

    def sample(self, result: DeviceResult, now: float, problems: list[str]) -> GpuSample:
        """This cycle's sample from a finished job without a lifecycle error."""
        self._note_calls(result)
        self.processes = result.processes or ()
        if result.slow_read:
            self.slow_at = now
            self.slow_fields = {k: v for k, v in result.fields.items() if k in _SLOW_FIELDS}
        fields = {**self.slow_fields, **result.fields}
        reasons = fields.pop(CLOCK_EVENT_REASONS_KEY, None)
        problems.extend(f"GPU {self.identity.index}: {message}" for message in result.errors.values())
        return GpuSample(
            self.identity,
            True,
            fields,
            self.unsupported_fields(),
            clock_event_reasons=None if reasons is None else int(reasons),
        )

    def _note_calls(self, result: DeviceResult) -> None:
        """Remember NOT_SUPPORTED; log call errors once per change, and their recovery."""
        ident = self.identity
        where = {"gpu": ident.index, "uuid": ident.uuid}
        for call in sorted(result.not_supported - self.unsupported):
            fields = ",".join(READS_BY_CALL[call].fields)
            event(
                log,
                logging.INFO,
                "NVML call not supported; its series are left out",
                **where,
                call=call,
                fields=fields,
            )
        self.unsupported |= result.not_supported
        if result.ecc_enabled is not None:
            self.ecc_enabled = result.ecc_enabled
        for call, message in result.errors.items():
            if self.call_errors.get(call) != message:
                event(
                    log,
                    logging.WARNING,
                    "NVML call failed; its series are left out",
                    **where,
                    call=call,
                    error=message,
                )
        for call in [c for c in self.call_errors if c in result.succeeded or c in result.not_supported]:
            del self.call_errors[call]
            event(log, logging.INFO, "NVML call answers again", **where, call=call)
        self.call_errors.update(result.errors)
