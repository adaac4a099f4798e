"""The hosts GPUs come with: each cloud's instance shapes per catalog GPU (``shapes.yaml``, with its
sources), the node labels a node of each shape carries, and whether a pod's CPU and memory
requests fit a shape's share.

A shape's share for a pod is its allocatable CPU and memory times the pod's GPUs over the shape's
GPUs: a one-GPU pod on an eight-GPU host may take an eighth of it, or the other seven GPUs strand.
AWS's allocatable figures are Karpenter's published ones; GCP's and Azure's are derived from the
vCPUs and memory with GKE's reservation rule (see the file's header).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CLOUDS = ("aws", "gcp", "azure")
CLOUD_NAMES = {"aws": "AWS", "gcp": "Google Cloud", "azure": "Azure"}
MIB = 2**20

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
KARPENTER = "karpenter.k8s.aws/"
AUTO_MODE = "eks.amazonaws.com/"


@dataclass(frozen=True)
class Shape:
    cloud: str  # one of CLOUDS
    name: str  # the instance type, machine type or VM size
    gpu: str  # the catalog key of its GPU
    gpus: int
    vcpus: int
    memory_mib: int
    cpu_millis: int  # allocatable
    allocatable_mib: int
    labels: tuple[tuple[str, str], ...]  # what a node of this shape is labelled with (GPU and type)

    def share(self, gpus: int) -> tuple[float, float]:
        """(millicores, MiB) a pod holding ``gpus`` of its GPUs may take."""
        part = min(1.0, gpus / self.gpus)
        return self.cpu_millis * part, self.allocatable_mib * part

    def holds(self, gpus: int, cpu_millis: float, memory_bytes: float) -> bool:
        cpu, mib = self.share(gpus)
        return gpus <= self.gpus and cpu_millis <= cpu and memory_bytes <= mib * MIB

    def words(self, gpus: int = 0) -> str:
        cpu, mib = self.share(gpus or self.gpus)
        whole = f"{self.vcpus} vCPUs, {self.memory_mib / 1024:g} GiB, {self.gpus} x {self.gpu}"
        if gpus and gpus < self.gpus:
            part = f"{gpus}/{self.gpus} of it"
            return f"{self.name} ({whole}; {part}: {cpu / 1000:.2f} CPUs, {mib / 1024:.1f} GiB)"
        return f"{self.name} ({whole}; allocatable {cpu / 1000:.2f} CPUs, {mib / 1024:.1f} GiB)"


def _reserved_millis(vcpus: int) -> float:
    steps = ((1, 0.06), (1, 0.01), (2, 0.005))
    left, out = float(vcpus), 0.0
    for size, rate in steps:
        out += min(left, size) * rate * 1000
        left = max(0.0, left - size)
    return out + left * 0.0025 * 1000


def _reserved_mib(memory_mib: float) -> float:
    steps = ((4096, 0.25), (4096, 0.20), (8192, 0.10), (112 * 1024, 0.06))
    left, out = memory_mib, 0.0
    for size, rate in steps:
        out += min(left, size) * rate
        left = max(0.0, left - size)
    return out + left * 0.02 + 100  # the eviction threshold


def _derived(cloud: str, name: str, gpu: str, gpus: int, vcpus: int, gib: float,
             labels: dict[str, str]) -> Shape:  # fmt: skip
    mib = gib * 1024
    cpu, alloc = vcpus * 1000 - _reserved_millis(vcpus), mib - _reserved_mib(mib)
    labels = {INSTANCE_TYPE: name, **labels}
    return Shape(cloud, name, gpu, gpus, vcpus, int(mib), int(cpu), int(alloc), tuple(labels.items()))


@dataclass(frozen=True)
class Shapes:
    shapes: tuple[Shape, ...]
    gpu_names: dict[str, str]  # catalog GPU -> Karpenter's / Auto Mode's instance-gpu-name
    gpu_memory: dict[str, str]  # catalog GPU -> instance-gpu-memory (MiB, as a label value)
    accelerators: dict[str, tuple[str, ...]]  # catalog GPU -> GKE accelerator values (the first written)
    names: dict[str, Shape] = field(default_factory=dict)  # by instance type (filled by load_shapes)
    carrying: dict[tuple[str, str], list[Shape]] = field(default_factory=dict)  # by (cloud, GPU)

    def by_name(self, name: str) -> Shape | None:
        return self.names.get(name)

    def of(self, cloud: str, gpu: str) -> list[Shape]:
        return list(self.carrying.get((cloud, gpu), ()))

    def gke_gpu(self, value: str) -> str | None:
        return next((g for g, vs in self.accelerators.items() if value in vs), None)

    def aws_gpus(self, name: str) -> list[str]:
        """The catalog GPUs a Karpenter GPU name covers (``a100``: both A100s)."""
        return [g for g, n in self.gpu_names.items() if n == name]


def _aws(row: list[Any], names: dict[str, str]) -> Shape:
    name, gpu, gpus, vcpus, mib, cpu, alloc, gpu_mib = row
    family = name.split(".", 1)[0]
    labels = {INSTANCE_TYPE: name}
    for prefix in (KARPENTER, AUTO_MODE):
        labels |= {prefix + "instance-family": family, prefix + "instance-gpu-name": names[gpu],
                   prefix + "instance-gpu-count": str(gpus), prefix + "instance-gpu-memory": str(gpu_mib),
                   prefix + "instance-gpu-manufacturer": "nvidia"}  # fmt: skip
    return Shape("aws", name, gpu, gpus, vcpus, mib, cpu, alloc, tuple(labels.items()))


@functools.cache
def load_shapes() -> Shapes:
    data = yaml.safe_load((Path(__file__).parent / "shapes.yaml").read_text())
    aws, gcp, azure = data["aws"], data["gcp"], data["azure"]
    names = {str(k): str(v) for k, v in aws["gpu_names"].items()}
    shapes = [_aws(r, names) for r in aws["shapes"]]
    memory = {r[1]: str(r[7]) for r in aws["shapes"]}
    accelerators = {str(k): tuple(v) for k, v in gcp["accelerators"].items()}
    for name, gpu, gpus, vcpus, gib in gcp["shapes"]:
        value = accelerators[gpu][1 if name in gcp["mega"] else 0]
        family = name.split("-", 1)[0]
        labels = {GKE_ACCELERATOR: value, "cloud.google.com/machine-family": family}
        shapes.append(_derived("gcp", name, gpu, gpus, vcpus, gib, labels))
    for name, gpu, gpus, vcpus, gib in azure["shapes"]:
        labels = {"kubernetes.azure.com/accelerator": "nvidia"}
        shapes.append(_derived("azure", name, gpu, gpus, vcpus, gib, labels))
    carrying: dict[tuple[str, str], list[Shape]] = {}
    for x in shapes:
        carrying.setdefault((x.cloud, x.gpu), []).append(x)
    return Shapes(tuple(shapes), names, memory, accelerators, {x.name: x for x in shapes}, carrying)
