"""The status page at ``/``: the fleet's right-sizing answer as one server-rendered HTML document.

Every value that comes from outside (pod names, namespaces, models, queue names and labels, error
texts) passes through ``html.escape``; the page carries its own style and script and fetches
nothing but itself (see ``assets``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from rightsizing.figures import latency, missed_by, monthly
from rightsizing.html_parts.cells import HOURS_PER_MONTH, NONE
from rightsizing.html_parts.cells import VERDICT_ORDER as _VERDICT_ORDER
from rightsizing.html_parts.cells import VERDICT_WORDS as _VERDICT_WORDS
from rightsizing.html_parts.cells import e as _e
from rightsizing.html_parts.cells import money as _money
from rightsizing.html_parts.cells import utc as _utc
from rightsizing.html_parts.cells import verdict_chip as _verdict
from rightsizing.html_parts.charts import svg
from rightsizing.html_parts.style import STYLE
from rightsizing.words import duration as _duration

from .. import __version__
from .assets import SCRIPT
from .model import GpuRow, PageModel


def _savings(row: GpuRow) -> str:
    s = row.savings
    if s is None or (isinstance(s, float) and not math.isfinite(s)):
        return NONE
    if s < 0:  # an upgrade: what it costs, in words, not a red "+"
        return f'<span class="more">costs {_money(-s)}/h more</span>'
    if s == 0:
        return f"{_money(0)}/h"
    return f'<span class="ok">{_money(s)}/h</span>'


def _device(row: GpuRow) -> str:
    ident = row.sample.identity
    mig = f' <span class="tag">MIG {_e(ident.mig_profile)}</span>' if ident.mig_profile else ""
    return (
        f"<b>{_e(ident.index)}</b>{mig}<br>{_e(ident.model)}"
        f'<div class="id muted" title="{_e(ident.uuid)}">{_e(ident.uuid)}</div>'
    )


def _pod(row: GpuRow) -> str:
    pod = row.sample.pod
    if pod is None:
        return '<span class="muted">no pod</span>'
    return (
        f'<span class="pod">{_e(pod.pod)}</span><br>'
        f'<span class="muted">{_e(pod.namespace)} · {_e(row.workload)}</span>'
    )


def _history(row: GpuRow) -> str:
    if row.verdict is None or row.window_seconds <= 0:
        return NONE
    share = min(1.0, row.history_seconds / row.window_seconds)
    return (
        f"{_e(_duration(row.history_seconds))} of {_e(_duration(row.window_seconds))}"
        f'<div class="bar" title="{share:.0%} of the window"><span style="width:{share:.0%}"></span></div>'
    )


def _gpu_rows(row: GpuRow) -> str:
    uuid = row.sample.identity.uuid
    if row.verdict is None:
        reason = f'<div class="reason">{_e(row.why_unjudged)}</div>'
    else:
        reason = f'<div class="reason">{_e(row.reason)}</div>'
    bottlenecks = "".join(f'<span class="tag">{_e(b.replace("_", " "))}</span>' for b in row.bottlenecks)
    bottlenecks += "".join(
        f'<span class="tag finding" title="{_e(evidence)}">{_e(name.replace("_", " "))}</span>'
        for name, evidence in row.findings
    )
    recommended = row.recommended if row.recommended not in (None, "none") else _instead(row)
    main = (
        f'<tr class="gpu" data-uuid="{_e(uuid)}" data-verdict="{_e(row.verdict or "unknown")}">'
        f'<td data-label="GPU">{_device(row)}</td>'
        f'<td data-label="Pod">{_pod(row)}</td>'
        f'<td data-label="Verdict">{_verdict(row.verdict)}{reason}</td>'
        f'<td data-label="Bottlenecks">{bottlenecks or "<span class=muted>none</span>"}</td>'
        f'<td data-label="Recommended">{_e(recommended) if recommended else NONE}</td>'
        f'<td data-label="Saved" class="num">{_savings(row)}</td>'
        f'<td data-label="History">{_history(row)}</td></tr>'
    )
    if not row.charts:
        return main
    charts = "".join(svg(c) for c in row.charts)
    cell = f'<td colspan="7"><div class="grid4">{charts}</div></td>'
    return main + f'<tr class="charts" data-uuid="{_e(uuid)}">{cell}</tr>'


def _summary(m: PageModel) -> str:
    judged = [r for r in m.rows if r.verdict is not None]
    chips = "".join(
        f'<span class="verdict v-{v}">{m.verdict_counts.get(v, 0)} {_e(_VERDICT_WORDS[v])}</span>'
        for v in _VERDICT_ORDER
        if m.verdict_counts.get(v, 0)
    )
    unjudged = sum(1 for r in m.rows if r.verdict is None and not r.mig_parent)
    if unjudged:
        chips += f'<span class="verdict v-unknown">{unjudged} not judged</span>'
    if m.savings is None:
        money = f'<div class="big">{NONE}</div><div class="muted">right-sizing is off</div>'
    else:
        money = (
            f'<div class="big" id="savings">{_money(m.savings)}/h</div>'
            f'<div class="muted">≈ {monthly(m.savings * HOURS_PER_MONTH)} a month, '
            f"over the last {_e(_duration(m.window_seconds or 0))}</div>"
        )
    top = sorted((r for r in judged if r.savings and r.savings > 0), key=lambda r: -(r.savings or 0))[:3]
    top += [r for r in judged if r.verdict == "underprovisioned"][:2]
    items = "".join(_recommendation(r) for r in top) or "<li class=muted>nothing to change</li>"
    return (
        '<section class="cards">'
        f'<div class="card"><h3>GPUs</h3><div class="big">{len(m.rows)}</div>'
        f'<div class="chips">{chips}</div></div>'
        f'<div class="card"><h3>On the table</h3>{money}</div>'
        f'<div class="card wide"><h3>Top recommendations</h3><ul>{items}</ul></div>'
        "</section>"
    )


def _instead(row: GpuRow) -> str | None:
    """What an under-provisioned GPU that no single GPU relieves needs instead, as its reason
    says it (no "move to none")."""
    if row.verdict != "underprovisioned":
        return None
    for fix, words in (("add replicas", "add replicas"), ("split the model", "split the model across GPUs")):
        if fix in row.reason:
            return words
    return "no single GPU is enough"


def _recommendation(r: GpuRow) -> str:
    ident = r.sample.identity
    who = f" ({_e(r.workload)})" if r.workload else ""
    instead = _instead(r) if r.recommended in (None, "none") else None
    if r.verdict == "idle":
        what = "release it"
    elif instead is not None:
        return f"<li>GPU {_e(ident.index)}{who}: {_e(instead)}</li>"
    elif r.verdict == "underprovisioned":
        what = f"move to {_e(r.recommended)}"
    else:
        what = f"{_e(r.current or ident.model)} → {_e(r.recommended)}"
    return f"<li>GPU {_e(ident.index)}{who}: {what} — {_savings(r)}</li>"


def _queues(m: PageModel) -> str:
    if not m.queues:
        return ""
    rows = []
    for q in m.queues:
        up = q.get("up")
        state = "up" if up else ("not polled yet" if up is None else "down")
        cls = "ok" if up else ("muted" if up is None else "bad")
        error = f'<div class="reason">{_e(q["error"])}</div>' if q.get("error") else ""
        pairs = dict(q.get("labels") or {}).items()
        labels = "".join(f'<span class="tag">{_e(k)}={_e(v)}</span>' for k, v in pairs)
        rows.append(
            f'<tr class="queue"><td data-label="Queue"><b>{_e(q.get("name"))}</b><br>{labels}</td>'
            f'<td data-label="Kind">{_e(q.get("kind", ""))}</td>'
            f'<td data-label="Depth" class="num">{_number(q.get("depth"))}</td>'
            f'<td data-label="In flight" class="num">{_number(q.get("in_flight"))}</td>'
            f'<td data-label="Source"><span class="{cls}">{state}</span>{error}</td></tr>'
        )
    return (
        '<h2>Queues</h2><table><thead><tr><th>Queue</th><th>Kind</th><th class="num">Depth</th>'
        f'<th class="num">In flight</th><th>Source</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _slo_state(s: Mapping[str, Any]) -> str:
    """'missed by 64 %', 'met, 12 % under', 'not judged'."""
    ratio, state = s.get("latency_ratio"), s.get("state")
    if state == "missed" and isinstance(ratio, (int, float)):
        return f'<span class="bad">{_e(missed_by(ratio))}</span>'
    if state in ("met", "met_with_room") and isinstance(ratio, (int, float)):
        room = " with room" if state == "met_with_room" else ""
        return f'<span class="ok">met{room}, {1 - ratio:.0%} under</span>'
    return '<span class="muted">not judged</span>'


def _slo_targets(s: Mapping[str, Any]) -> str:
    """Each declared target: its latency at the objective against it."""
    out = []
    for x in s.get("latencies") or ():
        target = x.get("target_seconds")
        if not isinstance(target, (int, float)):
            continue
        at = x.get("latency_at_objective_seconds")
        got = latency(at) if isinstance(at, (int, float)) else "unknown"
        q = (x.get("quantiles") or {}).keys()
        p = next((k for k in q if k not in ("p50", "p95", "p99")), "p95" if "p95" in q else "")
        out.append(f'<span class="tag">{_e(x.get("slo"))} {_e(p)} {_e(got)} / {_e(latency(target))}</span>')
    return "".join(out)


def _slos(m: PageModel) -> str:
    shown = [s for s in m.slos if s.get("state") != "no_slo"]
    lost = "".join(f'<p class="slo-unmatched bad">{_e(line)}</p>' for line in m.slos_unmatched)
    if not shown:
        return f"<h2>Latency SLOs</h2>{lost}" if lost else ""
    rows = []
    for s in shown:
        notes = [str(w) for w in s.get("not_judged") or ()]
        invalid = s.get("invalid_histograms")
        for kind, reason in (invalid.items() if isinstance(invalid, Mapping) else ()):
            if not any(str(reason) in n for n in notes):  # judged on earlier readings, refused now
                notes.append(f"{kind}: histogram refused at the last poll: invalid histogram: {reason}")
        why = "; ".join(notes)
        note = f'<div class="reason">{_e(why)}</div>' if why else ""
        rows.append(
            f'<tr class="slo"><td data-label="Workload"><b>{_e(s.get("workload"))}</b>'
            f'<br><span class="muted">{_e(s.get("namespace") or "")}</span></td>'
            f'<td data-label="Server">{_e(s.get("server") or "")}</td>'
            f'<td data-label="SLO">{_slo_state(s)}{note}</td>'
            f'<td data-label="Targets">{_slo_targets(s)}</td></tr>'
        )
    return (
        f"<h2>Latency SLOs</h2>{lost}<table><thead><tr><th>Workload</th><th>Server</th><th>SLO</th>"
        f'<th>Latency at the objective / target</th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _number(v: object) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
        return f"{v:g}"
    return '<span class="muted">unknown</span>'


def _collectors(m: PageModel) -> str:
    rows = "".join(
        f'<tr class="collector"><td data-label="Collector">{_e(c.name)}</td><td data-label="State">'
        + ('<span class="ok">ok</span>' if c.success else '<span class="bad">failing</span>')
        + (f'<div class="reason">{_e(c.error)}</div>' if c.error else "")
        + f'</td><td data-label="Took" class="num">{c.duration_seconds * 1000:.1f} ms</td></tr>'
        for c in m.collectors
    )
    return (
        '<h2>Collectors</h2><table><thead><tr><th>Collector</th><th>State</th><th class="num">Took</th>'
        f"</tr></thead><tbody>{rows}</tbody></table>"
    )


def _links(m: PageModel) -> str:
    paths = ["/metrics", "/api/v1/gpus", *(f"/api/v1/{s}" for s in m.sections if s != "gpus")]
    paths += ["/api/v1/pods"] if "pods" not in m.sections else []
    paths += ["/healthz", "/readyz"]
    # Relative links, so the page also works behind a proxy that serves it under a path prefix.
    return "<nav>" + "".join(f'<a href="{_e(p.lstrip("/"))}">{_e(p)}</a>' for p in paths) + "</nav>"


def _window_note(m: PageModel) -> str:
    """The window the verdicts judge, and that the report judges its own: a page that says B200
    beside a report that says "add replicas" may simply have judged another stretch of time."""
    if not m.window_seconds:
        return ""
    return (
        '<p class="note" id="window-note">Verdicts judge this exporter\'s last '
        f"{_e(_duration(m.window_seconds))} (rightsizing.window_seconds); rightsizer report judges "
        "the window it is given (--window, 7 d by default) from Prometheus, so its verdicts may "
        "differ.</p>"
    )


def _price_note(m: PageModel) -> str:
    """Which price set (catalog.price_set) the savings and recommendations are priced with."""
    if m.price_set is None:
        return ""
    name, description = m.price_set
    return (
        f'<p class="note" id="price-set">Prices: <code>{_e(name)}</code>, {_e(description)}. '
        "Chosen with catalog.price_set; prices set in catalog.prices win over it.</p>"
    )


def render(m: PageModel) -> str:
    drivers = ", ".join(m.drivers) or "unknown"
    refresh = max(5, math.ceil(m.interval))
    gpus = "".join(_gpu_rows(r) for r in m.rows)
    gpus = gpus or '<tr><td colspan="7" class="muted">no GPUs found</td></tr>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        '<meta name="color-scheme" content="light dark"><link rel="icon" href="data:,">'
        f"<title>Rightsizer · node {_e(m.hostname)}</title><style>{STYLE}</style></head>"
        f'<body data-refresh="{refresh}"><header><h1>Rightsizer <small>node '
        f'<span id="node">{_e(m.hostname)}</span></small></h1>'
        f'<span class="live">exporter unreachable: showing the last answer</span>{_links(m)}</header>'
        f'<main id="status">{_summary(m)}'
        f'<h2>GPUs</h2>{_window_note(m)}{_price_note(m)}'
        '<table class="gpus"><thead><tr><th>GPU</th><th>Pod · namespace · workload</th>'
        '<th>Verdict</th><th>Bottlenecks</th><th>Recommended</th><th class="num">Saved</th><th>History</th>'
        f"</tr></thead><tbody>{gpus}</tbody></table>"
        f"{_slos(m)}{_queues(m)}{_collectors(m)}"
        f'<footer>Sampled at <span id="sampled-at">{_utc(m.timestamp)}</span> from {_e(m.source)} · '
        f"NVIDIA driver {_e(drivers)} · rightsizer-exporter {_e(__version__)} · "
        f"charts: window buckets (mean per bucket) · refreshes every {refresh} s</footer></main>"
        f"<script>{SCRIPT}</script></body></html>"
    )
