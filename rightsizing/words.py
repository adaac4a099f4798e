"""The engine's words: durations, shares, prices and the parts of a reason that several verdicts share."""

from __future__ import annotations

from .catalog import Candidate
from .evidence import Evidence
from .pressure import memory_need
from .recommend import BURST_CEILING, Demand, Fit, burst_share, gib
from .settings import RightsizingSettings
from .workload_fit import WorkloadFit

POOLED = ("vllm", "sglang")  # servers whose KV-cache pool the exporter sizes from the served model


def duration(seconds: float) -> str:
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:.0f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def exact_duration(seconds: float) -> str:
    """To the second, each unit said once, none that is zero: 45 s, 2 min, 12 min 15 s, 1 h 5 s, 7 d."""
    left = max(0, round(seconds))
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size:
            parts.append(f"{left // size} {unit}")
            left %= size
    return " ".join(parts) or "0 s"


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def price_source(c: Candidate | None) -> str:
    if c is None:
        return ""
    if c.gpu.price_source.startswith("configured"):
        return "configured"
    estimated = c.price_estimated or c.gpu.price_source.lower().startswith("estimate")
    return "estimate" if estimated else "list"


def estimated(c: Candidate) -> str:
    return f"; {c.gpu.key}'s price is an estimate, not a list price" if price_source(c) == "estimate" else ""


def cost(delta: float) -> str:
    """Price change of a move in words: never a negative 'more'."""
    if delta > 0.005:
        return f"${delta:.2f}/h more"
    if delta < -0.005:
        return f"saves ${-delta:.2f}/h"
    return "at the same price"


def load(ev: Evidence, d: Demand, s: RightsizingSettings) -> str:
    bandwidth = ev.bandwidth
    band = (
        f" and p95 {bandwidth[0]} {pct(bandwidth[1])}"
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
    peak = ev.memory_peak_bytes or 0.0
    need = memory_need(ev) or 0.0
    memory = f"peak memory {gib(peak)}"
    margin = f"+{s.memory_margin_ratio:.0%} margin"
    margin += f", x{d.widening:.2f} for short history" if d.widening > 1.0001 else ""
    unsized = next((q for q in ev.queues if q.server in POOLED and q.kv_cache_bytes is None), None)
    if need >= peak and unsized is not None:  # usage of a pool of unknown size: peak is the reservation
        memory += (
            f" (the {unsized.server} server's reservation, not a measured need: its model is unknown, so "
            f"its KV-cache pool is too; set model on queue {unsized.name!r} to count only the pool in use; "
            f"{margin})"
        )
    elif need < peak:  # a server's reservation: the weights and the KV cache in use are the need
        memory = (
            f"memory need {gib(need)} (the server holds {gib(peak)}, {gib(peak - need)} of it KV cache "
            f"it leaves unused) ({margin})"
        )
    else:
        memory += f" ({margin})"
    return (
        f"{memory}, p95 "
        f"{ev.activity_source.replace('_', ' ')} {pct(ev.activity_p95)}{band}{gpus}"
    )


def bursts(d: Demand, current: Candidate, c: Candidate, fit: Fit, s: RightsizingSettings) -> str:
    """Said when bursts (p99) are closer to their ceiling than the p95 to its target."""
    burst = burst_share(d, current, c)
    if burst / BURST_CEILING <= fit.projected_activity / s.target_activity_ratio:
        return ""
    return f" and bursts (p99) decide at {pct(burst)}"


def projected(fit: Fit) -> str:
    if fit.binding == "memory":  # nothing else measured
        return "nothing but memory measured"
    return f"{fit.binding} {pct(fit.projected_activity)} projected"


def binding_words(binding: str, projected: float) -> str:
    if binding == "memory":  # nothing else measured: the option has no less of anything
        return "memory decides"
    return f"{binding} decides at {pct(projected)} projected"


def delta(current: Candidate, new: Candidate, group: WorkloadFit | None) -> float:
    """Change in hourly price per GPU today (positive: dearer)."""
    if group is None:
        return new.hourly_price_dollars - current.hourly_price_dollars
    return (group.count * new.hourly_price_dollars - group.today * current.hourly_price_dollars) / group.today


def ratio(a: float, b: float) -> float:
    if b <= 0:
        return 1.0
    return max(0.0, min(1.0, a / b))
