"""Unmet demand without SLOs: the evidence that a GPU is too small for its work (underprovisioned).

Each case is a named check of ``pressure``; ``unmet_demand`` says which holds, in words, and what
the work needs more of (the floors ``recommend.demand`` applies to the options):

1. ``memory_pressure``: the inference server is out of KV cache (KV-cache usage p95 at or above
   ``kv_cache_full_ratio``, or preemptions / retractions in the window), whatever NVML's memory
   fraction: an option must hold more than today's whole GPU (x the margin).
2. ``offload``: memory full and the PCIe host link at the data-loading flag while the GPU is underfed:
   bottlenecks ``memory_capacity`` and ``data_loading``; more memory than today removes the traffic.
3. ``queue_at_saturation``: a linked queue grows by its own level (``pressure.growing``) while a
   resource is at its limit (``pressure.saturated``): compute, DRAM bandwidth, memory full or KV
   pressure. The option needs more of each saturated resource: more memory than today's, or its
   compute or bandwidth projected under the target at today's full capacity (the other resource
   scaled with it: more throughput moves more bytes and does more FLOPs).
"""

from __future__ import annotations

from dataclasses import dataclass

from .evidence import Evidence
from .pressure import growing_queues, kv_pressure, offloading, saturated
from .recommend import gib
from .settings import RightsizingSettings

SMALL_SHARE = 0.8  # under this share of the GPU, the server's own memory setting is the first fix


@dataclass(frozen=True, slots=True)
class Unmet:
    name: str  # memory_pressure | offload | queue_at_saturation
    kind: str  # a few stable words for the summary: "memory full", "KV cache under pressure", ...
    cause: str  # the evidence in words
    resources: tuple[str, ...]  # what it needs more of: "memory", "compute", "memory bandwidth"
    bottlenecks: tuple[str, ...]  # bottlenecks the case shows (added to the measured ones)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def pressure_words(ev: Evidence) -> str:
    parts = []
    for q in ev.queues:
        if q.kv_cache_high is not None:
            parts.append(f"KV cache {q.kv_cache_high:.0%} used at p95")
        if q.preemptions:
            parts.append(f"{q.preemptions:.0f} preemptions")
    return ", ".join(parts)


def _saturation_words(ev: Evidence, s: RightsizingSettings, names: tuple[str, ...]) -> str:
    words = {
        "KV cache": f"KV cache ({pressure_words(ev)})",
        "memory": f"memory {_pct(ev.memory_peak_ratio)} full at peak",
        "memory bandwidth": (
            f"DRAM active {_pct(ev.dram_active_high)}" if ev.dram_active_high is not None
            else f"memory copy utilization {_pct(ev.memory_copy_high)}"
        ) + f" at p{s.bottlenecks.percentile * 100:.0f}",
        "compute": f"median {ev.activity_source.replace('_', ' ')} {_pct(ev.activity_p50)}",
    }  # fmt: skip
    return ", ".join(words[n] for n in names)


def _needs(names: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for n in names:
        need = "memory" if n in ("KV cache", "memory") else n
        if need not in out:
            out.append(need)
    return tuple(out)


def unmet_demand(
    ev: Evidence, s: RightsizingSettings, pressure: bool | None, bottlenecks: tuple[str, ...]
) -> Unmet | None:
    """The unmet demand the evidence shows, or None. ``bottlenecks``: those measured."""
    grow = growing_queues(ev, s)
    at = saturated(ev, s, pressure) if grow else ()

    def queue(said: tuple[str, ...] = ()) -> str:
        """The growing queue in words, naming the saturated resources not ``said`` already."""
        if not at:
            return ""
        q, rest = grow[0], tuple(n for n in at if n not in said)
        where = f" at saturated {_saturation_words(ev, s, rest)}" if rest else ""
        rise = f"grew by {round(q.rise)} ({q.growth_per_hour:.0%} of its level per hour)"
        return f"; queue {q.name!r} {rise}{where}"

    peak, total = gib(ev.memory_peak_bytes or 0), gib(ev.memory_total_bytes)
    ratio = ev.memory_peak_ratio or 0.0
    if kv_pressure(ev, s):
        full = ratio >= s.memory_full_ratio
        if full:
            cause = f"peak memory {peak} is {ratio:.0%} of {total}, under pressure ({pressure_words(ev)})"
        else:
            cause = (
                f"the inference server is out of KV cache ({pressure_words(ev)}) with memory {ratio:.0%} "
                f"of {total} at peak: the server reserves a fixed share, so the KV cache is the limit"
            )
            if ratio < SMALL_SHARE:  # a server given little of the GPU may only need a larger share
                cause += " (a larger memory share for the server, vLLM's --gpu-memory-utilization, may do)"
        extra = tuple(n for n in at if n not in ("KV cache", "memory"))
        kind = "memory full" if full else "KV cache under pressure"
        needs = _needs(("memory", *extra))
        return Unmet(
            "memory_pressure", kind, cause + queue(("KV cache", "memory")), needs, ("memory_capacity",)
        )
    if offloading(ev, s, bottlenecks):
        cause = (
            f"peak memory {peak} is {ratio:.0%} of {total} while the PCIe host link runs at "
            f"{_pct(ev.pcie_link_high)} and the GPU is underfed (p95 {ev.activity_source.replace('_', ' ')} "
            f"{_pct(ev.activity_p95)}): the work offloads to host memory"
        )
        extra = tuple(n for n in at if n != "memory")
        shown = ("memory_capacity", "data_loading")
        needs = _needs(("memory", *extra))
        return Unmet("offload", "offloading to host memory", cause + queue(("memory",)), needs, shown)
    if at:
        found = ("memory_capacity",) if "memory" in at else ()
        cause = queue().removeprefix("; ")
        return Unmet("queue_at_saturation", "saturated while its queue grows", cause, _needs(at), found)
    return None
