"""The simulated fleet: a ``GpuSource`` that reads a scenario instead of NVML.

Simulated time is ``start + elapsed wall time x speed`` (or stays at ``start`` when the scenario
is frozen). Everything a reading holds is a pure function of the scenario and the simulated time,
so ``reading_at(t)`` is the same whenever it is asked: the energy counter is the integral of the
power over 10-second buckets from a fixed origin (prefix sums are cached, so each bucket is
computed once). ``history`` replays the recent past so windows can be full at start.

Beyond the GPU fields, the right-sizing engine reads the node's host CPU busy ratio
(``host_cpu_busy_ratio``) and each simulated queue's depth (``queue_samples``).
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample, PodRef
from rightsizing.numa import NumaPlacement
from rightsizing.slo.latency import Histogram

from .latency import LatencyModel, slo_of
from .mig import INSTANCE_FIELDS, PARENT_UNSUPPORTED, Instance, combined
from .numa import placements
from .physics import Board, fields_of, nvlink_bytes_per_second, power_watts
from .scenario import Scenario, SimGpu, builtin_names, load_scenario
from .schema import QueueEntry
from .workloads import Activity, Noise, Workload, evaluate

__all__ = ["QueueSample", "Scenario", "SimulatedSource", "XidEvent", "builtin_names", "load_scenario"]

ENERGY_BUCKET_SECONDS = 10.0
KEEP_EXTRA_BUCKETS = 720  # integrals cached beyond the replayable history: 2 h of 10 s buckets
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class XidEvent:
    """An injected XID error, as NVML's event set would deliver it."""

    timestamp: float
    gpu_uuid: str
    xid: int


@dataclass(frozen=True, slots=True)
class QueueSample:
    """One simulated queue at one time: the GPUs it feeds are named by UUID."""

    name: str
    labels: Mapping[str, str]
    depth: float
    in_flight: float
    gpus: tuple[str, ...]
    server: str | None = None
    kv_cache_usage: float | None = None
    preemptions_total: float | None = None
    generated_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    requests_total: float | None = None
    latency: Mapping[str, Histogram] | None = None  # the server's cumulative latency histograms
    # The server's KV-cache pool over all its GPUs, as the exporter reads it from vLLM's
    # cache_config_info or SGLang's max_total_num_tokens and the model's shape: published for those
    # servers serving a declared model.
    kv_cache_bytes: float | None = None

    @property
    def queue(self) -> str:
        return self.name

    @property
    def gpu_uuid(self) -> str:
        return self.gpus[0]


class _Device:
    """One simulated GPU: constants, noise, and the cached energy / NVLink integrals."""

    __slots__ = (
        "base",
        "began",
        "board",
        "energy",
        "gpu",
        "identity",
        "instances",
        "keep",
        "last",
        "last_t",
        "noise",
        "nvlink",
        "origin_bucket",
        "pod",
        "rate",
        "rate_bucket",
        "unsupported",
        "uptime0",
    )

    def __init__(self, gpu: SimGpu, scenario: Scenario, start: float) -> None:
        self.gpu = gpu
        self.board = Board.of(gpu.spec)
        if gpu.pcie_link is not None:  # trained below its maximum: current values and capacity drop
            self.board = self.board.with_link(*gpu.pcie_link)
        self.noise = Noise(scenario.seed, gpu.index)
        self.identity = GpuIdentity(
            index=gpu.index,
            uuid=gpu.uuid,
            pci_bus_id=gpu.pci_bus_id,
            model=gpu.spec.nvml_names[0] if gpu.spec.nvml_names else gpu.spec.key,
            minor_number=gpu.index,
            driver_version=scenario.driver_version,
            memory_total_bytes=gpu.spec.usable_memory,
        )
        self.pod = PodRef(gpu.pod.pod, gpu.pod.namespace, gpu.pod.container) if gpu.pod else None
        origin = start - scenario.history_seconds - ENERGY_BUCKET_SECONDS
        self.instances = [
            Instance(gpu, m, self.identity, scenario.seed, gpu.spec.gpm_supported) for m in gpu.mig
        ]
        self.unsupported = self.board.unsupported | (PARENT_UNSUPPORTED if gpu.mig else frozenset())
        # A workload runs from start_after_seconds after the start, or since before the replayable past.
        self.began = [began(w.params["start_after_seconds"], start, scenario) for w in self._workloads()]
        self.origin_bucket = math.floor(origin / ENERGY_BUCKET_SECONDS)
        # Booted between 1 and 30 days before the origin; the counters start from that uptime.
        self.uptime0 = 86400.0 * (1 + 29 * self.noise.fixed("phase", 7))
        # energy[k - base], nvlink[k - base]: joules since boot and MiB over NVLink at the start of
        # bucket origin+k. Only the recent part is kept; older values are recomputed on demand.
        self.base = 0
        self.energy = array("d", [self.board.idle_watts * self.uptime0])
        self.nvlink = array("d", [0.0])
        self.keep = int(scenario.history_seconds / ENERGY_BUCKET_SECONDS) + KEEP_EXTRA_BUCKETS
        self.last_t: float | None = None
        self.last: Activity | None = None
        self.rate_bucket: int | None = None
        self.rate = (0.0, 0.0)

    def _workloads(self) -> list[Workload]:
        if self.gpu.workload is not None:
            return [self.gpu.workload]
        return [m.workload for m in self.gpu.mig]


