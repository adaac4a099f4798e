"""Verdicts against a declared latency SLO, layered on the utilisation verdict (``verdicts.assess``).

With an SLO judged over the window (``attainment``; enough requests):

- **missed** (a target's attainment under the objective): underprovisioned, whatever utilisation
  says. The reason names the target, the latency measured at the objective and the binding
  resource: inter-token latency of memory-bound decode -> memory bandwidth (compute when SM active
  is measured above the bandwidth signal); TTFT (or end-to-end latency) whose queue time at the
  objective is at least half of it -> capacity; TTFT with a short queue time -> prefill compute;
  queue time -> capacity. The recommendation is the cheapest other option that carries the work
  (``recommend.fits``) and whose projected latency (``projection``) stays under every target
  with the margin (``slo_margin_ratio``); none: add replicas (capacity) or split the model.
- **met with room** (every declared target at most (1 - margin) x target at the objective): the
  strongest evidence there is that the service has what it needs. Signs of unmet demand
  (underprovisioned by utilisation, KV pressure, a growing queue) do not override a met SLO: the
  verdict is rightsized, and the signs are named.
- **met**: the utilisation verdict stands, but a cheaper option is offered only when its projected
  latency keeps every target with the margin; the cheapest such option that fits is chosen, and when
  none is cheaper enough the verdict is rightsized ("the SLO forbids ...").

A target not judged (too few requests, a mean-only server, an absent histogram) is said in the
reason and decides nothing.

Work sized as a whole over several GPUs (a tensor-parallel group) keeps its degree when its SLO is
missed: the options are N whole GPUs of another model (NVLink when the work uses it today), each
holding and carrying one share, projected by the per-GPU capacity ratio. A downsizing by utilisation
to n GPUs (``workload_fit``) is kept only when its projection, with the capacity ratio times n / N,
keeps every target; otherwise the SLO forbids it.
"""

from __future__ import annotations

import dataclasses

from ..catalog import Candidate, Catalog
from ..evidence import Evidence
from ..recommend import current_candidate, demand, fits
from ..settings import RightsizingSettings
from ..verdicts import Assessment, assess
from ..words import estimated
from ..workload_fit import workload_options
from .attainment import Latency, SloEvidence, seconds_words
from .latency import WORDS
from .projection import LatencyProjection, decode_binding, project, queue_time

CAPACITY = "capacity"
PREFILL = "prefill compute"
QUEUE_SHARE = 0.5  # queue time at the objective at least this share of TTFT: capacity binds
SLO = "latency SLO"  # ``deciding`` of a verdict the SLO decided without a resource to name


def slo_of(ev: Evidence) -> SloEvidence | None:
    """The declared SLO of the workload the GPU's linked queues serve (the first one declared)."""
    return next((q.slo for q in ev.queues if q.slo is not None and q.slo.targets), None)


def assess_with_slo(ev: Evidence, s: RightsizingSettings, catalog: Catalog) -> Assessment:
    return judge(ev, s, catalog, assess(ev, s, catalog))


def binding_of(x: Latency, slo: SloEvidence, ev: Evidence) -> str:
    """The resource a missed target points at, in words."""
    decode, _ = decode_binding(ev)
    waited = queue_time(slo)
    if x.kind == "queue":
        return CAPACITY
    if x.kind == "itl":
        return "memory bandwidth (memory-bound decode)" if decode == "memory bandwidth" else "compute"
    if waited is None or x.at_objective is None:
        return f"{PREFILL} or {CAPACITY} (no queue-time histogram)" if x.kind == "ttft" else decode
    share = waited / x.at_objective if x.at_objective > 0 else 0.0
    if share >= QUEUE_SHARE:
        return f"{CAPACITY} (queue time {seconds_words(waited)} of it)"
    return f"{PREFILL} (queue time only {seconds_words(waited)})" if x.kind == "ttft" else decode


def _tail(reason: str) -> str:
    at = reason.find(" Bottlenecks:")
    return reason[at:] if at >= 0 else ""


