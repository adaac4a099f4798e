"""Node selection as the cluster does it: which vocabulary a pod template selects its GPU in, and
that selection rewritten to the target GPU in the same vocabulary.

Vocabularies (``nodeSelector`` and required node-affinity ``In`` terms alike): GPU Feature
Discovery's ``nvidia.com/gpu.product``; GKE's ``cloud.google.com/gke-accelerator``; Karpenter's
and EKS Auto Mode's ``instance-gpu-name``, ``instance-gpu-memory`` and ``instance-family``; the
instance type (``node.kubernetes.io/instance-type``: an EC2 type, a GCE machine type, an AKS VM
size). A node pool or node group, GFD's other GPU labels, and an instance type outside the shape
catalog cannot be mapped: the move is then left to a person, with the step spelled out. No value
naming the old GPU is left, and no second vocabulary is added beside the one in use; only a
template that selects its GPU in none gets GFD's label.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from .names import PRODUCT_LABEL
from .requests import Requests
from .shapes import AUTO_MODE, CLOUD_NAMES, GKE_ACCELERATOR, INSTANCE_TYPE, KARPENTER, Shape, Shapes

POOLS = {
    "cloud.google.com/gke-nodepool": ("gcp", "a GKE node pool"),
    "eks.amazonaws.com/nodegroup": ("aws", "an EKS managed node group"),
    "karpenter.sh/nodepool": ("aws", "a Karpenter NodePool"),
    "kubernetes.azure.com/agentpool": ("azure", "an AKS node pool"),
    "agentpool": ("azure", "an AKS node pool"),
}
GFD_OTHER = (
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.machine",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
)
INSTANCE_TYPES = (INSTANCE_TYPE, "beta.kubernetes.io/instance-type")
PARTITION = "cloud.google.com/gke-gpu-partition-size"


def kind(key: str) -> str | None:
    """The vocabulary a node label key belongs to (None: not a GPU selection)."""
    if key == PRODUCT_LABEL:
        return "gfd"
    if key == GKE_ACCELERATOR:
        return "gke"
    if key in INSTANCE_TYPES:
        return "type"
    if key in POOLS:
        return "pool"
    if key in GFD_OTHER or key == PARTITION:
        return "other"
    for prefix in (KARPENTER, AUTO_MODE):
        rest = key.removeprefix(prefix)
        if rest != key and rest in (
            "instance-gpu-name",
            "instance-gpu-memory",
            "instance-family",
            "instance-gpu-count",
        ):
            return rest
    return None


@dataclass(frozen=True)
class Move:
    """What the selection must change: today's GPU, the target, the pod's needs."""

    current: str  # catalog key of today's GPU (a MIG slice's parent)
    target: str  # catalog key of the target GPU (a MIG slice's parent)
    product: str  # GFD's nvidia.com/gpu.product value for the target placement
    mig: bool  # a MIG slice on either side
    gpus: int  # GPUs per pod
    requests: Requests | None  # None: not known (no manifest)
    memory: float = 0.0  # bytes of one target GPU (or slice) a server may use; 0: not known
    current_memory: float = 0.0  # the same of today's
    need: float | None = None  # bytes the engine says the target must hold (per GPU)


@dataclass
class Rewrite:
    node_selector: dict[str, Any] = field(default_factory=dict)  # changed keys only
    terms: list[Any] | None = None  # every term, rewritten
    labels: list[str] = field(default_factory=list)  # "key=value" it selects now
    notes: list[str] = field(default_factory=list)


class Manual(Exception):
    """The selection cannot be rewritten here: the step a person takes."""


def _fitting(shapes: list[Shape], m: Move) -> list[Shape]:
    ok = [s for s in shapes if s.gpus >= m.gpus]
    if m.requests is not None:
        ok = [s for s in ok if s.holds(m.gpus, m.requests.cpu_millis, m.requests.memory_bytes)]
    return sorted(ok, key=lambda s: (s.gpus, s.vcpus, s.memory_mib))


def target_shapes(cloud: str, m: Move, shapes: Shapes, label: str) -> list[Shape]:
    """The target GPU's shapes in ``cloud`` that hold the pod, or the manual step when none does."""
    offered = [s for s in shapes.of(cloud, m.target) if s.gpus >= m.gpus]
    if not offered:
        raise Manual(
            f"{CLOUD_NAMES[cloud]} offers no {m.target} host for {m.gpus} GPUs per pod, so {label} "
            f"cannot select it: keep {m.current}, or move the workload to nodes that have it"
        )
    fit = _fitting(offered, m)
    if not fit:
        assert m.requests is not None
        big = max(offered, key=lambda s: s.share(m.gpus))
        raise Manual(
            f"its pods request {m.requests.words()}, more than any {CLOUD_NAMES[cloud]} {m.target} host "
            f"offers a pod of {m.gpus} GPU{'s' if m.gpus > 1 else ''} (the most: {big.words(m.gpus)}): "
            "lower the requests to that or less in the same change, or keep the move out"
        )
    return fit


