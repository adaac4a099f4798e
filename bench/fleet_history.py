"""A fleet's history without running an exporter for days: N GPUs x D days at a scrape step,
streamed as sample lines with timestamps, one timestamp at a time (never all samples in memory).

Each GPU runs one of the simulator's workload kinds (``exporter.sources.simulated.workloads``: the same
``evaluate`` the simulated exporter samples, so the same shapes, noise and bursts), on nodes of 8
GPUs of one model: a quarter of the nodes train (one pod holding all 8 GPUs), the rest serve
(one pod per GPU, a mix of inference kinds and idle GPUs, each serving pod with its queue). The
label sets are the exporter's: ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``Hostname``, ``DCGM_FI_DRIVER_VERSION``, ``pod``/``namespace``/``container``, plus the
``instance`` and ``job`` a scrape adds. Per GPU, the ten series ``rightsizer report`` reads for
its judgement (memory used, SM/GR engine active, GPU and memory-copy utilisation, occupancy,
tensor, DRAM, PCIe TX/RX); per node, host CPU busy; per serving pod, its queue depth.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from exporter.sources.simulated import workloads as wl
from rightsizing.catalog import load_catalog

GIB = 1 << 30
MIB = 1 << 20
GPUS_PER_NODE = 8
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L4", "NVIDIA A10G")
SERVING = (  # (kind, weight) of a serving node's GPUs
    ("steady_inference", 4), ("bursty_inference", 2), ("idle", 2), ("memory_bound", 1),
    ("launch_overhead", 1), ("data_starved", 1), ("memory_saturated", 1),
)  # fmt: skip
PER_GPU = (
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)  # fmt: skip
HOST_CPU = "rightsizer_host_cpu_busy_ratio"
QUEUE = "rightsizer_queue_depth"
FAMILIES = (*PER_GPU, HOST_CPU, QUEUE)
SERIES_PER_GPU = len(PER_GPU)


@dataclass
class Gpu:
    node: int
    index: int
    workload: wl.Workload
    noise: wl.Noise
    capacity: float
    link: float  # PCIe bytes/s
    prefix: tuple[str, ...]  # "NAME{labels}" of each PER_GPU family
    queue: str | None  # "rightsizer_queue_depth{labels}" of a serving pod's queue


def _pick(seed: int, options: tuple[tuple[str, int], ...]) -> str:
    total = sum(w for _, w in options)
    x = seed % total
    for name, w in options:
        if x < w:
            return name
        x -= w
    return options[-1][0]


def _uuid(node: int, gpu: int) -> str:
    h = f"{wl.mix(node * 64 + gpu):016x}{wl.mix(node * 64 + gpu + 1 << 32):016x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def fleet(gpus: int, seed: int = 16) -> list[Gpu]:
    catalog = load_catalog()
    out: list[Gpu] = []
    for node in range((gpus + GPUS_PER_NODE - 1) // GPUS_PER_NODE):
        h = wl.mix(seed * 1_000_003 + node)
        training = h % 4 == 0
        model = MODELS[0 if training else (h >> 8) % len(MODELS)]
        spec = catalog.lookup(model)
        assert spec is not None, model
        host = f"gpu-node-{node:05d}"
        for i in range(min(GPUS_PER_NODE, gpus - node * GPUS_PER_NODE)):
            kind = "training" if training else _pick(wl.mix(h + i), SERVING)
            params = wl.resolve(kind, {})
            gib = params.get("memory_gib")
            capacity = float(spec.memory_bytes)
            memory = min(gib * GIB, 0.8 * capacity) if gib else params["memory_fraction"] * capacity
            if kind == "idle":
                pod = f'pod="notebook-{node}-{i}",namespace="research",container="jupyter"'
            elif training:
                pod = f'pod="pretrain-{node}-0",namespace="training",container="trainer"'
            else:
                pod = f'pod="{kind.replace("_", "-")}-{node}-{i}-7c9f8",namespace="llm",container="server"'
            labels = (
                f'gpu="{i}",UUID="{_uuid(node, i)}",pci_bus_id="00000000:{0x18 + 7 * i:02X}:00.0",'
                f'device="nvidia{i}",modelName="{model}",Hostname="{host}",DCGM_FI_DRIVER_VERSION="550.54.15",'
                f'{pod},instance="{host}:9430",job="rightsizer-exporter"'
            )
            queue = None
            if "queue_depth" in params:
                workload = f"{kind.replace('_', '-')}-{node}-{i}"
                queue = (f'{QUEUE}{{queue="{workload}-requests",kind="vllm",namespace="llm",'
                         f'workload="{workload}",instance="{host}:9430",'
                         'job="rightsizer-exporter"}')  # fmt: skip
            out.append(Gpu(
                node, i, wl.Workload(kind, params, memory), wl.Noise(seed + node, i), capacity,
                spec.pcie_bytes_per_second, tuple(f"{m}{{{labels}}}" for m in PER_GPU), queue,
            ))  # fmt: skip
    return out


def _host_cpu(node: int) -> str:
    return f'{HOST_CPU}{{instance="gpu-node-{node:05d}:9430",job="rightsizer-exporter"}}'


def lines(
    gpus: list[Gpu], start: float, seconds: float, step: float, ms: bool, origin: float | None = None
) -> Iterator[tuple[int, str]]:
    """(family index in FAMILIES, sample line with its timestamp) for every sample from ``start`` to
    ``start + seconds`` (both included), one timestamp at a time; timestamps in milliseconds
    (Prometheus text, for import APIs) or seconds (OpenMetrics). ``origin``: when the history
    begins (default ``start``; a later slice of one history passes the first slice's start)."""
    nodes = sorted({g.node for g in gpus})
    steps = int(seconds // step)
    host_idx, queue_idx = FAMILIES.index(HOST_CPU), FAMILIES.index(QUEUE)
    began = start if origin is None else origin
    for k in range(steps + 1):
        t = start + k * step
        stamp = f"{round(t * 1000)}" if ms else f"{t:.3f}"
        elapsed = t - began + 86400.0  # every workload began a day before the history
        cpu: dict[int, float] = {}
        for g in gpus:
            a = wl.evaluate(g.workload, g.noise, t, elapsed)
            busy = a.utilization > 0.05 or g.workload.kind == "training"
            cpu[g.node] = cpu.get(g.node, 0.02) + a.host_cpu * busy
            used = float(min(round(a.memory_bytes / MIB), g.capacity / MIB))
            values = (
                used, a.sm, a.gr_engine, round(100 * a.utilization), round(85 * a.dram), a.occupancy,
                a.tensor, a.dram, round(min(a.pcie_tx, 1.0) * g.link), round(min(a.pcie_rx, 1.0) * g.link),
            )  # fmt: skip
            for i, (prefix, v) in enumerate(zip(g.prefix, values, strict=True)):
                yield i, f"{prefix} {_num(v)} {stamp}"
            if g.queue:
                yield queue_idx, f"{g.queue} {_num(round(a.queue_depth))} {stamp}"
        for n in nodes:
            yield host_idx, f"{_host_cpu(n)} {_num(min(1.0, cpu.get(n, 0.0)))} {stamp}"


def _num(v: float) -> str:
    if v == int(v) and math.isfinite(v):
        return str(int(v))
    return f"{v:.4g}"
