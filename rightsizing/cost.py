"""Cost per inference, measured: what a workload pays per million generated tokens (or per thousand
requests, for servers that count no tokens) at today's price, and on the recommended option.

A workload is an inference server's queue and the GPUs it feeds (queue links). Its throughput is
the server's own counter rate over the right-sizing window; its price is the sum of the hourly
prices of those GPUs (MIG instances at their share). On the recommended options the throughput is
projected by ``projection``, the one rule ``rightsizer plan --measured-from`` uses as well: memory
bandwidth binds decode unless SM active (measured) is above the bandwidth signal; when the GPU is
the limit (a GPU of the workload is underprovisioned, or the queue grows by its own level,
``pressure.growing``) the rate scales with the binding resource's capacity, recommended over
current; when demand is met the same work is served while the option has room for it. The slowest
member bounds a workload spread over several GPUs.

No projection when a GPU's recommendation is not an option (release, none) or the workload moves
to another number of GPUs (``workload_change``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rightsizer_core.snapshot import Row

from . import projection
from .catalog import Catalog
from .evidence import Evidence
from .pressure import INFERENCE_SERVERS, growing
from .recommend import current_candidate
from .settings import RightsizingSettings
from .verdicts import Assessment

THROUGHPUT = "rightsizer_workload_throughput_per_second"
COST = "rightsizer_workload_cost_dollars"
TOKENS, REQUESTS = "tokens", "requests"
PER = {TOKENS: 1e6, REQUESTS: 1e3}  # dollars per million tokens, per thousand requests


@dataclass(frozen=True, slots=True)
class WorkloadCost:
    instance: str  # the exporter the queue belongs to ("" in the live engine: its own)
    queue: str
    server: str
    gpus: tuple[str, ...]  # the keys of the GPUs (or MIG instances) the queue feeds
    unit: str  # "tokens" (generated) or "requests"
    rate: float  # measured, per second
    hourly_dollars: float  # today's price of those GPUs
    recommended_hourly_dollars: float | None
    projected_rate: float | None

    @property
    def dollars(self) -> float | None:
        """Dollars per million tokens (per thousand requests) at today's price."""
        return _per(self.hourly_dollars, self.rate, self.unit)

    @property
    def projected_dollars(self) -> float | None:
        if self.recommended_hourly_dollars is None or self.projected_rate is None:
            return None
        return _per(self.recommended_hourly_dollars, self.projected_rate, self.unit)


def _per(hourly: float, rate: float, unit: str) -> float | None:
    if rate <= 0 or hourly <= 0:
        return None  # nothing served: no cost per unit (not zero, not infinite)
    return hourly / (rate * 3600.0) * PER[unit]


def signals(ev: Evidence) -> tuple[float | None, float | None]:
    """(SM active p95, bandwidth p95) as ``projection.binding`` reads them; None: not measured."""
    sm = ev.activity_p95 if ev.activity_source == "sm_active" else None
    return sm, None if ev.bandwidth is None else ev.bandwidth[1]


def capacity_ratio(ev: Evidence, a: Assessment, catalog: Catalog) -> tuple[float, float | None] | None:
    """(recommended over current capacity of the resource that binds the work, that resource's p95
    today); None when the recommendation is not an option."""
    cur = current_candidate(catalog, ev.model, ev.mig_profile)
    rec = catalog.candidate(a.recommended)
    if cur is None or rec is None:
        return None
    sm, bandwidth = signals(ev)
    resource = projection.binding(sm, bandwidth)
    busy = bandwidth if resource == projection.BANDWIDTH else sm
    return projection.capacity_ratio(cur, rec, resource, bandwidth is not None), busy


def workload_costs(
    units: Iterable[tuple[str, str, Evidence, Assessment]], catalog: Catalog, s: RightsizingSettings
) -> list[WorkloadCost]:
    """One cost per inference-server queue that counts its work, from the units (key, instance,
    evidence, assessment) it feeds; most expensive per hour first."""
    fed: dict[tuple[str, str], list[tuple[str, Evidence, Assessment]]] = {}
    for key, instance, ev, a in units:
        for q in ev.queues:
            if q.server in INFERENCE_SERVERS:
                fed.setdefault((instance, q.name), []).append((key, ev, a))
    out = []
    for (instance, name), members in fed.items():
        cost = _cost(instance, name, members, catalog, s)
        if cost is not None:
            out.append(cost)
    out.sort(key=lambda c: (-c.hourly_dollars, c.instance, c.queue))
    return out


