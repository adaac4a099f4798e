"""Exporter and adapter health: up, scrape cost, freshness, collectors and queue sources; the
adapter's requests, latency, upstream queries and refreshes; the exporter pods' CPU and memory."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from panels import (
    CLUSTER,
    INSTANCE,
    cluster_variable,
    datasource_variable,
    new_dashboard,
    query,
    query_variable,
    sel,
    stat_panel,
    state_panel,
    table_panel,
    timeseries_panel,
    zero_when_none,
)

EXPORTER_JOB = sel(CLUSTER, 'job=~"$exporter_job"')
E = sel(CLUSTER, 'job=~"$exporter_job"', INSTANCE)
A = sel(CLUSTER, 'job=~"$adapter_job"')
EXPORTER_PODS = sel(CLUSTER, 'container="exporter"', 'pod=~"rightsizer-exporter-.*"')


def per_second(family: str, by: str, selector: str) -> str:
    return f"sum by ({by}) (rate({family}{selector}[$__rate_interval]))"


def p99(family: str, by: str) -> str:
    return f"histogram_quantile(0.99, {per_second(family + '_bucket', 'le, ' + by, A)})"


def build() -> db.Dashboard:
    return (
        new_dashboard(
            "rightsizer-health",
            "Rightsizer / Exporter and adapter health",
            "Are the exporters and adapters up, fresh and cheap, and are their sources answering?",
        )
        .with_variable(datasource_variable())
        .with_variable(cluster_variable())
        .with_variable(
            query_variable(
                "exporter_job", "Exporter job", f"label_values(rightsizer_build_info{sel(CLUSTER)}, job)"
            )
        )
        .with_variable(
            query_variable(
                "adapter_job", "Adapter job", f"label_values(rightsizer_adapter_rule_up{sel(CLUSTER)}, job)"
            )
        )
        .with_variable(
            query_variable(
                "instance", "Exporter", f"label_values(rightsizer_build_info{EXPORTER_JOB}, instance)"
            )
        )
        .with_row(db.Row("Exporters"))
        .with_panel(
            stat_panel("Exporters up", "Targets Prometheus scrapes successfully.", "none", f"sum(up{E})")
        )
        .with_panel(
            stat_panel("Exporters down", "Targets Prometheus cannot scrape.", "none", f"sum(1 - up{E})")
        )
        .with_panel(
            stat_panel(
                "GPUs answering",
                "GPUs whose NVML calls answered this cycle.",
                "none",
                f"sum(rightsizer_gpu_up{E})",
            )
        )
        .with_panel(
            stat_panel(
                "GPUs not answering", "Lost, hung or erroring GPUs.", "none", f"sum(1 - rightsizer_gpu_up{E})"
            )
        )
        .with_panel(
            table_panel(
                "Versions",
                "Exporter versions running.",
                query(f"count by (version, python_version) (rightsizer_build_info{E})"),
                rename={"Value": "exporters"},
                width=8,
                height=5,
            )
        )
        .with_panel(
            timeseries_panel(
                "Scrape duration",
                "How long Prometheus waits for /metrics (pre-rendered bytes: flat whatever NVML does).",
                "s",
                query(f"scrape_duration_seconds{E}", "{{instance}}"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Sample age",
                "Seconds since the sample the exporter publishes was taken.",
                "s",
                query(f"time() - rightsizer_last_sample_timestamp_seconds{E}", "{{instance}}"),
            ).min(0)
        )
        .with_panel(
            state_panel(
                "Collectors succeeding",
                "1 when the collector's last run succeeded.",
                f"rightsizer_collector_success{E}",
                "{{instance}} {{collector}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "Collector duration",
                "Duration of each collector's last run.",
                "s",
                query(f"rightsizer_collector_duration_seconds{E}", "{{instance}} {{collector}}"),
            ).min(0)
        )
        .with_panel(
            state_panel(
                "Queue sources answering",
                "0 while a queue source is down, slow or "
                "answering garbage (its depth is then not published as fresh).",
                f"rightsizer_queue_source_up{E}",
                "{{instance}} {{queue}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "Since each queue's last good poll",
                "",
                "s",
                query(
                    f"time() - rightsizer_queue_last_success_timestamp_seconds{E}", "{{instance}} {{queue}}"
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Exporter pods: CPU and memory (cAdvisor)",
                "dcgm-exporter ships with a 512Mi limit; compare.",
                "none",
                query(
                    "sum by (pod) "
                    f"(rate(container_cpu_usage_seconds_total{EXPORTER_PODS}[$__rate_interval]))",
                    "{{pod}} CPU cores",
                ),
                query(
                    f"sum by (pod) (container_memory_working_set_bytes{EXPORTER_PODS}) / 1048576",
                    "{{pod}} working set MiB",
                ),
                width=24,
            ).min(0)
        )
        .with_row(db.Row("Adapters"))
        .with_panel(stat_panel("Adapters up", "Adapter replicas Prometheus scrapes.", "none", f"sum(up{A})"))
        .with_panel(
            stat_panel(
                "Rules failing",
                "Rules whose last refresh failed (their metrics answer 503).",
                "none",
                f"sum(1 - rightsizer_adapter_rule_up{A})",
            )
        )
        .with_panel(
            stat_panel(
                "Oldest values",
                "Age of the stalest rule's values.",
                "s",
                f"max(rightsizer_adapter_cache_age_seconds{A})",
                width=8,
            )
        )
        .with_panel(
            stat_panel(
                "Cached answers",
                "Distinct selector answers memoized since the last refresh.",
                "none",
                f"sum(rightsizer_adapter_cached_answers{A})",
                width=8,
            )
        )
        .with_panel(
            timeseries_panel(
                "Requests by endpoint and code",
                "",
                "reqps",
                query(
                    zero_when_none(
                        per_second("rightsizer_adapter_requests_total", "endpoint, code", A),
                        f"count(rightsizer_adapter_cached_answers{A})",
                        "",
                        ("endpoint", "none"),
                    ),
                    "{{endpoint}} {{code}}",
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Request latency p99",
                "",
                "s",
                query(p99("rightsizer_adapter_request_duration_seconds", "endpoint"), "{{endpoint}}"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Upstream queries by outcome",
                "One query per rule per refresh, however many HPAs ask.",
                "reqps",
                query(
                    per_second("rightsizer_adapter_upstream_queries_total", "source, outcome", A),
                    "{{source}} {{outcome}}",
                ),
                query(
                    per_second("rightsizer_adapter_refreshes_total", "instance", A), "{{instance}} refreshes"
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Refresh time",
                "Mean seconds a refresh took, and of each second how much its worker threads paused "
                "so that the requests answered meanwhile did not wait (adapter/giveway.py).",
                "s",
                query(
                    f"{per_second('rightsizer_adapter_refresh_duration_seconds_sum', 'instance', A)}"
                    f" / {per_second('rightsizer_adapter_refresh_duration_seconds_count', 'instance', A)}",
                    "{{instance}} refresh",
                ),
                query(
                    per_second("rightsizer_adapter_worker_pause_seconds_total", "instance", A),
                    "{{instance}} paused for requests",
                ),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Upstream query latency p99",
                "Prometheus queries (or exporter scrapes in direct mode).",
                "s",
                query(p99("rightsizer_adapter_upstream_query_duration_seconds", "source"), "{{source}}"),
            ).min(0)
        )
    )
