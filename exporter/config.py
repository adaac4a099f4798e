"""The exporter's configuration schema. Every setting has a documented default."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Literal

from rightsizer_core.limits import ListenerLimits
from rightsizer_core.listen import parse_listen
from rightsizer_core.settings import ConfigError, build, env_overrides, merge, read_yaml, setting
from rightsizing.catalog import CatalogSettings
from rightsizing.patches.settings import PatchSettings
from rightsizing.settings import RightsizingSettings
from rightsizing.slo.attainment import SloDeclaration

from .sources.dcgm.settings import DcgmExporterSettings
from .sources.discovery.settings import DiscoverySettings
from .sources.pods.settings import PodSettings
from .sources.queues.settings import QueueSettings, check_queue_names

DEFAULT_PORT = 9430  # dcgm-exporter uses 9400; both can run side by side


@dataclass(frozen=True)
class NvmlSettings:
    call_timeout_seconds: float = setting(
        2.0,
        "Deadline for one GPU's NVML calls in one cycle; a GPU over it is marked down this cycle.",
        minimum=0.05,
        maximum=60,
    )
    slow_interval_seconds: float = setting(
        10.0,
        "Cadence of slow NVML reads: power limit, PCIe link, energy and PCIe replay counters "
        "(4 ms of CPU per read on an H200), PCIe throughput without GPM (blocks ~20 ms).",
        minimum=1,
        maximum=3600,
    )
    init_timeout_seconds: float = setting(
        10.0,
        "Deadline for initialising NVML and enumerating its GPUs (at start and when re-initialising).",
        minimum=0.1,
        maximum=300,
    )
    reinit_backoff_initial_seconds: float = setting(
        1.0,
        "First wait before re-initialising NVML after a lifecycle error (doubles each try).",
        minimum=0.1,
        maximum=300,
    )
    reinit_backoff_max_seconds: float = setting(
        30.0, "Longest wait between NVML re-initialisation attempts.", minimum=0.1, maximum=3600
    )
    gpm_sample_spacing_seconds: float = setting(
        0.1,
        "Least time between two GPM samples of a GPU (NVML needs 100 ms); the profiling ratios cover "
        "the time between consecutive samples, so one cycle's interval at the default.",
        minimum=0.1,
        maximum=60,
    )
    mig_scan_interval_seconds: float = setting(
        10.0,
        "How often a GPU's MIG layout is scanned again; a MIG device that stops answering triggers a "
        "scan at once.",
        minimum=0.1,
        maximum=3600,
    )
    xid_events: bool = setting(True, "Watch XID errors (NVML events, read once per cycle without waiting).")
    event_wait_seconds: float = setting(
        1.0,
        "No longer used: XID events are read without waiting once per cycle. Accepted so existing "
        "configurations still load.",
        minimum=0.05,
        maximum=60,
    )


@dataclass(frozen=True)
class ExporterConfig:
    listen: str = setting(f":{DEFAULT_PORT}", "HOST:PORT to serve on; an empty host means all interfaces.")
    interval: float = setting(1.0, "Sampling interval in seconds.", minimum=0.05, maximum=300)
    http: ListenerLimits = setting(
        ListenerLimits(), "Limits of the HTTP listener against slow, idle and oversized clients."
    )
    log_level: Literal["debug", "info", "warning", "error"] = setting("info", "Log level.")
    hostname: str | None = setting(
        None,
        "Value of the Hostname label; default: this machine's hostname "
        "(or NODE_NAME when set, as in a DaemonSet).",
    )
    hostname_label: Literal["Hostname", "hostname"] = setting(
        "Hostname", "Name of the host label: dcgm-exporter's classic 'Hostname' or its 2026 'hostname'."
    )
    simulate: str | None = setting(
        None, "Run on a simulated fleet: 'default', another built-in scenario name, or a scenario YAML path."
    )
    nvml: NvmlSettings = setting(NvmlSettings(), "NVML sampling settings.")
    catalog: CatalogSettings = setting(
        CatalogSettings(), "GPU catalog: price overrides and extra GPUs for recommendations."
    )
    queues: list[QueueSettings] = setting(
        [], "Queue-depth sources (inference servers, Redis, HTTP JSON); see the Queue depth section."
    )
    discovery: DiscoverySettings = setting(
        DiscoverySettings(),
        "Inference servers found in this node's pods by their annotations; see docs/queues.md, "
        "Discovery on the node.",
    )
    pods: PodSettings = setting(
        PodSettings(), "Pod attribution from the kubelet pod-resources API; see the Pod attribution section."
    )
    dcgm_exporter: DcgmExporterSettings = setting(
        DcgmExporterSettings(),
        "The node's dcgm-exporter, read for the profiling ratios NVML lacks before Hopper (SM and DRAM "
        "active); off unless its url is set. See the dcgm-exporter section of docs/exporter.md.",
    )
    rightsizing: RightsizingSettings = setting(
        RightsizingSettings(), "Right-sizing: windows, verdict and bottleneck thresholds, queue links."
    )
    slos: list[SloDeclaration] = setting(
        [],
        "Latency SLOs of inference workloads, matched to queues by namespace and workload labels "
        "(or queue name); see docs/slos.md.",
    )
    patches: PatchSettings = setting(
        PatchSettings(),
        "Kustomize patches for recommendations (/api/v1/patches, rightsizer report --format patches): "
        "MIG strategy, prices and history they need.",
    )
    families: list[str] = setting(
        [],
        "Publish only these metric families: family names and presets ('headless': what the shipped "
        "rules, the adapter and the report read; 'shipped': that and the dashboards). Empty: all.",
    )

    def validate(self) -> None:
        from .families import resolve

        resolve(self.families)  # raises ValueError naming an unknown entry
        parse_listen(self.listen)
        check_queue_names(self.queues)
        if self.nvml.reinit_backoff_initial_seconds > self.nvml.reinit_backoff_max_seconds:
            raise ValueError(
                "nvml.reinit_backoff_initial_seconds must not exceed nvml.reinit_backoff_max_seconds"
            )

    @property
    def effective_hostname(self) -> str:
        return self.hostname or os.environ.get("NODE_NAME") or socket.gethostname()


def load_config(
    path: str | None,
    flags: dict[str, Any],
    environ: dict[str, str] | None = None,
) -> ExporterConfig:
    """File, then environment, then flags (only those given), checked against the schema."""
    data: dict[str, Any] = read_yaml(path) if path else {}
    where = path or "config"
    try:
        build(ExporterConfig, data, "")
    except ConfigError as exc:
        raise exc.within(where) from None
    env = env_overrides(ExporterConfig, environ=environ)
    try:
        build(ExporterConfig, merge(data, env), "")
    except ConfigError as exc:
        raise exc.within("environment (RIGHTSIZER_*)") from None
    merged = merge(merge(data, env), {k: v for k, v in flags.items() if v is not None})
    try:
        return build(ExporterConfig, merged, "")
    except ConfigError as exc:
        raise exc.within("command line") from None
