"""Rows and API objects of the workload latency and SLO families.

Per workload (``namespace``, ``workload``) and kind (``slo`` = ttft | itl | e2e | queue), over the
right-sizing window: the requests observed, the latency at p50/p95/p99 and at the objective, the
mean, and for a declared target its attainment, target, objective and the workload's latency
ratio; the cumulative requests and good requests of each declared target; and over the scaling
window the ratio and attainments the adapter serves, with ``rightsizer_workload_slo_scaling_up``
saying whether they can be judged now (and ``rightsizer_workload_slo_scaling_unjudged_info`` why
not, while it is 0). Figures a window cannot judge (fewer than the minimum requests, a mean-only
server, an absent or refused histogram) are absent, never 0, and a figure that is not finite is
never published.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rightsizer_core.snapshot import Row
from rightsizing.slo.attainment import SloEvidence
from rightsizing.slo.windows import Counted, Scaling

ATTAINMENT = "rightsizer_workload_slo_window_attainment_ratio"
TARGET = "rightsizer_workload_slo_target_seconds"
OBJECTIVE = "rightsizer_workload_slo_objective_ratio"
LATENCY = "rightsizer_workload_latency_seconds"
MEAN = "rightsizer_workload_latency_mean_seconds"
REQUESTS = "rightsizer_workload_latency_requests"
RATIO = "rightsizer_workload_slo_window_latency_ratio"
REQUESTS_TOTAL = "rightsizer_workload_slo_requests_total"
GOOD_TOTAL = "rightsizer_workload_slo_good_requests_total"
SCALING_RATIO = "rightsizer_workload_slo_scaling_latency_ratio"
SCALING_ATTAINMENT = "rightsizer_workload_slo_scaling_attainment_ratio"
SCALING_UP = "rightsizer_workload_slo_scaling_up"
SCALING_UNJUDGED = "rightsizer_workload_slo_scaling_unjudged_info"
LATENCY_SUM, LATENCY_COUNT = f"{LATENCY}_sum", f"{LATENCY}_count"  # the summary's other samples
FAMILY_NAMES = (
    ATTAINMENT, TARGET, OBJECTIVE, LATENCY, MEAN, REQUESTS, RATIO, REQUESTS_TOTAL, GOOD_TOTAL,
    SCALING_RATIO, SCALING_ATTAINMENT, SCALING_UP, SCALING_UNJUDGED, LATENCY_SUM, LATENCY_COUNT,
)  # fmt: skip


def _r(x: float, digits: int = 6) -> float:
    return round(x, digits)


def _finite(rows: list[Row]) -> tuple[Row, ...]:
    return tuple(r for r in rows if math.isfinite(r.value))


def _mean_only(ev: SloEvidence, kind: str) -> bool:
    x = ev.get(kind)
    return x is not None and x.mean_only


def slo_rows(
    evidence: Mapping[tuple[str, str], SloEvidence],
    scaling: Mapping[tuple[str, str], Scaling],
    counted: Mapping[tuple[str, str, str], Counted],
) -> dict[str, tuple[Row, ...]]:
    out: dict[str, list[Row]] = {name: [] for name in FAMILY_NAMES}
    for (namespace, workload), ev in sorted(evidence.items()):
        base = (("namespace", namespace), ("workload", workload))
        for kind, target in ev.targets.items():
            labels = (*base, ("slo", kind))
            out[TARGET].append(Row(target, labels))
            out[OBJECTIVE].append(Row(ev.declared.objective if ev.declared else 0.95, labels))
        for x in ev.latencies:
            labels = (*base, ("slo", x.kind))
            out[REQUESTS].append(Row(x.requests, labels))
            if not x.enough:
                continue
            if x.mean is not None:
                out[MEAN].append(Row(_r(x.mean), labels))
            for q, v in x.quantiles:
                out[LATENCY].append(Row(_r(v), (*labels, ("quantile", f"{q:g}"))))
            if x.judged and x.attainment is not None:
                out[ATTAINMENT].append(Row(_r(x.attainment), labels))
        ratio = ev.ratio
        if ratio is not None:
            out[RATIO].append(Row(_r(ratio), base))
    for (namespace, workload, kind), c in sorted(counted.items()):
        labels = (("namespace", namespace), ("workload", workload), ("slo", kind))
        out[LATENCY_COUNT].append(Row(_r(c.requests, 3), labels))
        out[LATENCY_SUM].append(Row(_r(c.seconds, 6), labels))
        found = evidence.get((namespace, workload))
        if found is not None and kind in found.targets and not _mean_only(found, kind):
            out[REQUESTS_TOTAL].append(Row(_r(c.requests, 3), labels))
            out[GOOD_TOTAL].append(Row(_r(c.good, 3), labels))
    for (namespace, workload), sc in sorted(scaling.items()):
        base = (("namespace", namespace), ("workload", workload))
        out[SCALING_UP].append(Row(1.0 if sc.evidence is not None else 0.0, base))
        if sc.evidence is None:
            why = sc.reason or sc.why_not or "not judged"
            out[SCALING_UNJUDGED].append(Row(1.0, (*base, ("reason", why))))
            continue
        ratio = sc.evidence.ratio
        if ratio is not None:
            out[SCALING_RATIO].append(Row(_r(ratio), base))
        for x in sc.evidence.judged:
            if x.attainment is not None:
                out[SCALING_ATTAINMENT].append(Row(_r(x.attainment), (*base, ("slo", x.kind))))
    return {name: _finite(rows) for name, rows in out.items()}
