"""The report's latency SLOs: the exporters' workload latency series over the report's window.

Per workload (``namespace``, ``workload``) and kind (``slo``), summed over the exporters that serve it:

- attainment over the whole window: the increase of ``rightsizer_workload_slo_good_requests_total``
  over that of ``rightsizer_workload_slo_requests_total`` (requests at or under the target over all
  requests; a window with fewer than ``slo_min_requests`` requests judges nothing);
- the target and objective: their latest values (``rightsizer_workload_slo_target_seconds``,
  ``..._objective_ratio``);
- latency at each quantile and the mean: the time average of the exporters' rolling-window values
  (``rightsizer_workload_latency_seconds``, ``..._latency_mean_seconds``), the highest exporter's.

The verdicts then read the same ``SloEvidence`` the live engine builds from the histograms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from ..evidence import QueueEvidence
from ..links import QueueReading
from ..settings import RightsizingSettings
from ..slo.attainment import PER_REQUEST, SloDeclaration, SloEvidence
from ..slo.attainment import Latency as LatencyEvidence
from ..slo.latency import KINDS
from ..slo.summary import slo_json
from .output import table
from .promapi import Sample

QUERIES = 8
# Every query groups by exporter (``instance``) as well: the report's shards split the fleet by
# exporter and concatenate the answers, so a workload served from several shards must be summed
# (or maxed) here, never taken from one shard's part.
WL = "instance, namespace, workload, slo"
Key = tuple[str, str]


class Collector(Protocol):
    w: str

    def run(self, what: str, expr: str) -> list[Sample]: ...


def _by(
    samples: list[Sample], combine: Callable[[float, float], float], *labels: str
) -> dict[tuple[str, ...], float]:
    """Each exporter's answer combined per ``labels`` (``instance`` left out)."""
    out: dict[tuple[str, ...], float] = {}
    for sample in samples:
        key = tuple(sample.labels.get(k, "") for k in labels)
        out[key] = combine(out[key], sample.value) if key in out else sample.value
    return out


def _sum(a: float, b: float) -> float:
    return a + b


def collect(c: Collector, s: RightsizingSettings, latest: bool = False) -> dict[Key, SloEvidence]:
    """Each workload's SLO evidence over ``c.w``; ``latest``: the exporters' latest rolling-window
    figures instead (``rightsizer plan --measured-from``: the workload as the live engine judges it
    now, whatever part of the window Prometheus holds)."""
    w = c.w
    labels = ("namespace", "workload", "slo")

    def by(
        what: str, expr: str, *extra: str, combine: Callable[[float, float], float] = max
    ) -> dict[tuple[str, ...], float]:
        return _by(c.run(what, expr), combine, *labels, *extra)

    target = by("SLOs", f"max by ({WL}) (last_over_time(rightsizer_workload_slo_target_seconds[{w}]))")
    objective = by("SLOs", f"max by ({WL}) (last_over_time(rightsizer_workload_slo_objective_ratio[{w}]))")
    over = "last_over_time" if latest else "avg_over_time"
    if latest:
        requests = by(
            "SLOs", f"sum by ({WL}) (last_over_time(rightsizer_workload_latency_requests[{w}]))", combine=_sum
        )
        latest_attainment = f"last_over_time(rightsizer_workload_slo_window_attainment_ratio[{w}])"
        attained = by("SLOs", f"min by ({WL}) ({latest_attainment})", combine=min)
        good = {k: attained[k] * n for k, n in requests.items() if k in attained}
    else:
        requests = by(
            "SLOs", f"sum by ({WL}) (increase(rightsizer_workload_slo_requests_total[{w}]))", combine=_sum
        )
        good = by(
            "SLOs",
            f"sum by ({WL}) (increase(rightsizer_workload_slo_good_requests_total[{w}]))",
            combine=_sum,
        )
    # Requests of the kinds observed once per request, for workloads with an inter-token latency
    # target (its histogram counts tokens).
    counts = f'increase(rightsizer_workload_latency_seconds_count{{slo=~"e2e|ttft|queue"}}[{w}])'
    itl_target = f'last_over_time(rightsizer_workload_slo_target_seconds{{slo="itl"}}[{w}])'
    per_request = (
        {}
        if latest
        else by(
            "SLOs",
            f"sum by ({WL}) ({counts} and on (instance, namespace, workload) {itl_target})",
            combine=_sum,
        )
    )
    seen = by(
        "latency", f"max by ({WL}) (max_over_time(rightsizer_workload_latency_requests[{w}]))", combine=_sum
    )
    latency = f"{over}(rightsizer_workload_latency_seconds[{w}])"
    quantiles = by("latency", f"max by ({WL}, quantile) ({latency})", "quantile")
    means = by("latency", f"max by ({WL}) ({over}(rightsizer_workload_latency_mean_seconds[{w}]))")
    workloads = sorted({k[:2] for k in (*target, *seen, *means)})
    out: dict[Key, SloEvidence] = {}
    for ns, wl in workloads:
        targets = {kind: target[(ns, wl, kind)] for kind in KINDS if (ns, wl, kind) in target}
        obj = next((objective[(ns, wl, k)] for k in targets if (ns, wl, k) in objective), 0.95)
        declared = None
        if targets:
            declared = SloDeclaration(
                namespace=ns or None,
                workload=wl,
                ttft_seconds=targets.get("ttft"),
                itl_seconds=targets.get("itl"),
                e2e_seconds=targets.get("e2e"),
                queue_seconds=targets.get("queue"),
                objective=obj,
            )
        found = []
        for kind in KINDS:
            k = (ns, wl, kind)
            if k not in seen and k not in target and k not in means:
                continue
            qs = tuple(sorted((float(q), v) for (a, b, c_, q), v in quantiles.items() if (a, b, c_) == k))
            counted = requests.get(k) if kind in targets else None
            n = counted if counted is not None else seen.get(k, 0.0)
            if kind == "itl" and not latest:  # the live engine's rule: requests, not tokens
                n = max(
                    (per_request[x] for x in ((ns, wl, r) for r in PER_REQUEST) if x in per_request),
                    default=n,
                )
            mean_only = not qs and k in means
            attainment = None
            if kind in targets and counted and not mean_only:
                attainment = max(0.0, min(1.0, good.get(k, 0.0) / counted))
            at = next((v for q, v in qs if abs(q - obj) < 1e-9), None)
            found.append(LatencyEvidence(
                kind, targets.get(kind), obj, n, n >= s.slo_min_requests and n > 0, attainment, False,
                at, qs, means.get(k), mean_only,
            ))  # fmt: skip
        if found or declared is not None:
            out[(ns, wl)] = SloEvidence(ns, wl, declared, tuple(found), s.slo_min_requests, None, 0.0)
    return out


