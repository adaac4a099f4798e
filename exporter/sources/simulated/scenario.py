"""Scenario files of the simulated fleet: schema, loading and checking (format in docs/scenarios.md).

``load_scenario`` takes a built-in name (a file in ``exporter/scenarios/``) or a path, checks it
with the same typed-settings machinery as the exporter's config (unknown keys rejected) and
returns a ``Scenario`` whose GPUs are expanded (``count``), identified and resolved against the
catalog. Every error is a ``ConfigError`` naming the file, the GPU and the key.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from rightsizer_core.settings import ConfigError, build, read_yaml
from rightsizer_core.workloads import workload_of
from rightsizing.catalog import Candidate, Catalog, GpuSpec, load_catalog

from . import workloads as wl
from .numa import check_numa
from .schema import (
    MAX_DEVICE_SECONDS_PER_CYCLE,
    MAX_DEVICES,
    MAX_HISTORY_DEVICE_HOURS,
    Expectation,
    ExpectEntry,
    GpuEntry,
    MigEntry,
    PodEntry,
    QueueEntry,
    Scenario,
    ScenarioEntry,
    SimGpu,
    SimMig,
    WorkloadEntry,
)
from .serving import serving

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
GIB = 2**30


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


def check_pace(scenario: Scenario, interval: float) -> None:
    """Bound one sampling cycle's work: the energy counters integrate every simulated second since
    the last cycle, for every device, on the event loop (see ``MAX_DEVICE_SECONDS_PER_CYCLE``)."""
    devices = sum(1 + len(g.mig) for g in scenario.gpus)
    work = 0.0 if scenario.frozen else devices * scenario.speed * interval
    if work > MAX_DEVICE_SECONDS_PER_CYCLE:
        raise ConfigError(
            f"{scenario.source}: speed {scenario.speed:g} x {devices} GPUs and MIG instances x interval "
            f"{interval:g} s is {work:.0f} simulated device-seconds per sampling cycle; at most "
            f"{MAX_DEVICE_SECONDS_PER_CYCLE} are allowed (lower speed or interval)"
        )


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
    devices = 0
    entries: list[tuple[GpuEntry, str]] = []
    for i, raw in enumerate(top.gpus):
        label = raw.get("name") or raw.get("model") if isinstance(raw, dict) else None
        where = f"gpus[{i}]" + (f" ({label})" if label else "")
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be a mapping")
        entry = build(GpuEntry, raw, where)
        devices += entry.count * (1 + len(entry.mig))
        _check_size(devices, top.history_seconds, where)
        entries.append((entry, where))
    pods = Counter(_pod_key(e) for e, _ in entries)
    for entry, where in entries:
        key = _pod_key(entry)
        gpus += _expand(entry, where, len(gpus), top, catalog, pods[key] if key else 1)
    for attr in ("uuid", "pci_bus_id"):
        seen: dict[str, str] = {}
        for g in gpus:
            value = getattr(g, attr)
            if value in seen:
                raise ConfigError(f"gpus: {attr} {value!r} is used by both {seen[value]} and {g.name}")
            seen[value] = g.name
    check_numa(top.numa_nodes, gpus)
    return Scenario(
        spec, top.description, top.seed, top.speed, start, top.frozen, top.history_seconds,
        top.driver_version, top.host_cpu_busy_ratio, tuple(gpus), tuple(top.numa_nodes),
        None if top.host_pressure is None else {
            (r, k): getattr(top.host_pressure, f"{r}_{k}") for r in ("memory", "io") for k in ("some", "full")
        }, tuple(top.slos),
    )  # fmt: skip


def _pod_key(e: GpuEntry) -> tuple[str, str] | None:
    """The pod a whole GPU belongs to (None with count > 1: each copy gets its own pod)."""
    if e.pod is None or e.count != 1 or e.mig:
        return None
    return (e.pod.namespace, e.pod.pod)


def _check_size(devices: int, history_seconds: float, where: str) -> None:
    """Bound the start-up cost (see ``MAX_DEVICES`` in schema)."""
    if devices > MAX_DEVICES:
        raise ConfigError(
            f"{where}: the scenario would simulate {devices} GPUs and MIG instances; at most "
            f"{MAX_DEVICES} are allowed (GPUs x count, plus their MIG instances)"
        )
    if devices * history_seconds > MAX_HISTORY_DEVICE_HOURS * 3600:
        raise ConfigError(
            f"{where}: history_seconds {history_seconds:g} for {devices} GPUs and MIG instances is "
            f"{devices * history_seconds / 3600:g} device-hours of history to replay; at most "
            f"{MAX_HISTORY_DEVICE_HOURS} are allowed (lower history_seconds)"
        )


def _workload(entry: WorkloadEntry | None, device: Candidate, where: str, shards: int = 1) -> wl.Workload:
    """The entry's workload on a device (a GPU or a MIG instance: a catalog candidate)."""
    if entry is None or entry.kind is None:
        raise ConfigError(f"{where}.workload: a workload with a kind is required (or mig instances)")
    kind, what, capacity = entry.kind, device.key, device.usable_memory
    allowed = {*wl.parameters_of(kind), "memory_gib", "memory_fraction"}
    named = ("kind", "model", "precision")
    given = {k: v for k, v in dataclasses.asdict(entry).items() if k not in named and v is not None}
    serves = "generated_tokens_per_second" in allowed
    for key in ("model", "precision"):
        if getattr(entry, key) is not None and not serves:
            raise ConfigError(
                f"{where}.workload.{key}: does not apply to kind {kind!r} (it serves no tokens)"
            )
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
    gib = params.get("memory_gib")
    memory = gib * GIB if gib is not None else params["memory_fraction"] * capacity
    if "memory_gib" in params and "memory_gib" not in given and "memory_fraction" not in given:
        memory = min(memory, 0.8 * capacity)  # a kind's default need on a small GPU
    if memory > capacity:
        raise ConfigError(
            f"{where}.workload.memory_gib: {memory / GIB:g} GiB is more than the {what}'s "
            f"{capacity / GIB:.2f} GiB usable (the total NVML reports)"
        )
    physics = None
    if serves:
        at = f"{where}.workload"
        physics = serving(kind, params, memory, device, entry.model, entry.precision or "bf16", at, shards)
    return wl.Workload(kind, params, memory, physics)


