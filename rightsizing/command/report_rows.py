"""The report's rows: one per judged GPU (or MIG instance) and pod, most money first, as the JSON,
CSV, text, HTML and Markdown formats show them."""

from __future__ import annotations

from typing import Any

from ..balance import findings
from ..cost import unit_cost
from .report import Fleet


def as_rows(fleet: Fleet) -> list[dict[str, Any]]:
    """One row per unit, most money first (savings descending; upgrades, then no-data last)."""
    rows: list[dict[str, Any]] = []
    cost_of = {k: c for c in fleet.costs for k in c.gpus}
    for u in fleet.units:
        a, ev = u.assessment, u.evidence
        cost = cost_of.get("\x00".join(u.key))
        rows.append(
            {
                "uuid": u.labels.get("UUID", ""),
                "gpu": u.labels.get("gpu", ""),
                "mig_profile": u.labels.get("GPU_I_PROFILE") or None,
                # Two instances of one profile on a GPU differ only by their GPU instance id.
                "mig_instance_id": int(u.labels["GPU_I_ID"]) if u.labels.get("GPU_I_ID") else None,
                "host": u.labels.get("Hostname") or u.labels.get("hostname") or u.labels.get("instance", ""),
                "instance": u.labels.get("instance") or None,
                "model": ev.model,
                "namespace": u.labels.get("namespace") or None,
                "pod": u.labels.get("pod") or None,
                "verdict": a.verdict,
                "current": a.current,
                "recommended": a.recommended,
                "hourly_price_dollars": u.hourly_price_dollars,
                "hourly_savings_dollars": None
                if a.hourly_savings_dollars is None
                else round(a.hourly_savings_dollars, 4),
                "fit_score": None if a.fit_score is None else round(a.fit_score, 3),
                "bottlenecks": list(a.bottlenecks),
                "summary": a.summary,
                "deciding": a.deciding or None,
                "reason": a.reason,
                "price_source": a.price_source or None,
                "workload_change": a.workload_change or None,
                "samples": ev.samples,
                "history_seconds": round(ev.history_seconds),
                "memory_peak_bytes": None if ev.memory_peak_bytes is None else round(ev.memory_peak_bytes),
                "activity_p95_ratio": None if ev.activity_p95 is None else round(ev.activity_p95, 4),
                **unit_cost(cost),
                "findings": [f.name for f in findings(ev)],
                "findings_evidence": [f.evidence for f in findings(ev)],
            }
        )
    rows.sort(
        key=lambda r: (
            r["hourly_savings_dollars"] is None,
            -(r["hourly_savings_dollars"] or 0.0),
            -(r["hourly_price_dollars"] or 0.0),
            r["uuid"],
        )
    )
    return rows