def _pool(key: str, value: str, m: Move, shapes: Shapes) -> str:
    cloud, what = POOLS[key]
    offered = sorted(shapes.of(cloud, m.target), key=lambda s: (s.gpus, s.vcpus, s.memory_mib))
    fit, misfit = _fitting(offered, m), ""
    if offered and not fit:
        try:
            target_shapes(cloud, m, shapes, key)
        except Manual as exc:
            misfit = f"{exc}; then "
    if cloud == "aws" and key.startswith("karpenter"):
        step = (
            f"allow {KARPENTER}instance-gpu-name {shapes.gpu_names.get(m.target, '?')} in a NodePool's "
            "requirements and select that NodePool here"
        )
    elif not offered:
        step = f"{CLOUD_NAMES[cloud]} offers no {m.target} host: keep {m.current}"
    else:
        extra = f" with accelerator {shapes.accelerators[m.target][0]}" if cloud == "gcp" else ""
        first = (fit or offered)[0].name
        step = f"{misfit}create one of {first}{extra} (or a larger shape) and select it in {key}"
    return (
        f"it selects {what} ({key}={value}), whose nodes carry {m.current}; no label value names the "
        f"{m.target}'s pool: by hand, {step}"
    )


def _target_value(key: str, m: Move, shapes: Shapes) -> str | None:
    k = kind(key)
    if k == "gfd":
        return m.product
    if k == "gke":
        return (shapes.accelerators.get(m.target) or (None,))[0]
    if k == "instance-gpu-name":
        return shapes.gpu_names.get(m.target)
    return None


def _differ(key: str, values: list[str], m: Move) -> Manual:
    named = f"{key}={','.join(values)}"
    return Manual(f"{named} does not name the measured {m.current}: the manifest and the pod differ")


def values_for(key: str, values: list[str], m: Move, shapes: Shapes, single: bool) -> list[str]:
    """The values that select the target in ``key``'s vocabulary. Raises Manual."""
    k = kind(key)
    if k == "gfd":
        return [m.product]
    if key == PARTITION and m.mig:
        named = f"{key}={','.join(values)}"
        raise Manual(f"it selects GKE's MIG partitions ({named}), set per node pool: by hand, create a node "
                     f"pool of {m.target} partitioned for the new profile and select its size")  # fmt: skip
    if m.current == m.target:
        return values  # a MIG move on the same GPU model: the same nodes
    if k == "pool":
        raise Manual(_pool(key, ",".join(values), m, shapes))
    if k == "other":
        raise Manual(
            f"it selects {key} ({','.join(values)}), a GPU label this tool does not rewrite: by hand, "
            f"select the {m.target} with {m.product} ({PRODUCT_LABEL}) instead"
        )
    if m.mig:
        raise Manual(
            f"a move to or from a MIG slice on {key} needs nodes partitioned for it (a node pool or "
            "node group per MIG layout): by hand"
        )
    if k == "gke":
        if not any(shapes.gke_gpu(v) == m.current for v in values):
            raise _differ(key, values, m)
        target_shapes("gcp", m, shapes, key)
        return [shapes.accelerators[m.target][0]]
    if k == "type":
        found = [shapes.by_name(v) for v in values]
        if (unknown := next((v for v, x in zip(values, found, strict=True) if x is None), None)) is not None:
            raise Manual(
                f"{key}={unknown} is not a shape of our catalog (rightsizing/patches/shapes.yaml): by "
                f"hand, select a type that carries the {m.target}"
            )
        known = [x for x in found if x is not None]
        if not any(x.gpu == m.current for x in known) or len({x.cloud for x in known}) > 1:
            raise _differ(key, values, m)
        fit = target_shapes(known[0].cloud, m, shapes, key)
        return [fit[0].name] if single else [x.name for x in fit]
    if k == "instance-gpu-name" and shapes.gpu_names.get(m.current) not in values:
        raise _differ(key, values, m)
    fit = target_shapes("aws", m, shapes, key)
    if k == "instance-gpu-name":
        return [shapes.gpu_names[m.target]]
    if k == "instance-gpu-memory":
        return [shapes.gpu_memory[m.target]]
    families = list(dict.fromkeys(x.name.split(".", 1)[0] for x in fit))
    return families[:1] if single else families


