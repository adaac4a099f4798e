"""Which GPUs are one multi-GPU workload, and that workload's evidence.

GPUs of one node attributed to pods of one workload (namespace + workload name,
``workloads.workload_of``; NVLink never crosses nodes, and a pod lives on one node) are
one multi-GPU job when a pod of it holds several GPUs (tensor parallel, FSDP in one pod), or when
there are several and any shows NVLink traffic at or above ``nvlink_share_ratio`` of its link
(ranks in separate pods talking over NVLink). Several single-GPU pods of one workload without
NVLink traffic are replicas (a Deployment's pods): each is sized alone. MIG instances are never
grouped. The live extension and ``rightsizer report`` both call ``multi_gpu_groups`` and ``merge``.

A group's evidence is its busiest rank's, signal by signal (the maximum of each), with the fewest
samples and the shortest history of its members, and ``workload_gpus`` = its GPU count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from rightsizer_core.workloads import workload_of

from .evidence import Evidence
from .settings import RightsizingSettings

Member = tuple[str, str, str | None, str | None, bool]  # (key, node, namespace, pod, is a MIG instance)

_MAX_FIELDS = (
    "memory_peak_bytes", "memory_p95_bytes", "activity_p50", "activity_p95", "activity_p99",
    "activity_recent_max", "utilization_p50", "sm_active_p50", "sm_active_high", "sm_occupancy_p50",
    "tensor_active_p95", "dram_active_p95", "dram_active_high", "pcie_link_high", "host_cpu_high",
    "starved_share", "memory_copy_p95", "memory_copy_high", "nvlink_high", "utilization_recent_max",
    "dram_active_p99", "memory_copy_p99",
)  # fmt: skip


def multi_gpu_groups(
    members: Sequence[Member], evidence: Mapping[str, Evidence], s: RightsizingSettings
) -> dict[str, list[str]]:
    """Group name ("node/namespace/workload") -> keys of its GPUs, for multi-GPU workloads only."""
    by_workload: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for key, node, namespace, pod, mig in members:
        if pod and not mig and key in evidence:
            by_workload.setdefault((node, namespace or "", workload_of(pod)), []).append((key, pod))
    out: dict[str, list[str]] = {}
    for (node, namespace, workload), gpus in by_workload.items():
        if len(gpus) < 2:
            continue
        pods = [pod for _, pod in gpus]
        shared_pod = len(set(pods)) < len(pods)
        nvlink = any((evidence[k].nvlink_high or 0.0) >= s.nvlink_share_ratio for k, _ in gpus)
        if shared_pod or nvlink:
            out[f"{node}/{namespace}/{workload}"] = sorted(k for k, _ in gpus)
    return out


def merge(evs: Sequence[Evidence]) -> Evidence:
    """One workload's evidence from its GPUs'."""
    first = evs[0]
    changes: dict[str, object] = {"workload_gpus": len(evs)}
    for name in _MAX_FIELDS:
        values = [v for e in evs if (v := getattr(e, name)) is not None]
        changes[name] = max(values) if values else None
    changes["samples"] = min(e.samples for e in evs)
    changes["history_seconds"] = min(e.history_seconds for e in evs)
    queues = {q.name: q for e in evs for q in e.queues}
    changes["queues"] = tuple(queues[n] for n in sorted(queues))
    return dataclasses.replace(first, **changes)  # type: ignore[arg-type]
