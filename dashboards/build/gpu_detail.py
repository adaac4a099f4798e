"""GPU detail: what the SMs really do next to GPU_UTIL, memory against its peak and capacity, power
against the limit, temperatures, clocks, PCIe against the link's capacity, XIDs."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import timeseries
from panels import (
    CLUSTER,
    INSTANCE,
    MODEL_DCGM,
    MODEL_OWN,
    cluster_variable,
    datasource_variable,
    new_dashboard,
    query,
    query_variable,
    sel,
    state_panel,
    table_panel,
    timeseries_panel,
    zero_when_none,
)

GPU_VAR = 'gpu=~"$gpu"'
D = sel(CLUSTER, INSTANCE, MODEL_DCGM, GPU_VAR)  # dcgm-exporter's families
OWN = sel(CLUSTER, INSTANCE, MODEL_OWN, GPU_VAR)  # rightsizer_* families
WHO = "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}}"
# Usable bytes per second per lane and direction: 8 GT/s x 128b/130b at generation 3, doubling
# each generation (generations 1 and 2, with 8b/10b coding, come out 2 % low).
LINK_CAPACITY = (
    f"rightsizer_gpu_pcie_link_width{OWN} * 984.615e6 * 2 ^ (rightsizer_gpu_pcie_link_generation{OWN} - 3)"
)


def ratio_panel(title: str, description: str, family: str) -> timeseries.Panel:
    return timeseries_panel(title, description, "percentunit", query(f"{family}{D}", WHO)).min(0).max(1)


def build() -> db.Dashboard:
    return (
        new_dashboard(
            "rightsizer-gpu",
            "Rightsizer / GPU detail",
            "One GPU (or several) in depth: profiling ratios next to GPU_UTIL, memory, power, "
            "temperature, clocks, PCIe and XIDs.",
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
                "gpu", "GPU", f"label_values(rightsizer_gpu_info{sel(CLUSTER, INSTANCE, MODEL_OWN)}, gpu)"
            )
        )
        .with_row(db.Row("Activity: what the SMs do, not only whether a kernel ran"))
        .with_panel(
            timeseries_panel(
                "GPU_UTIL vs SM active",
                "GPU_UTIL only says a kernel was running (it reads 100 % on a GPU "
                "stuck in NCCL); SM active says how much of the GPU worked.",
                "percentunit",
                query(f"DCGM_FI_DEV_GPU_UTIL{D} / 100", f"{WHO} GPU_UTIL"),
                query(f"DCGM_FI_PROF_SM_ACTIVE{D}", f"{WHO} SM active"),
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            ratio_panel(
                "SM occupancy",
                "Warps resident per SM against the maximum: low with "
                "high SM active means small kernels or launch overhead.",
                "DCGM_FI_PROF_SM_OCCUPANCY",
            )
        )
        .with_panel(
            ratio_panel(
                "Tensor pipe active",
                "Share of cycles the tensor cores work.",
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            )
        )
        .with_panel(
            ratio_panel(
                "DRAM active",
                "Share of cycles the memory interface moves data: high means memory-bandwidth-bound.",
                "DCGM_FI_PROF_DRAM_ACTIVE",
            )
        )
        .with_panel(
            timeseries_panel(
                "Activity p95 over the window",
                "What the verdicts rest on.",
                "percentunit",
                query(f"rightsizer_gpu_activity_p95_ratio{OWN}", WHO),
            )
            .min(0)
            .max(1)
        )
        .with_panel(
            state_panel(
                "Bottlenecks",
                "Bottlenecks the exporter finds (several may hold).",
                f"rightsizer_gpu_bottleneck{OWN} == 1",
                f"{WHO} {{{{bottleneck}}}}",
            )
        )
        .with_row(db.Row("Memory"))
        .with_panel(
            timeseries_panel(
                "Memory: used, window peak and capacity",
                "Framebuffer in use now, the most the workload needed in the window, and the GPU's total.",
                "bytes",
                query(f"DCGM_FI_DEV_FB_USED{D} * 1048576", f"{WHO} used"),
                query(f"rightsizer_gpu_memory_peak_bytes{OWN}", f"{WHO} window peak"),
                query(f"rightsizer_gpu_memory_total_bytes{OWN}", f"{WHO} capacity"),
            ).min(0)
        )
        .with_panel(
            table_panel(
                "Verdict and recommendation",
                "The right-sizing engine's current answer for each GPU.",
                query(f"rightsizer_gpu_recommendation_info{OWN}"),
                rename={"Value": "current"},
                width=12,
            )
        )
        .with_row(db.Row("Power, temperature and clocks"))
        .with_panel(
            timeseries_panel(
                "Power vs limit",
                "Draw against the enforced limit.",
                "watt",
                query(f"DCGM_FI_DEV_POWER_USAGE{D}", f"{WHO} draw"),
                query(f"rightsizer_gpu_power_limit_watts{OWN}", f"{WHO} limit"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "Temperature",
                "GPU and memory temperature.",
                "celsius",
                query(f"DCGM_FI_DEV_GPU_TEMP{D}", f"{WHO} GPU"),
                query(f"DCGM_FI_DEV_MEMORY_TEMP{D}", f"{WHO} memory"),
            )
        )
        .with_panel(
            timeseries_panel(
                "Clocks",
                "SM and memory clocks against the SM maximum.",
                "hertz",
                query(f"DCGM_FI_DEV_SM_CLOCK{D} * 1000000", f"{WHO} SM"),
                query(f"DCGM_FI_DEV_MEM_CLOCK{D} * 1000000", f"{WHO} memory"),
                query(f"rightsizer_gpu_sm_clock_max_hertz{OWN}", f"{WHO} SM max"),
            ).min(0)
        )
        .with_panel(
            state_panel(
                "Clock events (throttling)",
                "1 while a clock-event reason holds the clocks down (power cap, thermal, idle, ...).",
                f"max by (Hostname, gpu, reason) (rightsizer_gpu_clock_event_active{OWN})",
                "{{Hostname}} GPU {{gpu}} {{reason}}",
            )
        )
        .with_row(db.Row("PCIe"))
        .with_panel(
            timeseries_panel(
                "PCIe throughput vs link capacity",
                "Bytes per second each way against what the link "
                "carries at its current generation and width.",
                "Bps",
                query(f"DCGM_FI_PROF_PCIE_TX_BYTES{D}", f"{WHO} TX"),
                query(f"DCGM_FI_PROF_PCIE_RX_BYTES{D}", f"{WHO} RX"),
                query(LINK_CAPACITY, f"{WHO} link capacity"),
            ).min(0)
        )
        .with_panel(
            timeseries_panel(
                "PCIe replays",
                "Link-level retries per second: a rising rate means a marginal link.",
                "ops",
                query(f"rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{D}[$__rate_interval])", WHO),
            ).min(0)
        )
        .with_row(db.Row("Errors"))
        .with_panel(
            timeseries_panel(
                "XID errors",
                "XIDs the driver reported, per code (0 with xid none: no XID yet), and the last XID as "
                "dcgm-exporter shows it.",
                "none",
                query(
                    zero_when_none(
                        f"increase(rightsizer_xid_errors_total{OWN}[$__rate_interval])",
                        f"rightsizer_gpu_up{OWN}",
                        "instance, UUID, gpu, GPU_I_ID",
                        ("xid", "none"),
                    ),
                    f"{WHO} XID {{{{xid}}}}",
                ),
                query(f"DCGM_FI_DEV_XID_ERRORS{D}", f"{WHO} last XID"),
            ).min(0)
        )
        .with_panel(
            state_panel(
                "GPU answering",
                "0 while NVML does not answer for the GPU (lost, hung or erroring).",
                f"rightsizer_gpu_up{OWN}",
                WHO,
            )
        )
    )
