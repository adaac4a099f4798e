"""Verdicts: one of five states per GPU, with the recommendation and the reason in words.

Decided in this order (``rightsizing`` settings, defaults in brackets):
1. insufficient_data: fewer than ``min_samples`` (60) samples, or history shorter than
   ``min_history_seconds`` (10 min); also when the GPU model is not in the catalog (over, under
   and rightsized compare prices and capacities).
2. idle: activity (SM active, else GR engine active, else GPU utilization) below
   ``idle_activity_ratio`` (5 %) for at least ``idle_after_seconds`` (15 min). Never inferred from
   memory use: vLLM reserves 90 % of memory whatever it is doing.
3. underprovisioned: peak memory need >= ``memory_full_ratio`` (95 %) of the GPU's memory, or
   median activity >= ``saturation_activity_ratio`` (90 %) while a linked queue grows by at least
   ``queue_growth_min`` (5) over the window. Recommends the cheapest other GPU that fits.
4. overprovisioned: a catalog option at least ``min_savings_ratio`` (10 %) cheaper fits (see
   ``recommend``).
5. rightsized: none of the above.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bottlenecks import describe, find_bottlenecks
from .catalog import Candidate, Catalog
from .evidence import Evidence
from .recommend import Demand, cheapest_fit, current_candidate, demand, gib, project
from .settings import RightsizingSettings

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


def decision_inputs(ev: Evidence, s: RightsizingSettings) -> tuple[object, ...] | None:
    """Everything ``assess`` reads from the evidence, or None when it would read the sample count and
    history themselves (not enough data). Equal inputs give equal assessments, so the live engine
    reuses the last one while a GPU's window summaries stay in the same histogram bins."""
    if ev.samples < s.min_samples or ev.history_seconds < s.min_history_seconds:
        return None
    growth = s.queue_growth_min
    return (
        ev.model, ev.mig_profile, ev.memory_total_bytes, ev.memory_peak_bytes, ev.activity_source,
        ev.activity_p50, ev.activity_p95, ev.activity_recent_max, ev.history_seconds >= s.idle_after_seconds,
        ev.utilization_p50, ev.sm_active_p50, ev.sm_active_high, ev.dram_active_high, ev.pcie_link_high,
        ev.host_cpu_high, ev.starved_share, ev.confidence,
        tuple((q.name, round(q.rise) if q.rise >= growth and q.rise > 0 else None) for q in ev.queues),
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
    if (
        ev.activity_recent_max is not None
        and ev.activity_recent_max < s.idle_activity_ratio
        and ev.history_seconds >= s.idle_after_seconds
    ):
        price = current.hourly_price_dollars if current else None
        saves = f"; releasing it saves ${price:.2f}/h" if price else ""
        return Assessment(
            "idle",
            f"{ev.activity_source.replace('_', ' ')} below {_pct(s.idle_activity_ratio)} for the last "
            f"{duration(s.idle_after_seconds)} (peak {_pct(ev.activity_recent_max)}){saves}",
            (),
            "release",
            current_key,
            price,
            0.0,
            summary="idle: release it",
        )
    bottlenecks = find_bottlenecks(ev, s.bottlenecks)
    why = describe(ev, bottlenecks)
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
    return _sized(ev, s, catalog, current, bottlenecks, why)


def _sized(
    ev: Evidence,
    s: RightsizingSettings,
    catalog: Catalog,
    current: Candidate,
    bottlenecks: tuple[str, ...],
    why: str,
) -> Assessment:
    peak_ratio = ev.memory_peak_ratio or 0.0
    growing = [q for q in ev.queues if q.rise >= s.queue_growth_min and q.rise > 0]
    memory_full = peak_ratio >= s.memory_full_ratio
    saturated = (ev.activity_p50 or 0.0) >= s.saturation_activity_ratio and bool(growing)
    if memory_full or saturated:
        kind = "memory full" if memory_full else "saturated while its queue grows"
        if memory_full:
            peak, total = gib(ev.memory_peak_bytes or 0), gib(ev.memory_total_bytes)
            cause = f"peak memory {peak} is {peak_ratio:.0%} of {total}"
        else:
            q = growing[0]
            cause = f"median activity {_pct(ev.activity_p50)} while queue {q.name!r} grew by {round(q.rise)}"
        d = demand(
            ev,
            s,
            memory_floor=ev.memory_total_bytes if memory_full else 0.0,
            activity_floor=1.0 if saturated else 0.0,
        )
        fit = cheapest_fit(catalog, d, current, s, exclude_model=True)
        if fit is None:
            return Assessment(
                "underprovisioned",
                f"{cause}; no single catalog GPU holds {gib(d.memory_bytes)} and carries the work at "
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
        more = up.hourly_price_dollars - current.hourly_price_dollars
        return Assessment(
            "underprovisioned",
            f"{cause}; {up.key} holds {gib(d.memory_bytes)} and carries it at {_pct(fit.projected_activity)} "
            f"({d.binding}-bound), ${more:.2f}/h more.{why}",
            bottlenecks,
            up.key,
            current.key,
            current.hourly_price_dollars - up.hourly_price_dollars,
            _ratio(current.hourly_price_dollars, up.hourly_price_dollars),
            fit.projected_activity,
            d.memory_bytes,
            summary=f"{kind}: needs a bigger GPU",
        )
    d = demand(ev, s)
    fit = cheapest_fit(catalog, d, current, s)
    load = (
        f"peak memory {gib(ev.memory_peak_bytes or 0)} (+{s.memory_margin_ratio:.0%} margin"
        f"{f', x{d.widening:.2f} for short history' if d.widening > 1.0001 else ''}) and p95 "
        f"{ev.activity_source.replace('_', ' ')} {_pct(ev.activity_p95)}"
    )
    here = project(d, current, current)
    if fit is not None and fit.candidate.key != current.key:
        cheaper = fit.candidate
        saving = current.hourly_price_dollars - cheaper.hourly_price_dollars
        if saving >= s.min_savings_ratio * current.hourly_price_dollars and saving > 0:
            return Assessment(
                "overprovisioned",
                f"{load} fit {cheaper.key} at {_pct(fit.projected_activity)} projected activity "
                f"({d.binding}-bound); saves ${saving:.2f}/h.{why}",
                bottlenecks,
                cheaper.key,
                current.key,
                saving,
                _ratio(cheaper.hourly_price_dollars, current.hourly_price_dollars),
                fit.projected_activity,
                d.memory_bytes,
                summary=f"a cheaper option carries the work ({d.binding}-bound)",
            )
    if fit is None:
        detail = f"no catalog option carries {load} at <= {_pct(s.target_activity_ratio)} activity"
        score = None
    elif fit.candidate.key == current.key:
        detail = f"{load}: no cheaper option holds them at <= {_pct(s.target_activity_ratio)} activity"
        score = 1.0
    elif fit.candidate.hourly_price_dollars > current.hourly_price_dollars:
        detail = (
            f"{load}: only dearer options such as {fit.candidate.key} hold them at "
            f"<= {_pct(s.target_activity_ratio)} activity, and nothing shows unmet demand "
            f"(memory under {_pct(s.memory_full_ratio)}, no growing queue at saturation)"
        )
        score = None
    else:
        detail = f"{load}: {fit.candidate.key} would save under {s.min_savings_ratio:.0%}"
        score = _ratio(fit.candidate.hourly_price_dollars, current.hourly_price_dollars)
    if fit is not None and fit.candidate.hourly_price_dollars > current.hourly_price_dollars:
        score = _ratio(current.hourly_price_dollars, fit.candidate.hourly_price_dollars)
    return Assessment(
        "rightsized",
        f"{detail}.{why}",
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
    )


def _ratio(a: float, b: float) -> float:
    if b <= 0:
        return 1.0
    return max(0.0, min(1.0, a / b))


__all__ = ["VERDICTS", "Assessment", "Demand", "assess", "decision_inputs", "duration"]
