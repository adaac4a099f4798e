"""Verdicts: one of five states per GPU, with the recommendation and the reason in words.

Decided in this order (``rightsizing`` settings, defaults in brackets):
1. insufficient_data: fewer than ``min_samples`` (60) samples, or history shorter than
   ``min_history_seconds`` (10 min); also when the GPU model is not in the catalog (over, under
   and rightsized compare prices and capacities).
2. idle: activity (SM active, else GR engine active, else GPU utilization) below
   ``idle_activity_ratio`` (5 %) for at least ``idle_after_seconds`` (15 min), and GPU utilization
   too where reported (no kernel ran: a trickle of work is downsized, not released); without any
   activity signal, when no process held memory over the window (``empty_without_signal``). Never
   inferred from memory use: vLLM reserves 90 % of memory whatever it is doing.
3. underprovisioned: memory full (peak >= ``memory_full_ratio``, 95 %) AND memory pressure shown by
   a linked inference server (``pressure``), or median activity >= ``saturation_activity_ratio``
   (90 %) while a linked queue grows (by its own level, ``pressure.growing``). Recommends the
   same GPU model's options at no extra cost first, then the cheapest option that fits.
   A full GPU without pressure evidence is rightsized: "memory reserved by the server; need unknown".
4. overprovisioned: a catalog option at least ``min_savings_ratio`` (10 %) cheaper fits (see
   ``recommend``: every resource, each from its own signal).
5. rightsized: none of the above.

Work spread over several GPUs (``Evidence.workload_gpus`` > 1) is sized as a whole: n whole GPUs
(n at most today's count; NVLink when fewer or when it uses NVLink) carrying the whole workload, as
``4 x H100-SXM-80GB -> 2 x H200-SXM-141GB``; each GPU's savings are the workload's divided by its count.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bottlenecks import describe, find_bottlenecks
from .catalog import Candidate, Catalog
from .evidence import Evidence
from .pressure import backlog, growing, growing_queues, memory_pressure, server_queue, starvation_demand
from .recommend import (
    BURST_CEILING,
    Demand,
    Fit,
    binding_burst,
    burst_share,
    cheapest_fit,
    current_candidate,
    demand,
    gib,
    project,
)
from .settings import RightsizingSettings
from .workload_fit import WorkloadFit, workload_fit

VERDICTS = ("idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data")


@dataclass(frozen=True, slots=True)
class Assessment:
    verdict: str
    reason: str
    bottlenecks: tuple[str, ...]
    recommended: str  # a catalog option key, or "release" (idle) or "none" (nothing fits / no data)
    current: str | None  # the catalog option the GPU is today
    hourly_savings_dollars: float | None  # current price - recommended price; negative for upgrades
    fit_score: float | None  # 0-1: 1 when the GPU is the cheapest option that carries its work
    projected_activity: float | None = None  # activity on the recommended option
    memory_need_bytes: float | None = None  # what the recommended option must hold
    summary: str = ""  # the reason in a few stable words (a label value: no numbers in it)
    price_source: str = ""  # of the recommended option's price: list, estimate or configured
    workload_change: str = ""  # multi-GPU work: "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB"


def duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:.0f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def price_source(c: Candidate | None) -> str:
    if c is None:
        return ""
    if c.gpu.price_source.startswith("configured"):
        return "configured"
    estimated = c.price_estimated or c.gpu.price_source.lower().startswith("estimate")
    return "estimate" if estimated else "list"


def _estimated(c: Candidate) -> str:
    return f"; {c.gpu.key}'s price is an estimate, not a list price" if price_source(c) == "estimate" else ""


def _cost(delta: float) -> str:
    """Price change of a move in words: never a negative 'more'."""
    if delta > 0.005:
        return f"${delta:.2f}/h more"
    if delta < -0.005:
        return f"saves ${-delta:.2f}/h"
    return "at the same price"


def idle_kernels(ev: Evidence, s: RightsizingSettings) -> bool:
    """No kernel ran for idle_after_seconds: GPU utilization (when reported) stayed under the idle
    ratio too. A big GPU serving a trickle (SM active 3 %, kernels running 10 % of the time) does
    real work: it is downsized, never released."""
    util = ev.utilization_recent_max
    return util is None or util < s.idle_activity_ratio


# Less device memory than any CUDA context takes: nothing can have run.
NO_CONTEXT_BYTES = 256 * 2**20


def empty_without_signal(ev: Evidence, s: RightsizingSettings) -> bool:
    """No activity signal (a MIG instance of a GPU without profiling metrics reports no utilization),
    but no process held memory over the whole window: idle, as surely as by activity."""
    return (
        ev.activity_p95 is None
        and ev.memory_peak_bytes is not None
        and ev.memory_peak_bytes < NO_CONTEXT_BYTES
        and ev.history_seconds >= s.idle_after_seconds
    )


def decision_inputs(ev: Evidence, s: RightsizingSettings) -> tuple[object, ...] | None:
    """Everything ``assess`` reads from the evidence, or None when it would read the sample count and
    history themselves (not enough data). Equal inputs give equal assessments, so the live engine
    reuses the last one while a GPU's window summaries stay in the same histogram bins."""
    if ev.samples < s.min_samples or ev.history_seconds < s.min_history_seconds:
        return None
    return (
        ev.model, ev.mig_profile, ev.memory_total_bytes, ev.memory_peak_bytes, ev.activity_source,
        ev.activity_p50, ev.activity_p95, ev.activity_recent_max, ev.history_seconds >= s.idle_after_seconds,
        ev.utilization_p50, ev.sm_active_p50, ev.sm_active_high, ev.dram_active_high, ev.pcie_link_high,
        ev.host_cpu_high, ev.starved_share, ev.confidence, ev.dram_active_p95, ev.memory_copy_p95,
        ev.nvlink_high, ev.workload_gpus, ev.memory_copy_high, idle_kernels(ev, s),
        binding_burst(ev.activity_p95, ev.activity_p99, s),
        binding_burst(None if ev.bandwidth is None else ev.bandwidth[1], ev.bandwidth_p99, s),
        tuple(
            (q.name, q.server, q.kv_cache_high, q.preemptions, backlog(q),
             (round(q.rise), round(100 * q.growth_per_hour)) if growing(q, s) else None)
            for q in ev.queues
        ),
    )  # fmt: skip