def _projected_words(p: LatencyProjection, margin: float) -> str:
    parts = [f"{WORDS[k]} {seconds_words(v)} (target {seconds_words(t)})" for k, v, t in p.values]
    return f"{', '.join(parts)} with a {margin:.0%} margin"


def _search(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    slo: SloEvidence,
    current: Candidate,
    memory_floor: float,
    cheaper_than: float | None,
) -> tuple[Candidate, LatencyProjection] | None:
    """The cheapest option that carries the work and keeps the SLO with the margin: other than today's
    (an upgrade), or under ``cheaper_than`` dollars an hour (a downsizing)."""
    d = demand(ev, s)
    if memory_floor > d.memory_bytes:
        d = dataclasses.replace(d, memory_bytes=memory_floor)
    for c in catalog.candidates():  # cheapest first
        if cheaper_than is not None and c.hourly_price_dollars >= cheaper_than:
            return None
        if c.key == current.key or fits(d, current, c, s) is None:
            continue
        p = project(ev, slo, current, c)
        if p.keeps(s.slo_margin_ratio):
            return c, p
    return None


def _search_group(
    ev: Evidence, s: RightsizingSettings, catalog: Catalog, slo: SloEvidence, current: Candidate, floor: float
) -> tuple[Candidate, LatencyProjection] | None:
    """The cheapest whole GPU of which the workload's N keep the SLO: same degree, another model."""
    d = demand(ev, s)
    d = dataclasses.replace(d, memory_bytes=max(d.memory_bytes, floor), whole_gpus=True)
    for c in catalog.candidates():  # cheapest first; N of each, so the order holds
        if c.mig is not None or c.key == current.key or fits(d, current, c, s) is None:
            continue
        p = project(ev, slo, current, c)
        if p.keeps(s.slo_margin_ratio):
            return c, p
    return None


def judge(ev: Evidence, s: RightsizingSettings, catalog: Catalog, base: Assessment) -> Assessment:
    slo = slo_of(ev)
    if slo is None or base.verdict in ("insufficient_data", "idle"):
        return base
    current = current_candidate(catalog, ev.model, ev.mig_profile)
    if current is None:
        return base
    if slo.missed:
        return _missed(ev, s, catalog, slo, current, base)
    if not slo.judged:
        return dataclasses.replace(base, reason=f"{base.reason} SLO not judged: {'; '.join(slo.unjudged())}.")
    return _met(ev, s, catalog, slo, current, base)


def _met_words(slo: SloEvidence) -> str:
    return "; ".join(x.words() for x in slo.judged)


def _missed(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    slo: SloEvidence,
    current: Candidate,
    base: Assessment,
) -> Assessment:
    misses = sorted(slo.missed, key=lambda x: -(x.ratio or 0.0))
    said = "; ".join(f"{x.words()}, binding {binding_of(x, slo, ev)}" for x in misses)
    cause = f"SLO missed over the window: {said}"
    capacity = any(binding_of(x, slo, ev).startswith(CAPACITY) for x in misses)
    floor = (base.memory_need_bytes or 0.0) if base.verdict == "underprovisioned" else 0.0
    group = ev.workload_gpus > 1
    if group:
        found = _search_group(ev, s, catalog, slo, current, floor)
    else:
        found = _search(ev, s, catalog, slo, current, floor, None)
    worst = binding_of(misses[0], slo, ev)
    named = (CAPACITY, PREFILL, "memory bandwidth", "compute")
    deciding = next((r for r in named if worst.startswith(r)), worst)
    base = dataclasses.replace(
        base, verdict="underprovisioned", current=current.key, workload_change="", deciding=deciding
    )
    if found is None:
        fix = "add replicas: the queue is the limit" if capacity else "split it across GPUs or add replicas"
        return dataclasses.replace(
            base,
            recommended="none",
            hourly_savings_dollars=None,
            fit_score=None,
            reason=f"{cause}; {deciding} decides: no catalog option projects under every target with a "
            f"{s.slo_margin_ratio:.0%} margin: {fix}.{_tail(base.reason)}",
            summary=f"SLO missed: no {'GPU model' if group else 'single GPU'} keeps it",
        )
    c, p = found
    n = ev.workload_gpus
    delta = (c.hourly_price_dollars - current.hourly_price_dollars) * n
    change = f"{n} x {current.key} -> {n} x {c.key}" if group else ""
    option = f"{n} x {c.key}" if group else c.key
    cost = (
        f"${delta:.2f}/h more"
        if delta > 0.005
        else f"saves ${-delta:.2f}/h"
        if delta < -0.005
        else "at the same price"
    )
    return dataclasses.replace(
        base,
        recommended=c.key,
        hourly_savings_dollars=-delta,
        fit_score=_ratio(
            current.hourly_price_dollars, max(current.hourly_price_dollars, c.hourly_price_dollars)
        ),
        workload_change=change,
        reason=f"{cause}; {deciding} decides: {option} projects {_projected_words(p, s.slo_margin_ratio)}, "
        f"{cost}{estimated(c)}.{_tail(base.reason)}",
        summary="SLO missed: needs a faster GPU",
        price_source=_price_source(c),
    )


