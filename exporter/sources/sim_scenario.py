"""Scenario files of the simulated fleet: schema, loading and checking (format in docs/scenarios.md).

``load_scenario`` takes a built-in name (a file in ``exporter/scenarios/``) or a path, checks it
with the same typed-settings machinery as the exporter's config (unknown keys rejected) and
returns a ``Scenario`` whose GPUs are expanded (``count``), identified and resolved against the
catalog. Every error is a ``ConfigError`` naming the file, the GPU and the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from ..rightsizing.catalog import Catalog, GpuSpec, load_catalog
from ..settings import ConfigError, build, read_yaml, setting
from . import sim_workloads as wl

SCENARIO_DIR = Path(__file__).resolve().parent.parent / "scenarios"
GIB = 2**30
Verdict = Literal["idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data"]
Bottleneck = Literal[
    "memory_capacity", "memory_bandwidth", "compute", "launch_overhead", "data_loading", "host_cpu"
]
Kind = Literal[
    "idle", "steady_inference", "bursty_inference", "training", "memory_bound", "data_starved",
    "launch_overhead", "memory_saturated",
]  # fmt: skip


def _p(doc: str) -> Any:
    return setting(None, doc, minimum=0)


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
    period_seconds: float | None = _p("Period of the load wave, of bursts, or between checkpoints.")
    base_activity: float | None = _p("bursty_inference: SM active between bursts.")
    burst_seconds: float | None = _p("bursty_inference: length of each burst.")
    queue_burst_depth: float | None = _p("bursty_inference: queue depth at the end of a burst.")
    checkpoint_seconds: float | None = _p("training: length of each checkpoint dip.")
    nvlink_ratio: float | None = _p("training: NVLink traffic as a share of its bandwidth.")
    gap_fraction: float | None = _p("data_starved: share of seconds the GPU waits for data.")
    queue_depth: float | None = _p("Mean depth of the GPU's queue.")
    queue_growth_per_hour: float | None = _p("Items the GPU's queue grows by per hour.")
    batch: float | None = _p("Requests in flight at full load.")


@dataclass(frozen=True)
class PodEntry:
    pod: str = setting("", "Pod name (required).")
    namespace: str = setting("default", "Namespace.")
    container: str = setting("main", "Container.")


@dataclass(frozen=True)
class QueueEntry:
    name: str = setting("", "Queue name (required).")
    labels: dict[str, str] = setting({}, "Labels, e.g. namespace and workload to link it to pods.")


@dataclass(frozen=True)
class ExpectEntry:
    verdict: Verdict | None = setting(None, "Verdict the right-sizing engine should reach.")
    bottlenecks: list[Bottleneck] = setting([], "Bottlenecks it should find (exactly these).")
    recommended: str | None = setting(None, "Catalog key, '<key>/<MIG profile>', 'release' or 'none'.")


@dataclass(frozen=True)
class GpuEntry:
    model: str = setting("", "Catalog key or NVML name of the GPU (required).")
    count: int = setting(1, "Replicate this GPU this many times.", minimum=1, maximum=1024)
    name: str | None = setting(None, "A short name for messages and docs.")
    uuid: str | None = setting(None, "UUID override (default: derived from seed and index).")
    pci_bus_id: str | None = setting(None, "PCI bus id override (default: derived from the index).")
    history_seconds: float | None = setting(
        None, "How much past of this GPU history replay holds (default: the scenario's).", minimum=0
    )
    workload: WorkloadEntry | None = setting(None, "What runs on the GPU (required).")
    pod: PodEntry | None = setting(None, "Pod the GPU is attributed to.")
    queue: QueueEntry | None = setting(None, "Queue feeding this GPU's workload.")
    expect: ExpectEntry | None = setting(None, "What the right-sizing engine should conclude.")


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
    gpus: list[dict[str, Any]] = setting([], "The GPUs (at least one).")


@dataclass(frozen=True, slots=True)
class Expectation:
    verdict: str | None
    bottlenecks: tuple[str, ...]
    recommended: str | None


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    name: str
    spec: GpuSpec
    uuid: str
    pci_bus_id: str
    workload: wl.Workload
    history_seconds: float
    pod: PodEntry | None
    queue: QueueEntry | None
    expect: Expectation | None


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


def builtin_names() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(spec: str) -> Path:
    if "/" not in spec and not spec.endswith((".yaml", ".yml")):
        path = SCENARIO_DIR / f"{spec}.yaml"
        if not path.is_file():
            raise ConfigError(
                f"scenario {spec!r}: no such built-in scenario (built-in: {', '.join(builtin_names())}); "
                "give a YAML path for your own"
            )
        return path
    return Path(spec)


def load_scenario(spec: str) -> Scenario:
    """A built-in scenario by name (``default``, ``golden``, ...) or a scenario YAML file."""
    path = scenario_path(spec)
    data = read_yaml(path)
    try:
        return build_scenario(spec, data, load_catalog())
    except ConfigError as exc:
        raise ConfigError(f"{path}: {str(exc).removeprefix(': ')}") from None


def build_scenario(spec: str, data: dict[str, Any], catalog: Catalog) -> Scenario:
    """A scenario from already-read YAML data (``spec`` names it in the result)."""
    top = build(ScenarioEntry, data, "")
    start = None
    if top.start is not None:
        try:
            start = datetime.fromisoformat(top.start).timestamp()
        except ValueError:
            raise ConfigError(
                f"start: must be an RFC 3339 time such as 2025-01-01T00:00:00Z; got {top.start!r}"
            ) from None
    if not top.gpus:
        raise ConfigError("gpus: at least one GPU is required")
    gpus: list[SimGpu] = []
    for i, raw in enumerate(top.gpus):
        label = raw.get("name") or raw.get("model") if isinstance(raw, dict) else None
        where = f"gpus[{i}]" + (f" ({label})" if label else "")
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be a mapping")
        gpus += _expand(build(GpuEntry, raw, where), where, len(gpus), top, catalog)
    for attr in ("uuid", "pci_bus_id"):
        seen: dict[str, str] = {}
        for g in gpus:
            value = getattr(g, attr)
            if value in seen:
                raise ConfigError(f"gpus: {attr} {value!r} is used by both {seen[value]} and {g.name}")
            seen[value] = g.name
    return Scenario(
        spec, top.description, top.seed, top.speed, start, top.frozen, top.history_seconds,
        top.driver_version, top.host_cpu_busy_ratio, tuple(gpus),
    )  # fmt: skip


def _workload(entry: WorkloadEntry | None, spec: GpuSpec, where: str) -> wl.Workload:
    if entry is None or entry.kind is None:
        raise ConfigError(f"{where}.workload: a workload with a kind is required")
    kind = entry.kind
    allowed = {*wl.parameters_of(kind), "memory_gib", "memory_fraction"}
    given = {k: v for k, v in dataclasses.asdict(entry).items() if k != "kind" and v is not None}
    for key, value in given.items():
        if key not in allowed:
            raise ConfigError(
                f"{where}.workload.{key}: does not apply to kind {kind!r} "
                f"(its parameters: {', '.join(sorted(allowed))})"
            )
        if key in wl.RATIOS and value > 1:
            raise ConfigError(f"{where}.workload.{key}: must be at most 1; got {value!r}")
    if "memory_gib" in given and "memory_fraction" in given:
        raise ConfigError(f"{where}.workload: give memory_gib or memory_fraction, not both")
    params = wl.resolve(kind, given)
    params.pop("memory_fraction" if "memory_gib" in params else "memory_gib", None)
    if "memory_fraction" in given:
        params.pop("memory_gib", None)
        params["memory_fraction"] = given["memory_fraction"]
    if "utilization" in given and "activity" in given and given["utilization"] < given["activity"]:
        raise ConfigError(f"{where}.workload.utilization: must be at least activity (SM active)")
    if "memory_gib" in params:
        memory = params["memory_gib"] * GIB
    else:
        memory = params["memory_fraction"] * spec.memory_bytes
    if "memory_gib" in params and "memory_gib" not in given and "memory_fraction" not in given:
        memory = min(memory, 0.8 * spec.memory_bytes)  # a kind's default need on a small GPU
    if memory > spec.memory_bytes:
        raise ConfigError(
            f"{where}.workload.memory_gib: {memory / GIB:g} GiB is more than the {spec.key}'s "
            f"{spec.memory_bytes / GIB:g} GiB"
        )
    return wl.Workload(kind, params, memory)


def _expand(e: GpuEntry, where: str, first: int, top: ScenarioEntry, catalog: Catalog) -> list[SimGpu]:
    spec = catalog.lookup(e.model) if e.model else None
    if spec is None:
        raise ConfigError(
            f"{where}.model: unknown GPU {e.model!r} (catalog keys: {', '.join(catalog.keys())})"
        )
    work = _workload(e.workload, spec, where)
    if e.pod is not None and not e.pod.pod:
        raise ConfigError(f"{where}.pod.pod: the pod name is required")
    if e.queue is not None and not e.queue.name:
        raise ConfigError(f"{where}.queue.name: the queue name is required")
    if (e.uuid or e.pci_bus_id) and e.count > 1:
        raise ConfigError(f"{where}: uuid and pci_bus_id overrides need count 1")
    expect = None
    if e.expect is not None:
        rec = e.expect.recommended
        if rec is not None and rec not in ("release", "none") and catalog.candidate(rec) is None:
            raise ConfigError(f"{where}.expect.recommended: {rec!r} is not a catalog GPU or MIG profile")
        expect = Expectation(e.expect.verdict, tuple(e.expect.bottlenecks), rec)
    history = top.history_seconds
    if e.history_seconds is not None:
        history = min(e.history_seconds, history)
    out = []
    for n in range(e.count):
        index = first + n
        suffix = f"-{n}" if e.count > 1 else ""
        pod = dataclasses.replace(e.pod, pod=e.pod.pod + suffix) if e.pod else None
        queue = dataclasses.replace(e.queue, name=e.queue.name + suffix) if e.queue else None
        out.append(SimGpu(
            index, (e.name or spec.key) + suffix, spec, e.uuid or _uuid(top.seed, index),
            e.pci_bus_id or _bus_id(index), work, history, pod, queue, expect,
        ))  # fmt: skip
    return out


def _uuid(seed: int, index: int) -> str:
    a, b = wl.mix(wl.mix(seed) ^ (index * 2 + 1)), wl.mix(wl.mix(seed) ^ (index * 2 + 2))
    h = f"{a:016x}{b:016x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus_id(index: int) -> str:
    return f"{index // 32:08X}:{0x18 + (index % 32) * 7:02X}:00.0"