def assess(ev: Evidence, s: RightsizingSettings, catalog: Catalog) -> Assessment:
    current = current_candidate(catalog, ev.model, ev.mig_profile)
    current_key = current.key if current else None
    if ev.samples < s.min_samples or ev.history_seconds < s.min_history_seconds:
        return Assessment(
            "insufficient_data",
            f"{ev.samples} sample{'s' if ev.samples != 1 else ''} over {duration(ev.history_seconds)}; "
            f"needs {s.min_samples} samples "
            f"over {duration(s.min_history_seconds)} before judging",
            (),
            "none",
            current_key,
            None,
            None,
            summary="not enough data yet",
        )
    idle = (
        ev.activity_recent_max is not None
        and ev.activity_recent_max < s.idle_activity_ratio
        and idle_kernels(ev, s)
        and ev.history_seconds >= s.idle_after_seconds
    )
    if idle or empty_without_signal(ev, s):
        price = current.hourly_price_dollars if current else None
        saves = f"; releasing it saves ${price:.2f}/h" if price else ""
        what = (
            f"{ev.activity_source.replace('_', ' ')} below {_pct(s.idle_activity_ratio)} for the last "
            f"{duration(s.idle_after_seconds)} (peak {_pct(ev.activity_recent_max)})"
            if idle
            else f"no process held memory for {duration(ev.history_seconds)} (peak "
            f"{(ev.memory_peak_bytes or 0) / 2**20:.0f} MiB; no activity signal)"
        )
        return Assessment(
            "idle",
            f"{what}{saves}",
            (),
            "release",
            current_key,
            price,
            0.0,
            summary="idle: release it",
            price_source=price_source(current),
        )
    pressure = memory_pressure(ev, s)
    memory_counts = pressure is True or (pressure is None and server_queue(ev) is None)
    starving = starvation_demand(ev, s)
    bottlenecks = find_bottlenecks(ev, s.bottlenecks, memory_counts, starving)
    why = describe(ev, bottlenecks, starving)
    why = f" Bottlenecks: {why}." if why else ""
    if current is None:
        return Assessment(
            "insufficient_data",
            f"GPU model {ev.model!r} is not in the catalog; add it (catalog.extra_gpus) to compare options",
            bottlenecks,
            "none",
            None,
            None,
            None,
            summary="GPU model not in the catalog",
        )
    return _sized(ev, s, catalog, current, bottlenecks, why, pressure)


def _pressure_words(ev: Evidence) -> str:
    parts = []
    for q in ev.queues:
        if q.kv_cache_high is not None:
            parts.append(f"KV cache {q.kv_cache_high:.0%} used at p95")
        if q.preemptions:
            parts.append(f"{q.preemptions:.0f} preemptions")
    return ", ".join(parts)


