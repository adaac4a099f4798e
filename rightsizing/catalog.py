"""The GPU catalog: published figures and indicative prices of the GPUs Rightsizer can recommend.

The data lives in ``catalog.yaml`` next to this module (format documented at its top). Users
pick a price set (``catalog.price_set``, see ``price_sets``), override prices and add GPUs in the
exporter configuration (``catalog`` section, see ``CatalogSettings``); ``load_catalog`` merges
them and checks every entry, naming the file, the entry and the key of anything wrong.

Candidates are the priced options a recommendation chooses from: every whole GPU and every MIG
profile. A MIG profile's price is its parent's hourly price x the share of the GPU it makes
unusable: the larger of its memory slices / 8 and its compute slices / 7 (a 1g.20gb holds 2 of
the 8 memory slices, so 4 fit, and it costs a quarter of the GPU, not a seventh). Its memory
bandwidth and dense throughput scale by its share of the parent's memory and compute respectively.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from rightsizer_core.settings import ConfigError, build, read_yaml, setting

from .price_sets import DEFAULT_DESCRIPTION, DEFAULT_SET, PriceSet, PriceSetName, load_price_set

DATA_FILE = Path(__file__).with_name("catalog.yaml")

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


# --- the data file's schema (also used for GPUs added in the exporter configuration) --------------
@dataclass(frozen=True)
class MigEntry:
    name: str | None = setting(None, "Profile name as NVML reports it, e.g. 1g.10gb.")
    memory_bytes: int | str | None = setting(None, "Profile memory: bytes, or a size such as 10GiB.")
    usable_memory_bytes: int | str | None = setting(
        None, "Instance memory as NVML reports it (nvidia-smi mig -lgip), e.g. 9.75GiB."
    )
    sm_fraction: float | str | None = setting(None, "Compute slices out of 7: a number or 'N/7'.")
    memory_slices: int | None = setting(
        None, "Memory slices out of 8 (the MIG user guide's Fraction of Memory); default from memory_bytes.",
        minimum=1, maximum=MIG_MEMORY_SLICES,
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


def _normal(name: str) -> str:
    return " ".join(name.lower().split())


def _short(name: str) -> str:
    return re.sub(r"^(nvidia|tesla) ", "", _normal(name))


class Catalog:
    """GPUs by key and NVML name, and the priced candidates a recommendation chooses from."""

    def __init__(self, gpus: Iterable[GpuSpec], price_set: str = DEFAULT_SET,
                 price_set_description: str = DEFAULT_DESCRIPTION) -> None:
        self.price_set, self.price_set_description = price_set, price_set_description
        by_key: dict[str, GpuSpec] = {}
        for gpu in gpus:
            by_key[_normal(gpu.key)] = gpu  # later entries (user's) replace earlier ones by key
        self._gpus = tuple(by_key.values())
        self._index: dict[str, GpuSpec] = {}
        for gpu in self._gpus:
            for name in (*gpu.nvml_names, gpu.key):
                self._index.setdefault(_short(name), gpu)
                self._index[_normal(name)] = gpu
        cands: list[Candidate] = []
        for gpu in self._gpus:
            cands.append(
                Candidate(gpu.key, gpu, None, gpu.memory_bytes, 1.0, gpu.memory_bandwidth_bytes_per_second,
                          gpu.fp16_dense_tflops, gpu.hourly_price_dollars, gpu.usable_memory)
            )
            for p in gpu.mig_profiles:
                share = p.memory_bytes / gpu.memory_bytes
                cands.append(
                    Candidate(f"{gpu.key}/{p.name}", gpu, p, p.memory_bytes, p.sm_fraction,
                              gpu.memory_bandwidth_bytes_per_second * share,
                              gpu.fp16_dense_tflops * p.sm_fraction,
                              round(gpu.hourly_price_dollars * p.price_fraction, 6),
                              p.usable_memory_bytes or p.memory_bytes)
                )
        self._candidates = tuple(sorted(cands, key=lambda c: (c.hourly_price_dollars, c.key)))
        self._candidate_index = {_normal(c.key): c for c in self._candidates}

    def lookup(self, name: str) -> GpuSpec | None:
        """The GPU with this catalog key or NVML name (case-insensitive; 'NVIDIA '/'Tesla ' optional)."""
        return self._index.get(_normal(name)) or self._index.get(_short(name))

    def all(self) -> tuple[GpuSpec, ...]:
        return self._gpus

    def candidates(self) -> tuple[Candidate, ...]:
        """Whole GPUs and MIG profiles, cheapest first."""
        return self._candidates

    def candidate(self, key: str) -> Candidate | None:
        """A candidate by key: a GPU key/NVML name, or ``<gpu key>/<MIG profile>``."""
        found = self._candidate_index.get(_normal(key))
        if found is None and "/" not in key and (gpu := self.lookup(key)) is not None:
            found = self._candidate_index.get(_normal(gpu.key))
        return found

    def keys(self) -> Sequence[str]:
        return [g.key for g in self._gpus]


@dataclass(frozen=True)
class CatalogSettings:
    price_set: PriceSetName = setting(
        DEFAULT_SET,
        "Which price list prices the GPUs: catalog (the built-in list) or a cloud's set in "
        "rightsizing/prices/: aws-on-demand, aws-spot, azure-on-demand, gcp-on-demand, gcp-spot, "
        "gcp-committed-1y. A GPU a set leaves out keeps the catalog's price; catalog.prices wins over "
        "the set.",
    )
    prices: dict[str, float] = setting(
        {},
        "Hourly price in dollars per catalog GPU (key or NVML name), replacing the catalog's indicative "
        "list price; MIG profiles follow their parent (price x the larger of memory slices / 8 and "
        "compute slices / 7).",
    )
    extra_gpus: list[dict[str, Any]] = setting(
        [], "GPUs added to the catalog (an entry with a built-in key replaces it), in catalog.yaml's format."
    )
    extra_gpus_file: str | None = setting(
        None, "Path to a YAML file with a top-level 'gpus:' list in catalog.yaml's format, added likewise."
    )

    def validate(self) -> None:
        load_catalog(self)  # raises ConfigError naming the entry and key


@lru_cache(maxsize=1)
def builtin_gpus() -> tuple[GpuSpec, ...]:
    return tuple(read_catalog_file(DATA_FILE))


def load_catalog(overrides: CatalogSettings | None = None) -> Catalog:
    """The built-in catalog with the configuration's extra GPUs and prices applied."""
    gpus = list(builtin_gpus())
    if overrides is None:
        return Catalog(gpus)
    named: tuple[str, str] = (overrides.price_set, DEFAULT_DESCRIPTION)
    price_set = load_price_set(overrides.price_set, tuple(g.key for g in gpus))
    if price_set is not None:  # the set prices the built-in GPUs; extra GPUs bring their own prices
        gpus, named = with_prices(gpus, price_set), (price_set.name, price_set.description)
    if overrides.extra_gpus_file:
        try:
            gpus += read_catalog_file(overrides.extra_gpus_file)
        except ConfigError as exc:
            raise ConfigError(f"catalog.extra_gpus_file: {exc}") from None
    gpus += specs_from_list(overrides.extra_gpus, "catalog.extra_gpus")
    catalog = Catalog(gpus, *named)
    priced: dict[str, GpuSpec] = {}
    for name, price in overrides.prices.items():
        gpu = catalog.lookup(name)
        if gpu is None:
            raise ConfigError(
                f"catalog.prices: unknown GPU {name!r} (known keys: {', '.join(catalog.keys())})"
            )
        if not price >= 0:
            raise ConfigError(f"catalog.prices.{name}: must be at least 0; got {price!r}")
        priced[gpu.key] = _repriced(gpu, float(price))
    return Catalog([priced.get(g.key, g) for g in catalog.all()], *named) if priced else catalog


def with_prices(gpus: Iterable[GpuSpec], price_set: PriceSet) -> list[GpuSpec]:
    """The GPUs with a price set's prices; those it leaves out keep the catalog's, marked so."""
    out: list[GpuSpec] = []
    for gpu in gpus:
        found = price_set.prices.get(gpu.key)
        if found is None:
            kept = f"not in {price_set.name}: the catalog's default price applies ({gpu.price_source})"
            out.append(replace(gpu, price_source=kept))
        else:
            price, source = found
            out.append(replace(gpu, hourly_price_dollars=price, price_source=source, price_estimated=False))
    return out


def _repriced(gpu: GpuSpec, price: float) -> GpuSpec:
    return replace(gpu, hourly_price_dollars=price, price_source="configured in catalog.prices",
                   price_estimated=False)
