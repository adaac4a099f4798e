"""Kubernetes facts a patch rests on: valid names, the kinds with a pod template and where it is,
and where a catalog option lands: the node label GPU Feature Discovery writes
(``nvidia.com/gpu.product``) and the resource the NVIDIA device plugin offers (``nvidia.com/gpu``;
under its "mixed" MIG strategy ``nvidia.com/mig-<profile>``, under "single" ``nvidia.com/gpu`` on
nodes labelled ``<GPU>-MIG-<profile>``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..catalog import LABEL_VALUE, Candidate

GPU_RESOURCE = "nvidia.com/gpu"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_PREFIX = "nvidia.com/mig-"

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(rf"^{_LABEL}$")  # namespaces, containers: at most 63 characters
DNS_SUBDOMAIN = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")  # object names: at most 253 characters
_QUALIFIED = re.compile(r"^[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # name part of a resource

# Kinds whose pod template a patch edits: (apiVersion, path to the pod spec, can scale to zero).
TEMPLATES: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "Deployment": ("apps/v1", ("spec", "template", "spec"), True),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec"), True),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec"), True),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec"), False),
    "Job": ("batch/v1", ("spec", "template", "spec"), False),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec"), False),
    "Pod": ("v1", ("spec",), False),
}


def quoted(value: str) -> str:
    """A value from a label, quoted and escaped for a sentence (a newline stays ``\\n``)."""
    return json.dumps(value, ensure_ascii=True)


def name_problem(what: str, value: str, subdomain: bool = False) -> str | None:
    """Why ``value`` cannot name a Kubernetes object (None when it can)."""
    most, pattern = (253, DNS_SUBDOMAIN) if subdomain else (63, DNS_LABEL)
    if len(value) <= most and pattern.match(value):
        return None
    rule = "a DNS subdomain" if subdomain else "a DNS label"
    return (
        f"the {what} {quoted(value[:80])}{'…' if len(value) > 80 else ''} is not a Kubernetes name "
        f"({rule}: lower-case letters, digits and '-', at most {most} characters), so no object "
        "can be named by it"
    )


@dataclass(frozen=True)
class Placement:
    """Where an option runs: the node label value that selects its nodes and the resource a
    container asks for."""

    product: str
    resource: str


def placement(c: Candidate, strategy: str) -> Placement | str:
    """The option's placement under the MIG ``strategy`` ("mixed" or "single"), or why none is known."""
    if not c.gpu.gfd_product:
        return f"the catalog has no gfd_product for {c.gpu.key}: set it in catalog.extra_gpus"
    if c.mig is None:
        return Placement(c.gpu.gfd_product, GPU_RESOURCE)
    if strategy == "single":
        if not c.mig.gfd_product or not LABEL_VALUE.match(c.mig.gfd_product):
            return f"the catalog has no gfd_product for the MIG profile {c.key}"
        return Placement(c.mig.gfd_product, GPU_RESOURCE)
    name = f"mig-{c.mig.name}"
    if not _QUALIFIED.match(name):
        return f"the MIG profile name {quoted(c.mig.name)} makes no resource name"
    return Placement(c.gpu.gfd_product, MIG_PREFIX + c.mig.name)
