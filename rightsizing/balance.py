"""System balance: how the GPU sits in its host. Findings, each with its evidence, next to the
bottlenecks (they do not change the verdict: the GPU model is not what is wrong).

- ``pcie_link_degraded``: the PCIe link trained below what the GPU and slot support (NVML's current
  generation or width under its maximum: a GPU at Gen3 or x8 in a Gen4/Gen5 x16 slot, a riser, a
  bad seat). GPUs lower the link generation when idle to save power, so the link is judged by the
  best current generation and width seen over the window: a GPU that worked at full speed once in
  the window is not flagged.
- ``numa_mismatch``: none of the CPUs the GPU's container may run on (its cgroup's effective
  cpuset) belongs to the GPU's NUMA node, so every host-to-device copy and every kernel launch
  crosses the inter-socket link (UPI, Infinity Fabric): less bandwidth and more latency than the
  local socket. Judged only when all three are known: the GPU's node (NVML, else sysfs; -1 is no
  NUMA information), that node's CPU list, and the cpuset of the one container holding the GPU (a
  GPU shared by several containers, or with no process of its container yet, is not judged).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .evidence import Evidence
from .numa import NumaPlacement, format_cpulist

FINDINGS = ("pcie_link_degraded", "numa_mismatch")


@dataclass(frozen=True, slots=True)
class Finding:
    name: str
    evidence: str


def findings(ev: Evidence) -> tuple[Finding, ...]:
    return tuple(f for f in (_pcie(ev), _numa(ev)) if f is not None)


def _pcie(ev: Evidence) -> Finding | None:
    gen, gen_max = ev.pcie_link_generation, ev.pcie_link_generation_max
    width, width_max = ev.pcie_link_width, ev.pcie_link_width_max
    if not (gen and gen_max and width and width_max and (gen < gen_max or width < width_max)):
        return None
    return Finding(
        "pcie_link_degraded",
        f"PCIe link at Gen{gen:.0f} x{width:.0f} at best over the window, below the "
        f"Gen{gen_max:.0f} x{width_max:.0f} it supports: host transfers get "
        f"{gen_width_share(gen, width, gen_max, width_max):.0%} of the bandwidth",
    )


def _numa(ev: Evidence) -> Finding | None:
    numa = ev.numa
    if numa is FLAGGED_BY_EXPORTER:
        return Finding(
            "numa_mismatch",
            "the exporter found its container on no CPU of the GPU's NUMA node during the window "
            "(node and CPU lists in the exporter's /api/v1/gpus): host transfers cross the "
            "inter-socket link",
        )
    if numa is None or not numa.mismatch:
        return None
    return Finding(
        "numa_mismatch",
        f"GPU on NUMA node {numa.gpu_node} (CPUs {format_cpulist(numa.node_cpus)}), its "
        f"container {numa.container} may run only on CPUs {format_cpulist(numa.container_cpus)}: "
        "every host transfer crosses the inter-socket link",
    )


# The report's view: the exporter flagged the GPU at some time in the window (its CPU lists are not
# in Prometheus, only the finding series; the exporter's /api/v1/gpus has them).
FLAGGED_BY_EXPORTER = NumaPlacement(-2, None, None, "flagged by the exporter")


def judged(ev: Evidence) -> dict[str, bool]:
    """Finding -> found, for each check whose evidence is complete (the others are unknown)."""
    out = {}
    if ev.pcie_link_generation is not None and ev.pcie_link_generation_max is not None:
        out["pcie_link_degraded"] = _pcie(ev) is not None
    if ev.numa is not None and ev.numa.mismatch is not None:
        out["numa_mismatch"] = ev.numa.mismatch
    return out


def gen_width_share(gen: float, width: float, gen_max: float, width_max: float) -> float:
    """Bandwidth of the trained link as a share of the full one (per-lane rate doubles per generation
    from Gen3 on; Gen1 to Gen2 doubles too)."""
    return 2.0 ** (gen - gen_max) * width / width_max


class LinkSeen:
    """The best current PCIe generation and width seen per bucket of the window, and the latest
    maximum values."""

    __slots__ = ("_best", "_cached", "bucket_count", "maximum", "width")

    def __init__(self, width: float, bucket_count: int) -> None:
        self.width = width
        self.bucket_count = bucket_count
        self._best: dict[int, tuple[float, float]] = {}
        self._cached: tuple[float, float] | None = None  # best() until a bucket changes
        self.maximum: tuple[float, float] | None = None

    def add(self, t: float, gen: float | None, width: float | None, gen_max: float | None,
            width_max: float | None) -> None:  # fmt: skip
        if gen_max and width_max:
            self.maximum = (gen_max, width_max)
        if not gen or not width:
            return
        bucket = math.floor(t / self.width)
        best = self._best.get(bucket)
        if best is None:
            self._best[bucket] = (gen, width)
            oldest = bucket - self.bucket_count + 1
            for b in [b for b in self._best if b < oldest]:
                del self._best[b]
            self._cached = None
        elif gen > best[0] or width > best[1]:
            self._best[bucket] = (max(gen, best[0]), max(width, best[1]))
            self._cached = None

    def best(self) -> tuple[float, float] | None:
        if self._cached is None and self._best:
            values = self._best.values()
            self._cached = (max(g for g, _ in values), max(w for _, w in values))
        return self._cached
