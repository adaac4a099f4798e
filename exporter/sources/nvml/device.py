"""What the NVML source remembers about one GPU, and how a sampling job's result becomes a sample.

Lives on the event loop: sampling threads return ``DeviceResult`` values and never touch this
state, so the late answer of a call that hung cannot change anything. The GPM sample buffers and
the MIG layout (``gpm``, ``mig``) are the exception: they belong to the thread running the GPU's
job, which is handed them with each job (a GPU's jobs never overlap).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from rightsizer_core.logs import event
from rightsizer_core.snapshot import GpuIdentity, GpuSample

from .calls import (
    CLOCK_EVENT_REASONS_KEY,
    READS,
    READS_BY_CALL,
    STATIC_CALLS,
    CallTracker,
    Handle,
    RunningProcess,
)
from .events import XidReport
from .gpm import GPM_CALLS, GPM_FIELDS, GpmReading, GpmState, read_gpm
from .mig import MIG_CALLS, MIG_UNSUPPORTED_FIELDS, MigDevice, MigReading, MigState, read_mig
from .read import sample_device
from .result import DeviceResult
from .sampling import CallState

log = logging.getLogger("rightsizer.nvml")

_SLOW_FIELDS = frozenset(f for r in READS if r.slow for f in r.fields)
PCIE_THROUGHPUT_CALL = "nvmlDeviceGetPcieThroughput"
MIG_UTILIZATION_REASON = "NVML has no utilization for MIG devices"


@dataclass(frozen=True, slots=True)
class JobSettings:
    gpm_spacing: float
    mig_scan_interval: float


def run_job(
    tracker: CallTracker,
    handle: Handle,
    skip: frozenset[str],
    ecc_enabled: bool | None,
    slow: bool,
    gpm: GpmState,
    mig: MigState,
    settings: JobSettings,
    now: float,
) -> DeviceResult:
    """One cycle's reads of one GPU: the NVML queries, its MIG devices, GPM. Blocks; sampling thread."""
    whole = gpm.series.get(None)
    if (
        gpm.supported
        and whole is not None
        and not whole.not_supported
        and not whole.unsupported
        & {
            "pcie_tx_bytes_per_second",
            "pcie_rx_bytes_per_second",
        }
    ):
        skip = skip | {PCIE_THROUGHPUT_CALL}  # GPM measures PCIe over the whole interval instead
    result = sample_device(tracker, handle, skip, ecc_enabled, slow)
    if result.lifecycle is not None:
        return result
    result.mig = read_mig(tracker, handle, mig, settings.mig_scan_interval, now)
    result.lifecycle = result.mig.lifecycle
    if result.lifecycle is not None:
        return result
    instances = sorted({i.device.gpu_instance_id for i in result.mig.instances})
    result.gpm = read_gpm(tracker, handle, gpm, instances, now)
    result.lifecycle = result.gpm.lifecycle
    result.errors.update(result.mig.errors)
    result.errors.update(result.gpm.errors)
    result.succeeded |= (GPM_CALLS | MIG_CALLS) - result.errors.keys()  # so their errors log recovery
    tracker.mark("")
    return result


