"""``catalog.yaml``'s schema (also that of GPUs added in the exporter configuration): each entry
checked, naming the file, the entry and the key of anything wrong, and turned into a ``GpuSpec``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rightsizer_core.settings import ConfigError, build, read_yaml, setting

from .gpu_spec import MIG_MEMORY_SLICES, GpuSpec, MigProfile


@dataclass(frozen=True)
class MigEntry:
    name: str | None = setting(None, "Profile name as NVML reports it, e.g. 1g.10gb.")
    memory_bytes: int | str | None = setting(None, "Profile memory: bytes, or a size such as 10GiB.")
    usable_memory_bytes: int | str | None = setting(
        None, "Instance memory as NVML reports it (nvidia-smi mig -lgip), e.g. 9.75GiB."
    )
    sm_fraction: float | str | None = setting(None, "Compute slices out of 7: a number or 'N/7'.")
    memory_slices: int | None = setting(
        None,
        "Memory slices out of 8 (the MIG user guide's Fraction of Memory); default from memory_bytes.",
        minimum=1,
        maximum=MIG_MEMORY_SLICES,
    )
    max_instances: int | None = setting(None, "How many instances of this profile fit one GPU.", minimum=1)
    gfd_product: str | None = setting(
        None, "GFD's nvidia.com/gpu.product under the single MIG strategy; default <GPU's>-MIG-<name>."
    )
    gfd_product_source: str = setting("", "Where the profile's gfd_product comes from.")


@dataclass(frozen=True)
class GpuEntry:
    key: str | None = setting(None, "Catalog key, e.g. H100-SXM-80GB.")
    nvml_names: list[str] = setting([], "Names NVML reports for this GPU, e.g. 'NVIDIA H100 80GB HBM3'.")
    architecture: str = setting("", "GPU architecture, e.g. Hopper.")
    memory_bytes: int | str | None = setting(None, "Framebuffer size: bytes, or e.g. 80GiB.")
    usable_memory_bytes: int | str | None = setting(
        None, "Total as NVML reports it (memory.total, after ECC and driver reserve), e.g. 15360MiB."
    )
    usable_memory_source: str = setting("", "Where usable_memory_bytes comes from.")
    memory_bandwidth_bytes_per_second: float | str | None = setting(
        None, "Memory bandwidth: bytes/s, or e.g. 3.35TB/s."
    )
    fp16_dense_tflops: float | None = setting(None, "Dense FP16/BF16 tensor TFLOPS.", minimum=0)
    fp8_dense_tflops: float | None = setting(None, "Dense FP8 tensor TFLOPS; null without FP8.", minimum=0)
    int8_dense_tops: float | None = setting(None, "Dense INT8 tensor TOPS.", minimum=0)
    tdp_watts: float | None = setting(None, "Board power limit (TDP) in watts.", minimum=1)
    sm_count: int | None = setting(None, "Streaming multiprocessors.", minimum=1)
    sm_clock_max_mhz: float | None = setting(None, "Maximum SM clock, MHz.", minimum=1)
    memory_clock_max_mhz: float | None = setting(None, "Maximum memory clock, MHz.", minimum=1)
    pcie_generation: int | None = setting(None, "PCIe generation.", minimum=1, maximum=6)
    pcie_width: int | None = setting(None, "PCIe lanes.", minimum=1, maximum=32)
    interconnect: str = setting("PCIe", "GPU-to-GPU interconnect, e.g. 'NVLink 4, 900 GB/s'.")
    mig_profiles: list[MigEntry] = setting([], "MIG profiles (none when the GPU has no MIG).")
    hourly_price_dollars: float | None = setting(None, "Indicative hourly price in dollars.", minimum=0)
    price_source: str = setting("", "Where the price comes from and as of when.")
    price_estimated: bool = setting(False, "The price is derived, not a public list price.")
    mig_usable_memory_source: str = setting("", "Where the MIG profiles' usable_memory_bytes come from.")
    gpm_supported: bool = setting(False, "Whether NVML GPM profiling metrics work (Hopper and newer).")
    gfd_product: str | None = setting(
        None, "GFD's node label nvidia.com/gpu.product; default: the first NVML name, spaces as '-'."
    )
    gfd_product_source: str = setting("", "Where gfd_product comes from.")


REQUIRED = (
    "key",
    "memory_bytes",
    "memory_bandwidth_bytes_per_second",
    "fp16_dense_tflops",
    "tdp_watts",
    "sm_count",
    "sm_clock_max_mhz",
    "memory_clock_max_mhz",
    "pcie_generation",
    "pcie_width",
    "hourly_price_dollars",
)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTP]i?B)?\s*(/s)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtp", start=1):
    _UNITS[f"{_p}ib"], _UNITS[f"{_p}b"] = 1024**_i, 1000**_i


def parse_quantity(value: int | float | str, where: str, per_second: bool = False) -> float:
    """A byte count or rate: a number, or a number with a unit (GiB binary, GB decimal; '/s' for rates)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    else:
        m = _SIZE.match(str(value))
        if m is None or (m.group(3) and not per_second):
            unit = "bytes/s (e.g. 3.35TB/s)" if per_second else "bytes (e.g. 80GiB)"
            raise ConfigError(f"{where}: must be a number of {unit}; got {value!r}")
        number = float(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
    if number <= 0:
        raise ConfigError(f"{where}: must be positive; got {value!r}")
    return number


def _fraction(value: float | str, where: str) -> float:
    try:
        if isinstance(value, str) and "/" in value:
            num, den = value.split("/", 1)
            number = float(num) / float(den)
        else:
            number = float(value)
    except (ValueError, ZeroDivisionError):
        raise ConfigError(f"{where}: must be a fraction such as 3/7 or 0.43; got {value!r}") from None
    if not 0 < number <= 1:
        raise ConfigError(f"{where}: must be above 0 and at most 1; got {value!r}")
    return number


# A Kubernetes label value: at most 63 characters, alphanumerics at both ends, '-', '_' and '.' inside.
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")


def _label(value: str, where: str) -> str:
    if not value or not LABEL_VALUE.match(value):
        raise ConfigError(
            f"{where}: {value!r} is not a Kubernetes label value (at most 63 of A-Z a-z 0-9 - _ .)"
        )
    return value


def _mig(entry: MigEntry, parent_memory: int, where: str, parent_label: str) -> MigProfile:
    for name in ("name", "memory_bytes", "sm_fraction", "max_instances"):
        if getattr(entry, name) is None:
            raise ConfigError(f"{where}: {name} is required")
    assert entry.name and entry.memory_bytes is not None and entry.sm_fraction is not None
    memory = int(parse_quantity(entry.memory_bytes, f"{where}.memory_bytes"))
    if memory > parent_memory:
        raise ConfigError(f"{where}.memory_bytes: {memory} is more than the GPU's {parent_memory}")
    fraction = _fraction(entry.sm_fraction, f"{where}.sm_fraction")
    usable = _usable(entry.usable_memory_bytes, memory, "the profile's", where)
    label = _label(entry.gfd_product, f"{where}.gfd_product") if entry.gfd_product is not None else ""
    source = entry.gfd_product_source or ("the catalog entry" if label else "")
    if not label and parent_label and LABEL_VALUE.match(derived := f"{parent_label}-MIG-{entry.name}"):
        label, source = derived, "GFD's single MIG strategy: the GPU's gfd_product with -MIG-<profile>"
    slices = entry.memory_slices or round(memory / parent_memory * MIG_MEMORY_SLICES)
    slices = max(1, min(MIG_MEMORY_SLICES, slices))
    instances = int(entry.max_instances or 1)
    return MigProfile(entry.name, memory, fraction, instances, usable, label, source, slices)


def _usable(value: int | str | None, nominal: int, whose: str, where: str) -> int:
    """NVML's usable total, checked to be at most the nominal size; 0 when not given."""
    if value is None:
        return 0
    usable = int(parse_quantity(value, f"{where}.usable_memory_bytes"))
    if usable > nominal:
        raise ConfigError(
            f"{where}.usable_memory_bytes: {usable} is more than {whose} memory_bytes {nominal}"
        )
    return usable


def spec_from_mapping(raw: Any, where: str) -> GpuSpec:
    """Check one catalog entry (as read from YAML) and turn it into a GpuSpec."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: must be a mapping of GPU figures; got {raw!r}"[:200])
    if isinstance(raw.get("key"), str):
        where = f"{where} ({raw['key']})"
    e = build(GpuEntry, raw, where)
    for name in REQUIRED:
        if getattr(e, name) is None:
            raise ConfigError(f"{where}: {name} is required")
    assert e.key and e.memory_bytes is not None and e.memory_bandwidth_bytes_per_second is not None
    memory = int(parse_quantity(e.memory_bytes, f"{where}.memory_bytes"))
    bandwidth = parse_quantity(
        e.memory_bandwidth_bytes_per_second, f"{where}.memory_bandwidth_bytes_per_second", per_second=True
    )
    if e.gfd_product is not None:
        product = _label(e.gfd_product, f"{where}.gfd_product")
    else:  # GFD's rule; a name that makes no label value leaves it unknown (no node selection)
        product = e.nvml_names[0].strip().replace(" ", "-") if e.nvml_names else ""
        product = product if LABEL_VALUE.match(product) else ""
    migs = tuple(_mig(m, memory, f"{where}.mig_profiles[{i}]", product) for i, m in enumerate(e.mig_profiles))
    usable = _usable(e.usable_memory_bytes, memory, "the GPU's", where)
    if usable and not e.usable_memory_source:
        raise ConfigError(f"{where}: usable_memory_source is required with usable_memory_bytes")
    return GpuSpec(
        key=e.key,
        nvml_names=tuple(e.nvml_names),
        architecture=e.architecture,
        memory_bytes=memory,
        memory_bandwidth_bytes_per_second=bandwidth,
        fp16_dense_tflops=float(e.fp16_dense_tflops or 0.0),
        fp8_dense_tflops=e.fp8_dense_tflops,
        int8_dense_tops=e.int8_dense_tops,
        tdp_watts=float(e.tdp_watts or 0.0),
        sm_count=int(e.sm_count or 0),
        sm_clock_max_mhz=float(e.sm_clock_max_mhz or 0.0),
        memory_clock_max_mhz=float(e.memory_clock_max_mhz or 0.0),
        pcie_generation=int(e.pcie_generation or 0),
        pcie_width=int(e.pcie_width or 0),
        interconnect=e.interconnect,
        mig_profiles=migs,
        hourly_price_dollars=float(e.hourly_price_dollars or 0.0),
        price_source=e.price_source or "not stated",
        gpm_supported=e.gpm_supported,
        usable_memory_bytes=usable,
        usable_memory_source=e.usable_memory_source if usable else "nominal size",
        price_estimated=e.price_estimated,
        mig_usable_memory_source=e.mig_usable_memory_source,
        gfd_product=product,
        gfd_product_source=e.gfd_product_source
        or ("GFD's rule: the first NVML name with spaces as '-'" if product else ""),
    )


def specs_from_list(items: Any, where: str) -> list[GpuSpec]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: must be a list of GPUs")
    return [spec_from_mapping(raw, f"{where}[{i}]") for i, raw in enumerate(items)]


def read_catalog_file(path: str | Path) -> list[GpuSpec]:
    """GPUs of a catalog-format YAML file (a top-level ``gpus:`` list)."""
    data = read_yaml(path)
    unknown = sorted(set(data) - {"version", "gpus"})
    if unknown:
        raise ConfigError(f"{path}: unknown key {unknown[0]!r} (known keys: gpus, version)")
    return specs_from_list(data.get("gpus"), f"{path}: gpus")
