"""XID errors from NVML events, on a dedicated thread that never blocks sampling.

One daemon thread owns an NVML event set with every GPU registered for
``nvmlEventTypeXidCriticalError`` and waits on it with ``nvmlEventSetWait_v2`` (at most
``wait_seconds`` per call, its deadline). Sampling never waits for it: the source reads the tally
under a lock that the thread holds only to add one event. After NVML is initialised again the
source hands the thread the new handles (``attach``) and it registers them in a new event set.
A wait that does not return within its timeout plus ``hung_after`` seconds is reported as hung
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

from ..logs import event
from ..sampler import Contribution
from ..snapshot import CollectorStatus, GpuReading, GpuSample, Row
from .nvml_calls import LIFECYCLE_ERRORS, describe

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


class XidWatcher:
    def __init__(self, wait_seconds: float, hung_after_seconds: float) -> None:
        self.wait_seconds = wait_seconds
        self.hung_after = hung_after_seconds
        self._lock = threading.Lock()
        self._tallies: dict[str, XidTally] = {}
        self._wanted: tuple[int, list[tuple[str, Any]]] = (0, [])  # generation, (UUID, handle)
        self._registered = -1  # generation registered in the current event set
        self._watched: dict[int | None, str] = {}  # handle address -> UUID
        self._unsupported: dict[str, str] = {}
        self._problem: str | None = None
        self._waiting_since: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nvml-xid-events", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def attach(self, devices: list[tuple[str, Any]]) -> None:
        """Watch these GPUs (UUID, handle) from now on; called after every (re-)enumeration."""
        self._wanted = (self._wanted[0] + 1, list(devices))

    def stop(self) -> None:
        """Let the thread end after its current wait (a hung wait just stays, as a daemon)."""
        self._stop.set()

    def report(self) -> XidReport:
        with self._lock:
            tallies = dict(self._tallies)
            unsupported = dict(self._unsupported)
            # Every GPU handed to the thread counts as watched (its registration may lag a wait).
            watched = frozenset(uuid for uuid, _ in self._wanted[1] if uuid not in unsupported)
            problem = self._problem
        since = self._waiting_since
        if since is not None and time.monotonic() - since > self.wait_seconds + self.hung_after:
            problem = f"{WAIT_CALL} has not returned for {time.monotonic() - since:.1f} s"
        return XidReport(tallies, watched, unsupported, problem)

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        event_set: Any = None
        while not self._stop.is_set():
            generation, devices = self._wanted
            if generation != self._registered:
                event_set = self._register(event_set, generation, devices)
            if event_set is None or not self._watched:
                self._stop.wait(self.wait_seconds)
                continue
            self._waiting_since = time.monotonic()
            try:
                data = pynvml.nvmlEventSetWait_v2(event_set, max(1, round(self.wait_seconds * 1000)))
            except pynvml.NVMLError as exc:
                self._waiting_since = None
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                self._set_problem(f"{WAIT_CALL}: {describe(exc)}")
                if exc.value in LIFECYCLE_ERRORS:
                    self._registered = -1  # register again (with the handles of the next enumeration)
                self._stop.wait(self.wait_seconds)
                continue
            self._waiting_since = None
            self._set_problem(None)
            if data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                self._record(data)

    def _register(self, old: Any, generation: int, devices: list[tuple[str, Any]]) -> Any:
        if old is not None:
            with contextlib.suppress(pynvml.NVMLError):  # already gone when NVML was re-initialised
                pynvml.nvmlEventSetFree(old)
        try:
            event_set = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as exc:
            self._set_problem(f"nvmlEventSetCreate: {describe(exc)}")
            with self._lock:
                self._watched = {}
            return None
        watched: dict[int | None, str] = {}
        unsupported: dict[str, str] = {}
        errors = []
        for uuid, handle in devices:
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
        with self._lock:
            self._watched, self._unsupported = watched, unsupported
        self._registered = generation
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
