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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from rightsizer_core.settings import ConfigError, setting

from .catalog_file import LABEL_VALUE, parse_quantity, read_catalog_file, specs_from_list
from .gpu_spec import (
    MIG_COMPUTE_SLICES,
    MIG_MEMORY_SLICES,
    PCIE_LANE_BYTES_PER_SECOND,
    Candidate,
    GpuSpec,
    MigProfile,
    nvlink_bytes_per_second,
)
from .price_sets import DEFAULT_DESCRIPTION, DEFAULT_SET, PriceSet, PriceSetName, load_price_set

DATA_FILE = Path(__file__).with_name("catalog.yaml")

__all__ = [
    "DATA_FILE",
    "LABEL_VALUE",
    "MIG_COMPUTE_SLICES",
    "MIG_MEMORY_SLICES",
    "PCIE_LANE_BYTES_PER_SECOND",
    "Candidate",
    "Catalog",
    "CatalogSettings",
    "GpuSpec",
    "MigProfile",
    "builtin_gpus",
    "load_catalog",
    "nvlink_bytes_per_second",
    "parse_quantity",
    "read_catalog_file",
    "specs_from_list",
    "with_prices",
]


def _normal(name: str) -> str:
    return " ".join(name.lower().split())


def _short(name: str) -> str:
    return re.sub(r"^(nvidia|tesla) ", "", _normal(name))


class Catalog:
    """GPUs by key and NVML name, and the priced candidates a recommendation chooses from."""

    def __init__(
        self,
        gpus: Iterable[GpuSpec],
        price_set: str = DEFAULT_SET,
        price_set_description: str = DEFAULT_DESCRIPTION,
    ) -> None:
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
                Candidate(
                    gpu.key,
                    gpu,
                    None,
                    gpu.memory_bytes,
                    1.0,
                    gpu.memory_bandwidth_bytes_per_second,
                    gpu.fp16_dense_tflops,
                    gpu.hourly_price_dollars,
                    gpu.usable_memory,
                )
            )
            for p in gpu.mig_profiles:
                share = p.memory_bytes / gpu.memory_bytes
                cands.append(
                    Candidate(
                        f"{gpu.key}/{p.name}",
                        gpu,
                        p,
                        p.memory_bytes,
                        p.sm_fraction,
                        gpu.memory_bandwidth_bytes_per_second * share,
                        gpu.fp16_dense_tflops * p.sm_fraction,
                        round(gpu.hourly_price_dollars * p.price_fraction, 6),
                        p.usable_memory_bytes or p.memory_bytes,
                    )
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
    return replace(
        gpu, hourly_price_dollars=price, price_source="configured in catalog.prices", price_estimated=False
    )
