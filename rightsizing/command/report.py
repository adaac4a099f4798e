"""``rightsizer report``: the fleet's verdicts, recommendations and savings from Prometheus history.

One unit of the report is a GPU (or MIG instance) and the pod that used it, exactly as the live
engine keeps one window per GPU and pod. Its ``Evidence`` comes from PromQL over the window
(``count_over_time``, ``max_over_time``, ``quantile_over_time``, ``deriv``) on the exporter's
DCGM-named series, and the same ``assess`` as the live engine decides. Percentiles over long
windows read a subquery at ``resolution`` instead of every raw sample (Prometheus loads the raw
samples of a range into memory: 64 GPUs x 7 d at 1 s is 39 M samples per query).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..balance import FLAGGED_BY_EXPORTER
from ..catalog import PCIE_LANE_BYTES_PER_SECOND, Catalog, nvlink_bytes_per_second
from ..cost import WorkloadCost, workload_costs
from ..evidence import Evidence
from ..group import merge, multi_gpu_groups
from ..links import linked
from ..settings import RightsizingSettings
from ..slo.attainment import SloEvidence
from ..slo.verdict import assess_with_slo
from ..verdicts import Assessment
from ..words import exact_duration
from . import report_dcgm, report_queues, report_slo, report_span
from .promapi import PrometheusClient, ReportError, Sample, promql_duration
from .report_shards import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_SERIES,
    SIZED_BY,
    ShardedClient,
    plan,
    series_per_exporter,
)

# The exporter (instance) is part of a unit's key: each node's queues link to its own GPUs, and
# multi-GPU jobs are grouped within a node, as the live engine on that node does.
KEY = ("instance", "UUID", "GPU_I_ID", "pod", "namespace", "container")
BY = ", ".join(KEY)
IDENTITY = (*KEY, "GPU_I_PROFILE", "modelName", "Hostname", "hostname", "gpu")
MIB = 1048576.0
Key = tuple[str, ...]


@dataclass(frozen=True)
class Unit:
    key: Key
    labels: dict[str, str]
    evidence: Evidence
    assessment: Assessment
    hourly_price_dollars: float | None


@dataclass(frozen=True)
class Fleet:
    window_seconds: float
    at: float
    units: tuple[Unit, ...]
    costs: tuple[WorkloadCost, ...] = ()  # cost per inference of each inference server's GPUs
    shards: tuple[tuple[str, ...], ...] = ()  # the exporters (instance) of each shard queried
    history_start: float | None = None  # the earliest first sample of a GPU judged (Unix seconds)
    resolution: float | None = None  # the percentiles' subquery step (None: every raw sample)
    slos: tuple[SloEvidence, ...] = ()  # each workload's latencies over the window, with its SLO


def key_of(labels: dict[str, str]) -> Key:
    return tuple(labels.get(k, "") for k in KEY)


QUERIES = 51 + report_slo.QUERIES  # the report's queries (each sent once per shard)


class Collector:
    """Runs the report's queries, one after the other (each split by shard), telling ``progress``
    about each answer."""

    def __init__(
        self,
        client: PrometheusClient,
        at: float,
        window: float,
        resolution: float | None,
        progress: Callable[[int, int, str], None],
    ) -> None:
        self.plain, self.at, self.progress = client, at, progress
        self.client = ShardedClient(client, [()], 1)
        self.window = self.span = window
        self.asked = resolution
        self.narrow(None)
        self.done = 0
        self.total = 0
        self.what = ""
        self.shards: tuple[tuple[str, ...], ...] = ()

    def split(self, max_series: int, concurrency: int) -> dict[str, float]:
        """Plans the shards (one query per family of ``SIZED_BY``); returns the series per exporter found."""
        self.total = len(SIZED_BY) + QUERIES
        counts: dict[str, float] = {}
        for metric, extra in zip(SIZED_BY, (1, 0, 0, 0), strict=True):
            self.tick("shards")
            # The history queries answer one more series per exporter than it has GPUs: its own
            # first (last) sample's time (report_span).
            for name, n in series_per_exporter(self.plain, self.at, self.w, metric).items():
                counts[name] = max(n + extra, counts.get(name, 0.0))
        self.shards = tuple(plan(counts, max_series))
        self.client.close()
        self.client = ShardedClient(self.plain, self.shards, concurrency, self.answered)
        self.total = self.done + QUERIES * self.client.shards
        return counts

    def narrow(self, earliest: float | None) -> None:
        """From here on, read the history there is: from ``earliest`` (no sample is older), not the
        whole window, with the steps and the percentiles' default resolution sized by that span
        (two minutes of history under a week's window: raw samples, not one per minute)."""
        if earliest is not None:
            self.span = min(self.window, math.ceil(max(0.0, self.at - earliest)) + 1.0)
        self.w = promql_duration(self.span)
        self.resolution = self.asked or (self.span / 10080 if self.span > 86400 else None)
        self.sub = f"[{self.w}:{promql_duration(self.resolution)}]" if self.resolution else f"[{self.w}]"
        self.step_seconds = float(max(1, round(min(60.0, self.span / 2000))))
        self.step = promql_duration(self.step_seconds)

    def tick(self, what: str) -> None:
        self.done += 1
        self.progress(self.done, self.total, what)

    def answered(self) -> None:
        self.tick(self.what)

    def run(self, what: str, expr: str) -> list[Sample]:
        self.what = what
        return self.client.query(expr, self.at)

    def per_unit(self, what: str, expr: str, scale: float = 1.0) -> dict[Key, float]:
        return {key_of(dict(s.labels)): s.value * scale for s in self.run(what, f"max by ({BY}) ({expr})")}

    def quantile(self, what: str, q: float, metric: str, scale: float = 1.0) -> dict[Key, float]:
        return self.per_unit(what, f"quantile_over_time({q}, {metric}{self.sub})", scale)


ACTIVITY = (
    ("sm_active", "DCGM_FI_PROF_SM_ACTIVE", 1.0),
    ("gr_engine_active", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0),
    ("gpu_utilization", "DCGM_FI_DEV_GPU_UTIL", 0.01),
)


def collect(
    client: PrometheusClient,
    at: float,
    window: float,
    idle_after: float,
    resolution: float | None,
    s: RightsizingSettings,
    catalog: Catalog,
    progress: Callable[[int, int, str], None],
    max_series: int = DEFAULT_MAX_SERIES,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> Fleet:
    """The fleet judged from the window's history; queries split so that none answers more than
    ``max_series`` series (see ``report_shards``), ``concurrency`` shards at a time."""
    c = Collector(client, at, window, resolution, progress)
    try:
        c.split(max_series, concurrency)
        return dataclasses.replace(_collect(c, idle_after, s, catalog), shards=c.shards)
    finally:
        c.client.close()


def _collect(c: Collector, idle_after: float, s: RightsizingSettings, catalog: Catalog) -> Fleet:
    progress, window, at = c.progress, c.window, c.at
    high = s.bottlenecks.percentile
    ident = c.run("GPUs", f"max by ({', '.join(IDENTITY)}) (last_over_time(DCGM_FI_DEV_FB_USED[{c.w}]))")
    # One order whichever way the queries were split (engines answer a vector in no set order).
    ident.sort(key=lambda x: sorted(x.labels.items()))
    if not ident:
        raise ReportError(
            f"no GPU series (DCGM_FI_DEV_FB_USED) in Prometheus over the {exact_duration(window)} to "
            f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))}: is it scraping rightsizer-exporter?"
        )
    fb = "DCGM_FI_DEV_FB_USED"
    samples, counts = report_span.split(c.run("samples", report_span.samples_query(fb, BY, c.w)), key_of)
    first_expr, last_expr = report_span.edge_queries(fb, BY, c.w, c.step)
    first, firsts = report_span.split(c.run("history", first_expr), key_of)
    last, lasts = report_span.split(c.run("history", last_expr), key_of)
    spans = report_span.History(at, c.step_seconds, first, last, counts, firsts, lasts)
    c.narrow(spans.earliest())
    w, step = c.w, c.step
    total = c.per_unit("memory", f"max_over_time(rightsizer_gpu_memory_total_bytes[{w}])")
    peak = c.per_unit("memory peak", f"max_over_time({fb}[{w}])", MIB)
    mem95 = c.quantile("memory p95", 0.95, fb, MIB)
    act: dict[str, dict[str, dict[Key, float]]] = {}
    recent = promql_duration(min(idle_after, window))
    for name, metric, scale in ACTIVITY:
        act[name] = {
            "p50": c.quantile(f"{name} p50", 0.5, metric, scale),
            "p95": c.quantile(f"{name} p95", 0.95, metric, scale),
            "p99": c.quantile(f"{name} p99", 0.99, metric, scale),
            "recent": c.per_unit(f"{name} recent", f"max_over_time({metric}[{recent}])", scale),
        }
    sm_high = c.quantile("SM active high", high, "DCGM_FI_PROF_SM_ACTIVE")
    occupancy = c.quantile("occupancy", 0.5, "DCGM_FI_PROF_SM_OCCUPANCY")
    tensor = c.quantile("tensor", 0.95, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    dram95 = c.quantile("DRAM p95", 0.95, "DCGM_FI_PROF_DRAM_ACTIVE")
    dram_high = c.quantile("DRAM high", high, "DCGM_FI_PROF_DRAM_ACTIVE")
    dram99 = c.quantile("DRAM p99", 0.99, "DCGM_FI_PROF_DRAM_ACTIVE")
    copy99 = c.quantile("memory copy p99", 0.99, "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01)
    copy95 = c.quantile("memory copy p95", 0.95, "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01)
    copy_high = c.quantile("memory copy high", high, "DCGM_FI_DEV_MEM_COPY_UTIL", 0.01)
    rate = promql_duration(max(60.0, 4 * c.span / 2000))
    nvlink = c.per_unit(
        "NVLink",
        f"quantile_over_time({high}, rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[{rate}])[{w}:{step}])",
        MIB,
    )
    # A share of the window's instants: 2,000 of them are plenty (standard error under 1.2 points),
    # and the join it evaluates at each is the costliest step of the report on Prometheus.
    starved = c.per_unit("starvation", starved_expr(s, w, promql_duration(max(1.0, c.span / 2000))))
    tx = c.quantile("PCIe TX", high, "DCGM_FI_PROF_PCIE_TX_BYTES")
    rx = c.quantile("PCIe RX", high, "DCGM_FI_PROF_PCIE_RX_BYTES")
    gen = c.per_unit("PCIe link", f"max_over_time(rightsizer_gpu_pcie_link_generation_max[{w}])")
    width = c.per_unit("PCIe link", f"max_over_time(rightsizer_gpu_pcie_link_width_max[{w}])")
    # The best link the GPU trained at over the window (idle GPUs lower the generation to save power).
    gen_now = c.per_unit("PCIe link", f"max_over_time(rightsizer_gpu_pcie_link_generation[{w}])")
    width_now = c.per_unit("PCIe link", f"max_over_time(rightsizer_gpu_pcie_link_width[{w}])")
    numa_flag = 'rightsizer_gpu_balance_finding{finding="numa_mismatch"}'
    numa = c.per_unit("NUMA", f"max_over_time({numa_flag}[{w}])")
    cpu = {
        x.labels.get("instance", ""): x.value
        for x in c.run(
            "host CPU",
            f"max by (instance) (quantile_over_time({high}, rightsizer_host_cpu_busy_ratio{c.sub}))",
        )
    }
    stall = {
        x.labels.get("instance", ""): x.value
        for x in c.run(
            "host pressure",
            f"max by (instance) (quantile_over_time({high}, max by (instance) "
            f'(rightsizer_host_pressure_stalled_ratio{{kind="full"}})[{w}:{step}]))',
        )
    }
    slos = report_slo.collect(c, s)
    queues = report_slo.attach(report_queues.queues(c, step), slos)
    # A full window's samples span a little less than its length (as in Evidence.confidence).
    idle_after = min(idle_after, 0.98 * window)
    settings = dataclasses.replace(s, window_seconds=window, idle_after_seconds=idle_after)
    # A GPU in MIG mode is judged through its instances (as the live engine does): never twice.
    mig_parents = {(x.labels.get("instance"), x.labels.get("UUID")) for x in ident if x.labels.get("GPU_I_ID")}  # noqa: E501
    # A GPU a node's dcgm-exporter publishes beside our exporter is one unit, with its profiling.
    mine = report_dcgm.ours(total)
    keys = [key_of({k: v for k, v in x.labels.items() if k in IDENTITY}) for x in ident]
    twins = report_dcgm.twins(keys, mine)
    units_of_ours = [k for k in keys if k[0] in mine]
    profiling = [*act["sm_active"].values(), *act["gr_engine_active"].values()]
    for values in (*profiling, sm_high, occupancy, tensor, dram95, dram_high, dram99):
        report_dcgm.borrow(values, units_of_ours, mine)
    evidence: dict[Key, Evidence] = {}
    unit_labels: dict[Key, dict[str, str]] = {}
    starts: list[float] = []
    for sample in ident:
        labels = {k: v for k, v in sample.labels.items() if k in IDENTITY}
        if not labels.get("GPU_I_ID") and (labels.get("instance"), labels.get("UUID")) in mig_parents:
            continue
        k = key_of(labels)
        if k in twins:
            continue
        model = labels.get("modelName", "")
        spec = catalog.lookup(model)
        source = next((n for n, _, _ in ACTIVITY if k in act[n]["p95"]), "gpu_utilization")
        a = act[source]
        capacity = total.get(k) or (spec.memory_bytes if spec else 0.0)
        profile = labels.get("GPU_I_PROFILE") or None
        if profile and spec and not total.get(k):
            mig = spec.mig_profile(profile)
            capacity = mig.memory_bytes if mig else capacity
        link = (
            (PCIE_LANE_BYTES_PER_SECOND.get(int(gen[k]), 0.0) * width[k])
            if k in gen and k in width
            else (spec.pcie_bytes_per_second if spec else 0.0)
        )
        pcie = max(tx.get(k, 0.0), rx.get(k, 0.0)) / link if link and (k in tx or k in rx) else None
        nvlink_capacity = nvlink_bytes_per_second(spec.interconnect) if spec and not profile else None
        sample_for_links = report_queues.link_sample(labels, capacity)
        node = labels.get("instance", "")
        node_queues = [q for (where, _), (q, _) in queues.items() if where == node]
        names = linked(sample_for_links, node_queues, s.queue_links)
        began, ended = spans.edges(k, node, samples.get(k))
        history = max(0.0, ended - began)
        starts.append(began)
        unit_labels[k] = labels
        evidence[k] = Evidence(
            samples=int(samples.get(k, 0)),
            history_seconds=history,
            window_seconds=window,
            model=model,
            mig_profile=profile,
            memory_total_bytes=capacity,
            memory_peak_bytes=peak.get(k),
            memory_p95_bytes=mem95.get(k),
            activity_source=source,
            activity_p50=a["p50"].get(k),
            activity_p95=a["p95"].get(k),
            activity_p99=a["p99"].get(k),
            activity_recent_max=a["recent"].get(k),
            utilization_recent_max=act["gpu_utilization"]["recent"].get(k),
            dram_active_p99=dram99.get(k),
            memory_copy_p99=copy99.get(k),
            utilization_p50=act["gpu_utilization"]["p50"].get(k),
            sm_active_p50=act["sm_active"]["p50"].get(k),
            sm_active_high=sm_high.get(k),
            sm_occupancy_p50=occupancy.get(k),
            tensor_active_p95=tensor.get(k),
            dram_active_p95=dram95.get(k),
            dram_active_high=dram_high.get(k),
            pcie_link_high=pcie,
            host_cpu_high=cpu.get(labels.get("instance", "")),
            host_stall_high=stall.get(labels.get("instance", "")),
            starved_share=starved.get(k),
            queues=tuple(queues[(node, n)][1] for n in names if (node, n) in queues),
            memory_copy_p95=copy95.get(k),
            memory_copy_high=copy_high.get(k),
            nvlink_high=nvlink[k] / nvlink_capacity if nvlink_capacity and k in nvlink else None,
            pcie_link_generation=gen_now.get(k),
            pcie_link_generation_max=gen.get(k),
            pcie_link_width=width_now.get(k),
            pcie_link_width_max=width.get(k),
            numa=FLAGGED_BY_EXPORTER if numa.get(k) == 1 else None,
        )
    units = []
    judged = []
    for k, ev in _judged(evidence, unit_labels, settings).items():
        assessment = assess_with_slo(ev, settings, catalog)
        current = catalog.candidate(assessment.current) if assessment.current else None
        price = current.hourly_price_dollars if current else None
        units.append(Unit(k, unit_labels[k], evidence[k], assessment, price))
        judged.append(("\x00".join(k), unit_labels[k].get("instance", ""), ev, assessment))
    progress(c.total, c.total, "")
    costs = tuple(workload_costs(judged, catalog, settings))
    start = min(starts, default=None)
    return Fleet(window, at, tuple(units), costs, history_start=start, resolution=c.resolution,
                 slos=tuple(slos.values()))  # fmt: skip


def starved_expr(s: RightsizingSettings, w: str, step: str) -> str:
    """Share of samples with activity under the starvation mark while the node's CPU is busy."""
    b = s.bottlenecks
    activity = (
        "((DCGM_FI_PROF_SM_ACTIVE * 1) or (DCGM_FI_PROF_GR_ENGINE_ACTIVE * 1) "
        "or (DCGM_FI_DEV_GPU_UTIL / 100))"
    )
    # The host is loaded when its CPU is busy or (PSI) its tasks are all stalled on memory or I/O.
    busy = (
        f"max by (instance) ((rightsizer_host_cpu_busy_ratio >= bool {b.host_cpu_busy_ratio}) or "
        f'(rightsizer_host_pressure_stalled_ratio{{kind="full"}} >= bool {b.starved_host_stall_ratio}))'
    )
    starved = f"({activity} < bool {b.starved_activity_ratio}) * on (instance) group_left () {busy}"
    return f"avg_over_time(({starved})[{w}:{step}])"


def _judged(
    evidence: dict[Key, Evidence], labels: dict[Key, dict[str, str]], s: RightsizingSettings
) -> dict[Key, Evidence]:
    """What ``assess`` reads per unit: a multi-GPU workload's members read its merged evidence."""
    names = {k: "\x00".join(k) for k in evidence}
    keys = {n: k for k, n in names.items()}
    members = [
        (names[k], lab.get("instance", ""), lab.get("namespace") or None, lab.get("pod") or None,
         bool(lab.get("GPU_I_ID")))
        for k in evidence
        for lab in (labels[k],)
    ]  # fmt: skip
    by_name = {names[k]: ev for k, ev in evidence.items()}
    judged = dict(evidence)
    for group in multi_gpu_groups(members, by_name, s).values():
        merged = merge([by_name[n] for n in group])
        for n in group:
            judged[keys[n]] = merged
    return judged
