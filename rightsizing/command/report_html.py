"""``rightsizer report --format html``: one self-contained HTML file to attach to a ticket.

The status page's look (``html_parts``: style sheet, inline SVG charts, cells) over the report's
JSON document: fleet summary, workloads most money first, one row per judged GPU or MIG instance
with its charts over the window, and the assumptions. No script, nothing fetched from anywhere;
every value from outside passes through ``e`` (``html.escape``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rightsizer_core import __version__
from rightsizer_core.workloads import workload_of

from ..figures import monthly
from ..html_parts.cells import NONE, VERDICT_ORDER, VERDICT_WORDS, e, money, utc, verdict_chip
from ..html_parts.charts import svg
from ..html_parts.style import STYLE
from ..verdicts import duration
from ..words import exact_duration
from .report_charts import FleetCharts
from .report_common import COST_HEADERS, cost_cells, windows_line
from .report_slo import SLO_HEADERS, SLO_RIGHT, SLO_TITLE, slo_rows

REPORT_STYLE = """
header{padding-bottom:4px}header .muted{width:100%}
td{overflow-wrap:anywhere}td.num{overflow-wrap:normal}td[data-label=History]{white-space:nowrap}
.assumptions{display:grid;grid-template-columns:repeat(auto-fit,minmax(320px,1fr));gap:12px}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:4px 14px;margin:0}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0;overflow-wrap:anywhere}
td.src{font-size:12.5px;color:var(--muted);overflow-wrap:anywhere}
tr.set td:first-child{font-weight:600}table.thresholds td{padding:3px 10px}
table.prices td:first-child{white-space:nowrap}.assumptions>.card{align-self:start}
.tag.finding{border-color:var(--over);color:var(--over)}
@media (max-width:760px){tr.workload,tr.price,tr.cost,tr.slo{display:grid;grid-template-columns:1fr 1fr;
 padding-top:6px}tr.workload td,tr.price td,tr.cost td,tr.slo td{width:auto}tr.price td.src{grid-column:1/-1}}
