"""GPUs through NVML (nvidia-ml-py), sampled off the event loop with a deadline per GPU.

- One sampling thread runs every GPU's job of a cycle (``sampling``) and wakes the event loop
  once per cycle. A GPU whose call does not return within ``call_timeout_seconds`` keeps that
  thread to itself; the rest of the cycle moves to a new thread. The hung GPU is published down
  ("GPU is hung: <call> has not returned …") and gets no new work until the call returns; the other
  GPUs are sampled, and the scrape (which serves the last cycle) never waits for it.
- Identity and static values are read once per NVML initialisation, slow values on their cadence,
  and only what changes each cycle (``calls.READS``).
- Support is probed per GPU: a call that answers NOT_SUPPORTED is never made again on that GPU
  (until NVML is re-initialised for it) and its fields are listed as unsupported.
- After a lifecycle error (GPU lost, NVML uninitialised, driver gone …) the GPU is published down
  with its identity, and NVML is shut down and initialised again with exponential backoff; GPUs
  are matched again by UUID and come back as soon as they answer.
- Other errors leave that call's fields out for the cycle and are logged when they change.
- Each job also reads the GPU's MIG devices (``mig``; one sample per GPU instance, with its
  MIG identity) and GPM profiling ratios (``gpm``); XID events are read without waiting, as
  the cycle's last job (``events``), and merged into the samples.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import Future

import pynvml

from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample

from ...config import NvmlSettings
from ..base import SourceUnavailable
from .calls import RunningProcess, describe
from .device import Device, JobSettings, run_job
from .events import XidReport, XidWatcher
from .gpm import GpmState
from .lifecycle import Enumeration, initialise, shutdown
from .result import DeviceResult
from .sampling import Job, SamplingPool
from .worker import HungError, NvmlWorker

log = logging.getLogger("rightsizer.nvml")

SIMULATE_HINT = "run with --simulate to use a simulated fleet instead"


class NvmlSource:
    name = "nvml"

    def __init__(self, settings: NvmlSettings) -> None:
        self.settings = settings
        self._control = NvmlWorker("control")  # init, enumeration, shutdown
        self._sampling = SamplingPool()
        self._devices: dict[str, Device] = {}  # by UUID
        self._initialised = False
        self._reinit_needed = False
        self._reinit_at = 0.0
        self._backoff = settings.reinit_backoff_initial_seconds
        self._enumeration_failures: list[str] = []  # GPUs NVML counts but could not identify
        self._last_reinit_outcome: object = None  # to log re-initialisations only when they change
        self._job = JobSettings(settings.gpm_sample_spacing_seconds, settings.mig_scan_interval_seconds)
        self._xid = XidWatcher(settings.call_timeout_seconds) if settings.xid_events else None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        timeout = self.settings.init_timeout_seconds
        try:
            found = await self._control.run(initialise, False, {}, timeout=timeout)
        except pynvml.NVMLError_LibraryNotFound:
            raise SourceUnavailable(
                "NVML library libnvidia-ml.so.1 not found (is the NVIDIA driver installed?); " + SIMULATE_HINT
            ) from None
        except pynvml.NVMLError as exc:
            raise SourceUnavailable(f"NVML initialisation failed: {describe(exc)}; {SIMULATE_HINT}") from None
        except TimeoutError as exc:
            raise SourceUnavailable(f"NVML initialisation hung: {exc}; {SIMULATE_HINT}") from None
        self._initialised = True
        self._apply_enumeration(found, time.monotonic())
        event(log, logging.INFO, "NVML initialised", driver=found.driver_version, gpus=len(found.devices))
        if not found.devices and not found.failures:
            event(log, logging.WARNING, "NVML found no GPUs")

    async def stop(self) -> None:
        self._sampling.close()
        if self._initialised and not self._control.busy:
            with contextlib.suppress(TimeoutError, HungError):  # a hung driver must not hold up the exit
                await self._control.run(shutdown, timeout=min(1.0, self.settings.call_timeout_seconds))
        self._control.close()

    def running_processes(self) -> dict[str, list[RunningProcess]]:
        """Compute processes per device UUID (a MIG instance's under its MIG device UUID) as of the
        last cycle (for pod attribution; no NVML call)."""
        out: dict[str, list[RunningProcess]] = {}
        for dev in self._devices.values():
            if dev.handle is not None:
                out.update(dev.running_processes())
        return out

    @property
    def xid_watching(self) -> bool:
        """Whether XID errors are watched (``nvml.xid_events``)."""
        return self._xid is not None

    def xid_report(self, _t: float = 0.0) -> XidReport:
        """XID errors seen so far, per GPU UUID (no NVML call: the tally of the cycles' drains)."""
        return self._xid.report() if self._xid is not None else XidReport()

    # -- sampling -------------------------------------------------------------------------------
    async def collect(self) -> GpuReading:
        started = time.perf_counter()
        problems: list[str] = []
        if self._reinit_needed and time.monotonic() >= self._reinit_at:
            await self._reinit(problems)
        now = time.monotonic()
        due: list[str] = []
        batch: list[Job] = []
        for uuid, dev in self._devices.items():
            if dev.handle is None or dev.calls.busy:  # down, or its last call still hangs
                continue
            slow = now - dev.slow_at >= self.settings.slow_interval_seconds
            args = (dev.handle, dev.skip(), dev.ecc_enabled, slow, dev.gpm, dev.mig, self._job, now)
            due.append(uuid)
            batch.append((dev.calls, run_job, args))
        if self._xid is not None and due and not self._xid.calls.busy:
            batch.append((self._xid.calls, self._xid.drain, ()))  # after the GPUs: XID events, no wait
        futures = await self._sampling.run(batch, self.settings.call_timeout_seconds) if batch else []
        jobs: dict[str, Future[DeviceResult]] = dict(zip(due, futures[: len(due)], strict=True))
        ordered = sorted(self._devices.items(), key=lambda kv: kv[1].identity.index)
        xid = self.xid_report()
        samples = tuple(
            s for uuid, dev in ordered for s in self._samples(dev, jobs.get(uuid), problems, now, xid)
        )
        problems.extend(self._enumeration_failures)
        status = CollectorStatus(
            self.name, not problems, time.perf_counter() - started, "; ".join(problems) or None
        )
        return GpuReading(time.time(), samples, status)

    def _samples(
        self, dev: Device, job: Future[DeviceResult] | None, problems: list[str], now: float, xid: XidReport
    ) -> list[GpuSample]:
        if dev.handle is None:
            return dev.down_samples(dev.down or "down", problems)
        if job is None or not job.done():
            call = dev.calls.current_call or "an NVML call"
            return dev.down_samples(
                f"GPU is hung: {call} has not returned for {dev.calls.hung_for():.1f} s", problems
            )
        exc = job.exception()
        if exc is not None:  # a bug in the reading code, not a device fault
            ident = dev.identity
            event(
                log,
                logging.ERROR,
                "sampling a GPU failed",
                gpu=ident.index,
                uuid=ident.uuid,
                error=describe(exc),
            )
            return dev.down_samples(f"sampling failed: {describe(exc)}", problems)
        result = job.result()
        if result.lifecycle is not None:
            dev.handle, dev.down = None, result.lifecycle
            self._schedule_reinit(now)
            return dev.down_samples(result.lifecycle, problems)
        return dev.samples(result, now, problems, xid)

    # -- re-initialisation ------------------------------------------------------------------------
    def _schedule_reinit(self, now: float) -> None:
        if not self._reinit_needed:
            self._reinit_needed = True
            self._backoff = self.settings.reinit_backoff_initial_seconds
            self._reinit_at = now + self._backoff

    def _retry_later(self) -> None:
        self._backoff = min(self._backoff * 2, self.settings.reinit_backoff_max_seconds)
        self._reinit_at = time.monotonic() + self._backoff

    async def _reinit(self, problems: list[str]) -> None:
        known = {uuid: dev.identity for uuid, dev in self._devices.items()}
        try:
            found = await self._control.run(
                initialise, True, known, timeout=self.settings.init_timeout_seconds
            )
        except (TimeoutError, HungError) as exc:
            self._reinit_failed(f"NVML re-initialisation hung: {exc}", problems, nvml_down=False)
            return
        except pynvml.NVMLError as exc:
            self._reinit_failed(f"NVML re-initialisation failed: {describe(exc)}", problems, nvml_down=True)
            return
        self._apply_enumeration(found, time.monotonic())
        down = ",".join(str(d.identity.index) for d in self._devices.values() if d.handle is None)
        outcome = (down, tuple(found.failures))
        level = logging.INFO if outcome != self._last_reinit_outcome else logging.DEBUG
        self._last_reinit_outcome = outcome
        failures = "; ".join(found.failures)
        event(log, level, "NVML re-initialised", gpus=len(found.devices), still_down=down, failures=failures)

    def _reinit_failed(self, message: str, problems: list[str], nvml_down: bool) -> None:
        problems.append(message)
        if nvml_down:  # NVML is not initialised now: no GPU can answer until it is
            for dev in self._devices.values():
                dev.handle, dev.down = None, message
        level = logging.WARNING if message != self._last_reinit_outcome else logging.DEBUG
        self._last_reinit_outcome = message
        self._retry_later()
        event(
            log,
            level,
            "NVML re-initialisation did not succeed",
            error=message,
            retry_in=f"{self._backoff:g}s",
        )

    def _apply_enumeration(self, found: Enumeration, now: float) -> None:
        """Match enumerated GPUs to known ones by UUID; GPUs not found stay down with their identity."""
        seen = set()
        for item in found.devices:
            ident = item.identity
            seen.add(ident.uuid)
            dev = self._devices.get(ident.uuid)
            if dev is None:
                dev = self._devices[ident.uuid] = Device(
                    ident, gpm=GpmState(self.settings.gpm_sample_spacing_seconds)
                )
                event(log, logging.INFO, "GPU found", gpu=ident.index, uuid=ident.uuid, model=ident.model)
            elif dev.handle is None:
                dev.forget_probe()
            dev.identity, dev.handle, dev.down = ident, item.handle, None
        for uuid, dev in self._devices.items():
            if uuid not in seen:
                dev.handle = None
                dev.down = dev.down or "not found when NVML enumerated its GPUs"
        if found.failures != self._enumeration_failures:
            for failure in found.failures:
                event(log, logging.WARNING, "GPU did not answer enumeration", error=failure)
        self._enumeration_failures = found.failures
        if self._xid is not None:
            self._xid.attach([(uuid, d.handle) for uuid, d in self._devices.items() if d.handle is not None])
        if found.failures or any(d.handle is None for d in self._devices.values()):
            if self._reinit_needed:
                self._retry_later()
            else:
                self._schedule_reinit(now)
        else:
            self._reinit_needed = False
            self._backoff = self.settings.reinit_backoff_initial_seconds
