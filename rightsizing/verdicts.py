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
3. underprovisioned: unmet demand (``unmet``): a linked inference server out of KV cache whatever
   NVML's memory fraction, a linked queue growing by its own level at any saturated resource
   (compute, DRAM bandwidth, memory full, KV cache), or the offload signature. Recommends the same
   GPU model's options at no extra cost first, then the cheapest option with more of what is short.
   A full GPU without such evidence is rightsized: "memory reserved by the server; need unknown",
   unless the server's KV-cache pool is known (``pressure.memory_need``): then the need is judged.
4. overprovisioned: a catalog option at least ``min_savings_ratio`` (10 %) cheaper fits (see
   ``recommend``: every resource, each from its own signal).
5. rightsized: none of the above.

Work spread over several GPUs (``Evidence.workload_gpus`` > 1) is sized as a whole: n whole GPUs
(n at most today's count; NVLink when fewer or when it uses NVLink) carrying the whole workload, as
``4 x H100-SXM-80GB -> 2 x H200-SXM-141GB``; each GPU's savings are the workload's divided by its count.

Every reason names the resource that decided (``deciding``), and says when young history's wider
margins changed the verdict (``history``). This module decides 1 and 2 and hands a GPU that passes
them to ``sizing`` (3 to 5); ``assessment`` holds what a verdict says.
"""

from __future__ import annotations

import dataclasses

from .assessment import VERDICTS, Assessment
from .bottlenecks import BOTTLENECKS, describe, find_bottlenecks
from .catalog import Catalog
from .evidence import Evidence
from .history import history_note
from .pressure import backlog, growing, memory_pressure, server_queue, starvation_demand
from .recommend import Demand, Fit, binding_burst, current_candidate
from .settings import RightsizingSettings
from .sizing import sized, underprovisioned
from .unmet import pressure_words, unmet_demand
from .words import duration, price_source
from .words import pct as _pct


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
            (q.name, q.server, q.kv_cache_high, q.kv_cache_bytes, q.preemptions, backlog(q),
             q.depth_last >= 1.0, (round(q.rise), round(100 * q.growth_per_hour)) if growing(q, s) else None)
            for q in ev.queues
        ),
    )  # fmt: skip


def assess(ev: Evidence, s: RightsizingSettings, catalog: Catalog) -> Assessment:
    a = _assess(ev, s, catalog)

    def full_window() -> tuple[str, str]:
        """The same signals judged as a whole window (confidence 1: no widening)."""
        other = _assess(dataclasses.replace(ev, window_seconds=0.98 * ev.history_seconds), s, catalog)
        return other.verdict, other.recommended

    note = history_note((a.verdict, a.recommended), ev, s, full_window)
    return dataclasses.replace(a, reason=f"{a.reason} {note}") if note else a


def missing(ev: Evidence, s: RightsizingSettings) -> str:
    """What a GPU without enough data still lacks: "9 min more history", "20 more samples"; when
    the samples take longer than the history at the interval the window shows (60 samples at a
    15 s scrape are 15 min, not the 10 min of history), how long: "55 more samples: about 14 min
    at one sample every 15 s"."""
    parts = []
    history_wait = max(0.0, s.min_history_seconds - ev.history_seconds)
    if history_wait > 0:
        parts.append(f"{duration(history_wait)} more history")
    if ev.samples < s.min_samples:
        more = s.min_samples - ev.samples
        parts.append(f"{more} more sample{'s' if more != 1 else ''}")
        if ev.samples >= 2 and ev.history_seconds > 0:
            interval = ev.history_seconds / (ev.samples - 1)
            wait = more * interval
            if wait > history_wait:
                return " and ".join(parts) + (
                    f": about {duration(wait)} at one sample every {duration(interval)}"
                )
    return " and ".join(parts)


def _assess(ev: Evidence, s: RightsizingSettings, catalog: Catalog) -> Assessment:
    current = current_candidate(catalog, ev.model, ev.mig_profile)
    current_key = current.key if current else None
    if ev.samples < s.min_samples or ev.history_seconds < s.min_history_seconds:
        return Assessment(
            "insufficient_data",
            f"{ev.samples} sample{'s' if ev.samples != 1 else ''} over {duration(ev.history_seconds)}; "
            f"needs {s.min_samples} samples "
            f"over {duration(s.min_history_seconds)} before judging: {missing(ev, s)}",
            (),
            "none",
            current_key,
            None,
            None,
            summary="not enough data yet",
            deciding="history",
        )
    idle = (
        ev.activity_recent_max is not None
        and ev.activity_recent_max < s.idle_activity_ratio
        and idle_kernels(ev, s)
        and ev.history_seconds >= s.idle_after_seconds
    )
    waiting = [q for q in ev.queues if q.depth_last >= 1.0] if idle else []
    if waiting:  # quiet, yet requests wait for it: the server is not serving, which is no idleness
        q = waiting[0]
        return Assessment(
            "insufficient_data",
            f"{ev.activity_source.replace('_', ' ')} below {_pct(s.idle_activity_ratio)} for the last "
            f"{duration(s.idle_after_seconds)} while requests wait in its queue '{q.name}': "
            "the server is not serving them (stuck, or waiting on something other than the GPU); nothing "
            "to release or resize until it serves",
            (),
            "none",
            current_key,
            None,
            None,
            summary="requests wait, nothing runs",
            deciding="activity",
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
            deciding="activity" if idle else "memory",
        )
    pressure = memory_pressure(ev, s)
    memory_counts = pressure is True or (pressure is None and server_queue(ev) is None)
    starving = starvation_demand(ev, s)
    measured = find_bottlenecks(ev, s.bottlenecks, memory_counts, starving)
    unmet = unmet_demand(ev, s, pressure, measured)
    bottlenecks = measured
    if unmet is not None:  # what the unmet demand shows is a bottleneck whatever NVML's memory says
        bottlenecks = tuple(b for b in BOTTLENECKS if b in measured or b in unmet.bottlenecks)
    # The server's counters explain a memory bottleneck NVML's fraction alone does not show.
    below = (ev.memory_peak_ratio or 0.0) < s.bottlenecks.memory_capacity_ratio
    why = describe(ev, bottlenecks, starving, pressure_words(ev) if pressure and below else "")
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
            deciding="catalog",
        )
    if unmet is not None:
        return underprovisioned(ev, s, catalog, current, bottlenecks, why, unmet)
    return sized(ev, s, catalog, current, bottlenecks, why, pressure)


__all__ = ["VERDICTS", "Assessment", "Demand", "Fit", "assess", "decision_inputs", "duration"]
