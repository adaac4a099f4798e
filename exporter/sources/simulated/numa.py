"""NUMA placement in the simulated fleet: the host's nodes (``numa_nodes``: each one's CPU list), each
GPU's node (``numa_node``) and each pod's container cpuset (``pod.cpuset``), as pod attribution and
the host's sysfs would report them on a real node (``sources/pods/numa.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from rightsizer_core.settings import ConfigError
from rightsizing.numa import NumaPlacement, parse_cpulist

from .schema import PodEntry, SimGpu


def _cpus(text: str, where: str) -> frozenset[int]:
    cpus = parse_cpulist(text)
    if not cpus:
        raise ConfigError(f"{where}: {text!r} is not a CPU list such as '0-15,32-47'")
    return cpus


def check_numa(nodes: Sequence[str], gpus: Sequence[SimGpu]) -> None:
    for i, text in enumerate(nodes):
        _cpus(text, f"numa_nodes[{i}]")
    for g in gpus:
        if g.numa_node is not None and g.numa_node >= len(nodes):
            raise ConfigError(
                f"gpus ({g.name}).numa_node: {g.numa_node} is not one of the {len(nodes)} numa_nodes"
            )
        pods = [g.pod] + [m.pod for m in g.mig]
        for pod in pods:
            if pod is not None and pod.cpuset is not None:
                _cpus(pod.cpuset, f"gpus ({g.name}).pod.cpuset")


def _label(pod: PodEntry) -> str:
    return f"{pod.namespace}/{pod.pod}/{pod.container}"


def placements(nodes: Sequence[str], gpus: Sequence[SimGpu]) -> dict[str, NumaPlacement]:
    """Device UUID -> placement, for the GPUs (and MIG instances) with a NUMA node and a pod."""
    node_cpus = [parse_cpulist(t) for t in nodes]
    out: dict[str, NumaPlacement] = {}
    for g in gpus:
        if g.numa_node is None:
            continue
        cpus = node_cpus[g.numa_node] if g.numa_node >= 0 else None
        devices = [(g.uuid, g.pod)] + [(m.uuid, m.pod) for m in g.mig]
        for uuid, pod in devices:
            if pod is not None:
                mine = parse_cpulist(pod.cpuset) if pod.cpuset else None
                out[uuid] = NumaPlacement(g.numa_node, cpus, mine, _label(pod))
    return out