def _meets(op: str, have: str, values: list[str]) -> bool:
    if op in ("Gt", "Lt"):
        if not values or not have.isdigit() or not values[0].lstrip("-").isdigit():
            return False
        return int(have) > int(values[0]) if op == "Gt" else int(have) < int(values[0])
    return {"In": have in values, "NotIn": have not in values, "Exists": True}.get(op, False)


def _kept(key: str, op: str, values: list[str], m: Move, shapes: Shapes) -> bool:
    """A requirement on a number the target's hosts also carry (GPU count, GPU memory compared with
    Gt or Lt): kept as written when some target host meets it. Raises Manual when none does."""
    k = kind(key)
    if not (k == "instance-gpu-count" or (k == "instance-gpu-memory" and op in ("Gt", "Lt"))):
        return False
    if m.current == m.target:
        return True
    for x in _fitting(shapes.of("aws", m.target), m):
        have = dict(x.labels).get(key)
        if have is not None and _meets(op, have, values):
            return True
    raise Manual(f"{key} {op} {','.join(values)}: no {m.target} host meets it: by hand, change or drop it")


def _keys(selector: dict[str, Any], terms: list[Any]) -> list[tuple[str, list[str]]]:
    found = [(str(k), [str(v)]) for k, v in selector.items()]
    for t in (t for t in terms if isinstance(t, dict)):
        exprs = [e for e in t.get("matchExpressions") or [] if isinstance(e, dict)]
        found += [(str(e.get("key")), [str(v) for v in e.get("values") or []]) for e in exprs]
    return [(k, v) for k, v in found if kind(k) is not None]


def rewrite(selector: dict[str, Any], terms: list[Any], m: Move, shapes: Shapes) -> Rewrite:
    """The new node selection. Raises Manual."""
    out = Rewrite()
    keys = _keys(selector, terms)
    primary = next((k for k, _ in keys if kind(k) != "instance-gpu-count"), PRODUCT_LABEL)
    if m.current != m.target and (pool := next(((k, v) for k, v in keys if kind(k) == "pool"), None)):
        raise Manual(_pool(pool[0], ",".join(pool[1]), m, shapes))  # the pool decides, whatever else is said
    for key, value in selector.items():
        if _kept(str(key), "In", [str(value)], m, shapes):
            continue
        if kind(str(key)) is not None:
            (new,) = values_for(str(key), [str(value)], m, shapes, True)
            if new != value:
                out.node_selector[str(key)] = new
            out.labels.append(f"{key}={new}")
            if (memory := _memory_too(str(key), list(selector), m, shapes)) is not None:
                out.node_selector[memory[0]] = memory[1]
                out.labels.append(f"{memory[0]}={memory[1]}")
    if not terms and all(kind(k) == "instance-gpu-count" for k, _ in keys):
        out.node_selector[PRODUCT_LABEL] = m.product
        out.labels.append(f"{PRODUCT_LABEL}={m.product}")
    if terms:
        add = not any(kind(str(k)) is not None for k in selector)
        out.terms = [_term(t, m, shapes, primary, add, out.labels) for t in terms]
    if m.current != m.target or kind(primary) == "gfd":
        out.notes.append(_host(primary, keys, m, shapes))
    return out


