"""Price sets: each cloud's published hourly prices for the catalog's GPUs, chosen in the
configuration (``catalog.price_set``).

A set is a YAML file in ``prices/`` next to this module (format documented at the top of each
file): one cloud, one way of paying (on-demand, spot, a 1-year commitment), one region. Each entry
names the instance a GPU's price comes from, the page it was read on and the date that page shows;
the per-GPU price is the instance's hourly price divided by the GPUs it carries. Where the source
quotes a month rather than an hour, the entry gives that monthly figure and the hours the source's
month has, and the hourly price is their quotient. ``price_source`` says all of it. A GPU a set
leaves out keeps the built-in catalog price, and its ``price_source`` says that too.
``catalog.prices`` overrides are applied after the set and win.

The default set, ``catalog``, is the catalog's own price list (``catalog.yaml``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from rightsizer_core.settings import ConfigError, build, read_yaml, setting

PRICES_DIR = Path(__file__).with_name("prices")
# The sets catalog.price_set accepts: the catalog's own list and one file per set in PRICES_DIR.
PriceSetName = Literal[
    "catalog",
    "aws-on-demand",
    "aws-spot",
    "azure-on-demand",
    "gcp-committed-1y",
    "gcp-on-demand",
    "gcp-spot",
]
Pricing = Literal["on-demand", "spot", "committed-1y"]
DEFAULT_SET = "catalog"
DEFAULT_DESCRIPTION = "the built-in list in catalog.yaml"
# What a source's date may look like: a year, a month or a day (ISO 8601).
DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


@dataclass(frozen=True)
class PriceEntry:
    gpu: str = setting("", "Catalog key of the GPU, e.g. H100-SXM-80GB.")
    instance: str = setting("", "The instance (VM size, machine type) the price is read from.")
    gpus_per_instance: int | None = setting(None, "GPUs the instance carries.", minimum=1)
    instance_hourly_dollars: float | None = setting(None, "The instance's hourly price in dollars.")
    instance_monthly_dollars: float | None = setting(
        None,
        "The instance's monthly price in dollars, where the source quotes a month (with hours_per_month).",
    )
    hours_per_month: float | None = setting(None, "The hours in the source's month (Google Cloud: 730).")
    source: str = setting("", "Where the price was read: the page's URL.")
    as_of: str = setting("", "The date the source shows for the price (YYYY, YYYY-MM or YYYY-MM-DD).")
    note: str = setting("", "Anything the reader should know about this figure.")


@dataclass(frozen=True)
class PriceSetFile:
    name: str = setting("", "The set's name, as catalog.price_set selects it; equals the file name.")
    provider: str = setting("", "The cloud, e.g. AWS.")
    pricing: Pricing | None = setting(None, "on-demand, spot or committed-1y.")
    region: str = setting("", "The region the prices are for.")
    prices: list[PriceEntry] = setting([], "One entry per GPU the set prices.")


@dataclass(frozen=True, slots=True)
class PricedGpu:
    """One entry, checked: what the set charges for one GPU, and where that figure comes from."""

    gpu: str
    instance: str
    gpus_per_instance: int
    instance_hourly_dollars: float
    per_gpu_dollars: float  # instance_hourly_dollars / gpus_per_instance
    source: str  # the page's URL
    as_of: str
    price_source: str  # the sentence price_source carries


@dataclass(frozen=True, slots=True)
class PriceSet:
    name: str
    provider: str
    pricing: str
    region: str
    description: str  # "AWS spot, us-east-1, 2 GPUs priced, sources dated 2025-11-06 to 2026-08-06"
    entries: dict[str, PricedGpu]  # catalog key -> entry

    @property
    def prices(self) -> dict[str, tuple[float, str]]:
        """catalog key -> (per-GPU hourly dollars, price_source)."""
        return {k: (e.per_gpu_dollars, e.price_source) for k, e in self.entries.items()}


def available() -> list[str]:
    """The names catalog.price_set accepts."""
    return [DEFAULT_SET, *sorted(p.stem for p in PRICES_DIR.glob("*.yaml"))]


def _d(value: float) -> str:
    """Dollars as the source wrote them, to six decimals at most: 50.609541, 0.526, 98.32."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _given(value: float) -> str:
    """A figure as the file gives it, every digit kept: 325.07215214, 730, 0.526."""
    return repr(float(value)).removesuffix(".0")