@media print{body{background:#fff}tr.gpu,tr.charts{break-inside:avoid}}
"""


def _saves(dollars: float | None) -> str:
    if dollars is None:
        return NONE
    if dollars < 0:  # an upgrade: what it costs, in words, not a red "+"
        return f'<span class="more">costs {money(-dollars)}/h more</span>'
    return f'<span class="ok">{money(dollars)}/h</span>' if dollars else f"{money(0)}/h"


def _setting(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _estimate(price: Mapping[str, Any]) -> str:
    return " (an estimate)" if price["estimated"] and "estimate" not in price["source"].lower() else ""


def _bar(share: float) -> str:
    share = min(1.0, max(0.0, share))
    return f'<div class="bar" title="{share:.0%}"><span style="width:{share:.0%}"></span></div>'


def _summary(doc: Mapping[str, Any]) -> str:
    t = doc["totals"]
    chips = "".join(
        f'<span class="verdict v-{v}">{t["verdicts"][v]} {e(VERDICT_WORDS[v])}</span>'
        for v in VERDICT_ORDER
        if t["verdicts"].get(v)
    )
    found, window = float(t.get("history_found_seconds") or 0), float(doc["window_seconds"])
    upgrades = t["hourly_upgrade_cost_dollars"]
    return (
        '<section class="cards">'
        f'<div class="card"><h3>GPUs judged</h3><div class="big">{t["gpus"]}</div>'
        f'<div class="chips">{chips}</div></div>'
        '<div class="card"><h3>On the table</h3>'
        f'<div class="big" id="savings">{money(t["hourly_savings_dollars"])}/h'
        f'</div><div class="muted">≈ {monthly(t["monthly_savings_dollars"])} a month, of '
        f'{money(t["hourly_price_dollars"])}/h the fleet costs</div></div>'
        '<div class="card"><h3>Upgrades</h3>'
        f'<div class="big">{money(upgrades)}/h</div>'
        '<div class="muted">more, for under-provisioned GPUs</div></div>'
        f'<div class="card"><h3>History found</h3><div class="big">{e(exact_duration(found))}</div>'
        f'<div class="muted">of the {e(duration(window))} window</div>'
        f"{_bar(found / window if window else 0)}</div>"
        "</section>"
        + (f'<p class="note" id="windows">{e(windows)}</p>' if (windows := windows_line(t, window)) else "")
    )


def _workloads(doc: Mapping[str, Any]) -> str:
    rows = "".join(
        f'<tr class="workload"><td data-label="Namespace">{e(w["namespace"] or "-")}</td>'
        f'<td data-label="Workload"><b>{e(w["workload"])}</b></td>'
        f'<td data-label="GPUs" class="num">{w["gpus"]}</td><td data-label="Verdicts">{e(w["verdicts"])}</td>'
        f'<td data-label="Recommended">{e(w["recommended"])}</td>'
        f'<td data-label="Costs" class="num">{money(w["hourly_price_dollars"])}/h</td>'
        f'<td data-label="Saves" class="num">{_saves(w["hourly_savings_dollars"])}</td></tr>'
        for w in doc["workloads"]
    )
    return (
        '<h2>Workloads, most money first</h2><table class="workloads"><thead><tr><th>Namespace</th>'
        '<th>Workload</th><th class="num">GPUs</th><th>Verdicts</th><th>Recommended</th>'
        f'<th class="num">Costs</th><th class="num">Saves</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _costs(doc: Mapping[str, Any]) -> str:
    costs = doc.get("inference_costs") or []
    if not costs:
        return ""
    labels = COST_HEADERS
    rows = "".join(
        '<tr class="cost">'
        + "".join(
            f'<td data-label="{e(h)}"{"" if i < 2 else " class=num"}>{e(v)}</td>'
            for i, (h, v) in enumerate(zip(labels, cost_cells(c), strict=True))
        )
        + "</tr>"
        for c in costs
    )
    head = "".join(f"<th{'' if i < 2 else ' class=num'}>{e(h)}</th>" for i, h in enumerate(labels))
    return (
        "<h2>Cost per inference</h2><p class=muted>Measured throughput of each inference server and the "
        "price of the GPUs it runs on, today and projected on the recommendation.</p>"
        f'<table class="costs"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    )


def _slos(doc: Mapping[str, Any]) -> str:
    rows = slo_rows(list(doc.get("slos") or []))
    if not rows:
        return ""
    num = [" class=num" if right else "" for right in SLO_RIGHT]
    head = "".join(f"<th{n}>{e(h)}</th>" for h, n in zip(SLO_HEADERS, num, strict=True))
    body = "".join(
        '<tr class="slo">'
        + "".join(
            f'<td data-label="{e(h)}"{n}>{e(v)}</td>' for h, n, v in zip(SLO_HEADERS, num, r, strict=True)
        )
        + "</tr>"
        for r in rows
    )
    title, _, note = SLO_TITLE.partition(" (")
    return (
        f"<h2>{e(title)}</h2><p class=muted>{e(note.rstrip(')').capitalize())}.</p>"
        f'<table class="slos"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def _gpu(g: Mapping[str, Any], window: float, charts: FleetCharts) -> str:
    mig = f' <span class="tag">MIG {e(g["mig_profile"])}</span>' if g["mig_profile"] else ""
    device = (
        f'<b>{e(g["gpu"])}</b>{mig}<br>{e(g["model"])}<div class="muted">{e(g["host"])}</div>'
        f'<div class="id muted" title="{e(g["uuid"])}">{e(g["uuid"])}</div>'
    )
    if g["pod"]:
        pod = (f'<span class="pod">{e(g["pod"])}</span><br>'
               f'<span class="muted">{e(g["namespace"] or "")} · '
               f"{e(workload_of(g['pod']))}</span>")  # fmt: skip
    else:
        pod = '<span class="muted">no pod</span>'
    tags = "".join(f'<span class="tag">{e(b.replace("_", " "))}</span>' for b in g["bottlenecks"])
    findings = g.get("findings") or ()
    tags += "".join(f'<span class="tag finding">{e(f.replace("_", " "))}</span>' for f in findings)
    recommended = g["workload_change"] or (
        g["recommended"] if g["recommended"] not in (None, "none") else None
    )
    history = (f'{e(exact_duration(g["history_seconds"]))} of {e(duration(window))}'
               f'{_bar(g["history_seconds"] / window if window else 0)}')  # fmt: skip
    uuid = e(g["uuid"])
    row = (
        f'<tr class="gpu" data-uuid="{uuid}" data-verdict="{e(g["verdict"])}" '
        f'data-instance="{e(g["instance"] or "")}" data-mig-profile="{e(g["mig_profile"] or "")}">'
        f'<td data-label="GPU">{device}</td><td data-label="Pod">{pod}</td>'
        f'<td data-label="Verdict">{verdict_chip(g["verdict"])}'
        f'<div class="reason">{e(g["reason"])}</div></td>'
        f'<td data-label="Bottlenecks">{tags or "<span class=muted>none</span>"}</td>'
        f'<td data-label="Recommended">{e(recommended) if recommended else NONE}</td>'
        f'<td data-label="Saves" class="num">{_saves(g["hourly_savings_dollars"])}</td>'
        f'<td data-label="History">{history}</td></tr>'
    )
    drawn = charts.of(g)
    if not drawn:
        return row
    cell = f'<td colspan="7"><div class="grid4">{"".join(svg(c) for c in drawn)}</div></td>'
    return row + f'<tr class="charts" data-uuid="{uuid}">{cell}</tr>'


def _assumptions(doc: Mapping[str, Any], charts: FleetCharts) -> str:
    a = doc["assumptions"]
    if charts.error:
        drawn = f'<span class="bad">left out: {e(charts.error)}</span>'
    else:
        drawn = (f"mean per {e(duration(charts.step_seconds))} step, {e(utc(charts.start))} to "
                 f"{e(utc(charts.end))} (one query_range per signal)")  # fmt: skip
    resolution = a["resolution_seconds"]
    facts = [
        ("Prometheus", e(doc["prometheus_url"])),
        ("Window", f'{e(doc["window"])}: {e(utc(a["window_start"]))} to {e(utc(a["window_end"]))}'),
        ("History found", e(exact_duration(a["history_found_seconds"]))),
        ("Idle after", e(duration(a["idle_after_seconds"]))),
        ("Percentiles read",
         f"a subquery every {e(duration(resolution))}" if resolution else "every raw sample"),
        ("Charts", drawn),
        ("Settings from", e(a["exporter_config"] or "built-in defaults (no --exporter-config)")),
        ("Price set", f'<code>{e(a["price_set"]["name"])}</code>: {e(a["price_set"]["description"])}'),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in facts)
    thresholds = "".join(
        f'<tr class="{"set" if t["configured"] else ""}">'
        f'<td data-label="Setting"><code>{e(t["setting"])}</code></td>'
        f'<td data-label="Value" class="num">{e(_setting(t["value"]))}</td>'
        f'<td data-label="Default" class="num">{e(_setting(t["default"]))}</td></tr>'
        for t in a["thresholds"]
    )
    prices = "".join(
        f'<tr class="price"><td data-label="GPU">{e(p["gpu"])}</td>'
        f'<td data-label="Price" class="num">${p["hourly_price_dollars"]:,.4f}/h</td>'
        f'<td data-label="Source" class="src">{e(p["source"])}{_estimate(p)}</td></tr>'
        for p in a["prices"]
    )
    return (
        '<h2>Assumptions</h2><section class="assumptions">'
        f'<div class="card"><h3>How this report was made</h3><dl class="facts">{dl}</dl></div>'
        '<div><table class="prices"><thead><tr><th>GPU</th><th class="num">Price</th><th>Price source</th>'
        f"</tr></thead><tbody>{prices}</tbody></table></div></section>"
        '<h2>Thresholds</h2><table class="thresholds"><thead><tr><th>Setting (exporter config)</th>'
        '<th class="num">Value</th><th class="num">Default</th></tr></thead>'
        f"<tbody>{thresholds}</tbody></table>"
    )


def render_html(doc: Mapping[str, Any], charts: FleetCharts) -> str:
    window = float(doc["window_seconds"])
    end = utc(doc["at"])
    gpus = "".join(_gpu(g, window, charts) for g in doc["gpus"])
    gpus = gpus or '<tr><td colspan="7" class="muted">no GPUs judged</td></tr>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="color-scheme" content="light dark"><link rel="icon" href="data:,">'
        f"<title>Rightsizer report · {e(doc['window'])} to {e(end)}</title>"
        f"<style>{STYLE}{REPORT_STYLE}</style></head><body>"
        f"<header><h1>Rightsizer fleet report <small>{e(doc['window'])} to {e(end)}</small></h1>"
        f'<span class="muted">from {e(doc["prometheus_url"])}</span></header>'
        f'<main id="report">{_summary(doc)}{_workloads(doc)}{_costs(doc)}{_slos(doc)}'
        '<h2>GPUs, most money first</h2><table class="gpus"><thead><tr><th>GPU</th>'
        "<th>Pod · namespace · workload</th><th>Verdict</th><th>Bottlenecks</th><th>Recommended</th>"
        f'<th class="num">Saves</th><th>History</th></tr></thead><tbody>{gpus}</tbody></table>'
        f"{_assumptions(doc, charts)}"
        f"<footer>rightsizer report {e(__version__)} · written {e(utc(time.time()))} · charts: "
        "mean of each signal per step, 0-100 %</footer></main></body></html>"
    )