def _term(term: Any, m: Move, shapes: Shapes, primary: str, add: bool, labels: list[str]) -> dict[str, Any]:
    term = copy.deepcopy(term) if isinstance(term, dict) else {}
    exprs, placed = [], False
    for e in term.get("matchExpressions") or []:
        key = str(e.get("key")) if isinstance(e, dict) else ""
        op = e.get("operator") if isinstance(e, dict) else None
        values = [str(v) for v in e.get("values") or []] if isinstance(e, dict) else []
        if _kept(key, str(op), values, m, shapes) or kind(key) is None or op not in ("In", "NotIn"):
            exprs.append(e)
        elif op == "NotIn":
            if _target_value(key, m, shapes) in values:
                raise Manual(f"a required term excludes the target ({key} NotIn {','.join(values)}): by hand")
            exprs.append(e)
        elif not (key == PRODUCT_LABEL and placed):  # one product requirement per term
            new = values_for(key, values, m, shapes, False)
            exprs.append({"key": key, "operator": "In", "values": new})
            labels.append(f"{key} in ({','.join(new)})")
            placed = True
            keys = [str(x.get("key")) for x in term.get("matchExpressions") or [] if isinstance(x, dict)]
            if (memory := _memory_too(key, keys, m, shapes)) is not None:
                exprs.append({"key": memory[0], "operator": "In", "values": [memory[1]]})
                labels.append(f"{memory[0]} in ({memory[1]})")
    if not placed and add and (kind(primary) == "gfd" or m.current != m.target):
        exprs.append({"key": primary, "operator": "In", "values": _fresh(primary, m, shapes)})
    term["matchExpressions"] = exprs
    return term


def _memory_too(key: str, keys: list[str], m: Move, shapes: Shapes) -> tuple[str, str] | None:
    """A GPU name two GPUs share (``a100``: 40 and 80 GB) needs the GPU memory beside it."""
    if kind(key) != "instance-gpu-name" or m.current == m.target:
        return None
    memory = key.replace("instance-gpu-name", "instance-gpu-memory")
    if memory in keys or len(shapes.aws_gpus(shapes.gpu_names[m.target])) < 2:
        return None
    return memory, shapes.gpu_memory[m.target]


def _fresh(key: str, m: Move, shapes: Shapes) -> list[str]:
    """The values for a term that selected no GPU, in the vocabulary the other terms use."""
    value = _target_value(key, m, shapes)
    if value is None:
        raise Manual(
            f"a required node-affinity term selects no GPU while the others use {key}: by hand, "
            "select the target in that term too"
        )
    return [value]


def _host(primary: str, keys: list[tuple[str, list[str]]], m: Move, shapes: Shapes) -> str:
    if m.requests is None:
        return (
            "host fit was not checked: without the manifest the pods' CPU and memory requests are not known"
        )
    k = kind(primary)
    if k == "gfd":
        clouds = list(CLOUD_NAMES)
        where = "the GPU Feature Discovery label names no cloud; "
    elif k == "type":
        named = [x for key, vs in keys if kind(key) == "type" for v in vs if (x := shapes.by_name(v))]
        clouds, where = ([named[0].cloud] if named else list(CLOUD_NAMES)), ""
    else:
        clouds, where = (["gcp"] if k == "gke" else ["aws"]), ""
    fit = [(c, _fitting(shapes.of(c, m.target), m)) for c in clouds]
    hosts = (
        "; ".join(f"{CLOUD_NAMES[c]} {f[0].words(m.gpus)}" for c, f in fit if f)
        or "none of the published shapes"
    )
    asks = m.requests.words()
    return f"host: its pods request {asks}; {where}the smallest {m.target} host that holds them: {hosts}"