def _device(catalog: Catalog, key: str) -> Candidate:
    found = catalog.candidate(key)
    assert found is not None, key  # GPUs and profiles come from this catalog
    return found


def _expectation(e: ExpectEntry | None, where: str, catalog: Catalog) -> Expectation | None:
    if e is None:
        return None
    for rec in (e.recommended, *e.recommended_one_of):
        if rec is not None and rec not in ("release", "none") and catalog.candidate(rec) is None:
            raise ConfigError(f"{where}.expect.recommended: {rec!r} is not a catalog GPU or MIG profile")
    return Expectation(
        e.verdict, tuple(e.bottlenecks), e.recommended, e.workload_change, tuple(e.recommended_one_of)
    )


def _check_links(e: GpuEntry | MigEntry, where: str) -> None:
    if e.pod is not None and not e.pod.pod:
        raise ConfigError(f"{where}.pod.pod: the pod name is required")
    if e.queue is not None and not e.queue.name:
        raise ConfigError(f"{where}.queue.name: the queue name is required")
    if e.queue is not None and e.queue.slo is not None and e.queue.server is None:
        raise ConfigError(f"{where}.queue.slo: needs the queue's server (its latency histograms)")


def _check_queue_link(pod: PodEntry | None, queue: QueueEntry | None, where: str) -> None:
    """A queue's namespace and workload labels name its pod's, as every caller but the simulator
    links them (``rightsizer report`` by the labels): else live and report judge different GPUs."""
    if pod is None or queue is None:
        return
    for key, value in (("namespace", pod.namespace), ("workload", workload_of(pod.pod))):
        label = queue.labels.get(key)
        if label is not None and label != value:
            raise ConfigError(
                f"{where}.queue.labels.{key}: {label!r} is not the {key} of pod {pod.pod!r}, {value!r} "
                "(a workload is its pod's name less the suffixes Kubernetes generates, from "
                "'bcdfghjklmnpqrstvwxz2456789'): rightsizer report would not link them"
            )


