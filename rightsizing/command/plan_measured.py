"""``rightsizer plan --measured-from URL --workload NS/NAME``: the live measurement next to the plan.

From a Prometheus holding the exporter's series (instant queries at now):

- the workload's inference queues: ``rightsizer_queue_depth{namespace, workload}`` (``NS/NAME``), or
  the queue itself when ``--workload`` names one without a slash;
- their measured throughput and cost today: ``rightsizer_workload_throughput_per_second`` and
  ``rightsizer_workload_cost_dollars`` with ``option="current"`` (generated tokens; requests for
  servers that count no tokens);
- the GPUs it runs on: ``rightsizer_gpu_info`` whose pod belongs to the workload (its model and
  count), and whether any is ``underprovisioned`` (``rightsizer_gpu_verdict``).

Each plan option gets the measured rate projected by the resource that binds decode, memory
bandwidth (the same projection the live recommendation uses for bandwidth-bound work): when the
GPUs are the limit (a GPU of the workload underprovisioned), rate x option bandwidth / today's
bandwidth (GPU counts included); when demand is met, the same work is served, so the measured rate,
but never more than that bandwidth share: decode is never projected faster on less bandwidth.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rightsizer_core.workloads import workload_of

from ..catalog import Catalog
from ..cost import PER, TOKENS
from ..models import PlanError
from ..planner import Option, Plan
from ..recommend import current_candidate
from .output import money, rate, table
from .promapi import PrometheusClient, ReportError, Sample


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
    bandwidth: float | None  # today's memory bandwidth, all its GPUs, bytes/s
    limited: bool  # a GPU of the workload is underprovisioned: the GPUs are the limit

    def projected(self, bandwidth: float, hourly_dollars: float) -> tuple[float | None, float | None]:
        """(rate, dollars per unit) on an option with ``bandwidth`` bytes/s over all its GPUs."""
        if not self.bandwidth or bandwidth <= 0:
            return None, None
        share = bandwidth / self.bandwidth
        rate = self.rate * share if self.limited else self.rate * min(1.0, share)
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
) -> Measured:
    """The live measurement of ``workload``; PlanError (exit 2) when unknown or the source is down."""
    try:
        client = PrometheusClient(url, timeout, headers)
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
    current, count, bandwidth, limited = None, 0, None, False
    if slash:
        current, count, bandwidth, limited = _gpus(client, namespace, name, catalog, at)
    return Measured(workload, url, tuple(queues), unit, rate, dollars, current, count, bandwidth, limited)


def _gpus(
    client: PrometheusClient, namespace: str, name: str, catalog: Catalog, at: float
) -> tuple[str | None, int, float | None, bool]:
    """(catalog key, GPU count, total bandwidth, limited) of the whole GPUs the workload's pods hold."""
    info = _query(client, f'rightsizer_gpu_info{{namespace="{_quote(namespace)}"}}', at)
    held = [s for s in info if "UUID" in s.labels and workload_of(s.labels.get("pod", "")) == name]
    if any(s.labels.get("GPU_I_ID") for s in held):
        return None, len(held), None, False  # MIG instances: the plan compares whole GPUs only
    mine = {s.labels["UUID"]: s.labels.get("model_name", "") for s in held}
    candidates = {current_candidate(catalog, model, None) for model in mine.values()}
    if not mine or len(candidates) != 1 or None in candidates:
        return None, len(mine), None, False  # none found, or a mix: no projection
    (cur,) = candidates
    assert cur is not None
    under = _query(client, 'rightsizer_gpu_verdict{verdict="underprovisioned"} == 1', at)
    limited = any(s.labels.get("UUID") in mine for s in under)
    return cur.key, len(mine), cur.memory_bandwidth_bytes_per_second * len(mine), limited


def projected(m: Measured, o: Option) -> tuple[float | None, float | None]:
    return m.projected(o.candidate.memory_bandwidth_bytes_per_second * o.gpus, o.hourly_price_dollars)


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
        for o in r.options:
            value, dollars = projected(m, o)
            rows.append(
                [(f"{o.gpus} x " if o.gpus > 1 else "") + o.candidate.key, rate(value), money(dollars, 3)]
            )
        out.append(
            table(["option", f"measured {unit}, projected", f"$/{per}, projected"], rows, [False, True, True])
        )
        why = "the GPUs are the limit" if m.limited else "demand is met today"
        out.append(
            f"Projected by memory bandwidth, the resource that binds decode ({why}; never faster on less "
            "bandwidth)."
        )
    return "\n".join(out) + "\n"
