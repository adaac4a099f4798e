"""A GPU's published figures (``GpuSpec``), its MIG profiles and the priced options a
recommendation chooses from (``Candidate``): the catalog's data model, read from ``catalog.yaml``
by ``catalog_file`` and gathered by ``catalog``."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Usable bytes per second per lane of one PCIe link direction, after line encoding.
PCIE_LANE_BYTES_PER_SECOND = {1: 250e6, 2: 500e6, 3: 984.6e6, 4: 1969.2e6, 5: 3938.5e6, 6: 7877e6}


# A100, H100, H200 and B200 split their memory into 8 slices and their compute into 7.
MIG_MEMORY_SLICES = 8
MIG_COMPUTE_SLICES = 7

_NVLINK = re.compile(r"^NVLink[^,]*,\s*([0-9.]+)\s*(GB|TB)/s", re.IGNORECASE)


def nvlink_bytes_per_second(interconnect: str) -> float | None:
    """A GPU's total NVLink bandwidth from its catalog ``interconnect`` ("NVLink 4, 900 GB/s"), or None
    when its GPUs talk over PCIe (an optional bridge does not count)."""
    m = _NVLINK.search(interconnect.strip())
    return float(m.group(1)) * (1e12 if m.group(2).upper() == "TB" else 1e9) if m else None


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str  # e.g. "1g.10gb"
    memory_bytes: int
    sm_fraction: float  # compute slices / 7
    max_instances: int
    usable_memory_bytes: int = 0  # memory.total as NVML reports it for the instance; 0 = nominal
    gfd_product: str = ""  # GFD's nvidia.com/gpu.product under the "single" MIG strategy
    gfd_product_source: str = ""
    memory_slices: int = 0  # memory slices out of 8 (NVIDIA's "Fraction of Memory"); 0 = from memory_bytes

    @property
    def memory_fraction(self) -> float:
        return self.memory_slices / MIG_MEMORY_SLICES

    @property
    def price_fraction(self) -> float:
        """The share of the GPU this profile makes unusable, which is what it is priced at."""
        return max(self.memory_fraction, self.sm_fraction)


@dataclass(frozen=True, slots=True)
class GpuSpec:
    key: str
    nvml_names: tuple[str, ...]
    architecture: str
    memory_bytes: int
    memory_bandwidth_bytes_per_second: float
    fp16_dense_tflops: float
    fp8_dense_tflops: float | None
    int8_dense_tops: float | None
    tdp_watts: float
    sm_count: int
    sm_clock_max_mhz: float
    memory_clock_max_mhz: float
    pcie_generation: int
    pcie_width: int
    interconnect: str
    mig_profiles: tuple[MigProfile, ...]
    hourly_price_dollars: float
    price_source: str
    gpm_supported: bool
    # memory.total as NVML reports it (ECC and driver reserve taken off); where it comes from.
    usable_memory_bytes: int = 0
    usable_memory_source: str = "nominal size"
    price_estimated: bool = False  # no public list price: the price is derived (see price_source)
    mig_usable_memory_source: str = ""  # where the MIG profiles' usable_memory_bytes come from
    gfd_product: str = ""  # GFD's node label nvidia.com/gpu.product for this GPU ("" = not known)
    gfd_product_source: str = ""

    @property
    def usable_memory(self) -> int:
        """Bytes a workload can allocate on this GPU: NVML's memory.total, else the nominal size."""
        return self.usable_memory_bytes or self.memory_bytes

    @property
    def pcie_bytes_per_second(self) -> float:
        """Usable one-direction bandwidth of the GPU's PCIe link at its maximum generation and width."""
        return PCIE_LANE_BYTES_PER_SECOND[self.pcie_generation] * self.pcie_width

    def mig_profile(self, name: str) -> MigProfile | None:
        wanted = name.strip().lower()
        return next((p for p in self.mig_profiles if p.name.lower() == wanted), None)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A priced option: a whole GPU (``mig is None``) or one MIG profile of it."""

    key: str  # "L4-24GB", or "H100-SXM-80GB/1g.10gb" for a MIG profile
    gpu: GpuSpec
    mig: MigProfile | None
    memory_bytes: int
    compute_fraction: float
    memory_bandwidth_bytes_per_second: float
    fp16_dense_tflops: float
    hourly_price_dollars: float
    usable_memory_bytes: int = 0  # NVML's memory.total for this GPU or instance; 0 = memory_bytes

    @property
    def usable_memory(self) -> int:
        return self.usable_memory_bytes or self.memory_bytes

    @property
    def price_estimated(self) -> bool:
        return self.gpu.price_estimated

    @property
    def price_source(self) -> str:
        """Where this option's price comes from; a MIG profile's names the share of its parent."""
        p = self.mig
        if p is None:
            return self.gpu.price_source
        compute = round(p.sm_fraction * MIG_COMPUTE_SLICES)
        return (
            f"{self.gpu.key} price x {p.price_fraction:.4g}, the larger of its memory slices "
            f"({p.memory_slices}/{MIG_MEMORY_SLICES}) and compute slices ({compute}/{MIG_COMPUTE_SLICES}): "
            f"the share of the GPU the profile makes unusable; {self.gpu.price_source}"
        )
