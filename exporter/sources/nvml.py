"""GPUs through NVML (nvidia-ml-py), sampled off the event loop with a deadline per GPU.

- Each GPU has its own worker thread (``nvml_worker``); a cycle gives every idle worker one job
  and waits at most ``call_timeout_seconds`` for all of them together. A GPU whose job has not
  returned is published down ("hung in <call>") and gets no new work until the call returns; the
  other GPUs and the scrape never wait for it.
- Support is probed per GPU: a call that answers NOT_SUPPORTED is never made again on that GPU
  (until NVML is re-initialised for it) and its fields are listed as unsupported.
- After a lifecycle error (GPU lost, NVML uninitialised, driver gone …) the GPU is published down
  with its identity, and NVML is shut down and initialised again with exponential backoff; GPUs
  are matched again by UUID and come back as soon as they answer.
- Other errors leave that call's fields out for the cycle and are logged when they change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

import pynvml

from ..config import NvmlSettings
from ..logs import event
from ..snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample
from .base import SourceUnavailable
from .nvml_calls import CLOCK_EVENT_REASONS_KEY, READS, READS_BY_CALL, DeviceResult, describe, sample_device
from .nvml_lifecycle import Enumeration, initialise, shutdown
from .nvml_worker import HungError, NvmlWorker

log = logging.getLogger("rightsizer.nvml")

SIMULATE_HINT = "run with --simulate to use a simulated fleet instead"
_SLOW_FIELDS = frozenset(f for r in READS if r.slow for f in r.fields)


@dataclass
class _Device:
    identity: GpuIdentity
    worker: NvmlWorker
    handle: object | None = None  # None while the GPU is down after a lifecycle error
    down: str | None = None  # why it is down
    unsupported: set[str] = field(default_factory=set)  # calls that answered NOT_SUPPORTED
    ecc_enabled: bool | None = None
    call_errors: dict[str, str] = field(default_factory=dict)  # call -> last error, for logging changes
    slow_fields: dict[str, float] = field(default_factory=dict)
    slow_at: float = float("-inf")

    def unsupported_fields(self) -> frozenset[str]:
        return frozenset(f for call in self.unsupported for f in READS_BY_CALL[call].fields)

    def forget_probe(self) -> None:
        """NVML was re-initialised for this GPU: probe it again, as after a fresh start."""
        self.unsupported.clear()
        self.ecc_enabled = None
        self.call_errors.clear()
        self.slow_fields.clear()
        self.slow_at = float("-inf")


class NvmlSource:
    name = "nvml"

    def __init__(self, settings: NvmlSettings) -> None:
        self.settings = settings
        self._control = NvmlWorker("control")
        self._devices: dict[str, _Device] = {}  # by UUID
        self._initialised = False
        self._reinit_needed = False
        self._reinit_at = 0.0
        self._backoff = settings.reinit_backoff_initial_seconds
        self._last_reinit_error: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        try:
            found = await self._control.run(initialise, False, {}, timeout=self.settings.init_timeout_seconds)
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
        if not found.devices:
            event(log, logging.WARNING, "NVML found no GPUs")

    async def stop(self) -> None:
        for dev in self._devices.values():
            dev.worker.close()
        if self._initialised and not self._control.busy:
            with contextlib.suppress(TimeoutError, HungError):  # a hung driver must not hold up the exit
                await self._control.run(shutdown, timeout=min(1.0, self.settings.call_timeout_seconds))
        self._control.close()

    # -- sampling -------------------------------------------------------------------------------
    async def collect(self) -> GpuReading:
        started = time.perf_counter()
        problems: list[str] = []
        now = time.monotonic()
        if self._reinit_needed and now >= self._reinit_at:
            await self._reinit(problems)
            now = time.monotonic()
        jobs: dict[str, Future[DeviceResult]] = {}
        for uuid, dev in self._devices.items():
            if dev.handle is None or dev.worker.busy:
                continue
            include_slow = now - dev.slow_at >= self.settings.slow_interval_seconds
            jobs[uuid] = dev.worker.submit(
                sample_device, dev.handle, frozenset(dev.unsupported), dev.ecc_enabled, include_slow
            )
        if jobs:
            await asyncio.wait(
                [asyncio.wrap_future(f) for f in jobs.values()], timeout=self.settings.call_timeout_seconds
            )
        ordered = sorted(self._devices.items(), key=lambda kv: kv[1].identity.index)
        samples = tuple(self._sample(dev, jobs.get(uuid), problems, now) for uuid, dev in ordered)
        status = CollectorStatus(
            self.name, not problems, time.perf_counter() - started, "; ".join(problems) or None
        )
        return GpuReading(time.time(), samples, status)

    def _sample(
        self, dev: _Device, job: Future[DeviceResult] | None, problems: list[str], now: float
    ) -> GpuSample:
        ident = dev.identity
        if dev.handle is None:
            return self._down(dev, dev.down or "down", problems)
        if job is None or not job.done():
            call = dev.worker.current_call or "an NVML call"
            return self._down(
                dev, f"GPU is hung: {call} has not returned for {dev.worker.hung_for():.1f} s", problems
            )
        exc = job.exception()
        if exc is not None:  # a bug in the reading code, not a device fault
            event(
                log,
                logging.ERROR,
                "sampling a GPU failed",
                gpu=ident.index,
                uuid=ident.uuid,
                error=describe(exc),
            )
            return self._down(dev, f"sampling failed: {describe(exc)}", problems)
        result = job.result()
        if result.lifecycle is not None:
            dev.handle, dev.down = None, result.lifecycle
            self._schedule_reinit(now)
            return self._down(dev, result.lifecycle, problems)
        self._note_calls(dev, result)
        if result.slow_read:
            dev.slow_at = now
            dev.slow_fields = {k: v for k, v in result.fields.items() if k in _SLOW_FIELDS}
        fields = {**dev.slow_fields, **result.fields}
        reasons = fields.pop(CLOCK_EVENT_REASONS_KEY, None)
        problems.extend(f"GPU {ident.index}: {msg}" for msg in result.errors.values())
        return GpuSample(
            ident,
            True,
            fields,
            dev.unsupported_fields(),
            clock_event_reasons=None if reasons is None else int(reasons),
        )

    @staticmethod
    def _down(dev: _Device, error: str, problems: list[str]) -> GpuSample:
        problems.append(f"GPU {dev.identity.index} ({dev.identity.uuid}): {error}")
        return GpuSample(dev.identity, False, error=error)

    @staticmethod
    def _note_calls(dev: _Device, result: DeviceResult) -> None:
        """Remember NOT_SUPPORTED; log call errors once per change, and their recovery."""
        ident = dev.identity
        for call in sorted(result.not_supported - dev.unsupported):
            fields = ",".join(READS_BY_CALL[call].fields)
            event(
                log,
                logging.INFO,
                "NVML call not supported; its series are left out",
                gpu=ident.index,
                uuid=ident.uuid,
                call=call,
                fields=fields,
            )
        dev.unsupported |= result.not_supported
        if result.ecc_enabled is not None:
            dev.ecc_enabled = result.ecc_enabled
        for call, message in result.errors.items():
            if dev.call_errors.get(call) != message:
                event(
                    log,
                    logging.WARNING,
                    "NVML call failed; its series are left out",
                    gpu=ident.index,
                    uuid=ident.uuid,
                    call=call,
                    error=message,
                )
        for call in [c for c in dev.call_errors if c in result.succeeded or c in result.not_supported]:
            del dev.call_errors[call]
            event(log, logging.INFO, "NVML call answers again", gpu=ident.index, uuid=ident.uuid, call=call)
        dev.call_errors.update(result.errors)

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
        self._last_reinit_error = None
        self._apply_enumeration(found, time.monotonic())
        down = [d.identity.index for d in self._devices.values() if d.handle is None]
        event(
            log,
            logging.INFO,
            "NVML re-initialised",
            driver=found.driver_version,
            gpus=len(found.devices),
            still_down=",".join(map(str, down)),
            failures="; ".join(found.failures),
        )

    def _reinit_failed(self, message: str, problems: list[str], nvml_down: bool) -> None:
        problems.append(message)
        if nvml_down:  # NVML is not initialised now: no GPU can answer until it is
            for dev in self._devices.values():
                dev.handle, dev.down = None, message
        level = logging.WARNING if message != self._last_reinit_error else logging.DEBUG
        self._last_reinit_error = message
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
            uuid = item.identity.uuid
            seen.add(uuid)
            dev = self._devices.get(uuid)
            if dev is None:
                dev = self._devices[uuid] = _Device(item.identity, NvmlWorker(f"gpu{item.identity.index}"))
                event(
                    log,
                    logging.INFO,
                    "GPU found",
                    gpu=item.identity.index,
                    uuid=uuid,
                    model=item.identity.model,
                )
            elif dev.handle is None:
                dev.forget_probe()
            dev.identity, dev.handle, dev.down = item.identity, item.handle, None
        for uuid, dev in self._devices.items():
            if uuid not in seen:
                dev.handle = None
                dev.down = dev.down or "not found when NVML enumerated its GPUs"
        for failure in found.failures:
            event(log, logging.WARNING, "GPU did not answer enumeration", error=failure)
        if found.failures or any(d.handle is None for d in self._devices.values()):
            if self._reinit_needed:
                self._retry_later()
            else:
                self._schedule_reinit(now)
        else:
            self._reinit_needed = False
            self._backoff = self.settings.reinit_backoff_initial_seconds
