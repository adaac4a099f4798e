"""Sizing a GPU that has enough data, is not idle and is in the catalog (``verdicts`` decides
that first).

With unmet demand (``unmet``): underprovisioned, the cheapest option with more of what is short (the
same GPU model's options at no extra cost first), or what no option has and what to do instead.
Without: overprovisioned when a catalog option at least ``min_savings_ratio`` cheaper carries the
work (``recommend``: every resource, each from its own signal), else rightsized with the reason no
cheaper option was taken. Memory full with no evidence the work needs it is the server's
reservation: rightsized, need unknown.
"""

from __future__ import annotations

import dataclasses

from .assessment import Assessment
from .catalog import Candidate, Catalog
from .deciding import Decider, deciding, nothing_carries
from .evidence import Evidence
from .pressure import reserved_free, server_queue
from .recommend import Demand, Fit, cheapest_fit, demand, gib, project
from .settings import RightsizingSettings
from .unmet import Unmet, pressure_words
from .words import binding_words as _deciding
from .words import bursts as _bursts
from .words import cost as _cost
from .words import delta as _delta
from .words import estimated as _estimated
from .words import load as _load
from .words import pct as _pct
from .words import price_source
from .words import projected as _projected
from .words import ratio as _ratio
from .workload_fit import WorkloadFit, workload_fit


def underprovisioned(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    current: Candidate,
    bottlenecks: tuple[str, ...],
    why: str,
    unmet: Unmet,
) -> Assessment:
    """The cheapest option with more of what the unmet demand needs (``unmet.resources``)."""
    needs = unmet.resources
    d = demand(
        ev,
        s,
        memory_floor=ev.memory_total_bytes if "memory" in needs else 0.0,
        activity_floor=1.0 if "compute" in needs else 0.0,
        bandwidth_floor=1.0 if "memory bandwidth" in needs else 0.0,
    )
    if unmet.name == "offload":  # the host traffic is the offload itself: gone once the work fits
        d = dataclasses.replace(d, pcie=None)
    group, fit = _fit(ev, catalog, d, current, s, upgrade=True)
    if fit is None:  # what no option has decides (a group's: on as many GPUs as today), and what to do
        many = ev.workload_gpus > 1
        nowhere = nothing_carries(
            dataclasses.replace(d, whole_gpus=True) if many else d, current, catalog, s, needs[0]
        )
        on = f" (on each of {ev.workload_gpus} GPUs)" if many else ""
        more = "more " if many else ""
        instead = (
            f"split the model across {more}GPUs (tensor parallel)"
            if nowhere.resource == "memory"
            else "add replicas"
        )
        return Assessment(
            "underprovisioned",
            f"{unmet.cause}; {nowhere.words}{on}; {instead}.{why}",
            bottlenecks,
            "none",
            current.key,
            None,
            None,
            None,
            d.memory_bytes,
            summary=f"{unmet.kind}: no single GPU is enough",
            deciding=nowhere.resource,
            cause=unmet.cause,
        )
    up = fit.candidate
    delta = _delta(current, up, group)
    where = group.change if group else up.key
    per_gpu = " per GPU" if group else ""
    if group is not None:
        decider = Decider(fit.binding, f"{fit.binding} decides at {_pct(fit.projected_activity)} projected")
    elif up.gpu.key == current.gpu.key and up.hourly_price_dollars <= current.hourly_price_dollars + 1e-9:
        what = f"that holds {gib(d.memory_bytes)}" if needs[0] == "memory" else f"with more {needs[0]}"
        decider = Decider(needs[0], f"{needs[0]} decides: the same GPU's option at no extra cost {what}")
    else:
        decider = deciding(d, current, up, catalog, s, upgrade=True)
    return Assessment(
        "underprovisioned",
        f"{unmet.cause}; {where} holds {gib(d.memory_bytes)} and carries it ({fit.binding} "
        f"{_pct(fit.projected_activity)} projected there), {_cost(delta)}{per_gpu}{_estimated(up)}; "
        f"{decider.words}.{why}",
        bottlenecks,
        up.key,
        current.key,
        -delta,
        _ratio(current.hourly_price_dollars, current.hourly_price_dollars + max(delta, 0.0)),
        fit.projected_activity,
        d.memory_bytes,
        summary=f"{unmet.kind}: needs a bigger GPU",
        price_source=price_source(up),
        workload_change=group.change if group else "",
        deciding=decider.resource,
        cause=unmet.cause,
    )


