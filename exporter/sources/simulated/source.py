"""The simulated fleet: a ``GpuSource`` that reads a scenario instead of NVML.

Simulated time is ``start + elapsed wall time x speed`` (or stays at ``start`` when the scenario
is frozen). Everything a reading holds is a pure function of the scenario and the simulated time,
so ``reading_at(t)`` is the same whenever it is asked: the energy counter is the integral of the
power over 10-second buckets from a fixed origin (``device``: each GPU's activity and counters;
prefix sums are cached, so each bucket is computed once). ``history`` replays the recent past so
windows can be full at start.

Beyond the GPU fields, the right-sizing engine reads the node's host CPU busy ratio
(``host_cpu_busy_ratio``) and each simulated queue's depth (``queue_samples``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

from rightsizer_core.snapshot import CollectorStatus, GpuIdentity, GpuReading, GpuSample
from rightsizing.numa import NumaPlacement
from rightsizing.slo.latency import Histogram

from .device import ENERGY_BUCKET_SECONDS, Device
from .latency import LatencyModel, slo_of
from .mig import INSTANCE_FIELDS, PARENT_UNSUPPORTED
from .numa import placements
from .physics import fields_of
from .scenario import Scenario, builtin_names, load_scenario
from .schema import QueueEntry
from .workloads import Activity, Noise

__all__ = ["QueueSample", "Scenario", "SimulatedSource", "XidEvent", "builtin_names", "load_scenario"]


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
        self.devices = [Device(g, scenario, self.start_time) for g in scenario.gpus]
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
                d.integrals(t)
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
            d.activity(t).host_cpu for d in self.devices if self._present(d, t)
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
                feeds.append((d.gpu.queue, d.gpu.uuid, d.activity(t), d.began[0]))
            if d.instances:
                acts = d.instance_activities(t)
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
                out.append((d.identity, d.activity(t)))
                continue
            for inst, a in zip(d.instances, d.instance_activities(t), strict=True):
                out.append((inst.identity, a))
        return out

    # -- internals ----------------------------------------------------------------------------------
    def _present(self, d: Device, t: float) -> bool:
        """Whether the GPU existed at ``t`` (GPUs with a short ``history_seconds`` appeared lately)."""
        return t >= self.start_time - d.gpu.history_seconds

    def _samples(self, d: Device, t: float) -> list[GpuSample]:
        a = d.activity(t)
        joules, nvlink = d.integrals(t)
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
        for inst, ia in zip(d.instances, d.instance_activities(t), strict=True):
            if inst.unsupported is None:  # what NVML answers NOT_SUPPORTED for on an instance
                inst.unsupported = inst.missing | (frozenset(fields) | PARENT_UNSUPPORTED) - INSTANCE_FIELDS
            out.append(GpuSample(inst.identity, True, inst.fields(ia), inst.unsupported, None, inst.pod))
        return out
