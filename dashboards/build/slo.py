"""Latency SLO panels (on the autoscaling dashboard): attainment against the objective, the latency
at the objective against the target, and how fast each target spends its error budget.

Attainment comes from the exporters' SLO counters summed over every exporter (each holds some of a
workload's replicas), so it needs no recording rule; the burn-rate panel reads the recording rules
of deploy/monitoring/prometheusrule.yaml (the series the burn-rate alerts fire on)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from panels import CLUSTER, NAMESPACE, query, sel, timeseries_panel

SLO = sel(CLUSTER, NAMESPACE)
P95 = sel(CLUSTER, NAMESPACE, 'quantile="0.95"')
BY = "namespace, workload, slo"
WHO = "{{namespace}}/{{workload}} {{slo}}"
BURN = "namespace_workload_slo:rightsizer_workload_slo_error_budget_burn:rate"


def with_slo_panels(d: db.Dashboard) -> db.Dashboard:
    return (
        d.with_row(db.Row("Latency SLOs"))
        .with_panel(
            timeseries_panel(
                "SLO attainment (last hour)",
                "Share of the last hour's requests at or under each declared target, over every "
                "exporter of the workload (good / all requests of the SLO counters), and the objective "
                "it must stay above. Absent for an hour without requests.",
                "percentunit",
                query(
                    f"sum by ({BY}) (rate(rightsizer_workload_slo_good_requests_total{SLO}[1h]))"
                    f" / (sum by ({BY}) (rate(rightsizer_workload_slo_requests_total{SLO}[1h])) > 0)",
                    WHO,
                ),
                query(f"max by ({BY}) (rightsizer_workload_slo_objective_ratio{SLO})", f"{WHO} objective"),
            ).max(1)
        )
        .with_panel(
            timeseries_panel(
                "Latency at p95 against the target",
                "Each declared target, and the workload's p95 latency of the same kind over the "
                "right-sizing window (the slowest exporter's), from the servers' histograms.",
                "s",
                query(
                    f"max by ({BY}) (rightsizer_workload_latency_seconds{P95})"
                    f" and on ({BY}) max by ({BY}) (rightsizer_workload_slo_target_seconds{SLO})",
                    f"{WHO} p95",
                ),
                query(f"max by ({BY}) (rightsizer_workload_slo_target_seconds{SLO})", f"{WHO} target"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Latency at the objective over the target",
                "The worst declared target's latency at the objective divided by the target, per "
                "workload: 1 is on the edge, above 1 the SLO is missed (the slowest exporter's, over "
                "the right-sizing window).",
                "none",
                query(
                    f"max by (namespace, workload) (rightsizer_workload_slo_window_latency_ratio{SLO})",
                    "{{namespace}}/{{workload}}",
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Error-budget burn rate",
                "How fast each target spends its error budget (the share of requests allowed to miss "
                "it): 1 spends it exactly over the SLO period. The alerts fire above 14.4 over 1 h and "
                "5 m, and above 6 over 6 h and 30 m. Needs the recording rules of "
                "deploy/monitoring/prometheusrule.yaml.",
                "none",
                query(f"{BURN}1h{SLO}", f"{WHO} 1h"),
                query(f"{BURN}6h{SLO}", f"{WHO} 6h"),
            ).min(0)
        )
    )
