"""The simulated fleet as the node's dcgm-exporter would publish it: its profiling (DCP) fields,
for every GPU (GPM or not) and MIG instance, in dcgm-exporter's line format (labels in its order,
values with ``%f``, a MIG instance under its parent's UUID with GPU_I_PROFILE and GPU_I_ID). Lets a
simulated A100, L4 or L40S fleet be judged on SM and DRAM activity through the same reader as a
real node (``exporter.sources.dcgm``).
"""

from __future__ import annotations

from collections.abc import Sequence

from .source import SimulatedSource
from .workloads import Activity

# What dcgm-exporter's default counters file publishes (etc/dcp-metrics-included.csv, d5e5f51) ...
DEFAULT_COUNTERS = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
)
# ... and with its two commented-out SM lines turned on.
WITH_SM = (*DEFAULT_COUNTERS, "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY")
HELP = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "Ratio of time the graphics engine is active.",
    "DCGM_FI_PROF_SM_ACTIVE": "The ratio of cycles an SM has at least 1 warp assigned.",
    "DCGM_FI_PROF_SM_OCCUPANCY": "The ratio of number of warps resident on an SM.",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "Ratio of cycles the tensor (HMMA) pipe is active.",
    "DCGM_FI_PROF_DRAM_ACTIVE": (
        "Ratio of cycles the device memory interface is active sending or receiving data."
    ),
}


def _value(name: str, a: Activity) -> float:
    return {
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": a.gr_engine,
        "DCGM_FI_PROF_SM_ACTIVE": a.sm,
        "DCGM_FI_PROF_SM_OCCUPANCY": a.occupancy,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": a.tensor,
        "DCGM_FI_PROF_DRAM_ACTIVE": a.dram,
    }[name]


def dcgm_page(
    source: SimulatedSource, t: float | None = None, counters: Sequence[str] = WITH_SM, hostname: str = "node"
) -> str:
    """The page at simulated time ``t`` (default: now)."""
    at = source.now() if t is None else t
    activities = source.activities_at(at)
    lines: list[str] = []
    for name in counters:
        lines += [f"# HELP {name} {HELP[name]}", f"# TYPE {name} gauge"]
        for ident, a in activities:
            uuid = ident.parent_uuid or ident.uuid
            model = ident.model.split(" MIG ")[0]
            labels = (
                f'gpu="{ident.index}",UUID="{uuid}",pci_bus_id="{ident.pci_bus_id}",'
                f'device="nvidia{ident.minor_number}",modelName="{model}"'
            )
            if ident.mig_profile is not None:
                labels += f',GPU_I_PROFILE="{ident.mig_profile}",GPU_I_ID="{ident.mig_instance_id}"'
            lines.append(f'{name}{{{labels},Hostname="{hostname}"}} {_value(name, a):f}')
    return "\n".join(lines) + "\n"
