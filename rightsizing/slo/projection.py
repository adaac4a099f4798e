"""What a workload's latency at its objective becomes on another GPU.

The model (docs/rightsizing.md, "Latency SLOs"), each part scaled by the capacity ratio of the
resource that does it (``projection.capacity_ratio``, the one rule the throughput projections use):

- **inter-token latency** is a decode step: it scales with the resource that binds decode
  (``projection.binding``: memory bandwidth for memory-bound decode, compute when SM active is
  measured above the bandwidth signal): ITL' = ITL / r_decode.
- **prefill** (TTFT less the queue time) scales with compute: prefill' = prefill / r_compute.
- **queueing** grows as utilisation nears 1. For a single-server queue the mean wait is
  W = S x rho / (1 - rho) x (c_a^2 + c_s^2) / 2 (Kingman's G/G/1 approximation, J. F. C. Kingman,
  "The single server queue in heavy traffic", Proc. Cambridge Philos. Soc. 57, 1961; with
  exponential arrivals and service it is the exact M/M/1 wait). The same work on the option keeps
  its variability, so the factors cancel and W' / W = (S' / S) x [rho' / (1 - rho')] / [rho / (1 - rho)],
  with S' = S / r_decode and rho' = rho / r_decode, rho being the binding resource's p95 busy share
  today (the p95 rather than the mean: the projection errs toward a longer queue). rho' >= 1: the
  queue grows without bound (infinite latency).
- TTFT' = queue' + prefill'; end-to-end' = queue' + (e2e - queue) / r_decode; queue' as above.

The queue time at the objective is read as an exponential wait's quantile, -ln(1 - objective) x
the mean wait (the mean is exact: the histogram's sum over its count), at most the quantile the
buckets give: a server whose first queue bucket is 0.3 s (vLLM) would otherwise put the p95 of
waits of a few milliseconds at 0.285 s. That queue time is taken out of the latency at the
objective, the rest is service. Without a queue-time histogram the whole latency is projected by
the larger of the queueing factor and the service factor, so an unmeasured queue never makes an
option look faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import projection
from ..catalog import Candidate
from ..evidence import Evidence
from .attainment import SloEvidence


@dataclass(frozen=True, slots=True)
class LatencyProjection:
    option: str  # catalog key
    values: tuple[tuple[str, float, float], ...]  # (kind, projected seconds at the objective, target)
    decode: str  # the resource that binds decode: "memory bandwidth" or "compute"
    busy: float | None  # the binding resource's p95 busy share today
    busy_projected: float | None  # ... on the option

    def keeps(self, margin: float) -> bool:
        """Every target projects at or under (1 - margin) x target."""
        return bool(self.values) and all(v <= (1.0 - margin) * t for _, v, t in self.values)

    @property
    def worst(self) -> tuple[str, float, float] | None:
        """(kind, projected, target) of the highest projected/target."""
        return max(self.values, key=lambda x: x[1] / x[2], default=None)


def decode_binding(ev: Evidence) -> tuple[str, float | None]:
    """(resource binding decode, its p95 busy share) from the GPU's evidence."""
    sm = ev.activity_p95 if ev.activity_source == "sm_active" else None
    band = ev.bandwidth
    resource = projection.binding(sm, None if band is None else band[1])
    if resource == projection.BANDWIDTH:
        return resource, band[1] if band is not None else ev.activity_p95
    return resource, sm


def queue_time(slo: SloEvidence) -> float | None:
    """The queue time at the objective (see the module's docstring); None when not measured."""
    q = slo.get("queue")
    if q is None or q.requests <= 0:
        return None
    objective = slo.declared.objective if slo.declared is not None else 0.95
    at = q.at_objective
    if q.mean is None:
        return at
    tail = -math.log(1.0 - objective) * q.mean
    return tail if at is None else min(at, tail)


def queue_factor(busy: float | None, ratio: float) -> float:
    """W' / W for the same work on ``ratio`` x today's capacity (inf when it would saturate)."""
    if ratio <= 0:
        return float("inf")
    if busy is None or busy <= 1e-6:
        return 1.0 / ratio
    rho = min(busy, 0.999)
    after = rho / ratio
    if after >= 1.0:
        return float("inf")
    return (1.0 / ratio) * (after / (1.0 - after)) / (rho / (1.0 - rho))


@dataclass(frozen=True, slots=True)
class Binding:
    """What binds the work today: its resource, that resource's p95 busy share, and whether a
    bandwidth signal was measured (``projection.capacity_ratio``)."""

    resource: str
    busy: float | None
    bandwidth_seen: bool


def binding_of(ev: Evidence) -> Binding:
    resource, busy = decode_binding(ev)
    return Binding(resource, busy, ev.bandwidth is not None)


def project(
    ev: Evidence | Binding, slo: SloEvidence, current: Candidate, option: Candidate, gpus_ratio: float = 1.0
) -> LatencyProjection:
    """Each declared target's latency at the objective on ``option`` (``gpus_ratio``: the option's
    GPU count over today's), from the GPU's evidence or what binds its work."""
    b = ev if isinstance(ev, Binding) else binding_of(ev)
    resource, busy, seen = b.resource, b.busy, b.bandwidth_seen
    r_decode = projection.capacity_ratio(current, option, resource, seen) * gpus_ratio
    r_compute = projection.capacity_ratio(current, option, projection.COMPUTE, seen) * gpus_ratio
    fq = queue_factor(busy, r_decode)
    waited = queue_time(slo)
    values = []
    for kind, target in slo.targets.items():
        x = slo.get(kind)
        if x is None or x.at_objective is None or not x.judged:
            continue
        now = x.at_objective
        if kind == "itl":
            new = now / r_decode if r_decode > 0 else float("inf")
        elif kind == "queue":
            new = (now if waited is None else min(now, waited)) * fq
        else:
            r = r_compute if kind == "ttft" else r_decode
            service = 1.0 / r if r > 0 else float("inf")
            if waited is None:
                new = now * max(fq, service)
            else:
                new = min(waited, now) * fq + max(0.0, now - waited) * service
        values.append((kind, new, target))
    after = None if busy is None or r_decode <= 0 else busy / r_decode
    return LatencyProjection(option.key, tuple(values), resource, busy, after)
