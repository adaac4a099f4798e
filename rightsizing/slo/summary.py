"""Workload latency SLOs as JSON and in words: ``/api/v1/rightsizing``, ``rightsizer report``,
the status page."""

from __future__ import annotations

from typing import Any

from ..figures import missed_by
from .attainment import SloEvidence, percentile, seconds_words
from .latency import KINDS
from .windows import Scaling


def _r(x: float, digits: int = 6) -> float:
    return round(x, digits)


def slo_state(ev: SloEvidence, margin: float) -> str:
    """met_with_room | met | missed | not_judged | no_slo."""
    if not ev.targets:
        return "no_slo"
    if ev.missed:
        return "missed"
    if not ev.judged:
        return "not_judged"
    return "met_with_room" if ev.met_with_room(margin) else "met"


def slo_json(ev: SloEvidence, scaling: Scaling | None, margin: float) -> dict[str, Any]:
    """One workload's entry of ``/api/v1/rightsizing``'s ``slos``."""
    kinds = []
    for kind in KINDS:
        x = ev.get(kind)
        target = ev.targets.get(kind)
        if x is None and target is None:
            continue
        kinds.append({
            "slo": kind,
            "target_seconds": target,
            "requests": None if x is None else round(x.requests, 3),
            "enough_requests": None if x is None else x.enough,
            "attainment_ratio": None if x is None or not x.judged else _r(x.attainment or 0.0),
            "attainment_exact": None if x is None or not x.judged else x.exact,
            "latency_at_objective_seconds": None if x is None or not x.enough else x.at_objective,
            "quantiles": {} if x is None or not x.enough else {percentile(q): _r(v) for q, v in x.quantiles},
            "mean_seconds": None if x is None or not x.enough or x.mean is None else _r(x.mean),
            "mean_only": None if x is None else x.mean_only,
            "missed": None if x is None or not x.judged else x.missed,
        })  # fmt: skip
    return {
        "namespace": ev.namespace,
        "workload": ev.workload,
        "server": ev.server,
        "objective": ev.declared.objective if ev.declared else None,
        "state": slo_state(ev, margin),
        "latency_ratio": None if ev.ratio is None else _r(ev.ratio),
        "not_judged": ev.unjudged(),
        "invalid_histograms": dict(ev.invalid),
        "window_seconds": round(ev.window_seconds, 3),
        "min_requests": ev.min_requests,
        "latencies": kinds,
        "scaling": None if scaling is None else {
            "judged": scaling.evidence is not None,
            "why_not": scaling.why_not,
            "latency_ratio": None if scaling.evidence is None or scaling.evidence.ratio is None
            else _r(scaling.evidence.ratio),
        },
    }  # fmt: skip


def slo_words(ev: SloEvidence, margin: float) -> str:
    """'missed by 64 %: TTFT p95 820 ms against 500 ms', 'met with room: ...', 'not judged: ...'."""
    state = slo_state(ev, margin)
    if state == "no_slo":
        return "no SLO declared"
    if state == "not_judged":
        return "not judged: " + "; ".join(ev.unjudged())
    worst = max(ev.judged, key=lambda x: x.ratio or 0.0)
    what = (
        f"{worst.kind} {percentile(worst.objective)} {seconds_words(worst.at_objective)} "
        f"against {seconds_words(worst.target)}"
    )
    ratio = ev.ratio or 0.0
    if state == "missed":
        return f"{missed_by(ratio)}: {what}"
    return f"{state.replace('_', ' ')} ({1 - ratio:.0%} under): {what}"
