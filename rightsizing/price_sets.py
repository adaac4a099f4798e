"""Price sets: each cloud's published hourly prices for the catalog's GPUs, chosen in the
configuration (``catalog.price_set``).

A set is a YAML file in ``prices/`` next to this module (format documented at the top of each
file). Each entry names the instance a GPU's price comes from; the per-GPU price is the instance's
hourly price divided by the GPUs it carries, and its ``price_source`` says so, with the page, the
region and the date. A GPU a set leaves out keeps the built-in catalog price, and its
``price_source`` says that too. ``catalog.prices`` overrides are applied after the set and win.

The default set, ``catalog``, is the catalog's own price list (``catalog.yaml``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from rightsizer_core.settings import ConfigError, build, read_yaml, setting

PRICES_DIR = Path(__file__).with_name("prices")
# The sets catalog.price_set accepts: the catalog's own list and one file per set in PRICES_DIR.
PriceSetName = Literal["catalog", "aws-on-demand", "gcp-on-demand", "azure-on-demand"]
DEFAULT_SET = "catalog"
DEFAULT_DESCRIPTION = "the built-in list in catalog.yaml"


@dataclass(frozen=True)
class PriceEntry:
    gpu: str = setting("", "Catalog key of the GPU, e.g. H100-SXM-80GB.")
    instance: str = setting("", "The instance (VM size, machine type) the price is read from.")
    instance_hourly_dollars: float | None = setting(None, "The instance's hourly price in dollars.")
    gpus_per_instance: int | None = setting(None, "GPUs the instance carries.", minimum=1)
    note: str = setting("", "Anything the reader should know about this figure.")


@dataclass(frozen=True)
class PriceSetFile:
    name: str = setting("", "The set's name, as catalog.price_set selects it; equals the file name.")
    provider: str = setting("", "The cloud, e.g. AWS.")
    pricing: str = setting("", "on-demand, spot or committed.")
    region: str = setting("", "The region the prices are for.")
    source: str = setting("", "The page the prices come from.")
    as_of: str = setting("", "When the prices were read.")
    prices: list[PriceEntry] = setting([], "One entry per GPU the set prices.")


@dataclass(frozen=True, slots=True)
class PriceSet:
    name: str
    description: str  # "AWS on-demand, us-east-1, as of 2024 (source)"
    prices: dict[str, tuple[float, str]]  # catalog key -> (per-GPU hourly dollars, price_source)


def available() -> list[str]:
    """The names catalog.price_set accepts."""
    return [DEFAULT_SET, *sorted(p.stem for p in PRICES_DIR.glob("*.yaml"))]


def read_price_set(path: str | Path, known_gpus: Iterable[str]) -> PriceSet:
    """One set file, checked: every key known, every GPU priced once, every price positive and finite."""
    path = Path(path)
    raw = read_yaml(path)
    f = build(PriceSetFile, raw, str(path))
    for name in ("name", "provider", "pricing", "region", "source", "as_of"):
        if not getattr(f, name):
            raise ConfigError(f"{path}: {name} is required")
    if f.name != path.stem:
        raise ConfigError(f"{path}: name {f.name!r} differs from the file's name {path.stem!r}")
    known = set(known_gpus)
    out: dict[str, tuple[float, str]] = {}
    for i, e in enumerate(f.prices):
        where = f"{path}: prices[{i}]"
        if e.gpu not in known:
            raise ConfigError(f"{where}: unknown GPU {e.gpu!r} (known keys: {', '.join(sorted(known))})")
        if e.gpu in out:
            raise ConfigError(f"{where}: {e.gpu} is priced twice")
        if not e.instance:
            raise ConfigError(f"{where}: instance is required")
        price, count = e.instance_hourly_dollars, e.gpus_per_instance
        if not isinstance(price, int | float) or isinstance(price, bool) or not 0 < price < math.inf:
            raise ConfigError(
                f"{where}.instance_hourly_dollars: must be a positive finite number; got {price!r}"
            )
        if count is None:
            raise ConfigError(f"{where}: gpus_per_instance is required")
        per_gpu = round(float(price) / count, 6)
        split = f" / {count} GPUs = ${per_gpu:g}/h per GPU" if count > 1 else ""
        source = (
            f"{f.name}: {f.source}, {f.region}, {e.instance} ({count} x {e.gpu}) ${float(price):g}/h"
            f"{split}, as of {f.as_of}" + (f"; {e.note}" if e.note else "")
        )
        out[e.gpu] = (per_gpu, source)
    if not out:
        raise ConfigError(f"{path}: prices is empty")
    description = f"{f.provider} {f.pricing}, {f.region}, as of {f.as_of}, from the {f.source}"
    return PriceSet(f.name, description, out)


@lru_cache(maxsize=16)
def load_price_set(name: str, known_gpus: tuple[str, ...]) -> PriceSet | None:
    """The set called ``name`` (None for the default, the catalog's own prices)."""
    if name == DEFAULT_SET:
        return None
    if name not in available():
        raise ConfigError(f"catalog.price_set: unknown price set {name!r} (known: {', '.join(available())})")
    return read_price_set(PRICES_DIR / f"{name}.yaml", known_gpus)

