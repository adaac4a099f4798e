"""``rightsizer plan --measured-from URL --workload NS/NAME``: the live measurement next to the plan.

From a Prometheus holding the exporter's series (instant queries at now):

- the workload's inference queues: ``rightsizer_queue_depth{namespace, workload}`` (``NS/NAME``), or
  the queue itself when ``--workload`` names one without a slash;
- their measured throughput and cost today: ``rightsizer_workload_throughput_per_second`` and
  ``rightsizer_workload_cost_dollars`` with ``option="current"`` (generated tokens; requests for
  servers that count no tokens);
- the GPUs it runs on: ``rightsizer_gpu_info`` whose pod belongs to the workload (its model and
  count), and whether any is ``underprovisioned`` (``rightsizer_gpu_verdict``).

With a latency SLO declared for the workload (``rightsizer_workload_slo_*`` over the last hour, read
as ``rightsizer report`` reads them), its state and latency ratio today, and each option's latency
at the objective projected by the model the engine uses (``rightsizing.slo.projection``) over the
target, with the margin the SLO must keep.

Each plan option gets the measured rate projected by the one rule the live exporter and ``rightsizer
report`` use (``rightsizing.projection``): the resource that binds the work is read from the GPUs'
p95 SM active and bandwidth signal (DRAM active, else memory-copy utilization) over the last hour,
memory bandwidth unless SM active is measured and above it; when the GPUs are the limit (a GPU of
the workload underprovisioned), rate x option capacity / today's (GPU counts included); when demand
is met, the same work is served while the option has room for it (rate x capacity ratio / today's
p95 of that resource, at most the measured rate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from rightsizer_core.workloads import workload_of

from .. import projection
from ..catalog import Candidate, Catalog
from ..cost import PER, TOKENS
from ..models import PlanError
from ..planner import Option, Plan
from ..recommend import current_candidate
from ..settings import RightsizingSettings
from ..slo.attainment import SloEvidence
from ..slo.projection import Binding, project
from ..slo.summary import slo_json, slo_words
from . import report_slo
from .output import money, rate, table
from .promapi import PrometheusClient, ReportError, Sample

WINDOW = "1h"  # the live engine's default window: the signals that say what binds the work
MARGIN = RightsizingSettings().slo_margin_ratio  # an option keeps the SLO at (1 - this) x the target


@dataclass(frozen=True, slots=True)
class Measured:
    workload: str
    source: str  # the Prometheus URL
    queues: tuple[str, ...]
    unit: str  # "tokens" (generated) or "requests"
    rate: float  # per second, summed over the workload's queues
    dollars: float | None  # per million tokens (thousand requests) at today's price
    current: str | None  # catalog key of the GPUs it runs on; None: not found
    gpus: int
    limited: bool  # a GPU of the workload is underprovisioned: the GPUs are the limit
    resource: str = projection.BANDWIDTH  # what binds the work (``projection.binding``)
    busy: float | None = None  # that resource's p95 today (None: not measured)
    bandwidth_seen: bool = False  # a bandwidth signal was measured
    option: Candidate | None = None  # the catalog option of the GPUs it runs on
    slo: SloEvidence | None = None  # its latencies over the last hour, with its declared SLO

    def latency(self, option: Candidate, gpus: int) -> float | None:
        """The worst declared target's projected latency at the objective over the target on
        ``gpus`` x ``option`` (None: no SLO judged, or the GPUs unknown)."""
        if self.slo is None or not self.slo.judged or self.option is None or self.gpus <= 0:
            return None
        binding = Binding(self.resource, self.busy, self.bandwidth_seen)
        worst = project(binding, self.slo, self.option, option, gpus / self.gpus).worst
        return None if worst is None else worst[1] / worst[2]

    def projected(
        self, option: Candidate, gpus: int, hourly_dollars: float
    ) -> tuple[float | None, float | None]:
        """(rate, dollars per unit) on ``gpus`` x ``option``."""
        if self.option is None or self.gpus <= 0:
            return None, None
        ratio = projection.capacity_ratio(self.option, option, self.resource, self.bandwidth_seen)
        rate = projection.projected_rate(self.rate, ratio * gpus / self.gpus, self.limited, self.busy)
        if rate <= 0:
            return rate, None
        return rate, hourly_dollars / (rate * 3600.0) * PER[self.unit]


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _query(client: PrometheusClient, expr: str, at: float) -> list[Sample]:
    try:
        return client.query(expr, at)
    except ReportError as exc:
        raise PlanError(f"--measured-from: {exc}") from None


def measure(
    url: str,
    workload: str,
    catalog: Catalog,
    at: float,
    timeout: float = 30.0,
    headers: Mapping[str, str] | None = None,
    credentials: str | None = None,
) -> Measured:
    """The live measurement of ``workload``; PlanError (exit 2) when unknown or the source is down."""
    try:
        client = PrometheusClient(url, timeout, headers, credentials)
    except ReportError as exc:
        raise PlanError(str(exc).replace("--prometheus-url", "--measured-from")) from None
    namespace, slash, name = workload.partition("/")
    if slash and namespace and name:
        sel = f'namespace="{_quote(namespace)}",workload="{_quote(name)}"'
        queues = sorted(
            {s.labels.get("queue", "") for s in _query(client, f"rightsizer_queue_depth{{{sel}}}", at)}
        )
    elif not slash and workload:
        queues = [workload]
    else:
        raise PlanError(f"--workload {workload!r}: give NAMESPACE/WORKLOAD or a queue name")
    queues = [q for q in queues if q]
    if not queues:
        raise PlanError(f"--measured-from {url}: no queue of workload {workload} (rightsizer_queue_depth)")
    pick = "|".join(_quote(re.escape(q)) for q in queues)
    rates = _query(
        client, f'rightsizer_workload_throughput_per_second{{queue=~"{pick}",option="current"}}', at
    )
    if not rates:
        raise PlanError(f"--measured-from {url}: no measured throughput for workload {workload} yet")
    unit = TOKENS if any(s.labels.get("unit") == TOKENS for s in rates) else rates[0].labels.get("unit", "")
    rate = sum(s.value for s in rates if s.labels.get("unit") == unit)
    costs = _query(client, f'rightsizer_workload_cost_dollars{{queue=~"{pick}",option="current"}}', at)
    hourly = sum(
        s.value * r.value * 3600.0 / PER[unit]
        for s in costs
        for r in rates
        if r.labels.get("queue") == s.labels.get("queue") and r.labels.get("unit") == unit
    )
    dollars = hourly / (rate * 3600.0) * PER[unit] if rate > 0 and hourly > 0 else None
    measured = Measured(workload, url, tuple(queues), unit, rate, dollars, None, 0, False)
    who = (namespace, name) if slash else ("", workload)
    measured = replace(measured, slo=_slo(client, *who, at))
    return _gpus(client, namespace, name, catalog, at, measured) if slash else measured


class _Instant:
    """What ``report_slo.collect`` asks of a collector, answered by instant queries at ``at``."""

    w = WINDOW

    def __init__(self, client: PrometheusClient, at: float) -> None:
        self.client, self.at = client, at

    def run(self, what: str, expr: str) -> list[Sample]:
        return _query(self.client, expr, self.at)


def _slo(client: PrometheusClient, namespace: str, workload: str, at: float) -> SloEvidence | None:
    found = report_slo.collect(_Instant(client, at), RightsizingSettings(), latest=True)
    return found.get((namespace, workload))


def _gpus(
    client: PrometheusClient, namespace: str, name: str, catalog: Catalog, at: float, m: Measured
) -> Measured:
    """``m`` with the whole GPUs the workload's pods hold: their catalog key and count, whether
    they are the limit, and the signals that say what binds the work."""
    info = _query(client, f'rightsizer_gpu_info{{namespace="{_quote(namespace)}"}}', at)
    held = [s for s in info if "UUID" in s.labels and workload_of(s.labels.get("pod", "")) == name]
    if any(s.labels.get("GPU_I_ID") for s in held):
        return replace(m, gpus=len(held))  # MIG instances: the plan compares whole GPUs only
    mine = {s.labels["UUID"]: s.labels.get("model_name", "") for s in held}
    candidates = {current_candidate(catalog, model, None) for model in mine.values()}
    if not mine or len(candidates) != 1 or None in candidates:
        return replace(m, gpus=len(mine))  # none found, or a mix: no projection
    (cur,) = candidates
    assert cur is not None
    under = _query(client, 'rightsizer_gpu_verdict{verdict="underprovisioned"} == 1', at)
    limited = any(s.labels.get("UUID") in mine for s in under)
    pick = "|".join(_quote(re.escape(u)) for u in sorted(mine))

    def p95(metric: str, scale: float = 1.0) -> float | None:
        found = _query(client, f'max(quantile_over_time(0.95, {metric}{{UUID=~"{pick}"}}[{WINDOW}]))', at)
        return found[0].value * scale if found else None

    sm = p95("DCGM_FI_PROF_SM_ACTIVE")
    bandwidth = p95("DCGM_FI_PROF_DRAM_ACTIVE")
    if bandwidth is None:
        bandwidth = p95("DCGM_FI_DEV_MEM_COPY_UTIL", 0.01)
    resource = projection.binding(sm, bandwidth)
    busy = bandwidth if resource == projection.BANDWIDTH else sm
    return replace(m, current=cur.key, gpus=len(mine), limited=limited, resource=resource, busy=busy,
                   bandwidth_seen=bandwidth is not None, option=cur)  # fmt: skip


def projected(m: Measured, o: Option) -> tuple[float | None, float | None]:
    return m.projected(o.candidate, o.gpus, o.hourly_price_dollars)


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def measured_dict(m: Measured) -> dict[str, Any]:
    per = "million_tokens" if m.unit == "tokens" else "thousand_requests"
    return {
        "workload": m.workload,
        "source": m.source,
        "queues": list(m.queues),
        "unit": m.unit,
        "per_second": round(m.rate, 4),
        f"dollars_per_{per}": _round(m.dollars, 6),
        "current": m.current,
        "gpus": m.gpus,
        "gpus_are_the_limit": m.limited,
        "projected_by": m.resource if m.option is not None else None,
        "binding_p95": _round(m.busy, 4) if m.option is not None else None,
        "slo": None if m.slo is None else slo_json(m.slo, None, MARGIN),
    }


def render_measured(r: Plan, m: Measured | None) -> str:
    if m is None:
        return ""
    per = "M tokens" if m.unit == "tokens" else "k requests"
    unit = "tok/s generated" if m.unit == "tokens" else "requests/s"
    on = f"{m.gpus} x {m.current}" if m.current else "GPUs not found (no projection)"
    out = [
        "",
        f"Measured  {m.workload} on {on}: {rate(m.rate)} {unit}, "
        f"{money(m.dollars, 3)} per {per} today (from {m.source})",
    ]
    if m.current and r.options:
        rows = []
        slo = m.slo is not None and bool(m.slo.judged)
        for o in r.options:
            value, dollars = projected(m, o)
            row = [(f"{o.gpus} x " if o.gpus > 1 else "") + o.candidate.key, rate(value), money(dollars, 3)]
            rows.append(row + ([_latency(m.latency(o.candidate, o.gpus))] if slo else []))
        heads = ["option", f"measured {unit}, projected", f"$/{per}, projected"]
        heads += ["latency/target, projected"] if slo else []
        out.append(table(heads, rows, [False, True, True, True][: len(heads)]))
        if m.limited:
            why = "the GPUs are the limit: the rate scales with it"
        else:
            busy = "" if m.busy is None else f" (p95 {m.busy:.0%} today)"
            why = f"demand is met today: the same rate while an option has room for it{busy}"
        signal = (
            "SM active above the bandwidth signal" if m.resource == projection.COMPUTE
            else "decode reads the weights every step; no SM active above the bandwidth signal"
        )  # fmt: skip
        out.append(
            f"Projected by {m.resource}, the resource that binds the work ({signal}); {why}. The exporter "
            "and rightsizer report project by the same rule."
        )
    if m.slo is not None and m.slo.targets:
        out.append(
            f"Latency SLO over the last hour: {slo_words(m.slo, MARGIN)}. An option keeps it at a projected "
            f"latency/target of at most {1 - MARGIN:.2f} (docs/slos.md, the latency model)."
        )
    return "\n".join(out) + "\n"


def _latency(ratio: float | None) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" + (" (keeps it)" if ratio <= 1 - MARGIN else "")