def _sized(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    current: Candidate,
    bottlenecks: tuple[str, ...],
    why: str,
    pressure: bool | None,
) -> Assessment:
    peak_ratio = ev.memory_peak_ratio or 0.0
    grow = growing_queues(ev, s)
    full = peak_ratio >= s.memory_full_ratio
    memory_short = full and pressure is True
    saturated = (ev.activity_p50 or 0.0) >= s.saturation_activity_ratio and bool(grow)
    peak, total = gib(ev.memory_peak_bytes or 0), gib(ev.memory_total_bytes)
    if memory_short or saturated:
        kind = "memory full" if memory_short else "saturated while its queue grows"
        if memory_short:
            pressed = _pressure_words(ev)
            cause = f"peak memory {peak} is {peak_ratio:.0%} of {total}, under pressure ({pressed})"
        else:
            q = grow[0]
            cause = (
                f"median activity {_pct(ev.activity_p50)} while queue {q.name!r} grew by {round(q.rise)} "
                f"({q.growth_per_hour:.0%} of its level per hour)"
            )
        d = demand(
            ev,
            s,
            memory_floor=ev.memory_total_bytes if memory_short else 0.0,
            activity_floor=1.0 if saturated else 0.0,
        )
        group, fit = _fit(ev, catalog, d, current, s, upgrade=True)
        if fit is None:
            return Assessment(
                "underprovisioned",
                f"{cause}; no catalog option holds {gib(d.memory_bytes)} and carries the work at "
                f"<= {_pct(s.target_activity_ratio)}: split it across GPUs (tensor parallel).{why}",
                bottlenecks,
                "none",
                current.key,
                None,
                None,
                None,
                d.memory_bytes,
                summary=f"{kind}: no single GPU is enough",
            )
        up = fit.candidate
        delta = _delta(current, up, group)
        where = group.change if group else up.key
        per_gpu = " per GPU" if group else ""
        return Assessment(
            "underprovisioned",
            f"{cause}; {where} holds {gib(d.memory_bytes)} and carries it, {fit.binding} deciding at "
            f"{_pct(fit.projected_activity)}, {_cost(delta)}{per_gpu}{_estimated(up)}.{why}",
            bottlenecks,
            up.key,
            current.key,
            -delta,
            _ratio(current.hourly_price_dollars, current.hourly_price_dollars + max(delta, 0.0)),
            fit.projected_activity,
            d.memory_bytes,
            summary=f"{kind}: needs a bigger GPU",
            price_source=price_source(up),
            workload_change=group.change if group else "",
        )
    d = demand(ev, s)
    here, here_binding = project(d, current, current)
    if full:  # full, but no evidence the work needs more: the server's reservation
        known = _pressure_words(ev)
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
            return Assessment(
                "overprovisioned",
                f"{load} fit {where}, where {_deciding(fit.binding, fit.projected_activity)}"
                f"{_bursts(d, current, cheaper, fit, s) if group is None else ''}; "
                f"saves ${saving:.2f}/h{each}{_estimated(cheaper)}.{why}",
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
            )
    if fit is None:
        detail = f"no catalog option carries {load} at <= {_pct(s.target_activity_ratio)}"
        score = None
    elif fit.candidate.key == current.key:
        detail = f"{load}: no cheaper option carries them at <= {_pct(s.target_activity_ratio)}"
        score = 1.0
    elif fit.candidate.hourly_price_dollars > current.hourly_price_dollars:
        detail = (
            f"{load}: only dearer options such as {fit.candidate.key} carry them at "
            f"<= {_pct(s.target_activity_ratio)}, and nothing shows unmet demand "
            f"(no memory pressure, no growing queue at saturation)"
        )
        score = _ratio(current.hourly_price_dollars, fit.candidate.hourly_price_dollars)
    else:
        detail = f"{load}: {fit.candidate.key} would save under {s.min_savings_ratio:.0%}"
        score = _ratio(fit.candidate.hourly_price_dollars, current.hourly_price_dollars)
    return Assessment(
        "rightsized",
        f"{detail}; {here_binding} decides here.{why}",
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


def _load(ev: Evidence, d: Demand, s: RightsizingSettings) -> str:
    bandwidth = ev.bandwidth
    band = (
        f" and p95 {bandwidth[0]} {_pct(bandwidth[1])}"
        if bandwidth is not None
        else " (no bandwidth signal: no option with less bandwidth)"
    )
    if d.activity is None:
        band = (
            " (no activity or bandwidth signal: no option with less compute or bandwidth)"
            if bandwidth is None
            else f"{band} (no activity signal: no option with less compute)"
        )
    gpus = f" on each of {ev.workload_gpus} GPUs" if ev.workload_gpus > 1 else ""
    return (
        f"peak memory {gib(ev.memory_peak_bytes or 0)} (+{s.memory_margin_ratio:.0%} margin"
        f"{f', x{d.widening:.2f} for short history' if d.widening > 1.0001 else ''}), p95 "
        f"{ev.activity_source.replace('_', ' ')} {_pct(ev.activity_p95)}{band}{gpus}"
    )


def _bursts(d: Demand, current: Candidate, c: Candidate, fit: Fit, s: RightsizingSettings) -> str:
    """Said when bursts (p99) are closer to their ceiling than the p95 to its target."""
    burst = burst_share(d, current, c)
    if burst / BURST_CEILING <= fit.projected_activity / s.target_activity_ratio:
        return ""
    return f" and bursts (p99) decide at {_pct(burst)}"


def _deciding(binding: str, projected: float) -> str:
    if binding == "memory":  # nothing else measured: the option has no less of anything
        return "memory decides"
    return f"{binding} decides at {_pct(projected)} projected"


def _delta(current: Candidate, new: Candidate, group: WorkloadFit | None) -> float:
    """Change in hourly price per GPU today (positive: dearer)."""
    if group is None:
        return new.hourly_price_dollars - current.hourly_price_dollars
    return (group.count * new.hourly_price_dollars - group.today * current.hourly_price_dollars) / group.today


def _ratio(a: float, b: float) -> float:
    if b <= 0:
        return 1.0
    return max(0.0, min(1.0, a / b))


__all__ = ["VERDICTS", "Assessment", "Demand", "Fit", "assess", "decision_inputs", "duration"]
