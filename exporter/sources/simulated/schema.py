"""The scenario file's schema (typed settings: unknown keys rejected) and the loaded scenario's types.

The format is documented in docs/scenarios.md; ``scenario`` loads and checks files against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from rightsizer_core.settings import setting
from rightsizing.catalog import GpuSpec, MigProfile
from rightsizing.slo.attainment import SloDeclaration, SloTargets

from . import workloads as wl

# Start-up cost bounds: replaying the past costs about 45 ms of CPU per simulated device (GPU or MIG
# instance) for the right-sizing windows, plus the energy counters' integration from the start of
# the history (10 s steps). These keep a scenario's start at a few seconds (bench/simulated.py).
MAX_DEVICES = 64  # GPUs plus MIG instances: an 8-GPU node with every GPU split in seven fits
MAX_HISTORY_DEVICE_HOURS = 256  # devices x history_seconds, e.g. 64 devices x 4 h or 8 GPUs x 32 h
# Each cycle integrates the simulated time since the last one: devices x speed x interval seconds,
# about 0.6 ms of CPU per 1,000 on the event loop. 64 devices at speed 1,500, or 8 GPUs at 12,500.
MAX_DEVICE_SECONDS_PER_CYCLE = 100_000

Verdict = Literal["idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data"]
Bottleneck = Literal[
    "memory_capacity", "memory_bandwidth", "compute", "launch_overhead", "data_loading", "host_cpu"
]
Kind = Literal[
    "idle", "steady_inference", "bursty_inference", "training", "memory_bound", "data_starved",
    "launch_overhead", "memory_saturated",
]  # fmt: skip


# Every parameter is finite (a file may say .inf or 1e308, which pass as floats and then overflow the
# simulation's arithmetic at start); periods are at least a second (0 or 1e-300 divide by zero).
MAX_PARAMETER = 1e9


def _p(doc: str, minimum: float = 0) -> Any:
    return setting(None, doc, minimum=minimum, maximum=MAX_PARAMETER)


@dataclass(frozen=True)
class WorkloadEntry:
    kind: Kind | None = setting(None, "Workload kind (required); see docs/scenarios.md.")
    start_after_seconds: float | None = _p("The GPU is empty until this long after the scenario start.")
    memory_gib: float | None = _p("Memory the workload holds, GiB.")
    memory_fraction: float | None = _p("Memory held as a share of the GPU's total (vLLM reserves 0.9).")
    noise: float | None = _p("Relative per-second jitter of the activity signals.")
    host_cpu: float | None = _p("Share of the node's CPU this workload keeps busy.")
    pcie_link_ratio: float | None = _p("Host-to-GPU traffic as a share of the PCIe link.")
    activity: float | None = _p("Mean SM active ratio.")
    utilization: float | None = _p("Mean GPU utilization (GPU_UTIL) ratio.")
    dram: float | None = _p("Mean DRAM active ratio.")
    tensor: float | None = _p("Mean tensor pipe active ratio.")
    occupancy: float | None = _p("Mean SM occupancy ratio.")
    swing: float | None = _p("Relative amplitude of the slow load wave.")
    period_seconds: float | None = _p("Period of the load wave, of bursts, or between checkpoints.", 1)
    base_activity: float | None = _p("bursty_inference: SM active between bursts.")
    burst_seconds: float | None = _p("bursty_inference: length of each burst.", minimum=1)
    queue_burst_depth: float | None = _p("bursty_inference: queue depth at the end of a burst.")
    checkpoint_seconds: float | None = _p("training: length of each checkpoint dip.", minimum=1)
    nvlink_ratio: float | None = _p("training: NVLink traffic as a share of its bandwidth.")
    gap_fraction: float | None = _p("data_starved: share of seconds the GPU waits for data.")
    queue_depth: float | None = _p("Mean depth of the GPU's queue.")
    queue_growth_per_hour: float | None = _p("Items the GPU's queue grows by per hour.")
    batch: float | None = _p("Requests in flight at full load.")
    kv_cache_usage: float | None = _p("KV-cache usage (0-1) the queue's inference server reports.")
    preemptions_per_hour: float | None = _p("Requests the queue's inference server preempts per hour.")
    generated_tokens_per_second: float | None = _p("Tokens/s offered (counted as its GPU serves them).")
    prompt_tokens_per_second: float | None = _p("Prompt tokens/s offered (counted as its GPU serves them).")
    requests_per_second: float | None = _p("Requests/s offered (counted as its GPU serves them).")
    latency_spread: float | None = _p(
        "Serving kinds: sigma of the logarithm of each service time (the server's latency shape)."
    )
    model: str | None = setting(
        None, "Serving kinds: the model served, a `rightsizer plan` built-in such as llama-3-8b."
    )
    precision: Literal["bf16", "fp16", "fp8", "int8", "int4"] | None = setting(
        None, "Serving kinds: the precision of the model's weights (default bf16)."
    )


@dataclass(frozen=True)
class PodEntry:
    pod: str = setting("", "Pod name (required).")
    namespace: str = setting("default", "Namespace.")
    container: str = setting("main", "Container.")
    cpuset: str | None = setting(
        None, "CPUs the container may run on (its cgroup's effective cpuset), e.g. '32-47' (NUMA check)."
    )


@dataclass(frozen=True)
class QueueEntry:
    name: str = setting("", "Queue name (required).")
    labels: dict[str, str] = setting({}, "Labels, e.g. namespace and workload to link it to pods.")
    server: Literal["vllm", "sglang", "tgi", "triton"] | None = setting(
        None,
        "Inference server behind the queue; vllm and sglang report KV-cache usage and preemptions "
        "(the workload's kv_cache_usage, preemptions_per_hour), tgi and triton none; vllm, sglang "
        "and tgi count tokens and requests, triton requests only.",
    )
    slo: SloTargets | None = setting(
        None, "The latency SLO of the workload behind the queue (needs server): targets and objective."
    )


@dataclass(frozen=True)
class ExpectEntry:
    verdict: Verdict | None = setting(None, "Verdict the right-sizing engine should reach.")
    bottlenecks: list[Bottleneck] = setting([], "Bottlenecks it should find (exactly these).")
    recommended: str | None = setting(None, "Catalog key, '<key>/<MIG profile>', 'release' or 'none'.")
    workload_change: str | None = setting(
        None, "Multi-GPU work: the workload's move, e.g. '4 x H100-SXM-80GB -> 2 x B200-SXM-180GB'."
    )
    recommended_one_of: list[str] = setting(
        [], "When several answers are sound: the recommendation must be one of these."
    )


@dataclass(frozen=True)
class XidEntry:
    after_seconds: float = setting(0.0, "When, in seconds after the scenario start (may be negative).")
    xid: int = setting(
        0, "The XID error number, e.g. 79 (fallen off the bus) or 48 (double-bit ECC).", minimum=1
    )


@dataclass(frozen=True)
class MigEntry:
    profile: str = setting("", "MIG profile of the GPU's catalog entry, e.g. 1g.10gb (required).")
    name: str | None = setting(None, "A short name for messages and docs.")
    workload: WorkloadEntry | None = setting(None, "What runs on the instance (required).")
    pod: PodEntry | None = setting(None, "Pod the instance is attributed to.")
    queue: QueueEntry | None = setting(None, "Queue feeding this instance's workload.")
    expect: ExpectEntry | None = setting(None, "What the right-sizing engine should conclude.")


@dataclass(frozen=True)
class PcieLinkEntry:
    generation: int | None = setting(None, "PCIe generation the link runs at (default the GPU's).", minimum=1)
    width: int | None = setting(None, "Lanes the link runs at (default the GPU's).", minimum=1)


@dataclass(frozen=True)
class HostPressureEntry:
    memory_some: float = setting(0.0, "Share of time some task stalls on memory.", minimum=0, maximum=1)
    memory_full: float = setting(0.0, "Share of time all busy tasks stall on memory.", minimum=0, maximum=1)
    io_some: float = setting(0.0, "Share of time some task stalls on I/O.", minimum=0, maximum=1)
    io_full: float = setting(0.0, "Share of time all non-idle tasks stall on I/O.", minimum=0, maximum=1)


@dataclass(frozen=True)
class GpuEntry:
    model: str = setting("", "Catalog key or NVML name of the GPU (required).")
    count: int = setting(1, "Replicate this GPU this many times.", minimum=1, maximum=MAX_DEVICES)
    name: str | None = setting(None, "A short name for messages and docs.")
    uuid: str | None = setting(None, "UUID override (default: derived from seed and index).")
    pci_bus_id: str | None = setting(None, "PCI bus id override (default: derived from the index).")
    history_seconds: float | None = setting(
        None, "How much past of this GPU history replay holds (default: the scenario's).", minimum=0
    )
    workload: WorkloadEntry | None = setting(None, "What runs on the GPU (required unless mig is given).")
    pod: PodEntry | None = setting(None, "Pod the GPU is attributed to.")
    queue: QueueEntry | None = setting(None, "Queue feeding this GPU's workload.")
    expect: ExpectEntry | None = setting(None, "What the right-sizing engine should conclude.")
    mig: list[MigEntry] = setting([], "MIG mode: the GPU's instances, each with its own workload.")
    xids: list[XidEntry] = setting([], "XID errors to inject: [{after_seconds, xid}].")
    pcie_link: PcieLinkEntry | None = setting(
        None, "The PCIe link it trained at, when below its maximum: {generation, width}."
    )
    numa_node: int | None = setting(
        None, "NUMA node the GPU sits on (an index of numa_nodes; -1: no NUMA information).", minimum=-1
    )


@dataclass(frozen=True)
class ScenarioEntry:
    description: str = setting("", "What the scenario shows.")
    seed: int = setting(1, "Seed of every noise value.")
    speed: float = setting(1.0, "Simulated seconds per wall-clock second.", minimum=0.001, maximum=100000)
    start: str | None = setting(None, "Simulated start time, RFC 3339 (default: when the exporter starts).")
    frozen: bool = setting(False, "Simulated time does not advance (reproducible output).")
    history_seconds: float = setting(3600.0, "Past replayable at start.", minimum=0, maximum=30 * 86400)
    driver_version: str = setting("550.54.15", "Driver version every GPU reports.")
    host_cpu_busy_ratio: float = setting(
        0.15, "Node CPU busy before workloads add theirs.", minimum=0, maximum=1
    )
    host_pressure: HostPressureEntry | None = setting(
        None, "The host's PSI stall shares {memory_some, memory_full, io_some, io_full}; none: no PSI."
    )
    numa_nodes: list[str] = setting(
        [], "The host's NUMA nodes, each one's CPU list in order, e.g. ['0-31', '32-63'] (NUMA check)."
    )
    gpus: list[dict[str, Any]] = setting([], "The GPUs (at least one).")
    slos: list[SloDeclaration] = setting(
        [], "Latency SLOs, as the exporter's slos: (by namespace and workload labels, or queue name)."
    )


@dataclass(frozen=True, slots=True)
class Expectation:
    verdict: str | None
    bottlenecks: tuple[str, ...]
    recommended: str | None
    workload_change: str | None = None
    recommended_one_of: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SimMig:
    """One MIG instance of a simulated GPU."""

    name: str
    profile: MigProfile
    instance_id: int  # GPU instance id (GPU_I_ID), 1, 2, ... in declared order
    uuid: str
    workload: wl.Workload
    pod: PodEntry | None
    queue: QueueEntry | None
    expect: Expectation | None


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    name: str
    spec: GpuSpec
    uuid: str
    pci_bus_id: str
    workload: wl.Workload | None  # None in MIG mode: the instances carry the work
    history_seconds: float
    pod: PodEntry | None
    queue: QueueEntry | None
    expect: Expectation | None
    mig: tuple[SimMig, ...] = ()
    xids: tuple[tuple[float, int], ...] = ()  # (seconds after start, XID), in time order
    pcie_link: tuple[int, int] | None = None  # (generation, width) trained at, when below the max
    numa_node: int | None = None  # NUMA node of the GPU (an index of Scenario.numa_nodes)


@dataclass(frozen=True, slots=True)
class Scenario:
    source: str  # built-in name or path
    description: str
    seed: int
    speed: float
    start: float | None  # Unix time; None: when the source is created
    frozen: bool
    history_seconds: float
    driver_version: str
    host_cpu_busy_ratio: float
    gpus: tuple[SimGpu, ...]
    numa_nodes: tuple[str, ...] = ()  # CPU list of each NUMA node
    host_pressure: dict[tuple[str, str], float] | None = None  # (resource, kind) -> stalled share
    slos: tuple[SloDeclaration, ...] = ()  # the scenario's top-level slos: (queues declare their own)