@dataclass
class Device:
    identity: GpuIdentity
    calls: CallState = field(default_factory=CallState)  # its job on the sampling thread
    handle: Handle | None = None  # None while the GPU is down after a lifecycle error
    down: str | None = None  # why it is down
    unsupported: set[str] = field(default_factory=set)  # calls that answered NOT_SUPPORTED
    ecc_enabled: bool | None = None
    call_errors: dict[str, str] = field(default_factory=dict)  # call -> last error, to log changes only
    slow_fields: dict[str, float] = field(default_factory=dict)  # last values of slow calls
    slow_at: float = float("-inf")
    static_fields: dict[str, float] = field(default_factory=dict)  # values that never change, read once
    static_done: set[str] = field(default_factory=set)  # static calls answered since NVML was initialised
    layout_known: bool = False  # the MIG layout was read once since NVML was initialised
    processes: tuple[RunningProcess, ...] = ()  # as of the last cycle it answered
    gpm: GpmState = field(default_factory=lambda: GpmState(0.1))
    mig: MigState = field(default_factory=MigState)
    instances: tuple[GpuIdentity, ...] = ()  # MIG instances as of the last cycle
    instance_processes: dict[str, tuple[RunningProcess, ...]] = field(default_factory=dict)  # by MIG UUID

    def running_processes(self) -> dict[str, list[RunningProcess]]:
        """Compute processes by device UUID: each MIG instance's under its MIG device UUID, the
        rest under the GPU's."""
        instances = {i.mig_instance_id for i in self.instances}
        out = {self.identity.uuid: [p for p in self.processes if p.gpu_instance_id not in instances]}
        out.update({uuid: list(procs) for uuid, procs in self.instance_processes.items()})
        return out

    def skip(self) -> frozenset[str]:
        """Calls the next job leaves out: NOT_SUPPORTED, and static values already read."""
        return frozenset(self.unsupported | self.static_done)

    def unsupported_fields(self) -> frozenset[str]:
        return frozenset(f for call in self.unsupported for f in READS_BY_CALL[call].fields)

    def forget_probe(self) -> None:
        """NVML was re-initialised for this GPU: probe it again, as after a fresh start."""
        self.unsupported.clear()
        self.ecc_enabled = None
        self.call_errors.clear()
        self.slow_fields.clear()
        self.slow_at = float("-inf")
        self.static_fields.clear()
        self.static_done.clear()
        self.layout_known = False
        self.gpm = self.gpm.retire()
        self.mig = MigState()

    def down_samples(self, error: str, problems: list[str]) -> list[GpuSample]:
        """Published with its identity (so ``rightsizer_gpu_up 0`` names it) and no fields; its
        MIG instances as last seen, down too."""
        problems.append(f"GPU {self.identity.index} ({self.identity.uuid}): {error}")
        self.processes = ()
        self.instance_processes = {}
        return [GpuSample(ident, False, error=error) for ident in (self.identity, *self.instances)]

    def samples(
        self, result: DeviceResult, now: float, problems: list[str], xid: XidReport
    ) -> list[GpuSample]:
        """This cycle's samples (the GPU, then its MIG instances) from a job without a lifecycle error."""
        self._note_calls(result)
        self.processes = result.processes or ()
        if result.slow_read:
            self.slow_at = now
            self.slow_fields = {k: v for k, v in result.fields.items() if k in _SLOW_FIELDS}
        for call in result.succeeded & STATIC_CALLS:
            self.static_done.add(call)
            self.static_fields.update({k: result.fields[k] for k in READS_BY_CALL[call].fields})
        gpm = result.gpm or GpmReading()
        fields = {**self.static_fields, **self.slow_fields, **result.fields, **gpm.fields.get(None, {})}
        reasons = fields.pop(CLOCK_EVENT_REASONS_KEY, None)
        problems.extend(f"GPU {self.identity.index}: {message}" for message in result.errors.values())
        unsupported = set(self.unsupported_fields() | gpm.unsupported.get(None, frozenset()))
        why: dict[str, str] = {}
        if self.gpm.reason is not None and gpm.unsupported.get(None):
            why["gpm"] = self.gpm.reason
        if result.mig is not None and result.mig.enabled and "gpu_utilization_ratio" in unsupported:
            why["utilization"] = "NVML has no utilization for a GPU in MIG mode (nor for its instances)"
        uuid = self.identity.uuid
        if uuid in xid.watched:
            tally = xid.tallies.get(uuid)
            fields["xid_last"] = float(tally.last_xid) if tally else 0.0
        elif uuid in xid.unsupported:
            unsupported.add("xid_last")
            why["xid"] = xid.unsupported[uuid]
        gpu = GpuSample(
            self.identity,
            True,
            fields,
            frozenset(unsupported - fields.keys()),  # e.g. PCIe rates without GPM: from another call
            clock_event_reasons=None if reasons is None else int(reasons),
            unsupported_reasons=why,
        )
        return [gpu, *self._instance_samples(result.mig or MigReading(), gpm, why.get("gpm"))]

    def _instance_samples(self, mig: MigReading, gpm: GpmReading, gpm_reason: str | None) -> list[GpuSample]:
        out = []
        self.instance_processes = {}
        identities: list[GpuIdentity] = []
        for reading in sorted(mig.instances, key=lambda r: (r.device.gpu_instance_id, r.device.index)):
            ident = self._instance_identity(reading.device)
            if any(i.mig_instance_id == ident.mig_instance_id for i in identities):
                continue  # several compute instances in one GPU instance: the GPU instance once
            identities.append(ident)
            if reading.error is not None:
                out.append(GpuSample(ident, False, error=reading.error))
                continue
            gi = reading.device.gpu_instance_id
            if reading.processes is not None:
                self.instance_processes[ident.uuid] = reading.processes
            why = {"utilization": MIG_UTILIZATION_REASON}
            gpm_unsupported = gpm.unsupported.get(gi, GPM_FIELDS if gpm_reason else frozenset())
            if gpm_reason and gpm_unsupported:
                why["gpm"] = gpm_reason
            fields = {**reading.fields, **gpm.fields.get(gi, {})}
            out.append(
                GpuSample(
                    ident, True, fields, MIG_UNSUPPORTED_FIELDS | gpm_unsupported, unsupported_reasons=why
                )
            )
        self._note_layout(tuple(identities), mig.enabled)
        return out

    def _instance_identity(self, dev: MigDevice) -> GpuIdentity:
        parent = self.identity
        return GpuIdentity(
            index=parent.index,
            uuid=dev.uuid,
            pci_bus_id=parent.pci_bus_id,
            model=parent.model,
            minor_number=parent.minor_number,
            driver_version=parent.driver_version,
            memory_total_bytes=dev.memory_total_bytes,
            mig_profile=dev.profile,
            mig_instance_id=dev.gpu_instance_id,
            parent_uuid=parent.uuid,
        )

    def _note_layout(self, identities: tuple[GpuIdentity, ...], enabled: bool) -> None:
        """Log the MIG layout when it changes; static values are read again after a change."""
        if identities != self.instances and self.layout_known:
            self.static_done.clear()
        self.layout_known = True
        if identities != self.instances:
            layout = ",".join(f"{i.mig_instance_id}:{i.mig_profile}:{i.uuid}" for i in identities)
            event(log, logging.INFO, "MIG layout", gpu=self.identity.index, uuid=self.identity.uuid,
                  mig_enabled=enabled, instances=layout or "none")  # fmt: skip
        self.instances = identities

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
