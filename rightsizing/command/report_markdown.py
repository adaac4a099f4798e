"""``rightsizer report --format markdown``: the report as Markdown tables for a pull request, one
table per section and no HTML. Every cell is escaped (label values are user input): a pod named
``a|b`` or ``<script>`` stays one cell of plain text."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rightsizer_core.workloads import workload_of

from ..figures import monthly
from ..markdown import cell, md_table
from ..verdicts import duration
from ..words import exact_duration
from .output import money
from .report_common import COST_HEADERS, HOURS_PER_MONTH, cost_cells, history_line, windows_line
from .report_slo import SLO_HEADERS, SLO_RIGHT, SLO_TITLE, slo_rows


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _saves(dollars: float | None) -> str:
    if dollars is not None and dollars < 0:  # an upgrade
        return f"costs {money(-dollars)}/h more"
    return "-" if dollars is None else f"{money(dollars)}/h"


def render_markdown(doc: dict[str, Any]) -> str:
    totals, a = doc["totals"], doc["assumptions"]
    verdicts = ", ".join(f"{n} {v}" for v, n in sorted(totals["verdicts"].items(), key=lambda x: -x[1]))
    summary = [
        ("GPUs judged", totals["gpus"]),
        ("Verdicts", verdicts or "-"),
        ("Costs now", f"{money(totals['hourly_price_dollars'])}/h"),
        ("Right-sizing saves",
         f"{money(totals['hourly_savings_dollars'])}/h ({monthly(totals['monthly_savings_dollars'])}/month "
         f"at {HOURS_PER_MONTH:g} h)"),
        ("Upgrades add", f"{money(totals['hourly_upgrade_cost_dollars'])}/h"),
        ("History found", history_line(totals, doc["window_seconds"]).removeprefix("History found: ")),
    ]  # fmt: skip
    windows = windows_line(totals, doc["window_seconds"])
    if windows:
        summary.append(("Windows", windows.removeprefix("Windows: ")))
    workloads = [
        [w["namespace"], w["workload"], w["gpus"], w["verdicts"], w["recommended"],
         f"{money(w['hourly_price_dollars'])}/h", _saves(w["hourly_savings_dollars"])]
        for w in doc["workloads"]
    ]  # fmt: skip
    span = duration(doc["window_seconds"])
    gpus = [
        [
            g["gpu"], g["model"] + (f" {g['mig_profile']}" if g["mig_profile"] else ""), g["uuid"], g["host"],
            g["namespace"], g["pod"], workload_of(g["pod"]) if g["pod"] else None, g["verdict"],
            g["workload_change"] or g["recommended"], _saves(g["hourly_savings_dollars"]),
            ", ".join(g["bottlenecks"]), ", ".join(g.get("findings") or ()),
            f"{exact_duration(g['history_seconds'])} of {span}",
            g["reason"],
        ]
        for g in doc["gpus"]
    ]  # fmt: skip
    facts = [
        ("Prometheus", doc["prometheus_url"]),
        ("Window", f"{doc['window']}: {_when(a['window_start'])} to {_when(a['window_end'])}"),
        ("Idle after", duration(a["idle_after_seconds"])),
        ("Resolution", duration(a["resolution_seconds"]) if a["resolution_seconds"] else "every raw sample"),
        ("Thresholds and prices from", a["exporter_config"] or "built-in defaults and catalog"),
    ]
    out = [
        "# Rightsizer fleet report",
        "",
        f"The fleet over the {cell(doc['window'])} to {_when(doc['at'])}, from Prometheus history.",
        "",
        "## Summary",
        "",
        md_table(["Figure", "Value"], summary),
        "",
        "## Workloads, most money first",
        "",
        md_table(["Namespace", "Workload", "GPUs", "Verdicts", "Recommended", "Costs", "Saves"], workloads,
                 [False, False, True, False, False, True, True]),
        "",
        *_costs(doc),
        *_slos(doc),
        "## GPUs",
        "",
        md_table(["GPU", "Model", "UUID", "Host", "Namespace", "Pod", "Workload", "Verdict", "Recommended",
                  "Saves", "Bottlenecks", "Findings", "History", "Why"], gpus),
        "",
        "## Assumptions",
        "",
        md_table(["Assumption", "Value"], facts),
        "",
        "## Thresholds",
        "",
        md_table(["Setting", "Value", "Default"],
                 [[t["setting"], t["value"], t["default"]] for t in a["thresholds"]]),
        "",
        "## Prices",
        "",
        f"Price set (catalog.price_set): `{a['price_set']['name']}`, {cell(a['price_set']['description'])}.",
        "",
        md_table(["GPU", "Price", "Source"],
                 [[p["gpu"], f"{money(p['hourly_price_dollars'], 4)}/h", p["source"]] for p in a["prices"]],
                 [False, True, False]),
    ]  # fmt: skip
    return "\n".join(out) + "\n"


def _slos(doc: dict[str, Any]) -> list[str]:
    rows = slo_rows(doc.get("slos") or [])
    if not rows:
        return []
    title, _, note = SLO_TITLE.partition(" (")
    return [f"## {title}", "", f"({note}", "", md_table(SLO_HEADERS, rows, SLO_RIGHT), ""]


def _costs(doc: dict[str, Any]) -> list[str]:
    costs = doc.get("inference_costs") or []
    if not costs:
        return []
    right = [False, False, True, True, True, True, True, True]
    return ["## Cost per inference", "", md_table(COST_HEADERS, [cost_cells(c) for c in costs], right), ""]
