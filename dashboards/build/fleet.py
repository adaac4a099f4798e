"""Fleet right-sizing: verdicts, money per hour on the table, who is over- and under-provisioned,
idle GPUs and for how long. Workload rows come from deploy/monitoring's recording rules."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.models import dashboard as dm
from panels import (
    CLUSTER,
    INSTANCE,
    MODEL_OWN,
    NAMESPACE,
    bar_panel,
    cluster_variable,
    datasource_variable,
    new_dashboard,
    query,
    query_variable,
    sel,
    stat_panel,
    table_panel,
    timeseries_panel,
)

OWN = (CLUSTER, INSTANCE, MODEL_OWN, NAMESPACE)
GPU = sel(*OWN)
JOIN = "on (instance, UUID, GPU_I_ID)"  # one GPU or MIG instance across rightsizer_* families
LEGEND = "{{Hostname}} GPU {{gpu}} {{model_name}}"
SAVINGS = f"clamp_min(rightsizer_gpu_hourly_savings_dollars{GPU}, 0)"
WORKLOAD = sel(CLUSTER, NAMESPACE)
# Cost per inference: series per inference server's queue (no GPU labels); the closing brace is
# added where the option is chosen.
COST = f'rightsizer_workload_cost_dollars{{{CLUSTER}, {INSTANCE}, per="million_tokens"'
TOKENS_PER_SECOND = f'rightsizer_workload_throughput_per_second{{{CLUSTER}, {INSTANCE}, unit="tokens"'
BALANCE = f"rightsizer_gpu_balance_finding{GPU}"
PRESSURE = "rightsizer_host_pressure_stalled_ratio" + sel(CLUSTER, INSTANCE, 'kind="full"')
BY_SERVER = "max by (cluster, instance, queue, kind)"  # one row per server: today's and projected merge


def verdict(name: str) -> str:
    return "rightsizer_gpu_verdict" + sel(*OWN, 'verdict="' + name + '"')


def idle_for() -> str:
    """Seconds each idle GPU has been idle: since its last non-idle moment in the range or, if it
    was idle throughout, since the range began (a lower bound)."""
    return (
        f"time() - (\n"
        f"  max_over_time(timestamp({verdict('idle')} == 0)[$__range:$__interval])\n"
        f"  or\n"
        f"  min_over_time(timestamp({verdict('idle')} == 1)[$__range:$__interval])\n"
        f")\nand {JOIN} ({verdict('idle')} == 1)"
    )


def build() -> db.Dashboard:
    return (
        new_dashboard(
            "rightsizer-fleet",
            "Rightsizer / Fleet right-sizing",
            "Every GPU's verdict, the money per hour a better-fitting GPU would save, and who holds "
            "idle, over- and under-provisioned GPUs.",
        )
        .with_variable(datasource_variable())
        .with_variable(cluster_variable())
        .with_variable(
            query_variable(
                "instance", "Exporter", f"label_values(rightsizer_gpu_info{sel(CLUSTER)}, instance)"
            )
        )
        .with_variable(
            query_variable(
                "model", "GPU model", f"label_values(rightsizer_gpu_info{sel(CLUSTER, INSTANCE)}, model_name)"
            )
        )
        .with_variable(
            query_variable(
                "namespace",
                "Namespace",
                f"label_values(rightsizer_gpu_info{sel(CLUSTER, INSTANCE)}, namespace)",
            )
        )
        .with_row(db.Row("Verdicts and money"))
        .with_panel(
            stat_panel(
                "GPUs",
                "GPUs and MIG instances the exporters see.",
                "none",
                f"count(rightsizer_gpu_info{GPU})",
            )
        )
        .with_panel(
            stat_panel(
                "Money per hour on the table",
                "What moving every over-provisioned GPU to the cheapest catalog "
                "GPU that carries its work would save per hour (GPUs that need a dearer one count 0).",
                "currencyUSD",
                f"sum({SAVINGS})",
                width=5,
                decimals=2,
            )
        )
        .with_panel(
            stat_panel(
                "Per month",
                "The same, times 730 hours.",
                "currencyUSD",
                f"sum({SAVINGS}) * 730",
                width=5,
                decimals=0,
            )
        )
        .with_panel(
            stat_panel(
                "Fleet fit score",
                "Mean fit score: 1 when every GPU fits its work.",
                "percentunit",
                f"avg(rightsizer_gpu_fit_score{GPU})",
                decimals=0,
            )
        )
        .with_panel(
            stat_panel(
                "Idle GPUs",
                "GPUs whose activity stayed under the idle threshold long "
                "enough (never judged from memory use).",
                "none",
                f"count({verdict('idle')} == 1)",
                width=6,
            ).no_value("0")
        )
        .with_panel(
            bar_panel(
                "GPUs per verdict",
                "Current verdict of every GPU.",
                "none",
                f"count by (verdict) (rightsizer_gpu_verdict{GPU} == 1)",
                "{{verdict}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "GPUs per verdict over time",
                "How the fleet's verdicts move.",
                "none",
                query(f"count by (verdict) (rightsizer_gpu_verdict{GPU} == 1)", "{{verdict}}"),
            )
        )
        .with_row(db.Row("Where the money is"))
        .with_panel(
            table_panel(
                "Over-provisioned GPUs",
                "The ten GPUs with the most to save, with the cheaper option that "
                "carries their work and why.",
                query(
                    f"sort_desc(topk(10, rightsizer_gpu_hourly_savings_dollars{GPU} > 0) * {JOIN} "
                    f"group_left (recommended, reason) rightsizer_gpu_recommendation_info{GPU})"
                ),
                rename={"Value": "$ per hour saved"},
            ).unit("currencyUSD")
        )
        .with_panel(
            table_panel(
                "Under-provisioned GPUs",
                "GPUs whose work does not fit (memory at capacity, or saturated "
                "while their queue grows), with the GPU they need; the value is the fit score.",
                query(
                    f"(rightsizer_gpu_fit_score{GPU} and {JOIN} ({verdict('underprovisioned')} == 1)) "
                    f"* {JOIN} "
                    f"group_left (recommended, reason) rightsizer_gpu_recommendation_info{GPU}"
                ),
                rename={"Value": "Fit score"},
            ).unit("percentunit")
        )
        .with_panel(
            table_panel(
                "Workloads",
                "Per workload (pod name less its generated suffix): money per hour a better fit "
                "saves (negative: it needs a dearer GPU), activity p95 and memory peak. Needs the recording "
                "rules of deploy/monitoring.",
                query(f"sort_desc(namespace_workload:rightsizer_gpu_hourly_savings_dollars:sum{WORKLOAD})"),
                query(f"namespace_workload:rightsizer_gpu_activity_p95_ratio:max{WORKLOAD}"),
                query(f"namespace_workload:rightsizer_gpu_memory_peak_bytes:max{WORKLOAD}"),
                merge=True,
                rename={
                    "Value #A": "$ per hour saved",
                    "Value #B": "Activity p95",
                    "Value #C": "Memory peak",
                },
            )
            .override_by_name("Value #A", [dm.DynamicConfigValue("unit", "currencyUSD")])
            .override_by_name("Value #B", [dm.DynamicConfigValue("unit", "percentunit")])
            .override_by_name("Value #C", [dm.DynamicConfigValue("unit", "bytes")])
        )
        .with_row(db.Row("Cost per inference"))
        .with_panel(
            table_panel(
                "Cost per million tokens per inference server",
                "Each inference server's GPUs (the queue's links): generated tokens per second measured "
                "over the right-sizing window, dollars per million tokens at today's price, and projected "
                "on the recommended GPUs (throughput scaled by the resource that binds the work).",
                query(f"sort_desc({BY_SERVER} ({COST}, option=\"current\"}}))"),
                query(f"{BY_SERVER} ({COST}, option=\"recommended\"}})"),
                query(f"{BY_SERVER} ({TOKENS_PER_SECOND}, option=\"current\"}})"),
                merge=True,
                rename={
                    "Value #A": "$ per M tokens",
                    "Value #B": "$ per M tokens recommended",
                    "Value #C": "Tokens per second",
                },
                width=14,
            )
            .override_by_name("Value #A", [dm.DynamicConfigValue("unit", "currencyUSD")])
            .override_by_name("Value #B", [dm.DynamicConfigValue("unit", "currencyUSD")])
        )
        .with_panel(
            timeseries_panel(
                "Dollars per million tokens",
                "Measured cost per million generated tokens of each inference server's GPUs.",
                "currencyUSD",
                query(f"{COST}, option=\"current\"}}", "{{queue}} ({{kind}})"),
                width=10,
            )
        )
        .with_row(db.Row("System balance"))
        .with_panel(
            stat_panel(
                "GPUs with a balance finding",
                "GPUs whose place in the host holds them back (a PCIe link trained below its maximum, "
                "a container on no CPU of the GPU's NUMA node), whatever their verdict; each GPU once.",
                "none",
                f"sum(max by (cluster, instance, UUID, GPU_I_ID) ({BALANCE}))",
                width=6,
            )
        )
        .with_panel(
            table_panel(
                "Balance findings per GPU",
                "1 where a check finds a problem, 0 where it finds none, absent where it cannot tell. "
                "pcie_link_degraded: the best PCIe link over the window is below the GPU's maximum; "
                "numa_mismatch: none of the CPUs the GPU's container may run on is on the GPU's NUMA "
                "node. The evidence is in /api/v1/gpus.",
                query(f"sort_desc({BALANCE})"),
                rename={"Value": "Found"},
                width=18,
            )
        )
        .with_panel(
            bar_panel(
                "GPUs flagged per check",
                "How many of the GPUs each balance check judged it flags.",
                "none",
                f"sum by (finding) ({BALANCE})",
                "{{finding}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "Host stalled on memory or I/O (PSI)",
                "Share of time all busy tasks of the node stall on memory or I/O (pressure stall "
                "information, 'full'); at 10 % or more, a GPU's gaps count as starvation for "
                "data_loading. Absent on kernels without PSI.",
                "percentunit",
                query(f"max by (cluster, instance, resource) ({PRESSURE})", "{{instance}} {{resource}}"),
            )
        )
        .with_row(db.Row("Idle GPUs"))
        .with_panel(
            table_panel(
                "Idle GPUs and for how long",
                "Idle time of each idle GPU within the dashboard's range.",
                query(idle_for()),
                rename={"Value": "Idle for"},
                width=12,
            ).unit("s")
        )
        .with_panel(
            bar_panel(
                "Activity p95 per GPU",
                "95th percentile of SM (or GR engine) activity over "
                "the exporter's window; GPU_UTIL where profiling is not available.",
                "percentunit",
                f"rightsizer_gpu_activity_p95_ratio{GPU}",
                LEGEND,
            )
        )
        .with_row(db.Row("Bottlenecks and trend"))
        .with_panel(
            bar_panel(
                "GPUs per bottleneck",
                "What limits the GPUs that are limited.",
                "none",
                f"count by (bottleneck) (rightsizer_gpu_bottleneck{GPU} == 1)",
                "{{bottleneck}}",
            )
        )
        .with_panel(
            timeseries_panel(
                "Money per hour on the table over time",
                "",
                "currencyUSD",
                query(f"sum({SAVINGS})", "savings per hour"),
            )
        )
    )
