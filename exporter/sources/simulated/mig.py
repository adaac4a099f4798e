"""MIG instances of a simulated GPU: each instance runs its own workload; the GPU adds them up.

As NVML reports it on a MIG-enabled GPU: the parent GPU keeps its power, clocks, temperature,
energy and total memory use but answers NOT_SUPPORTED for utilization; each instance reports its
own memory and, on GPUs with GPM, its own profiling ratios (relative to the instance), and no
utilization either.
"""

from __future__ import annotations

from rightsizer_core.snapshot import GpuIdentity, PodRef

from .physics import GPM_FIELDS
from .schema import SimGpu, SimMig
from .workloads import Activity, Noise, evaluate

MIB = 1024 * 1024
# Parent fields NVML does not answer in MIG mode.
PARENT_UNSUPPORTED = frozenset({"gpu_utilization_ratio", "memory_copy_utilization_ratio"})
INSTANCE_FIELDS = frozenset(
    {
        "memory_total_bytes",
        "memory_used_bytes",
        "memory_free_bytes",
        "memory_reserved_bytes",
        "compute_processes",
        "compute_processes_memory_bytes",
        *GPM_FIELDS,
    }
)


def usable(mig: SimMig) -> int:
    """The instance's memory as NVML reports it (nvidia-smi mig -lgip), else the profile's size."""
    return mig.profile.usable_memory_bytes or mig.profile.memory_bytes


class Instance:
    """One simulated MIG instance: identity, noise, and its workload's start."""

    __slots__ = ("identity", "mig", "missing", "noise", "pod", "unsupported")

    def __init__(self, gpu: SimGpu, mig: SimMig, parent: GpuIdentity, seed: int, gpm: bool) -> None:
        self.mig = mig
        self.noise = Noise(seed, 100_000 + gpu.index * 8 + mig.instance_id)
        self.identity = GpuIdentity(
            index=parent.index,
            uuid=mig.uuid,
            pci_bus_id=parent.pci_bus_id,
            model=parent.model,
            minor_number=parent.minor_number,
            driver_version=parent.driver_version,
            memory_total_bytes=usable(mig),
            mig_profile=mig.profile.name,
            mig_instance_id=mig.instance_id,
            parent_uuid=parent.uuid,
        )
        self.pod = PodRef(mig.pod.pod, mig.pod.namespace, mig.pod.container) if mig.pod else None
        self.missing: frozenset[str] = frozenset() if gpm else frozenset(GPM_FIELDS)
        self.unsupported: frozenset[str] | None = None  # set from the parent's fields on first use

    def activity(self, t: float, began: float) -> Activity:
        return evaluate(self.mig.workload, self.noise, t, t - began)

    def fields(self, a: Activity) -> dict[str, float]:
        total = usable(self.mig)
        used = float(min(round(a.memory_bytes / MIB) * MIB, total))
        out = {
            "memory_total_bytes": float(total),
            "memory_used_bytes": used,
            "memory_free_bytes": float(total - used),
            "memory_reserved_bytes": 0.0,
            "compute_processes": 1.0 if a.running else 0.0,
            "compute_processes_memory_bytes": used if a.running else 0.0,
        }
        if not self.missing:
            out.update(
                gr_engine_active_ratio=round(a.gr_engine, 4),
                sm_active_ratio=round(a.sm, 4),
                sm_occupancy_ratio=round(a.occupancy, 4),
                tensor_active_ratio=round(a.tensor, 4),
                dram_active_ratio=round(a.dram, 4),
            )
        return out


def combined(instances: list[Instance], activities: list[Activity], memory_total: int) -> Activity:
    """The whole GPU's activity: instance ratios weighted by their compute (memory for DRAM)
    share of the GPU (``memory_total``: its nominal size, which the profiles' sizes divide);
    memory, traffic and host CPU added up."""
    whole = Activity()
    for inst, a in zip(instances, activities, strict=True):
        share = inst.mig.profile.sm_fraction
        memory_share = inst.mig.profile.memory_bytes / memory_total
        whole.running = whole.running or a.running
        whole.utilization += share * a.utilization
        whole.gr_engine += share * a.gr_engine
        whole.sm += share * a.sm
        whole.occupancy += share * a.occupancy
        whole.tensor += share * a.tensor
        whole.dram += memory_share * a.dram
        whole.memory_bytes += a.memory_bytes
        whole.pcie_rx += a.pcie_rx * share
        whole.pcie_tx += a.pcie_tx * share
        whole.nvlink += a.nvlink * share
        whole.host_cpu += a.host_cpu
    whole.dram = min(whole.dram, 1.0)
    return whole
