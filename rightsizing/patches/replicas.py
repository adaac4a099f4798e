"""How many replicas, when the verdict is "add replicas" (no bigger GPU carries the work): the count
the measured arrival rate needs, and an HPA and a KEDA ScaledObject that keep at least that many.

- Queue growing at saturation (the servers count requests): each pod's arrivals are what it served
  plus what its queue grew by, per second (Little's law in its steady-state form: what arrives
  either leaves or waits). One replica serves, at saturation, the mean of what each served. The
  replicas needed keep each one under ``1 - margin`` of that: ``ceil(arrivals / (served x (1 - margin)))``.
- A latency SLO missed on capacity without request counts: the latency ratio at the objective scales
  the replicas as an HPA on that ratio with a ``Value`` target would, with the same margin:
  ``ceil(replicas x ratio / (1 - margin))``.
- Neither: the count is not guessed; the README says what is missing.

The autoscalers' target types follow how HPA computes replicas (an external metric's ``Value``
target multiplies the ratio by the ready pods; ``AverageValue`` divides a total by a per-replica
value): the SLO latency ratio, already per replica, is a ``Value`` target; the queue depth, a
total, an ``AverageValue`` one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..catalog import LABEL_VALUE
from ..evidence import Evidence
from .names import TEMPLATES
from .owners import Owner

ADAPTER = "rightsizer-adapter.rightsizer.svc:9443"  # the adapter's KEDA external scaler (deploy/base)
QUEUE_TARGET = "5"  # queued requests per replica, as the adapter's HPA example
RATIO = "rightsizer_workload_slo_latency_ratio"


def adds_replicas(verdict: str, recommended: str, reason: str) -> bool:
    return verdict == "underprovisioned" and recommended == "none" and "add replicas" in reason


@dataclass(frozen=True)
class Replicas:
    today: int
    needed: int | None  # None: not known, ``words`` says why
    words: str


def count(pods: dict[str, list[Evidence]], margin: float) -> Replicas:
    """The replicas the pods' queues (or their SLO) need; ``pods``: pod -> its GPUs' evidence."""
    today, keep = len(pods), 1.0 - margin
    served, arrivals = [], 0.0
    for evidences in pods.values():
        queues = {q.name: q for ev in evidences for q in ev.queues}.values()
        rates = [q.requests_rate for q in queues]
        if not queues or any(r is None for r in rates):
            break
        grew = sum(max(0.0, q.rise) / q.history_seconds for q in queues if q.history_seconds > 0)
        served.append(sum(r or 0.0 for r in rates))
        arrivals += served[-1] + grew
    else:
        per = sum(served) / len(served)
        if per > 0:
            n = max(today + 1, math.ceil(arrivals / (per * keep)))
            return Replicas(today, n, (
                f"{arrivals:.2f} requests/s arrive (what its {today} pods served plus what their queues grew "
                f"by); one replica serves {per:.2f}/s at saturation; at {keep:.0%} of that: "
                f"ceil({arrivals:.2f} / ({per:.2f} x {keep:.2f})) = {n} replicas"))  # fmt: skip
    ratios = [r for evs in pods.values() for ev in evs for q in ev.queues if q.slo and (r := q.slo.ratio)]
    if ratios:
        worst = max(ratios)
        n = max(today + 1, math.ceil(today * worst / keep))
        return Replicas(
            today,
            n,
            (
                f"the latency at the objective is {worst:.2f} x its target; scaled as an HPA on that ratio "
                f"would be, with the {margin:.0%} margin: "
                f"ceil({today} x {worst:.2f} / {keep:.2f}) = {n} replicas"
            ),
        )
    return Replicas(
        today,
        None,
        (
            "how many cannot be said: its servers count no requests (or no queue is linked to it) and no "
            "latency SLO is judged; link its queue with a server that counts requests, or declare an SLO"
        ),
    )


def autoscalers(owner: Owner, r: Replicas, queues: Sequence[str], workload: str, slo: bool,
                margin: float) -> list[dict[str, Any]]:  # fmt: skip
    """An HPA and a KEDA ScaledObject keeping at least ``r.needed`` replicas (only one of them may
    scale the object); [] when the object does not scale or the count is unknown."""
    if r.needed is None or not TEMPLATES.get(owner.kind, ("", (), False))[2]:
        return []
    metrics, triggers = [], []
    target = f"{1 - margin:g}"
    if slo and LABEL_VALUE.match(workload):
        metrics.append({"type": "External", "external": {
            "metric": {"name": RATIO, "selector": {"matchLabels": {"workload": workload}}},
            "target": {"type": "Value", "value": target}}})  # fmt: skip
        push = {"scalerAddress": ADAPTER, "metric": RATIO, "labelSelector": f"workload={workload}"}
        triggers.append(
            {"type": "external-push", "metricType": "Value", "metadata": {**push, "target": target}}
        )
    for q in (q for q in queues if LABEL_VALUE.match(q)):
        metrics.append({"type": "External", "external": {
            "metric": {"name": "rightsizer_queue_depth", "selector": {"matchLabels": {"queue": q}}},
            "target": {"type": "AverageValue", "averageValue": QUEUE_TARGET}}})  # fmt: skip
        triggers.append({"type": "external-push", "metadata": {
            "scalerAddress": ADAPTER, "metric": "rightsizer_queue_depth", "labelSelector": f"queue={q}",
            "target": QUEUE_TARGET}})  # fmt: skip
    if not metrics:
        return []
    ref = {"apiVersion": TEMPLATES[owner.kind][0], "kind": owner.kind, "name": owner.name}
    meta = {"name": owner.name[:200], "namespace": owner.namespace}
    most = 2 * r.needed
    spec = {"scaleTargetRef": ref, "minReplicas": r.needed, "maxReplicas": most, "metrics": metrics}
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta, "spec": spec}
    keda = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": meta,
            "spec": {"scaleTargetRef": ref, "minReplicaCount": r.needed, "maxReplicaCount": most,
                     "triggers": triggers}}  # fmt: skip
    return [hpa, keda]
