"""What the text, Markdown and HTML reports word the same way: the hours in a month behind monthly
savings, the line about how much history was found, and the inference-cost table's headers and
cells. A leaf of the report's modules, so the formats import it and not each other."""

from __future__ import annotations

from typing import Any

from ..verdicts import duration
from ..words import exact_duration
from .output import money

HOURS_PER_MONTH = 730.0


def history_line(totals: dict[str, Any], window_seconds: float) -> str:
    """How much history the report found, and what that means for its verdicts."""
    found = float(totals.get("history_found_seconds") or 0)
    line = f"History found: {exact_duration(found)} of the {duration(window_seconds)} window"
    if window_seconds and found < 0.98 * window_seconds:
        line += (
            " (less than the window: verdicts rest on what there is, with margins widened; "
            "GPUs with too little say insufficient_data)"
        )
    return line + "."


def windows_line(totals: dict[str, Any], window_seconds: float) -> str:
    """When the exporters' status pages judge another window than the report's, say so: a page
    that says B200 beside a report that says "add replicas" is not a contradiction when one judged
    the last hour and the other a week. Empty when the two windows are the same."""
    live = totals.get("live_window_seconds")
    if not isinstance(live, (int, float)) or abs(live - window_seconds) < 1:
        return ""
    return (
        f"Windows: this report judges {duration(window_seconds)}; each exporter's status page and "
        f"/api/v1/rightsizing judge its last {duration(live)} (rightsizing.window_seconds), so a "
        "verdict there may differ from this one."
    )


COST_HEADERS = ("Queue", "Server", "GPUs", "Costs", "Measured", "Cost now", "Projected", "Cost recommended")


def cost_cells(c: dict[str, Any]) -> list[str]:
    """A row of ``inference_costs`` as the cost table's cells (the text report's ``cost_table``)."""
    per = "M tokens" if c["unit"] == "tokens" else "k requests"
    key = "million_tokens" if c["unit"] == "tokens" else "thousand_requests"

    def rate(x: float | None) -> str:
        return "-" if x is None else f"{x:,.1f} {c['unit']}/s"

    def price(x: float | None) -> str:
        return "-" if x is None else f"{money(x, 3)}/{per}"

    return [
        c["queue"], c["server"], str(c["gpus"]), f"{money(c['hourly_dollars'])}/h", rate(c["per_second"]),
        price(c[f"dollars_per_{key}"]), rate(c["projected_per_second"]),
        price(c[f"projected_dollars_per_{key}"]),
    ]  # fmt: skip
