"""NUMA placement of each GPU held by exactly one container, refreshed with pod attribution.

The GPU's node and each node's CPU list never change while the host runs: read once and kept. A
container's cpuset is read once per container (its cgroup path); a part that could not be read
is tried again at the next refresh. So a refresh while attribution holds reads no file at all.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rightsizer_core.logs import event
from rightsizer_core.snapshot import GpuIdentity, GpuSample
from rightsizing.numa import NumaPlacement

from .attribution import Holders, ProcessVerdict
from .cgroup import CgroupRef
from .numa import cgroup_cpus, node_cpus, sysfs_gpu_node

log = logging.getLogger("rightsizer.pods")


@dataclass(frozen=True, slots=True)
class Target:
    uuid: str
    bus_id: str
    nvml_node: int | None  # NVML's answer; None: NVML did not say (sysfs is read instead)
    cpuset_path: str | None
    unified: bool
    container: str  # namespace/pod/container


class PlacementReader:
    def __init__(self, sysfs_root: str, cgroup_root: str) -> None:
        self.sysfs_root = sysfs_root
        self.cgroup_root = cgroup_root
        self.placements: dict[str, NumaPlacement] = {}
        self.nodes_complete = False
        self._nvml_nodes: dict[str, int] = {}
        self._sysfs_nodes: dict[str, int] = {}
        self._node_cpus: dict[int, frozenset[int]] = {}
        self._cpus: dict[tuple[str, bool], frozenset[int]] = {}
        self._problem: str | None = None

    def note_nodes(self, gpus: Sequence[GpuSample]) -> None:
        """NVML's NUMA node of each GPU (the static ``numa_node`` field). No I/O."""
        nodes = {}
        for g in gpus:
            v = g.fields.get("numa_node")
            if v is not None:
                nodes[g.identity.uuid] = int(v)
        self._nvml_nodes = nodes
        self.nodes_complete = len(nodes) == len(gpus)

    def targets(
        self,
        identities: Mapping[str, GpuIdentity],
        holders: Holders,
        verdicts: Sequence[ProcessVerdict],
        cgroups: Mapping[int, CgroupRef | None],
    ) -> list[Target]:
        pid_of = {(v.device_uuid, v.pod): v.pid for v in verdicts if v.pod is not None}
        out = []
        for uuid, ident in identities.items():
            ref = holders.single(ident)
            if ref is None:
                continue  # free, or shared by several containers: no one container's CPUs to judge
            node = self._nvml_nodes.get(uuid)
            if node is None and ident.parent_uuid is not None:
                node = self._nvml_nodes.get(ident.parent_uuid)  # a MIG instance sits where its GPU does
            pid = pid_of.get((uuid, ref))
            cg = cgroups.get(pid) if pid is not None else None
            path, unified = (cg.cpuset_path, cg.unified) if cg else (None, False)
            name = f"{ref.namespace}/{ref.pod}/{ref.container}"
            out.append(Target(uuid, ident.pci_bus_id, node, path, unified, name))
        return out

    def read(self, targets: Sequence[Target]) -> None:
        """Blocking: run it in a thread."""
        placements: dict[str, NumaPlacement] = {}
        problems: list[str] = []
        paths = set()
        for t in targets:
            node = t.nvml_node if t.nvml_node is not None else self._gpu_node(t.bus_id)
            if node is None or node < 0:
                continue  # no NUMA information (-1, or no numa_node file: a kernel without NUMA)
            cpus = self._node_cpus.get(node)
            if cpus is None:
                cpus = node_cpus(self.sysfs_root, node)
                if cpus:
                    self._node_cpus[node] = cpus
                else:
                    problems.append(f"no CPU list for NUMA node {node} under {self.sysfs_root}")
            mine = None
            if t.cpuset_path is not None:
                key = (t.cpuset_path, t.unified)
                paths.add(key)
                mine = self._cpus.get(key)
                if mine is None:
                    mine = cgroup_cpus(self.cgroup_root, t.cpuset_path, t.unified)
                    if mine is not None:
                        self._cpus[key] = mine
                    else:
                        problems.append(f"no cpuset for {t.container} under {self.cgroup_root}")
            placements[t.uuid] = NumaPlacement(node, cpus, mine, t.container)
        for key in [k for k in self._cpus if k not in paths]:
            del self._cpus[key]  # containers gone: never grow without bound
        self.placements = placements
        self.note_problem(problems[0] if problems else None)

    def _gpu_node(self, bus_id: str) -> int | None:
        node = self._sysfs_nodes.get(bus_id)
        if node is None:
            node = sysfs_gpu_node(self.sysfs_root, bus_id)
            if node is not None:
                self._sysfs_nodes[bus_id] = node
        return node

    def note_problem(self, problem: str | None) -> None:
        if problem == self._problem:
            return
        self._problem = problem
        if problem is not None:
            event(log, logging.INFO, "NUMA check incomplete", reason=problem)
        else:
            event(log, logging.INFO, "NUMA check complete")