def _met(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    slo: SloEvidence,
    current: Candidate,
    base: Assessment,
) -> Assessment:
    margin = s.slo_margin_ratio
    room = slo.met_with_room(margin)
    unjudged = slo.unjudged()
    note = f" Not judged: {'; '.join(unjudged)}." if unjudged else ""
    how = "met with room" if room else "met without room"
    met = f"SLO {how} over the window: {_met_words(slo)}"
    if base.verdict == "underprovisioned":
        if not room:
            return dataclasses.replace(base, reason=f"{base.reason} SLO {how}: {_met_words(slo)}.{note}")
        return dataclasses.replace(
            base,
            verdict="rightsized",
            recommended=current.key,
            hourly_savings_dollars=0.0,
            fit_score=1.0,
            reason=f"{met}: {SLO} decides, the service has what it needs; the signs of unmet demand do "
            "not cost latency "
            f"yet ({base.cause or base.reason.split(' Bottlenecks:')[0]}).{note}{_tail(base.reason)}",
            summary="SLO met with room",
            deciding=SLO,
            workload_change="",
        )
    if base.verdict != "overprovisioned":
        return dataclasses.replace(base, reason=f"{met}; {base.reason}{note}")
    if ev.workload_gpus > 1:
        return _met_group(ev, s, catalog, slo, current, base, met, note)
    chosen = catalog.candidate(base.recommended)
    if chosen is not None:
        p = project(ev, slo, current, chosen)
        if p.keeps(margin):
            return dataclasses.replace(
                base,
                reason=f"{met}; on {chosen.key} it projects {_projected_words(p, margin)}. "
                f"{base.reason}{note}",
            )
    bar = current.hourly_price_dollars * (1.0 - s.min_savings_ratio)
    found = _search(ev, s, catalog, slo, current, 0.0, bar + 1e-9)
    forbid = ""
    if chosen is not None:
        p = project(ev, slo, current, chosen)
        worst = p.worst
        if worst is not None:
            kind, v, t = worst
            forbid = f"on {chosen.key} {WORDS[kind]} projects {seconds_words(v)} against {seconds_words(t)}"
    if found is None:
        return _forbidden(
            base,
            current,
            f"{met}; {SLO} decides: a cheaper option carries the load but the SLO forbids it "
            f"({forbid}, more than {1 - margin:.0%} of the target): no cheaper option keeps it."
            f"{note}{_tail(base.reason)}",
        )
    c, p = found
    saving = current.hourly_price_dollars - c.hourly_price_dollars
    return dataclasses.replace(
        base,
        recommended=c.key,
        hourly_savings_dollars=saving,
        fit_score=_ratio(c.hourly_price_dollars, current.hourly_price_dollars),
        reason=f"{met}; {SLO} decides: {c.key} keeps it, projecting {_projected_words(p, margin)} "
        f"({forbid}); saves ${saving:.2f}/h{estimated(c)}.{note}{_tail(base.reason)}",
        summary="a cheaper option keeps the SLO",
        deciding=SLO,
        price_source=_price_source(c),
    )


