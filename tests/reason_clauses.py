"""Clauses of a verdict's reason that independent readers found false, as checks on one GPU's
``/api/v1/gpus`` rightsizing object: each returns what is false, or nothing."""

from __future__ import annotations

import re
from typing import Any

from rightsizing.catalog import Catalog

GIB = 2**30
NOT_MOVES = ("none", "release")
HOLDS = re.compile(r"no cheaper option holds ([0-9.]+) GiB")
MOST_MEMORY = "memory rules out most cheaper options"
MORE = re.compile(r"\$[0-9.,]+/h more")
# The load clause with the peak as the need: "peak memory 72.0 GiB (+15% margin"
PEAK_AS_NEED = re.compile(r"peak memory [0-9.]+ GiB \(\+")
POOLED = ("vllm", "sglang")


def _price(catalog: Catalog, key: str | None) -> float | None:
    c = catalog.candidate(key) if key else None
    return None if c is None else c.hourly_price_dollars


def estimate_unsaid(got: dict[str, Any], catalog: Catalog) -> str | None:
    """A move onto a GPU whose price is an estimate says so."""
    moved = got["recommended"] not in (*NOT_MOVES, got["current"])
    if moved and got["price_source"] == "estimate" and "price is an estimate" not in got["reason"]:
        return f"moves to {got['recommended']}, whose price is an estimate, without saying so"
    return None


def holds_but_one_does(got: dict[str, Any], catalog: Catalog) -> str | None:
    """"no cheaper option holds X GiB", or "memory rules out most cheaper options": every cheaper
    option that holds the need is named beside it (with why it lost)."""
    reason = got["reason"]
    m = HOLDS.search(reason)
    if m is not None:
        shown = m.group(1)
        need = float(shown) + 0.5 * 10.0 ** -len(shown.partition(".")[2])  # shown to 0.1 or 0.01 GiB
    elif MOST_MEMORY in reason and got.get("memory_need_bytes"):
        need = got["memory_need_bytes"] / GIB
        shown = f"{need:.1f}"
    else:
        return None
    chosen = got["recommended"] if got["recommended"] not in NOT_MOVES else got["current"]
    top = _price(catalog, chosen)
    if top is None:
        return None
    upgrade = got["verdict"] == "underprovisioned"
    holders = [
        c.key
        for c in catalog.candidates()
        if c.hourly_price_dollars < top - 1e-9
        and not (upgrade and c.key == got["current"])
        and c.usable_memory / GIB >= need
    ]
    unnamed = [k for k in holders if k not in reason]
    counted = sum(int(n) for n in re.findall(r" and ([0-9]+) more hold ", reason))  # "L40S-48GB and 7 more"
    return f"leaves out that {unnamed} hold {shown} GiB" if len(unnamed) > counted else None


def cheapest_unsaid(got: dict[str, Any], catalog: Catalog) -> str | None:
    """On the catalog's cheapest option, 'no cheaper option' is not why it stays: it is the cheapest
    (an upgrade's 'cheaper' is cheaper than the option it moves to)."""
    current = catalog.candidate(got["current"]) if got["current"] else None
    if current is None or got["verdict"] == "underprovisioned" or "no cheaper option" not in got["reason"]:
        return None
    if any(c.hourly_price_dollars < current.hourly_price_dollars - 1e-9 for c in catalog.candidates()):
        return None
    return f"says 'no cheaper option' on {current.key}, the catalog's cheapest"


def reservation_as_need(got: dict[str, Any], catalog: Catalog) -> str | None:
    """A server that reserves its pool, with usage under full, whose peak is read as the need."""
    pooled = [q for q in got["queues"] if q["server"] in POOLED]
    if not pooled or not PEAK_AS_NEED.search(got["reason"]):
        return None
    if any(q["kv_cache_p95_ratio"] is not None and q["kv_cache_p95_ratio"] < 0.9 for q in pooled):
        return "gives the server's reservation as the peak memory the work needs"
    return None


def offload_link(got: dict[str, Any], catalog: Catalog) -> str | None:
    """Offloading: the host traffic goes once the work fits, so no option loses on its host link."""
    reason = got["reason"]
    if "offloads to host memory" in reason and "host link is too narrow" in reason:
        return "rules out an option on its host link, though the offload traffic goes once the work fits"
    return None


def upgrade_in_rightsized(got: dict[str, Any], catalog: Catalog) -> str | None:
    """A rightsized reason carries no price of a move: that reads as a recommendation."""
    if got["verdict"] == "rightsized" and MORE.search(got["reason"]):
        return "a rightsized reason prices an upgrade ('$.../h more')"
    return None


CHECKS = (
    estimate_unsaid,
    holds_but_one_does,
    cheapest_unsaid,
    reservation_as_need,
    offload_link,
    upgrade_in_rightsized,
)


def false_clauses(got: dict[str, Any], catalog: Catalog) -> list[str]:
    return [found for check in CHECKS if (found := check(got, catalog)) is not None]

