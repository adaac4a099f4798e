"""XID errors from NVML events, on a dedicated thread that never blocks sampling.

An NVML event set with every GPU registered for ``nvmlEventTypeXidCriticalError`` is read once
per sampling cycle, without waiting: the drain is one more job on the sampling thread
(``sampling``), after the GPUs', and calls ``nvmlEventSetWait_v2`` with a timeout of 0 until
it answers TIMEOUT (nothing pending). NVML queues events in the set until they are read, so none
is lost between cycles, and an XID reaches the published cycle as soon as a waiting thread's
would (samples are published once per cycle). No wait is ever pending: nothing to interrupt at
shutdown or re-initialisation, no thread, and no cost from NVML builds whose waits poll inside the
library. After NVML is initialised again the source hands over the new handles (``attach``) and
the next drain registers them in a new event set. A drain that does not return by the cycle's
deadline is left to its own thread like a hung GPU and reported as hung
(``rightsizer_collector_success{collector="xid"} 0``); sampling goes on.

``XidExtension`` publishes the tally of any source that has ``xid_report(t)`` (NVML) or
``xid_events(since, until)`` (the simulated fleet's injected XIDs): ``rightsizer_xid_errors_total{xid}`` and
``rightsizer_xid_last_seen_timestamp_seconds`` per GPU, and ``/api/v1/xid``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample, Row

from ...sampler import Contribution
from .calls import LIFECYCLE_ERRORS, CallTracker, describe
from .sampling import CallState

log = logging.getLogger("rightsizer.nvml")

WAIT_CALL = "nvmlEventSetWait_v2"
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class XidTally:
    """The XID errors seen on one GPU."""

    counts: Mapping[int, int]  # XID -> events
    last_xid: int
    last_seen: float  # Unix time
    last_gpu_instance_id: int | None = None


@dataclass(frozen=True, slots=True)
class XidReport:
    tallies: Mapping[str, XidTally] = field(default_factory=dict)  # by GPU UUID
    watched: frozenset[str] = frozenset()  # GPUs whose XID events are watched
    unsupported: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> why not watched
    problem: str | None = None


def _address(handle: Any) -> int | None:
    return ctypes.cast(handle, ctypes.c_void_p).value


MAX_EVENTS_PER_DRAIN = 256  # a storm of events is read over several cycles, not in one


class XidWatcher:
    """The XID event set, read without waiting (``drain``) as one job of each sampling cycle."""

    def __init__(self, hung_after_seconds: float) -> None:
        self.hung_after = hung_after_seconds
        self.calls = CallState()  # the drain job on the sampling thread
        self._lock = threading.Lock()
        self._tallies: dict[str, XidTally] = {}
        self._wanted: tuple[int, list[tuple[str, Any]]] = (0, [])  # generation, (UUID, handle)
        self._registered = -1  # generation registered in ``_event_set``
        self._event_set: Any = None
        self._watched: dict[int | None, str] = {}  # handle address -> UUID
        self._unsupported: dict[str, str] = {}
        self._problem: str | None = None

    def attach(self, devices: list[tuple[str, Any]]) -> None:
        """Watch these GPUs (UUID, handle) from now on; called after every (re-)enumeration. The next
        drain registers them in a new event set."""
        self._wanted = (self._wanted[0] + 1, list(devices))

    def report(self) -> XidReport:
        with self._lock:
            tallies = dict(self._tallies)
            unsupported = dict(self._unsupported)
            # Every GPU handed over counts as watched (its registration may lag by a cycle).
            watched = frozenset(uuid for uuid, _ in self._wanted[1] if uuid not in unsupported)
            problem = self._problem
        if self.calls.busy and self.calls.hung_for() > self.hung_after:  # past the cycle's deadline
            call = self.calls.current_call or WAIT_CALL
            problem = f"{call} has not returned for {self.calls.hung_for():.1f} s"
        return XidReport(tallies, watched, unsupported, problem)

    # -- the drain job (sampling thread) ---------------------------------------------------------
    def drain(self, tracker: CallTracker) -> None:
        """Register new handles if any, then read every pending event without waiting."""
        generation, devices = self._wanted
        if generation != self._registered:
            self._event_set = self._register(tracker, self._event_set, devices)
            self._registered = generation
        if self._event_set is None or not self._watched:
            return
        for _ in range(MAX_EVENTS_PER_DRAIN):
            tracker.mark(WAIT_CALL)
            try:
                data = pynvml.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:  # nothing (more) pending
                    self._set_problem(None)
                    return
                self._set_problem(f"{WAIT_CALL}: {describe(exc)}")
                if exc.value in LIFECYCLE_ERRORS:
                    self._registered = -1  # register again (with the handles of the next enumeration)
                return
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._record(data)
        self._set_problem(None)

    def _register(self, tracker: CallTracker, old: Any, devices: list[tuple[str, Any]]) -> Any:
        if old is not None:
            tracker.mark("nvmlEventSetFree")
            with contextlib.suppress(pynvml.NVMLError):  # already gone when NVML was re-initialised
                pynvml.nvmlEventSetFree(old)
        tracker.mark("nvmlEventSetCreate")
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            self._set_problem(f"nvmlEventSetCreate: {describe(exc)}")
            self._watched = {}
            self._registered = -1  # try again next cycle
            return None
        watched: dict[int | None, str] = {}
        unsupported: dict[str, str] = {}
        errors = []
        for uuid, handle in devices:
            tracker.mark("nvmlDeviceRegisterEvents")
            try:
                pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
            except pynvml.NVMLError as exc:
                message = f"nvmlDeviceRegisterEvents: {describe(exc)}"
                if exc.value == pynvml.NVML_ERROR_NOT_SUPPORTED:
                    unsupported[uuid] = message
                else:
                    errors.append(f"{uuid}: {message}")
                continue
            watched[_address(handle)] = uuid
        self._watched = watched
        with self._lock:
            self._unsupported = unsupported
        self._set_problem("; ".join(errors) or None)
        return event_set

    def _record(self, data: Any) -> None:
        uuid = self._watched.get(_address(data.device))
        if uuid is None:
            return
        xid, instance = int(data.eventData), int(data.gpuInstanceId)
        with self._lock:
            old = self._tallies.get(uuid)
            counts = dict(old.counts) if old else {}
            counts[xid] = counts.get(xid, 0) + 1
            gi = None if instance == NO_INSTANCE else instance
            self._tallies[uuid] = XidTally(counts, xid, time.time(), gi)
        event(
            log, logging.WARNING, "XID error", uuid=uuid, xid=xid, gpu_instance=gi if gi is not None else ""
        )

    def _set_problem(self, problem: str | None) -> None:
        if problem != self._problem:
            if problem is None:
                event(log, logging.INFO, "XID event watch answers again")
            else:
                event(log, logging.WARNING, "XID event watch failed; XIDs may be missed", error=problem)
        with self._lock:
            self._problem = problem


class XidExtension:
    """Publishes a source's XID tally as counter and timestamp rows, and ``/api/v1/xid``."""

    name = "xid"

    def __init__(self, report: Callable[[float], XidReport], collector: bool = True) -> None:
        self._report = report
        self._collector = collector  # publish rightsizer_collector_success{collector="xid"} (a live watch)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        started = time.perf_counter()
        rep = self._report(reading.timestamp)
        totals: list[Row] = []
        seen: list[Row] = []
        api: dict[str, Any] = {}
        for g in gpus:
            tally = rep.tallies.get(g.identity.uuid)
            if tally is None:
                continue
            totals.extend(Row(float(n), (("xid", str(x)),), g) for x, n in sorted(tally.counts.items()))
            seen.append(Row(tally.last_seen, (), g))
            api[g.identity.uuid] = {
                "gpu": g.identity.index,
                "counts": {str(x): n for x, n in sorted(tally.counts.items())},
                "last_xid": tally.last_xid,
                "last_seen": tally.last_seen,
                "last_gpu_instance_id": tally.last_gpu_instance_id,
            }
        status = CollectorStatus(self.name, rep.problem is None, time.perf_counter() - started, rep.problem)
        return Contribution(
            rows={
                "rightsizer_xid_errors_total": tuple(totals),
                "rightsizer_xid_last_seen_timestamp_seconds": tuple(seen),
            },
            api={"xid": {"gpus": api, "unwatched": dict(rep.unsupported), "problem": rep.problem}},
            collectors=(status,) if self._collector else (),
        )


def events_report(xid_events: Callable[[float, float], Sequence[Any]]) -> Callable[[float], XidReport]:
    """An ``xid_report`` for a source that lists its XID events (the simulated fleet's
    ``xid_events(since, until)``, each event with ``timestamp``, ``gpu_uuid`` and ``xid``): the
    tally of every event up to the reading's time."""

    def report(t: float) -> XidReport:
        tallies: dict[str, XidTally] = {}
        for e in xid_events(float("-inf"), t):
            old = tallies.get(e.gpu_uuid)
            counts = dict(old.counts) if old else {}
            counts[e.xid] = counts.get(e.xid, 0) + 1
            tallies[e.gpu_uuid] = XidTally(counts, int(e.xid), float(e.timestamp))
        return XidReport(tallies)

    return report


def xid_reporter(source: object) -> Callable[[float], XidReport] | None:
    """How to read ``source``'s XID errors, or None if it has none to report (or watches none)."""
    if not getattr(source, "xid_watching", True):
        return None
    report: Callable[[float], XidReport] | None = getattr(source, "xid_report", None)
    if report is not None:
        return report
    events = getattr(source, "xid_events", None)
    return events_report(events) if events is not None else None