def began(after: float, start: float, scenario: Scenario) -> float:
    return start + after if after > 0 else start - scenario.history_seconds


class SimulatedSource:
    name = "simulated"

    def __init__(
        self,
        scenario: Scenario,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.scenario = scenario
        self._monotonic = monotonic
        self._wall0 = monotonic()
        self.start_time = scenario.start if scenario.start is not None else wall()
        self.devices = [_Device(g, scenario, self.start_time) for g in scenario.gpus]
        self._numa = placements(scenario.numa_nodes, scenario.gpus)
        self._host_noise = Noise(scenario.seed, -1)
        # Latency histograms of each serving workload whose queue names its inference server.
        self._latency: dict[str, LatencyModel] = {}
        for d in self.devices:
            units = [(d.gpu.queue, d.gpu.uuid, d.gpu.workload)] if d.gpu.workload is not None else []
            units += [(i.mig.queue, i.mig.uuid, i.mig.workload) for i in d.instances]
            for q, uuid, w in units:
                if q is not None and q.server is not None and w.serving is not None:
                    self._latency[uuid] = LatencyModel(w, q.server, d.noise)
        # Latency SLOs the scenario's queues declare.
        self.slos = scenario.slos + tuple(
            slo_of(q) for d in self.devices for q in (d.gpu.queue, *(i.mig.queue for i in d.instances))
            if q is not None and q.slo is not None
        )  # fmt: skip

    def host_pressure(self, t: float | None = None) -> dict[tuple[str, str], float] | None:
        """The host's PSI stall shares, (resource, kind) -> ratio; None: a host without PSI."""
        return self.scenario.host_pressure

    def numa_placements(self) -> dict[str, NumaPlacement]:
        """Device UUID -> NUMA placement of the GPU and its pod's container (static)."""
        return self._numa

    # -- GpuSource ------------------------------------------------------------------------------
    async def start(self) -> None:
        return None

    async def collect(self) -> GpuReading:
        began = time.perf_counter()
        t = self.now()
        gpus = tuple(s for d in self.devices for s in self._samples(d, t))
        return GpuReading(t, gpus, CollectorStatus(self.name, True, time.perf_counter() - began))

    async def stop(self) -> None:
        return None

    # -- simulated time ---------------------------------------------------------------------------
    def now(self) -> float:
        """The current simulated time (Unix seconds)."""
        if self.scenario.frozen:
            return self.start_time
        return self.start_time + (self._monotonic() - self._wall0) * self.scenario.speed

    def reading_at(self, t: float, history: bool = False) -> GpuReading:
        """The fleet's reading at simulated time ``t`` (GPUs without past at ``t`` left out when
        ``history``)."""
        began = time.perf_counter()
        gpus = tuple(
            s for d in self.devices if not history or self._present(d, t) for s in self._samples(d, t)
        )
        return GpuReading(t, gpus, CollectorStatus(self.name, True, time.perf_counter() - began))

    def history(
        self, seconds: float, step: float, cancelled: Callable[[], bool] = lambda: False
    ) -> Iterator[GpuReading]:
        """Readings of the recent past, oldest first, every ``step`` seconds of simulated time, all
        strictly before the current simulated time, going back at most ``seconds`` and never before
        the scenario's ``history_seconds`` ahead of its start. Ends early once ``cancelled()``."""
        if step <= 0:
            raise ValueError("step must be positive")
        now = self.now()
        earliest = max(now - seconds, self.start_time - self.scenario.history_seconds)
        n = math.floor((now - earliest) / step + 1e-9)
        # The energy counters integrate from the start of the history: do it in slices, so that a
        # stop is seen within one slice rather than after the whole past of every GPU.
        for d in self.devices:
            t = (d.origin_bucket + 1) * ENERGY_BUCKET_SECONDS
            while True:
                if cancelled():
                    return
                t = min(t + ENERGY_BUCKET_SECONDS * 512, now - n * step)
                self._integrals(d, t)
                if t >= now - n * step:
                    break
        for k in range(n, 0, -1):
            if cancelled():
                return
            yield self.reading_at(now - k * step, history=True)

    # -- signals for the right-sizing engine ------------------------------------------------------
    def host_cpu_busy_ratio(self, t: float | None = None) -> float:
        """Share of the node's CPU time busy at ``t`` (default: now)."""
        t = self.now() if t is None else t
        busy = self.scenario.host_cpu_busy_ratio + sum(
            self._activity(d, t).host_cpu for d in self.devices if self._present(d, t)
        )
        busy *= 1.0 + 0.04 * self._host_noise.signed("load", math.floor(t))
        return round(min(1.0, max(0.0, busy)), 4)

    def queue_entries(self) -> list[tuple[str, dict[str, str]]]:
        """(name, labels) of every queue the scenario declares, present now or later."""
        entries = (q for d in self.devices for q in (d.gpu.queue, *(i.mig.queue for i in d.instances)))
        return [(q.name, dict(q.labels)) for q in entries if q is not None]

    def queue_samples(self, t: float | None = None) -> list[QueueSample]:
        """Depth and in-flight count of every simulated queue at ``t`` (default: now)."""
        t = self.now() if t is None else t
        out: list[QueueSample] = []
        seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for d in self.devices:
            if not self._present(d, t):
                continue
            feeds: list[tuple[QueueEntry | None, str, Activity, float]] = []
            if d.gpu.queue is not None:
                feeds.append((d.gpu.queue, d.gpu.uuid, self._activity(d, t), d.began[0]))
            if d.instances:
                acts = self._instance_activities(d, t)
                feeds += [
                    (i.mig.queue, i.mig.uuid, a, b)
                    for i, a, b in zip(d.instances, acts, d.began, strict=True)
                ]
            for q, uuid, a, start in feeds:
                if q is not None and (q.name, tuple(sorted(q.labels.items()))) in seen:
                    # One queue feeding several GPUs (a tensor-parallel server): published once,
                    # as that server's /metrics would be, and linked to every GPU it feeds.
                    i = seen[(q.name, tuple(sorted(q.labels.items())))]
                    pool = out[i].kv_cache_bytes
                    more = self._pool(q.server, uuid)
                    pool = None if pool is None or more is None else pool + more
                    out[i] = replace(out[i], gpus=(*out[i].gpus, uuid), kv_cache_bytes=pool)
                elif q is not None:
                    seen[(q.name, tuple(sorted(q.labels.items())))] = len(out)
                    depth, in_flight = float(round(a.queue_depth)), float(round(a.in_flight))
                    reports = q.server in ("vllm", "sglang")
                    tokens = reports or q.server == "tgi"
                    served = q.server is not None
                    model = self._latency.get(uuid)
                    out.append(
                        QueueSample(
                            q.name, dict(q.labels), depth, in_flight, (uuid,), q.server,
                            a.kv_cache if reports else None, a.preemptions if reports else None,
                            a.generated_tokens if tokens and served else None,
                            a.prompt_tokens if tokens and served else None,
                            a.requests if served else None,
                            None if model is None else model.at(t - start),
                            self._pool(q.server, uuid),
                        )
                    )  # fmt: skip
        return out

    def _pool(self, server: str | None, uuid: str) -> float | None:
        """The KV-cache pool of a vLLM or SGLang workload with a declared model (the servers publish
        their pool in blocks or tokens, and the exporter needs the model's shape for bytes)."""
        model = self._latency.get(uuid)
        physics = None if model is None else model.w.serving
        if server not in ("vllm", "sglang") or physics is None or not physics.model:
            return None
        return physics.pool_bytes

    def xid_events(self, since: float, until: float) -> list[XidEvent]:
        """The injected XID errors with ``since < timestamp <= until``, in time order."""
        events = [
            XidEvent(self.start_time + after, d.gpu.uuid, xid)
            for d in self.devices
            for after, xid in d.gpu.xids
            if since < self.start_time + after <= until
        ]
        return sorted(events, key=lambda e: (e.timestamp, e.gpu_uuid))

    def activities_at(self, t: float) -> list[tuple[GpuIdentity, Activity]]:
        """Each present GPU's activity at ``t`` (in MIG mode, each instance's): what a profiler such
        as DCGM measures, GPM or not (``dcgm_page``)."""
        out: list[tuple[GpuIdentity, Activity]] = []
        for d in self.devices:
            if not self._present(d, t):
                continue
            if not d.instances:
                out.append((d.identity, self._activity(d, t)))
                continue
            for inst, a in zip(d.instances, self._instance_activities(d, t), strict=True):
                out.append((inst.identity, a))
        return out

    # -- internals ----------------------------------------------------------------------------------
    def _present(self, d: _Device, t: float) -> bool:
        """Whether the GPU existed at ``t`` (GPUs with a short ``history_seconds`` appeared lately)."""
        return t >= self.start_time - d.gpu.history_seconds

    def _instance_activities(self, d: _Device, t: float) -> list[Activity]:
        return [i.activity(t, b) for i, b in zip(d.instances, d.began, strict=True)]

    def _activity(self, d: _Device, t: float) -> Activity:
        """The whole GPU's activity (in MIG mode, its instances' combined)."""
        if d.last_t == t and d.last is not None:  # collect, host CPU and queues ask the same t
            return d.last
        if d.gpu.workload is not None:
            a = evaluate(d.gpu.workload, d.noise, t, t - d.began[0])
        else:
            a = combined(d.instances, self._instance_activities(d, t), d.gpu.spec.memory_bytes)
        d.last_t, d.last = t, a
        return a

    def _samples(self, d: _Device, t: float) -> list[GpuSample]:
        a = self._activity(d, t)
        joules, nvlink = self._integrals(d, t)
        uptime = d.uptime0 + (t - d.origin_bucket * ENERGY_BUCKET_SECONDS)
        fields, reasons = fields_of(d.board, a, d.noise, t, joules, nvlink, uptime)
        if d.gpu.xids:
            fields["xid_last"] = float(
                next((x for after, x in reversed(d.gpu.xids) if after <= t - self.start_time), 0)
            )
        if not d.instances:
            return [GpuSample(d.identity, True, fields, d.unsupported, None, d.pod, reasons)]
        for name in PARENT_UNSUPPORTED:
            del fields[name]
        out = [GpuSample(d.identity, True, fields, d.unsupported, None, d.pod, reasons)]
        for inst, ia in zip(d.instances, self._instance_activities(d, t), strict=True):
            if inst.unsupported is None:  # what NVML answers NOT_SUPPORTED for on an instance
                inst.unsupported = inst.missing | (frozenset(fields) | PARENT_UNSUPPORTED) - INSTANCE_FIELDS
            out.append(GpuSample(inst.identity, True, inst.fields(ia), inst.unsupported, None, inst.pod))
        return out

    def _integrals(self, d: _Device, t: float) -> tuple[float, float]:
        """Energy (J since boot) and NVLink data (MiB) at ``t``: whole buckets from the cache plus
        the current bucket's share at its midpoint rate."""
        k = max(0, math.floor(t / ENERGY_BUCKET_SECONDS) - d.origin_bucket)
        if k < d.base:  # older than the cache: the same sums, recomputed (rare: deep history)
            e, n = self._from_origin(d, k)
        else:
            while d.base + len(d.energy) <= k:
                j = d.base + len(d.energy) - 1
                watts, link = self._rates(d, (d.origin_bucket + j + 0.5) * ENERGY_BUCKET_SECONDS)
                d.energy.append(d.energy[-1] + watts * ENERGY_BUCKET_SECONDS)
                d.nvlink.append(d.nvlink[-1] + link * ENERGY_BUCKET_SECONDS)
            e, n = d.energy[k - d.base], d.nvlink[k - d.base]
            if len(d.energy) > 2 * d.keep:
                drop = len(d.energy) - d.keep
                del d.energy[:drop], d.nvlink[:drop]
                d.base += drop
        if d.rate_bucket != k:  # the current bucket's rate, once per bucket
            d.rate_bucket, d.rate = k, self._rates(d, (d.origin_bucket + k + 0.5) * ENERGY_BUCKET_SECONDS)
        watts, link = d.rate
        part = t - (d.origin_bucket + k) * ENERGY_BUCKET_SECONDS
        return e + watts * part, n + link * part

    def _from_origin(self, d: _Device, k: int) -> tuple[float, float]:
        e, n = d.board.idle_watts * d.uptime0, 0.0
        for j in range(k):
            watts, link = self._rates(d, (d.origin_bucket + j + 0.5) * ENERGY_BUCKET_SECONDS)
            e += watts * ENERGY_BUCKET_SECONDS
            n += link * ENERGY_BUCKET_SECONDS
        return e, n

    def _rates(self, d: _Device, t: float) -> tuple[float, float]:
        a = self._activity(d, t)
        return power_watts(d.board, a), nvlink_bytes_per_second(d.board, a) / MIB
