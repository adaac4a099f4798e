"""Multi-GPU work sized as a whole: n whole GPUs carrying what N GPUs carry today.

The evidence of a multi-GPU workload is the busiest rank's (``group.merge``): its memory, compute
and bandwidth are one GPU's share, so the whole needs N times them. n GPUs of a candidate carry it
when each holds and carries N/n shares at or under the target. n runs from 1 to N (never more
GPUs than today); 1 < n < N needs NVLink between them (the shards talk), n = N needs NVLink when the
work uses it today, and n = 1 needs none. MIG instances are never offered (no NVLink or
peer-to-peer). The cheapest total wins; at equal price today's GPUs stay.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .catalog import Candidate, Catalog
from .recommend import Demand, Fit, fits
from .settings import RightsizingSettings


@dataclass(frozen=True, slots=True)
class WorkloadFit:
    fit: Fit
    count: int  # GPUs recommended
    today: int  # GPUs the workload holds today
    change: str  # "4 x H100-SXM-80GB -> 2 x H200-SXM-141GB"


@dataclass(frozen=True, slots=True)
class GroupOption:
    total: float  # dollars an hour for all ``count`` GPUs
    count: int
    candidate: Candidate
    projected: tuple[float, str]  # (projected activity, what binds it) as ``recommend.fits`` says


def workload_options(
    catalog: Catalog, d: Demand, current: Candidate, s: RightsizingSettings, gpus: int, upgrade: bool = False
) -> list[GroupOption]:
    """Every way n whole GPUs (1 <= n <= N) carry an N-GPU workload, cheapest total first; at equal
    price today's GPUs come first."""
    out: list[tuple[float, int, GroupOption]] = []
    for n in range(1, gpus + 1):
        share = gpus / n
        scaled = dataclasses.replace(
            d,
            memory_bytes=d.memory_bytes * share,
            activity=None if d.activity is None else d.activity * share,
            bandwidth=None if d.bandwidth is None else d.bandwidth * share,
            pcie=None if d.pcie is None else d.pcie * share,
            activity_burst=None if d.activity_burst is None else d.activity_burst * share,
            bandwidth_burst=None if d.bandwidth_burst is None else d.bandwidth_burst * share,
            whole_gpus=True,
            nvlink=(1 < n < gpus) or (n == gpus and d.nvlink),
        )
        for c in catalog.candidates():
            if c.mig is not None or (upgrade and n == gpus and c.key == current.key):
                continue
            projected = fits(scaled, current, c, s)
            if projected is None:
                continue
            stay = n == gpus and c.key == current.key
            total = n * c.hourly_price_dollars
            out.append((round(total, 9), 0 if stay else 1, GroupOption(total, n, c, projected)))
    out.sort(key=lambda o: (o[0], o[1]))  # stable: fewer GPUs, then the catalog's order, first
    return [o for _, _, o in out]


def workload_fit(
    catalog: Catalog, d: Demand, current: Candidate, s: RightsizingSettings, gpus: int, upgrade: bool = False
) -> WorkloadFit | None:
    """The cheapest way to carry an N-GPU workload, or None for single-GPU work or when nothing fits."""
    if gpus <= 1:
        return None
    options = workload_options(catalog, d, current, s, gpus, upgrade)
    if not options:
        return None
    best = options[0]
    fit = Fit(best.candidate, best.projected[0], best.projected[1])
    change = f"{gpus} x {current.key} -> {best.count} x {best.candidate.key}"
    return WorkloadFit(fit, best.count, gpus, change)