def _positive(value: object, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise ConfigError(f"{where}: must be a positive finite number; got {value!r}")
    return float(value)


def _hourly(e: PriceEntry, where: str) -> tuple[float, str]:
    """The instance's hourly price and how it was read (the arithmetic, where there is one)."""
    if (e.instance_hourly_dollars is None) == (e.instance_monthly_dollars is None):
        raise ConfigError(f"{where}: give instance_hourly_dollars or instance_monthly_dollars (one of them)")
    if e.instance_hourly_dollars is not None:
        if e.hours_per_month is not None:
            raise ConfigError(f"{where}: hours_per_month goes with instance_monthly_dollars")
        price = _positive(e.instance_hourly_dollars, f"{where}.instance_hourly_dollars")
        return price, f"${_given(price)}/h"
    month = _positive(e.instance_monthly_dollars, f"{where}.instance_monthly_dollars")
    if e.hours_per_month is None:
        raise ConfigError(f"{where}: hours_per_month is required with instance_monthly_dollars")
    hours = _positive(e.hours_per_month, f"{where}.hours_per_month")
    price = round(month / hours, 6)
    return price, f"${_given(month)}/month / {_given(hours)} h = ${_d(price)}/h"


def _entry(f: PriceSetFile, e: PriceEntry, where: str) -> PricedGpu:
    if not e.instance:
        raise ConfigError(f"{where}: instance is required")
    if e.gpus_per_instance is None:
        raise ConfigError(f"{where}: gpus_per_instance is required")
    if not e.source.strip():
        raise ConfigError(f"{where}: source is required (the page the price was read on)")
    if not DATE.match(e.as_of):
        raise ConfigError(f"{where}.as_of: must be a date, YYYY, YYYY-MM or YYYY-MM-DD; got {e.as_of!r}")
    price, read = _hourly(e, where)
    count = e.gpus_per_instance
    per_gpu = round(price / count, 6)
    split = f" / {count} GPUs = ${_d(per_gpu)}/h per GPU" if count > 1 else ""
    text = (
        f"{f.name}: {f.provider} {f.pricing}, {f.region}, {e.instance} ({count} x {e.gpu}) {read}{split}; "
        f"source {e.source}, as of {e.as_of}" + (f"; {e.note}" if e.note else "")
    )
    return PricedGpu(e.gpu, e.instance, count, price, per_gpu, e.source, e.as_of, text)


def read_price_set(path: str | Path, known_gpus: Iterable[str]) -> PriceSet:
    """One set file, checked: every key known, every GPU priced once, every price positive and finite,
    every price with its source and date."""
    path = Path(path)
    f = build(PriceSetFile, read_yaml(path), str(path))
    for name in ("name", "provider", "pricing", "region"):
        if not getattr(f, name):
            raise ConfigError(f"{path}: {name} is required")
    if f.name != path.stem:
        raise ConfigError(f"{path}: name {f.name!r} differs from the file's name {path.stem!r}")
    known = set(known_gpus)
    out: dict[str, PricedGpu] = {}
    for i, e in enumerate(f.prices):
        where = f"{path}: prices[{i}]"
        if e.gpu not in known:
            raise ConfigError(f"{where}: unknown GPU {e.gpu!r} (known keys: {', '.join(sorted(known))})")
        if e.gpu in out:
            raise ConfigError(f"{where}: {e.gpu} is priced twice")
        out[e.gpu] = _entry(f, e, where)
    if not out:
        raise ConfigError(f"{path}: prices is empty")
    dates = sorted({e.as_of for e in out.values()})
    dated = f"dated {dates[0]}" if len(dates) == 1 else f"dated {dates[0]} to {dates[-1]}"
    description = (
        f"{f.provider} {f.pricing}, {f.region}, {len(out)} GPU{'s' if len(out) > 1 else ''} priced, "
        f"sources {dated}"
    )
    return PriceSet(f.name, f.provider, str(f.pricing), f.region, description, out)


@lru_cache(maxsize=16)
def load_price_set(name: str, known_gpus: tuple[str, ...]) -> PriceSet | None:
    """The set called ``name`` (None for the default, the catalog's own prices)."""
    if name == DEFAULT_SET:
        return None
    if name not in available():
        raise ConfigError(f"catalog.price_set: unknown price set {name!r} (known: {', '.join(available())})")
    return read_price_set(PRICES_DIR / f"{name}.yaml", known_gpus)
