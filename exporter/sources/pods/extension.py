"""Pod attribution as a sampler ``Extension``: refreshed on its own cadence, applied per cycle.

An asyncio task asks the kubelet (``client``), reads the processes' cgroups and the device-manager
checkpoint (in a thread, with a deadline) and caches the result. ``contribute`` runs once per
sampling cycle and only looks things up in that cache: labels on the devices held by exactly one
container, and ``rightsizer_pod_gpu_memory_used_bytes`` from the source's latest per-process
memory. Scrapes never trigger any of it.

Faults (socket missing, kubelet hung past the deadline, malformed answer, kubelet gone): the
``pods`` collector reports 0 with the reason, one log line per change of state, everything else
is served as usual. The last good answer keeps labelling for ``keep_last_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample, PodRef
from rightsizing.numa import NumaPlacement

from ...sampler import Contribution
from .attribution import (
    MEMORY_FAMILY,
    GpuProcess,
    Holders,
    Owners,
    ProcessLister,
    ProcessVerdict,
    attribute_processes,
    holders_from,
    label_gpus,
    memory_rows,
    owners_from,
    pods_by_uid,
)
from .cgroup import CgroupRef, read_cgroup
from .checkpoint import CheckpointError, read_checkpoint, uid_index
from .client import KubeletAnswer, PodResourcesClient, PodResourcesError
from .placement import PlacementReader
from .report import api_view
from .settings import PodSettings

log = logging.getLogger("rightsizer.pods")
MIN_REFRESH_GAP_SECONDS = 1.0


@dataclass(frozen=True)
class _Attribution:
    answer: KubeletAnswer
    listed_at: float  # monotonic time of the kubelet answer in use
    holders: Holders
    owners: Owners
    owner_refs: Mapping[tuple[str, int], PodRef]  # (device UUID, PID) -> container


@dataclass(frozen=True)
class _HostReading:
    cgroups: dict[int, CgroupRef | None]
    uid_pods: dict[str, tuple[PodRef, ...]] | None
    problem: str | None  # /proc or checkpoint trouble: per-process attribution degraded


class PodAttribution:
    name = "pods"

    def __init__(self, settings: PodSettings, processes: ProcessLister | None = None) -> None:
        self.settings = settings
        self._processes = processes
        self._resources = frozenset(settings.resource_names)
        self._client = PodResourcesClient(
            settings.socket, settings.max_answer_bytes, settings.max_pods
        )
        self._state: _Attribution | None = None
        self._status = CollectorStatus(self.name, False, 0.0, "not refreshed yet")
        self._api: dict[str, Any] = {"enabled": True, "ok": False, "error": "not refreshed yet"}
        self._identities: dict[str, GpuIdentity] = {}
        self._identity_order: tuple[GpuIdentity, ...] = ()
        self._known: frozenset[tuple[str, int]] = frozenset()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._logged: tuple[str, str | None] | None = None
        self._logged_problem: str | None = None
        self.refreshes = 0
        self.placement = PlacementReader(settings.sysfs_root, settings.cgroup_root)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh()  # the first snapshot already carries labels when the kubelet answers
        self._task = asyncio.create_task(self._run(), name="pod-attribution")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._client.close()

    async def _run(self) -> None:
        interval = self.settings.refresh_interval_seconds
        while True:
            started = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            await asyncio.sleep(max(0.0, started + MIN_REFRESH_GAP_SECONDS - time.monotonic()))
            try:
                await self.refresh()
            except Exception:  # a bug must not end attribution for the life of the process
                log.exception("pod attribution refresh failed")
            self._wake.clear()  # wake-ups during the refresh are answered by it

    # -- refresh (off the scrape path) --------------------------------------------------------
    async def refresh(self) -> None:
        started = time.perf_counter()
        now = time.monotonic()
        error: str | None = None
        answer: KubeletAnswer | None = None
        listed_at = now
        try:
            answer = await self._client.list(self.settings.timeout_seconds, self._resources)
        except PodResourcesError as exc:
            error = str(exc)
        except Exception as exc:  # anything else from the gRPC stack: same outcome, say what it was
            error = f"kubelet pod-resources List failed: {type(exc).__name__}: {exc}"
        finally:
            await self._client.close()  # see client.py: no channel stays open between refreshes
        previous = self._state
        if (
            answer is None
            and previous is not None
            and now - previous.listed_at <= self.settings.keep_last_seconds
        ):
            answer, listed_at = previous.answer, previous.listed_at
        self.refreshes += 1
        if answer is None:
            self._state = None
            self._finish(started, error, None, "off")
            return
        processes, lister_problem = self._current_processes()
        host = await self._read_host(processes, answer)
        if lister_problem is not None:
            host = _HostReading(host.cgroups, host.uid_pods, lister_problem)
        holders = holders_from(answer)
        verdicts = attribute_processes(holders, self._identities, processes, host.cgroups, host.uid_pods)
        refs = {(v.device_uuid, v.pid): v.pod for v in verdicts if v.pod}
        self._state = _Attribution(answer, listed_at, holders, owners_from(refs, self._identities), refs)
        self._known = frozenset((v.device_uuid, v.pid) for v in verdicts)
        await self._read_placement(holders, verdicts, host.cgroups)
        self._finish(started, error, (answer, holders, verdicts, host), "on" if error is None else "keeping")

    async def _read_placement(
        self, holders: Holders, verdicts: Sequence[ProcessVerdict], cgroups: Mapping[int, CgroupRef | None]
    ) -> None:
        """NUMA placement of each device held by one container (its cpuset through a process of
        it); files already read are not read again, so this is cheap while attribution holds."""
        targets = self.placement.targets(self._identities, holders, verdicts, cgroups)
        timeout = self.settings.timeout_seconds
        try:
            await asyncio.wait_for(asyncio.to_thread(self.placement.read, targets), timeout)
        except TimeoutError:
            self.placement.note_problem(f"reading the NUMA layout took longer than {timeout:g}s")

    def numa_placements(self) -> Mapping[str, NumaPlacement]:
        """Device UUID -> NUMA placement of the GPU and of the one container holding it."""
        return self.placement.placements if self._state is not None else {}

    def _current_processes(self) -> tuple[Mapping[str, Sequence[GpuProcess]], str | None]:
        if self._processes is None:
            return {}, None
        try:
            return self._processes(), None
        except Exception as exc:
            return {}, f"the GPU source's running processes failed: {type(exc).__name__}: {exc}"

    async def _read_host(
        self, processes: Mapping[str, Sequence[GpuProcess]], answer: KubeletAnswer
    ) -> _HostReading:
        pids = sorted({p.pid for procs in processes.values() for p in procs})
        if not pids:
            return _HostReading({}, None, None)
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._read_host_blocking, pids, answer), self.settings.timeout_seconds
            )
        except TimeoutError:
            root, timeout = self.settings.procfs_root, self.settings.timeout_seconds
            return _HostReading({}, None, f"reading {root} took longer than {timeout:g}s")

    def _read_host_blocking(self, pids: list[int], answer: KubeletAnswer) -> _HostReading:
        cgroups: dict[int, CgroupRef | None] = {}
        problem = None
        root = self.settings.procfs_root
        for pid in pids:
            try:
                cgroups[pid] = read_cgroup(root, pid)
            except OSError as exc:
                cgroups[pid] = None
                problem = f"cannot read {root}/{pid}/cgroup: {exc.strerror or exc}"
        uid_pods = None
        if self.settings.checkpoint:
            try:
                uid_pods = pods_by_uid(answer, uid_index(read_checkpoint(self.settings.checkpoint)))
            except CheckpointError as exc:
                problem = f"per-process attribution on shared GPUs off: {exc}"
        return _HostReading(cgroups, uid_pods, problem)

    def _finish(
        self,
        started: float,
        error: str | None,
        result: tuple[KubeletAnswer, Holders, tuple[ProcessVerdict, ...], _HostReading] | None,
        phase: str,
    ) -> None:
        self._status = CollectorStatus(self.name, error is None, time.perf_counter() - started, error)
        if result is None:
            self._api = api_view(self.settings.socket, error, phase)
        else:
            answer, holders, verdicts, host = result
            age = time.monotonic() - self._state.listed_at if self._state else None
            socket = self.settings.socket
            self._api = api_view(socket, error, phase, age, answer, holders, verdicts, host.problem)
            self._note_problem(host.problem)
        self._log_phase(phase, error, result[0] if result else None)

    def _log_phase(self, phase: str, error: str | None, answer: KubeletAnswer | None) -> None:
        key = (phase, error)
        if key == self._logged:
            return
        first = self._logged is None
        self._logged = key
        if phase == "on":
            assert answer is not None
            event(
                log,
                logging.INFO,
                "pod attribution on",
                pods=answer.pods,
                gpu_allocations=len(answer.devices),
                skipped=len(answer.skipped),
            )
        elif phase == "keeping":
            event(
                log,
                logging.WARNING,
                "kubelet pod-resources failing; labelling with its last answer",
                error=error or "",
                keep_last_seconds=self.settings.keep_last_seconds,
            )
        elif not first or error:
            event(log, logging.WARNING, "pod attribution off", error=error or "")

    def _note_problem(self, problem: str | None) -> None:
        if problem != self._logged_problem:
            self._logged_problem = problem
            if problem is not None:
                event(log, logging.WARNING, "per-process pod attribution degraded", error=problem)
            else:
                event(log, logging.INFO, "per-process pod attribution back")

    # -- per cycle (cheap, no I/O) ------------------------------------------------------------
    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        identities = tuple(g.identity for g in gpus)
        state = self._state
        if identities != self._identity_order or not self.placement.nodes_complete:
            self.placement.note_nodes(gpus)  # static: read again only for new devices
        if identities != self._identity_order:  # devices came, went or changed (e.g. a new MIG layout)
            self._identity_order = identities
            self._identities = {i.uuid: i for i in identities}
            if state is not None:  # rows follow GPU order: re-sort them for the new devices
                state = self._state = replace(state, owners=owners_from(state.owner_refs, self._identities))
        api = {"pods": self._api}
        if state is None:
            return Contribution(api=api, collectors=(self._status,))
        rows = {}
        if self._processes is not None:
            processes = self._cycle_processes()
            rows[MEMORY_FAMILY] = memory_rows(gpus, processes, state.owners)
            known = self._known
            if any((uuid, p.pid) not in known for uuid, procs in processes.items() for p in procs):
                self._wake.set()  # a new GPU process: attribute it soon rather than in a full interval
        return Contribution(
            rows=rows, api=api, collectors=(self._status,), gpus=label_gpus(gpus, state.holders)
        )

    def _cycle_processes(self) -> Mapping[str, Sequence[GpuProcess]]:
        assert self._processes is not None
        try:
            return self._processes()
        except Exception:
            return {}  # reported by the next refresh, which calls the same lister