def attach(
    queues: Mapping[tuple[str, str], tuple[QueueReading, QueueEvidence]], slos: Mapping[Key, SloEvidence]
) -> dict[tuple[str, str], tuple[QueueReading, QueueEvidence]]:
    """Each queue's evidence with its workload's SLO (by its namespace and workload labels, or its name)."""
    out = {}
    for key, (reading, ev) in queues.items():
        labels = reading.labels
        wl = (labels.get("namespace", ""), labels["workload"]) if "workload" in labels else ("", reading.name)
        found = slos.get(wl)
        server = ev.server
        out[key] = (reading, ev if found is None else replace(ev, slo=replace(found, server=server)))
    return out


def as_json(slos: Iterable[SloEvidence], margin: float) -> list[dict[str, Any]]:
    """The report's ``slos``: each workload with a declared SLO or measured latencies."""
    return [slo_json(ev, None, margin) for ev in sorted(slos, key=lambda e: (e.namespace, e.workload))]


SLO_HEADERS = ("namespace", "workload", "SLO", "latency/target", "worst attainment", "not judged")
SLO_RIGHT = (False, False, False, True, True, False)
SLO_TITLE = "Latency SLOs (latency at the objective over the target; attainment over the window)"


def slo_rows(slos: list[dict[str, Any]]) -> list[list[str]]:
    """One row per workload with a declared SLO (``SLO_HEADERS``), for every format of the report."""
    rows = []
    for s in (s for s in slos if s["state"] != "no_slo"):
        judged = [x for x in s["latencies"] if x["attainment_ratio"] is not None]
        worst = max(judged, key=lambda x: (x["latency_at_objective_seconds"] or 0.0) / x["target_seconds"],
                    default=None)  # fmt: skip
        rows.append([
            s["namespace"] or "-", s["workload"], s["state"].replace("_", " "),
            "-" if s["latency_ratio"] is None else f"{s['latency_ratio']:.2f}",
            "-" if worst is None else f"{worst['slo']} {worst['attainment_ratio']:.1%}",
            "; ".join(s["not_judged"]) or "-",
        ])  # fmt: skip
    return rows


def text_lines(slos: list[dict[str, Any]]) -> list[str]:
    """'Latency SLOs' of the text report: one line per workload with a declared SLO."""
    rows = slo_rows(slos)
    return ["", f"{SLO_TITLE}:", table(list(SLO_HEADERS), rows, list(SLO_RIGHT))] if rows else []
