"""The right-sizing sampler extension: feeds each GPU's window every cycle; scores and publishes
when something reads the cycle.

Scoring (evidence, verdicts, costs) and the rows and API objects built from it are lazy: a cycle's
contribution computes them on its first read (a render for a scrape, ``/api/v1/gpus`` or
``/api/v1/rightsizing``, the status page), at most once per cycle, and a cycle nobody reads is only
fed. Values are those eager scoring would give for the same cycle: everything a score reads is
either captured with the cycle (host CPU, PSI, NUMA placements) or changes only when the next cycle
is fed, and forgetting gone GPUs and queues waits for that next cycle too. With
``score_interval_seconds`` > 0 a due cycle is scored as it is fed (the cycles after it publish its
scores), and only rows and API objects wait for a reader.

Windows run on the samples' own timestamps, so a simulated fleet may run faster than wall time.
A GPU's window restarts when another pod takes the GPU (the window belongs to the workload). At
start, a source that can replay its recent past (``history(seconds, step, cancelled)``, the
simulated fleet) fills the windows so verdicts are there within seconds; a stop signal ends the
replay between two readings. ``contribute`` does no I/O: host CPU comes
from a background reader of /proc/stat (or the simulated host), queue depth from the queue
extension's latest values (or the simulated queues).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterable, Mapping, Sequence

from rightsizer_core.logs import event
from rightsizer_core.snapshot import CollectorStatus, GpuReading, GpuSample, PodRef, Row
from rightsizing.catalog import Catalog, nvlink_bytes_per_second
from rightsizing.cost import WorkloadCost, cost_json, cost_rows, workload_costs
from rightsizing.evidence import Evidence, QueueEvidence
from rightsizing.group import merge, multi_gpu_groups
from rightsizing.hostcpu import HostCpuMonitor
from rightsizing.links import QueueReading, linked
from rightsizing.numa import NumaPlacement
from rightsizing.patches.settings import PatchSettings
from rightsizing.settings import RightsizingSettings
from rightsizing.slo.attainment import SloDeclaration, SloEvidence
from rightsizing.slo.verdict import assess_with_slo
from rightsizing.slo.windows import Scaling, SloTracker
from rightsizing.tracker import GpuTracker
from rightsizing.trend import QueueTrend, ServerCounters
from rightsizing.verdicts import Assessment, decision_inputs

from ..lazy import Deferred, LazyRows, LazySections
from ..sampler import Contribution
from .feeds import PlacementFeed, QueueFeed, simulated_queue_readings
from .publish import CycleView, RowMaker
from .slo_match import Unmatched

log = logging.getLogger("rightsizer.rightsizing")
REPLAY_POINTS = 720  # samples per GPU replayed at start (a 1 h window: one every 5 s)


class RightsizingExtension:
    name = "rightsizing"

    def __init__(
        self,
        settings: RightsizingSettings,
        catalog: Catalog,
        interval: float,
        source: object | None = None,
        queues: QueueFeed | None = None,
        placements: PlacementFeed | None = None,
        patches: PatchSettings | None = None,
        node: str = "",
        slos: Sequence[SloDeclaration] = (),
        unmatched: Sequence[Unmatched] = (),
    ) -> None:
        self.settings = settings
        self.patch_settings = patches or PatchSettings()
        self.node = node
        self.catalog = catalog
        self.interval = interval
        self.source = source
        self.queue_feed = queues
        self.placements = getattr(source, "numa_placements", None) or placements
        self._sim_cpu = getattr(source, "host_cpu_busy_ratio", None)
        self._sim_queues = getattr(source, "queue_samples", None)
        self._sim_psi = getattr(source, "host_pressure", None)
        self.host_cpu = None if self._sim_cpu else HostCpuMonitor(settings.procfs_root, interval)
        self.trackers: dict[str, GpuTracker] = {}
        self.pods: dict[str, PodRef | None] = {}
        self.queues: dict[str, QueueTrend] = {}
        self.servers: dict[str, ServerCounters] = {}  # memory pressure and throughput of server queues
        self._assessments: dict[str, Assessment] = {}
        self._costs: list[WorkloadCost] = []  # cost per inference of each inference server's GPUs
        self._cost_rows: dict[str, tuple[Row, ...]] = {}
        self._cost_json: list[dict[str, object]] = []
        self._evidence: dict[str, Evidence] = {}
        self._decided: dict[str, tuple[tuple[object, ...] | None, Assessment]] = {}
        self._links: dict[str, tuple[tuple[PodRef | None, tuple[str, ...]], list[str]]] = {}
        self._scored_at: float | None = None
        # A due cycle not scored yet: its GPUs and the NUMA placements it was fed with.
        self._pending: tuple[Sequence[GpuSample], Mapping[str, NumaPlacement]] | None = None
        self._forget_after: float | None = None  # time of the last cycle fed (queues forgotten later)
        self.scorings = 0  # score() runs (a cycle nobody reads costs none)
        self.row_maker = RowMaker()
        self.queue_meta: dict[str, QueueReading] = {}  # latest reading of each queue (for links)
        # Latency histograms per workload, and their SLOs (the exporter's and the scenario's).
        self.slo = SloTracker(settings, (*slos, *getattr(source, "slos", ())))
        self._slo_evidence: dict[tuple[str, str], SloEvidence] = {}
        self._slo_scaling: dict[tuple[str, str], Scaling] = {}
        self.slo_unmatched = tuple(unmatched)  # declared SLOs that no queue matches (slo_match)

    # -- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self.host_cpu is not None:
            await self.host_cpu.start()
        history = getattr(self.source, "history", None)
        if history is not None:
            started = time.perf_counter()
            seconds = self.settings.window_seconds
            step = max(self.interval, seconds / REPLAY_POINTS)
            event(log, logging.INFO, "filling windows from history", seconds=seconds, step=step)
            cancel = threading.Event()  # the thread cannot be cancelled: it stops when asked
            try:
                count = await asyncio.to_thread(self._replay, history(seconds, step, cancel.is_set), cancel)
            except asyncio.CancelledError:  # a stop signal during start-up
                cancel.set()
                raise
            event(
                log,
                logging.INFO,
                "windows filled from history",
                readings=count,
                seconds=round(time.perf_counter() - started, 3),
            )

    async def stop(self) -> None:
        if self.host_cpu is not None:
            await self.host_cpu.stop()

    def _replay(self, readings: Iterable[GpuReading], cancel: threading.Event) -> int:
        count = 0
        for reading in readings:
            if cancel.is_set():
                break
            self.feed(reading.timestamp, reading.gpus, live=False)
            count += 1
        return count

    # -- feeding ------------------------------------------------------------------------------
    def _host_cpu(self, t: float) -> float | None:
        if self._sim_cpu is not None:
            return float(self._sim_cpu(t))
        return None if self.host_cpu is None else self.host_cpu.latest

    def _host_pressure(self, t: float) -> Mapping[tuple[str, str], float]:
        """PSI stall shares, (resource, kind) -> ratio; empty when unknown (no PSI)."""
        if self._sim_psi is not None:
            return self._sim_psi(t) or {}
        return {} if self.host_cpu is None else self.host_cpu.psi.latest

    def _queue_readings(self, t: float, live: bool) -> list[QueueReading]:
        """The configured queues' latest depths (live cycles only: they have no past), and the
        simulated fleet's queues at ``t``."""
        out = self.queue_feed.queue_readings() if self.queue_feed is not None and live else []
        if self._sim_queues is not None:
            out += simulated_queue_readings(self._sim_queues(t))
        return out

    def feed(self, t: float, gpus: Sequence[GpuSample], live: bool = True) -> None:
        cpu = self._host_cpu(t)
        stalls = [v for (_, kind), v in self._host_pressure(t).items() if kind == "full"]
        stall = max(stalls) if stalls else None
        for sample in gpus:
            if not sample.up:
                continue
            key = sample.identity.key
            tracker = self.trackers.get(key)
            pod = sample.pod
            if (
                tracker is None
                or tracker.identity != sample.identity
                or (pod is not None and self.pods.get(key) not in (None, pod))
            ):
                spec = self.catalog.lookup(sample.identity.model)
                tracker = self.trackers[key] = GpuTracker(
                    sample,
                    self.settings,
                    spec.pcie_bytes_per_second if spec else None,
                    nvlink_bytes_per_second(spec.interconnect) if spec else None,
                )
            if pod is not None:
                self.pods[key] = pod
            tracker.add(t, sample, cpu, stall)
        self.slo.begin_cycle()
        for q in self._queue_readings(t, live):
            self.slo.add(t, q.name, q.labels, q.server, q.latency, q.latency_refused)
            trend = self.queues.get(q.name)
            if trend is None:
                trend = self.queues[q.name] = QueueTrend(
                    self.settings.window_seconds, self.settings.window_buckets
                )
            last = trend.last_timestamp
            if last is None or not last - self.settings.window_seconds <= t <= last:
                trend.add(t, q.depth)
                totals = [q.preemptions_total, q.generated_tokens_total, q.prompt_tokens_total]
                totals.append(q.requests_total)
                if q.server is not None or q.kv_cache_usage is not None or any(x is not None for x in totals):
                    counters = self.servers.get(q.name)
                    if counters is None:
                        counters = self.servers[q.name] = ServerCounters(
                            self.settings.window_seconds, self.settings.window_buckets
                        )
                    counters.add(t, q.kv_cache_usage, *totals, kv_bytes=q.kv_cache_bytes)
            self.queue_meta[q.name] = q

    # -- scoring ------------------------------------------------------------------------------
    @property
    def assessments(self) -> dict[str, Assessment]:
        """Device key -> assessment of the last cycle fed (scored now if it was not yet)."""
        self._score_pending()
        return self._assessments

    @property
    def evidence(self) -> dict[str, Evidence]:
        """Device key -> the evidence its assessment was made from (scored now if needed)."""
        self._score_pending()
        return self._evidence

    @property
    def costs(self) -> list[WorkloadCost]:
        """Cost per inference of each inference server's GPUs (scored now if needed)."""
        self._score_pending()
        return self._costs

    def _score_pending(self) -> None:
        pending = self._pending
        if pending is not None:
            self.score(*pending)

    def score(self, gpus: Sequence[GpuSample], placements: Mapping[str, NumaPlacement] | None = None) -> None:
        self._pending = None
        self.scorings += 1
        s = self.settings
        queues = {}
        self._slo_evidence = slo = self.slo.evidence()
        self._slo_scaling = self.slo.scaling()
        for name, trend in self.queues.items():
            n, last, top, rise = trend.summary()
            if n:
                mean, span = trend.level()
                meta = self.queue_meta.get(name)
                counters = self.servers.get(name)
                rates = counters.rates() if counters is not None else (None, None, None)
                queues[name] = QueueEvidence(
                    name, last or 0.0, top or 0.0, rise, mean, span,
                    meta.server if meta is not None else None,
                    counters.kv_cache_p95() if counters is not None else None,
                    counters.preemptions() if counters is not None else None,
                    *rates, slo.get(self.slo.queue_key(name) or ("", name)),
                    counters.kv_bytes if counters is not None else None,
                )  # fmt: skip
        metas = tuple(self.queue_meta.values())
        # A GPU in MIG mode is judged through its instances, each of which is a workload's device.
        mig_parents = {g.identity.parent_uuid for g in gpus if g.identity.parent_uuid is not None}
        evidence: dict[str, Evidence] = {}
        if placements is None:
            placements = self.placements() if self.placements is not None else {}
        members = []
        for sample in gpus:
            key = sample.identity.key
            tracker = self.trackers.get(key)
            # A GPU that is down gets no verdict until it answers again (its window is kept).
            if tracker is None or not sample.up or sample.identity.uuid in mig_parents:
                continue
            link_key = (sample.pod, tuple(self.queue_meta))
            cached = self._links.get(key)
            if cached is None or cached[0] != link_key:
                cached = self._links[key] = (link_key, linked(sample, metas, s.queue_links))
            linked_queues = [queues[n] for n in cached[1] if n in queues]
            evidence[key] = tracker.evidence(linked_queues, False, placements.get(sample.identity.uuid))
            pod, mig = sample.pod, sample.identity.parent_uuid is not None
            members.append((key, "", pod.namespace if pod else None, pod.pod if pod else None, mig))
        judged = dict(evidence)  # what assess reads: a multi-GPU workload's members read its merged evidence
        for keys in multi_gpu_groups(members, evidence, s).values():
            merged = merge([evidence[k] for k in keys])
            for k in keys:
                judged[k] = merged
        assessments: dict[str, Assessment] = {}
        for key, ev in judged.items():
            # Latencies move every cycle: an assessment that reads an SLO is made afresh.
            inputs = (
                None
                if any(q.slo is not None and q.slo.targets for q in ev.queues)
                else decision_inputs(ev, s)
            )
            previous = self._decided.get(key)
            if inputs is not None and previous is not None and previous[0] == inputs:
                assessments[key] = previous[1]
            else:
                assessments[key] = assess_with_slo(ev, s, self.catalog)
                self._decided[key] = (inputs, assessments[key])
        self._assessments, self._evidence = assessments, evidence
        units = ((k, "", judged[k], a) for k, a in assessments.items())
        self._costs = workload_costs(units, self.catalog, s)
        self._cost_rows = cost_rows(self._costs)
        self._cost_json = [cost_json(c) for c in self._costs]

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        started = time.perf_counter()
        t = reading.timestamp
        if self._forget_after is not None:  # queues: the previous cycle's scores may still read them
            self._forget_queues(self._forget_after)
        if self.host_cpu is not None:
            self.host_cpu.poll()
        self.feed(t, gpus)
        self._forget_gpus(gpus, t)  # scores read present GPUs only
        self._forget_after = t
        due = (
            self._scored_at is None
            or t - self._scored_at >= self.settings.score_interval_seconds
            or t < self._scored_at
        )
        if due:
            self._scored_at = t
            self._pending = (gpus, self.placements() if self.placements is not None else {})
            if self.settings.score_interval_seconds > 0:
                self._score_pending()  # the cycles until the next due one publish this cycle's scores
        cycle = CycleView(self, gpus, self._host_cpu(t), self._host_pressure(t), t)
        api = LazySections(
            {
                "gpus": Deferred(cycle.entries),
                "rightsizing": Deferred(cycle.overview),
                "patches": Deferred(cycle.patches),
            }
        )
        status = CollectorStatus(self.name, True, time.perf_counter() - started)
        return Contribution(rows=LazyRows(cycle.rows), api=api, collectors=(status,))

    def _forget_gpus(self, gpus: Sequence[GpuSample], t: float) -> None:
        """Drop windows of GPUs not seen for a whole window (gone from the node)."""
        present = {g.identity.key for g in gpus}
        horizon = t - self.settings.window_seconds
        for key in [k for k, tr in self.trackers.items() if k not in present]:
            last = self.trackers[key].window.last_timestamp
            if last is None or last < horizon:
                del self.trackers[key]
                self.pods.pop(key, None)
                self._links.pop(key, None)
                self._decided.pop(key, None)

    def _forget_queues(self, t: float) -> None:
        """Drop windows of queues not seen for a whole window before ``t``."""
        horizon = t - self.settings.window_seconds
        for name in [n for n, q in self.queues.items() if (q.last_timestamp or 0.0) < horizon]:
            del self.queues[name]
            self.queue_meta.pop(name, None)
            self.servers.pop(name, None)
        self.slo.forget(horizon)