def _cost(
    instance: str,
    name: str,
    members: Sequence[tuple[str, Evidence, Assessment]],
    catalog: Catalog,
    s: RightsizingSettings,
) -> WorkloadCost | None:
    q = next(q for q in members[0][1].queues if q.name == name)
    if q.generated_tokens_rate is not None:
        unit, rate = TOKENS, q.generated_tokens_rate
    elif q.requests_rate is not None:
        unit, rate = REQUESTS, q.requests_rate
    else:
        return None  # the server counts nothing we can price
    hourly = 0.0
    recommended: float | None = 0.0
    limited = any(a.verdict == "underprovisioned" for _, _, a in members) or growing(q, s)
    served: list[float] = []
    for _, ev, a in members:
        cur = current_candidate(catalog, ev.model, ev.mig_profile)
        if cur is None:
            return None  # a GPU without a price: no cost for the workload
        hourly += cur.hourly_price_dollars
        rec = catalog.candidate(a.recommended)
        ratio = capacity_ratio(ev, a, catalog)
        if rec is None or ratio is None or a.workload_change or recommended is None:
            recommended = None
            continue
        recommended += rec.hourly_price_dollars
        served.append(projection.projected_rate(rate, ratio[0], limited, ratio[1]))
    # The slowest member bounds the workload.
    projected = min(served) if recommended is not None and served else None
    keys = tuple(k for k, _, _ in members)
    return WorkloadCost(instance, name, q.server or "", keys, unit, rate, hourly, recommended, projected)


def cost_json(c: WorkloadCost) -> dict[str, object]:
    """A workload's cost as ``/api/v1/rightsizing`` and the report's JSON show it."""
    per = "million_tokens" if c.unit == TOKENS else "thousand_requests"
    return {
        "queue": c.queue,
        "server": c.server,
        "gpus": len(c.gpus),
        "unit": c.unit,
        "per_second": round(c.rate, 4),
        "hourly_dollars": round(c.hourly_dollars, 6),
        f"dollars_per_{per}": _round(c.dollars),
        "recommended_hourly_dollars": _round(c.recommended_hourly_dollars),
        "projected_per_second": _round(c.projected_rate),
        f"projected_dollars_per_{per}": _round(c.projected_dollars),
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def cost_rows(costs: Iterable[WorkloadCost]) -> dict[str, tuple[Row, ...]]:
    """The workloads' series: throughput and cost, today and projected on the recommendation."""
    throughput: list[Row] = []
    dollars: list[Row] = []
    for c in costs:
        per = "million_tokens" if c.unit == TOKENS else "thousand_requests"
        for option, rate, cost in (
            ("current", c.rate, c.dollars),
            ("recommended", c.projected_rate, c.projected_dollars),
        ):
            base = (("queue", c.queue), ("kind", c.server))
            if rate is not None:
                throughput.append(Row(round(rate, 6), (*base, ("unit", c.unit), ("option", option))))
            if cost is not None:
                dollars.append(Row(round(cost, 6), (*base, ("per", per), ("option", option))))
    return {THROUGHPUT: tuple(throughput), COST: tuple(dollars)}


def unit_cost(c: WorkloadCost | None) -> dict[str, Any]:
    """The cost per inference of the workload a unit serves (its queue's, over all its GPUs)."""
    out: dict[str, Any] = dict.fromkeys(("inference_queue", "dollars_per_million_tokens",
                                         "projected_dollars_per_million_tokens"))  # fmt: skip
    if c is not None and c.unit == TOKENS:
        out["inference_queue"] = c.queue
        out["dollars_per_million_tokens"] = None if c.dollars is None else round(c.dollars, 4)
        projected = c.projected_dollars
        out["projected_dollars_per_million_tokens"] = None if projected is None else round(projected, 4)
    elif c is not None:
        out["inference_queue"] = c.queue
    return out