def _migs(e: GpuEntry, spec: GpuSpec, where: str, catalog: Catalog) -> list[tuple[MigEntry, SimMig]]:
    """The GPU's MIG instances (without UUIDs yet), checked against its catalog profiles."""
    out: list[tuple[MigEntry, SimMig]] = []
    used = 0.0
    for i, m in enumerate(e.mig):
        at = f"{where}.mig[{i}]"
        profile = spec.mig_profile(m.profile) if m.profile else None
        if profile is None:
            known = ", ".join(p.name for p in spec.mig_profiles) or "none: it has no MIG"
            raise ConfigError(f"{at}.profile: {m.profile!r} is not a MIG profile of {spec.key} ({known})")
        same = sum(1 for other, _ in out if other.profile.lower() == profile.name.lower()) + 1
        used += profile.sm_fraction
        if same > profile.max_instances or used > 1 + 1e-9:
            raise ConfigError(f"{at}: the instances do not fit one {spec.key} (too many compute slices)")
        _check_links(m, at)
        work = _workload(m.workload, _device(catalog, f"{spec.key}/{profile.name}"), at)
        expect = _expectation(m.expect, at, catalog)
        out.append((m, SimMig(m.name or profile.name, profile, i + 1, "", work, m.pod, m.queue, expect)))
    return out


def _expand(
    e: GpuEntry, where: str, first: int, top: ScenarioEntry, catalog: Catalog, shards: int = 1
) -> list[SimGpu]:
    spec = catalog.lookup(e.model) if e.model else None
    if spec is None:
        raise ConfigError(
            f"{where}.model: unknown GPU {e.model!r} (catalog keys: {', '.join(catalog.keys())})"
        )
    if e.mig and e.workload is not None:
        raise ConfigError(f"{where}: in MIG mode the workloads belong to the instances (mig[…].workload)")
    migs = _migs(e, spec, where, catalog)
    work = None if migs else _workload(e.workload, _device(catalog, spec.key), where, shards)
    _check_links(e, where)
    if (e.uuid or e.pci_bus_id) and e.count > 1:
        raise ConfigError(f"{where}: uuid and pci_bus_id overrides need count 1")
    expect = _expectation(e.expect, where, catalog)
    history = top.history_seconds
    if e.history_seconds is not None:
        history = min(e.history_seconds, history)
    xids = tuple(sorted((x.after_seconds, x.xid) for x in e.xids))
    link = None
    if e.pcie_link is not None:
        link = (e.pcie_link.generation or spec.pcie_generation, e.pcie_link.width or spec.pcie_width)
        if link[0] > spec.pcie_generation or link[1] > spec.pcie_width:
            raise ConfigError(
                f"{where}.pcie_link: above the {spec.key}'s Gen{spec.pcie_generation} x{spec.pcie_width}"
            )
    out = []
    for n in range(e.count):
        index = first + n
        suffix = f"-{n}" if e.count > 1 else ""
        uuid = e.uuid or _uuid(top.seed, index)
        instances = tuple(
            dataclasses.replace(
                sm,
                uuid="MIG-" + _uuid(top.seed, 4096 + index * 8 + sm.instance_id)[4:],
                pod=dataclasses.replace(m.pod, pod=m.pod.pod + suffix) if m.pod else None,
                queue=dataclasses.replace(m.queue, name=m.queue.name + suffix) if m.queue else None,
            )
            for m, sm in migs
        )
        pod = dataclasses.replace(e.pod, pod=e.pod.pod + suffix) if e.pod else None
        queue = dataclasses.replace(e.queue, name=e.queue.name + suffix) if e.queue else None
        _check_queue_link(pod, queue, where)
        for (_, sm), mine in zip(migs, instances, strict=True):
            _check_queue_link(mine.pod, mine.queue, f"{where}.mig[{sm.instance_id - 1}]")
        out.append(SimGpu(
            index, (e.name or spec.key) + suffix, spec, uuid, e.pci_bus_id or _bus_id(index), work,
            history, pod, queue, expect, instances, xids, link, e.numa_node,
        ))  # fmt: skip
    return out


def _uuid(seed: int, index: int) -> str:
    a, b = wl.mix(wl.mix(seed) ^ (index * 2 + 1)), wl.mix(wl.mix(seed) ^ (index * 2 + 2))
    h = f"{a:016x}{b:016x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _bus_id(index: int) -> str:
    return f"{index // 32:08X}:{0x18 + (index % 32) * 7:02X}:00.0"
