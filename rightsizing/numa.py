"""NUMA placement of a GPU and of the container holding it, and the kernel's CPU-list spelling.

Pure values: the exporter's pod attribution (``exporter/sources/pods/numa.py``) reads them from
sysfs and the container's cgroup, the simulated fleet from its scenario; ``balance`` judges them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

_MAX_CPU = 1 << 16  # no host has more CPUs: a larger number is a corrupt file
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True, slots=True)
class NumaPlacement:
    """One GPU's NUMA node, that node's CPUs and its container's CPUs (None: unknown)."""

    gpu_node: int
    node_cpus: frozenset[int] | None
    container_cpus: frozenset[int] | None
    container: str = ""  # "namespace/pod/container", for the evidence

    @property
    def mismatch(self) -> bool | None:
        """True when none of the container's CPUs is local to the GPU's node; None when unknown."""
        if self.gpu_node < 0 or not self.node_cpus or not self.container_cpus:
            return None
        return self.node_cpus.isdisjoint(self.container_cpus)


def parse_cpulist(text: str) -> frozenset[int] | None:
    """The CPUs of a kernel CPU list (``0-3,8,10-11``); None when it is not one. An empty list is
    an empty set (a node without CPUs, e.g. a memory-only node)."""
    text = text.strip()
    if not text:
        return frozenset()
    cpus: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part.strip())
        if m is None:
            return None
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        if last < first or last >= _MAX_CPU:
            return None
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


@functools.lru_cache(maxsize=1024)  # a host has few distinct lists; the evidence names them often
def format_cpulist(cpus: frozenset[int] | None) -> str:
    """The kernel's CPU list spelling of ``cpus`` (ranges joined by commas); "unknown" for None."""
    if cpus is None:
        return "unknown"
    out, run = [], None
    for c in sorted(cpus):
        if run is not None and c == run[1] + 1:
            run = (run[0], c)
            continue
        if run is not None:
            out.append(f"{run[0]}" if run[0] == run[1] else f"{run[0]}-{run[1]}")
        run = (c, c)
    if run is not None:
        out.append(f"{run[0]}" if run[0] == run[1] else f"{run[0]}-{run[1]}")
    return ",".join(out)