def _met_group(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    slo: SloEvidence,
    current: Candidate,
    base: Assessment,
    met: str,
    note: str,
) -> Assessment:
    """A multi-GPU workload downsized by utilisation: the cheapest way to carry it (n whole GPUs,
    price order, as the single-GPU path searches) whose projection keeps the SLO; the ways the SLO
    forbids on the way are named."""
    margin = s.slo_margin_ratio
    today = current.hourly_price_dollars * ev.workload_gpus
    bar = today * (1.0 - s.min_savings_ratio) + 1e-9
    options = [
        o
        for o in workload_options(catalog, demand(ev, s), current, s, ev.workload_gpus)
        if o.total < bar and not (o.count == ev.workload_gpus and o.candidate.key == current.key)
    ]
    if not options:
        return dataclasses.replace(base, reason=f"{met}; {base.reason}{note}")
    forbidden: list[str] = []
    for o in options:
        c, n = o.candidate, o.count
        p = project(ev, slo, current, c, n / ev.workload_gpus)
        if not p.keeps(margin):
            kind, v, t = p.worst or ("itl", float("inf"), 0.0)
            forbidden.append(f"{n} x {c.key}: {WORDS[kind]} {seconds_words(v)} against {seconds_words(t)}")
            continue
        if not forbidden:  # the utilisation verdict's own choice keeps it
            return dataclasses.replace(
                base,
                reason=f"{met}; on {n} x {c.key} it projects {_projected_words(p, margin)}. "
                f"{base.reason}{note}",
            )
        saving = today - o.total
        return dataclasses.replace(
            base,
            recommended=c.key,
            hourly_savings_dollars=saving,
            fit_score=_ratio(o.total, today),
            workload_change=f"{ev.workload_gpus} x {current.key} -> {n} x {c.key}",
            reason=f"{met}; {SLO} decides: {n} x {c.key} carries the load and keeps it, projecting "
            f"{_projected_words(p, margin)}, where the SLO forbids the cheaper {_listed(forbidden)} (more "
            f"than {1 - margin:.0%} of the target); saves ${saving:.2f}/h{estimated(c)}."
            f"{note}{_tail(base.reason)}",
            summary="a cheaper option keeps the SLO",
            deciding=SLO,
            price_source=_price_source(c),
        )
    return _forbidden(
        base,
        current,
        f"{met}; {SLO} decides: cheaper options carry the load but the SLO forbids each "
        f"({_listed(forbidden)}, more than {1 - margin:.0%} of the target): none keeps it."
        f"{note}{_tail(base.reason)}",
    )


def _listed(forbidden: list[str], shown: int = 3) -> str:
    more = len(forbidden) - shown
    return "; ".join(forbidden[:shown]) + (f"; and {more} more" if more > 0 else "")


def _forbidden(base: Assessment, current: Candidate, reason: str) -> Assessment:
    """Rightsized on today's GPUs: a cheaper option carries the load, but the SLO forbids it."""
    return dataclasses.replace(
        base,
        verdict="rightsized",
        recommended=current.key,
        hourly_savings_dollars=0.0,
        fit_score=1.0,
        workload_change="",
        reason=reason,
        summary="the SLO forbids a cheaper option",
        deciding=SLO,
        price_source=_price_source(current),
    )


def _ratio(a: float, b: float) -> float:
    return 1.0 if b <= 0 else max(0.0, min(1.0, a / b))


def _price_source(c: Candidate) -> str:
    if c.gpu.price_source.startswith("configured"):
        return "configured"
    estimated = c.price_estimated or c.gpu.price_source.lower().startswith("estimate")
    return "estimate" if estimated else "list"
