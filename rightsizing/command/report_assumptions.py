"""What a report's conclusions rest on: its window, the thresholds it judged with, where each
price comes from and how much history it found. Part of the JSON report (``assumptions``) and shown
by the HTML and Markdown reports, so a reader of an attached report can tell how it was made."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from ..catalog import Catalog
from ..settings import BottleneckSettings, RightsizingSettings

# Settings that are not thresholds of a verdict (or that the report sets from its own flags).
_NOT_THRESHOLDS = {
    "enabled", "window_seconds", "window_buckets", "score_interval_seconds", "procfs_root",
    "queue_links", "bottlenecks", "idle_after_seconds",
}  # fmt: skip


def thresholds(s: RightsizingSettings) -> list[dict[str, Any]]:
    """Every threshold ``assess`` reads, as ``rightsizing.<name>`` with its value and default."""
    out = []
    pairs: list[tuple[str, Any, Any]] = [
        (f"rightsizing.{f.name}", s, RightsizingSettings()) for f in dataclasses.fields(s)
        if f.name not in _NOT_THRESHOLDS
    ]  # fmt: skip
    pairs += [(f"rightsizing.bottlenecks.{f.name}", s.bottlenecks, BottleneckSettings())
              for f in dataclasses.fields(s.bottlenecks)]  # fmt: skip
    for name, obj, default in pairs:
        attr = name.rsplit(".", 1)[1]
        value, was = getattr(obj, attr), getattr(default, attr)
        out.append({"setting": name, "value": value, "default": was, "configured": value != was})
    return out


def prices(rows: Iterable[Mapping[str, Any]], catalog: Catalog) -> list[dict[str, Any]]:
    """The price of every GPU and MIG profile the report names (current or recommended) and its source."""
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        for key in (row.get("current"), row.get("recommended")):
            c = catalog.candidate(key) if isinstance(key, str) else None
            if c is None or c.key in out:
                continue
            source = c.price_source
            out[c.key] = {
                "gpu": c.key,
                "hourly_price_dollars": c.hourly_price_dollars,
                "estimated": c.price_estimated,
                "source": source,
            }
    return sorted(out.values(), key=lambda p: (-p["hourly_price_dollars"], p["gpu"]))


def assumptions(
    *,
    window_seconds: float,
    at: float,
    idle_after_seconds: float,
    resolution_seconds: float | None,
    settings: RightsizingSettings,
    catalog: Catalog,
    rows: list[dict[str, Any]],
    history_found_seconds: float,
    exporter_config: str | None,
    history_start: float | None = None,
) -> dict[str, Any]:
    return {
        "window_start": at - window_seconds,
        "window_end": at,
        "idle_after_seconds": min(idle_after_seconds, window_seconds),
        "resolution_seconds": resolution_seconds,  # None: every raw sample
        "history_found_seconds": history_found_seconds,
        "history_start": history_start,  # the earliest first sample of a GPU judged (None: none)
        "exporter_config": exporter_config,
        "thresholds": thresholds(settings),
        "price_set": price_set(catalog),
        "prices": prices(rows, catalog),
    }


def price_set(catalog: Catalog) -> dict[str, str]:
    """Which price set (catalog.price_set) priced the GPUs; catalog.prices overrides show per price."""
    return {"name": catalog.price_set, "description": catalog.price_set_description}
