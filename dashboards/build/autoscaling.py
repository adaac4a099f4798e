"""Autoscaling: queue depth and in-flight work next to replicas (kube-state-metrics), what KEDA got
from its scalers, and the values and freshness of what the adapter serves."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from panels import (
    CLUSTER,
    NAMESPACE,
    cluster_variable,
    datasource_variable,
    new_dashboard,
    query,
    query_variable,
    sel,
    state_panel,
    timeseries_panel,
    zero_when_none,
)
from slo import with_slo_panels

QUEUE = sel(CLUSTER, NAMESPACE, 'queue=~"$queue"')
ADAPTER = sel(CLUSTER, 'job=~"$adapter_job"')
KUBE = sel(CLUSTER, NAMESPACE)
PODS = sel(CLUSTER, NAMESPACE, 'pod!=""')
IDLE_PODS = sel(CLUSTER, NAMESPACE, 'pod!=""', 'verdict="idle"')


def build() -> db.Dashboard:
    return with_slo_panels(
        new_dashboard(
            "rightsizer-autoscaling",
            "Rightsizer / Autoscaling",
            "Queue depth and in-flight work as HPA and KEDA see them, next to the replicas they "
            "decided, the health of the adapter that serves them, and the workloads' latency SLOs.",
        )
        .with_variable(datasource_variable())
        .with_variable(cluster_variable())
        .with_variable(
            query_variable(
                "namespace", "Namespace", f"label_values(rightsizer_queue_depth{sel(CLUSTER)}, namespace)"
            )
        )
        .with_variable(
            query_variable(
                "queue", "Queue", f"label_values(rightsizer_queue_depth{sel(CLUSTER, NAMESPACE)}, queue)"
            )
        )
        .with_variable(
            query_variable(
                "adapter_job", "Adapter job", f"label_values(rightsizer_adapter_rule_up{sel(CLUSTER)}, job)"
            )
        )
        .with_row(db.Row("Queues, as the adapter serves them"))
        .with_panel(
            timeseries_panel(
                "Queue depth",
                "Items waiting, per queue: the adapter's rightsizer_queue_depth (one series "
                "per queue whichever exporters poll it), which HPA divides by its target.",
                "none",
                query(f"max without (instance, job) (rightsizer_queue_depth{QUEUE})", "{{queue}}"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "In flight",
                "Requests being served, for sources that report it (vLLM, TGI, SGLang, JSON).",
                "none",
                query(f"max without (instance, job) (rightsizer_queue_in_flight{QUEUE})", "{{queue}}"),
            ).min(0)
        )
        .with_row(db.Row("Replicas (kube-state-metrics) and KEDA"))
        .with_panel(
            timeseries_panel(
                "Replicas",
                "Available replicas of each Deployment, and what each HPA wants and may have.",
                "none",
                query(f"kube_deployment_status_replicas_available{KUBE}", "{{deployment}} available"),
                query(
                    f"kube_horizontalpodautoscaler_status_desired_replicas{KUBE}",
                    "{{horizontalpodautoscaler}} desired",
                ),
                query(
                    f"kube_horizontalpodautoscaler_spec_max_replicas{KUBE}", "{{horizontalpodautoscaler}} max"
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "KEDA: value per scaler",
                "What KEDA last got from each trigger (for ours: the adapter's "
                "value), and whether the ScaledObject is active.",
                "none",
                query(f"keda_scaler_metrics_value{KUBE}", "{{scaledObject}} {{metric}}"),
                query(f"keda_scaler_active{KUBE}", "{{scaledObject}} active"),
            ).min(0)
        )
        .with_row(db.Row("Adapter: values and freshness"))
        .with_panel(
            timeseries_panel(
                "Age of each rule's values",
                "Seconds since each rule last refreshed: HPA and KEDA see values this old at most.",
                "s",
                query(f"max by (rule) (rightsizer_adapter_cache_age_seconds{ADAPTER})", "{{rule}}"),
            ).min(0)
        )
        .with_panel(
            state_panel(
                "Rules answering",
                "0 while a rule's upstream query or scrape fails (its metric then answers 503).",
                f"min by (rule) (rightsizer_adapter_rule_up{ADAPTER})",
                "{{rule}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "Series per rule",
                "Series each rule's cached vector holds.",
                "none",
                query(f"max by (rule) (rightsizer_adapter_rule_series{ADAPTER})", "{{rule}}"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "KEDA calls and push streams",
                "External-scaler calls per second and open StreamIsActive streams (external-push).",
                "none",
                query(
                    zero_when_none(
                        "sum by (method) "
                        f"(rate(rightsizer_adapter_grpc_requests_total{ADAPTER}[$__rate_interval]))",
                        f"count(rightsizer_adapter_cached_answers{ADAPTER})",
                        "",
                        ("method", "none"),
                    ),
                    "{{method}}",
                ),
                query(f"sum(rightsizer_adapter_keda_streams{ADAPTER})", "open push streams"),
            ).min(0)
        )
        .with_row(db.Row("Per-pod GPU signals (custom.metrics.k8s.io)"))
        .with_panel(
            timeseries_panel(
                "GPU utilization per pod",
                "The adapter's rightsizer_gpu_utilization_ratio: what a Pods metric HPA averages.",
                "percentunit",
                query(f"avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{PODS}) / 100", "{{namespace}}/{{pod}}"),
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            state_panel(
                "Idle per pod",
                "The adapter's rightsizer_gpu_idle: 1 while the pod's GPU is idle (a scale-to-zero signal).",
                f"max by (namespace, pod) (rightsizer_gpu_verdict{IDLE_PODS})",
                "{{namespace}}/{{pod}}",
            )
        )
    )