def sized(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    current: Candidate,
    bottlenecks: tuple[str, ...],
    why: str,
    pressure: bool | None,
) -> Assessment:
    peak_ratio = ev.memory_peak_ratio or 0.0
    d = demand(ev, s)
    here, _ = project(d, current, current)
    if (
        peak_ratio >= s.memory_full_ratio and reserved_free(ev) <= 0.0
    ):  # full, but no evidence the work needs more: the server's reservation
        known = pressure_words(ev)
        evidence = f"no memory pressure ({known})" if known else "no KV-cache usage or preemptions reported"
        held = "memory reserved by the server; need unknown"
        if server_queue(ev) is None:  # no server: a framework's allocator keeps what it frees
            held, evidence = "need unknown", "no inference server linked to report pressure"
        return Assessment(
            "rightsized",
            f"memory {peak_ratio:.0%} full at peak: {held} "
            f"({evidence}); p95 {ev.activity_source.replace('_', ' ')} {_pct(ev.activity_p95)}.{why}",
            bottlenecks,
            current.key,
            current.key,
            0.0,
            1.0,
            here,
            ev.memory_peak_bytes,
            summary=held if held != "need unknown" else "memory full; need unknown",
            price_source=price_source(current),
            deciding="memory",
        )
    group, fit = _fit(ev, catalog, d, current, s)
    load = _load(ev, d, s)
    fewer = group is not None and group.count < group.today
    if fit is not None and (fit.candidate.key != current.key or fewer):
        cheaper = fit.candidate
        saving = -_delta(current, cheaper, group)
        if saving >= s.min_savings_ratio * current.hourly_price_dollars and saving > 0:
            where = group.change if group else cheaper.key
            each = f" per GPU (${saving * group.today:.2f}/h for the workload)" if group else ""
            if group is None:
                decider = deciding(d, current, cheaper, catalog, s)
                there = f" ({_projected(fit)} there{_bursts(d, current, cheaper, fit, s)}); {decider.words}"
            else:
                decider = Decider(fit.binding, "")
                there = f", where {_deciding(fit.binding, fit.projected_activity)}"
            return Assessment(
                "overprovisioned",
                f"{load} fit {where}{there}; saves ${saving:.2f}/h{each}{_estimated(cheaper)}.{why}",
                bottlenecks,
                cheaper.key,
                current.key,
                saving,
                _ratio(current.hourly_price_dollars - saving, current.hourly_price_dollars),
                fit.projected_activity,
                d.memory_bytes,
                summary=f"a cheaper option carries the work ({fit.binding}-bound)",
                price_source=price_source(cheaper),
                workload_change=group.change if group else "",
                deciding=decider.resource,
            )
    if fit is None:
        detail = f"no catalog option carries {load} at <= {_pct(s.target_activity_ratio)}"
        score = None
    elif fit.candidate.key == current.key and not _cheaper_exists(catalog, current, s):
        target = _pct(s.target_activity_ratio)
        detail = f"{load} fit at <= {target}, and {current.key} is the catalog's cheapest option"
        score = 1.0
    elif fit.candidate.key == current.key:
        detail = f"{load}: no cheaper option carries them at <= {_pct(s.target_activity_ratio)}"
        score = 1.0
    elif fit.candidate.hourly_price_dollars > current.hourly_price_dollars:
        detail = (
            f"{load}: only dearer options such as {fit.candidate.key} carry them at "
            f"<= {_pct(s.target_activity_ratio)}, and nothing shows unmet demand "
            f"(no memory pressure, no growing queue at a saturated resource, no offload)"
        )
        score = _ratio(current.hourly_price_dollars, fit.candidate.hourly_price_dollars)
    else:
        detail = f"{load}: {fit.candidate.key} would save under {s.min_savings_ratio:.0%}"
        score = _ratio(fit.candidate.hourly_price_dollars, current.hourly_price_dollars)
    decider = deciding(d, current, current, catalog, s)
    return Assessment(
        "rightsized",
        f"{detail}; {decider.words}.{why}",
        bottlenecks,
        current.key,
        current.key,
        0.0,
        1.0 if score is None else score,
        here,
        d.memory_bytes,
        summary="no cheaper option carries the work"
        if fit is not None
        else "no catalog option has headroom for it",
        price_source=price_source(current),
        deciding=decider.resource,
    )


def _cheaper_exists(catalog: Catalog, current: Candidate, s: RightsizingSettings) -> bool:
    """Some option the recommendation may choose costs less than ``current``."""
    return any(
        c.hourly_price_dollars < current.hourly_price_dollars - 1e-9 and (c.mig is None or s.recommend_mig)
        for c in catalog.candidates()
    )


def _fit(
    ev: Evidence,
    catalog: Catalog,
    d: Demand,
    current: Candidate,
    s: RightsizingSettings,
    upgrade: bool = False,
) -> tuple[WorkloadFit | None, Fit | None]:
    """A multi-GPU workload's fit as a whole, or a single GPU's."""
    if ev.workload_gpus > 1:
        group = workload_fit(catalog, d, current, s, ev.workload_gpus, upgrade)
        return group, group.fit if group else None
    return None, cheapest_fit(catalog, d, current, s, upgrade)
