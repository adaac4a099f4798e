"""The body of one patch: a strategic-merge patch of the owning object's pod template that selects
the recommended GPU's nodes and, where the resource name changes, renames it in the container.

Node selection: rewritten in the vocabulary the manifest's template already uses (``selection``:
GPU Feature Discovery's label, GKE's accelerator, Karpenter's or EKS Auto Mode's GPU name, an
instance type), in ``nodeSelector`` and in every required node-affinity term (kustomize replaces
that list whole, so every term is written again as the manifest has it, changed only there); a
template selecting its GPU no way gets ``nodeSelector`` on ``nvidia.com/gpu.product``. The pod's
CPU and memory requests are checked against the target GPU's hosts. The resource: ``old: null``
(kustomize deletes the key) and ``new: count`` in limits, and in requests where the manifest's
requests name it (without a manifest, in requests too: an extended resource's requests must equal
its limits, and the API server fills them from the limits when left out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from . import selection, server
from .manifests import Manifests, pod_spec
from .names import PRODUCT_LABEL, TEMPLATES
from .owners import Owner
from .requests import pod_requests, quantity
from .shapes import load_shapes

AFFINITY = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")


@dataclass(frozen=True)
class Rename:
    """A GPU container's resource today and after the move (the same name when it stays)."""

    container: str
    count: int  # what one pod's container holds (pod attribution)
    old: str
    new: str
    to_count: int | None = None  # a tensor-parallel group resized: what it holds after the move


@dataclass(frozen=True)
class Body:
    patch: dict[str, Any]
    source: str  # the manifest file read, or "" without one
    notes: tuple[str, ...]  # what the reviewer must know about it
    labels: tuple[str, ...] = ()  # the node labels it selects now ("key=value", "key in (a,b)")


@dataclass(frozen=True)
class ByHand:
    """No patch: the node selection cannot be written here; ``why`` is the step a person takes."""

    why: str


def _nest(path: tuple[str, ...], leaf: dict[str, Any]) -> dict[str, Any]:
    for step in reversed(path):
        leaf = {step: leaf}
    return leaf


def _terms(spec: dict[str, Any]) -> list[Any] | None:
    node: Any = spec
    for step in AFFINITY:
        node = node.get(step) if isinstance(node, dict) else None
    terms = node.get("nodeSelectorTerms") if isinstance(node, dict) else None
    return terms if isinstance(terms, list) and terms else None


def _document(owner: Owner, meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    api_version, path, _ = TEMPLATES[owner.kind]
    return {"apiVersion": api_version, "kind": owner.kind, "metadata": meta, **_nest(path, spec)}


def _containers(template: dict[str, Any], field: str) -> list[dict[str, Any]]:
    listed = template.get(field)
    return [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []


def _unread(owner: Owner, product: str, held: list[Rename]) -> Body:
    """Without a manifest: what the measurements alone say."""
    renames = [r for r in held if r.old != r.new]
    spec: dict[str, Any] = {"nodeSelector": {PRODUCT_LABEL: product}}
    notes = [
        "no manifest was read (--manifests): nodes are selected by nodeSelector on GPU Feature Discovery's "
        "label, which is only right when the cluster's nodes carry it and the object selects its GPU no "
        "other way (a cloud's label, a node pool, required node affinity)",
        "host fit was not checked: without the manifest the pods' CPU and memory requests are not known",
    ]
    if renames:
        spec["containers"] = [
            {
                "name": r.container,
                "resources": {k: {r.old: None, r.new: r.count} for k in ("limits", "requests")},
            }
            for r in renames
        ]
        notes.append(
            "requests are written with the limits (an extended resource's requests equal its "
            "limits), and kustomize lists the containers named here before the others"
        )
    meta = {"name": owner.name, "namespace": owner.namespace}
    return Body(_document(owner, meta, spec), "", tuple(notes), (f"{PRODUCT_LABEL}={product}",))


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _renamed(c: dict[str, Any], r: Rename, owner: Owner, where: str) -> dict[str, Any] | str | None:
    """The container's new resources; None when its resource stays; why not when it asks for
    another resource than the one measured."""
    resources = _mapping(c.get("resources"))
    limits = _mapping(resources.get("limits"))
    if r.old not in limits:
        asks = ", ".join(sorted(str(k) for k in limits)) or "nothing"
        if "mig-" in asks or "mig-" in r.old:
            asks += "; is patches.mig_strategy the cluster's?"
        return (f"{where}: container {r.container} of {owner.kind} {owner.name} does not ask for {r.old} in "
                f"its limits (it asks for {asks}): the manifest and the measured pod differ")  # fmt: skip
    if r.old == r.new and r.to_count is None:
        return None
    if r.to_count is not None and quantity(limits[r.old]) != r.count:
        return (f"{where}: container {r.container} asks for {limits[r.old]} {r.old}, the measured pod held "
                f"{r.count}: the manifest and the measured pod differ")  # fmt: skip
    gone = {r.old: None} if r.old != r.new else {}
    new: dict[str, Any] = {"limits": {**gone, r.new: r.to_count or limits[r.old]}}
    requests = resources.get("requests")
    if isinstance(requests, dict) and r.old in requests:
        new["requests"] = {**gone, r.new: r.to_count or requests[r.old]}
    return new


def build(
    owner: Owner, move: selection.Move, held: list[Rename], manifests: Manifests | None
) -> Body | ByHand | str:
    """The patch for the GPU containers ``held``; the step to take by hand when the node selection
    cannot be rewritten; or why no patch can be written against the manifest."""
    if manifests is None:
        return _unread(owner, move.product, held)
    found = manifests.find(owner.kind, owner.namespace, owner.name)
    if isinstance(found, str):
        return found
    obj, where = found
    template = pod_spec(obj, owner.kind)
    if template is None:
        return f"{where}: the {owner.kind} has no pod template at {'.'.join(TEMPLATES[owner.kind][1])}"
    asks = pod_requests(template, where)
    if isinstance(asks, str):
        return asks
    selector = template.get("nodeSelector")
    try:
        sel = selection.rewrite(
            selector if isinstance(selector, dict) else {}, _terms(template) or [],
            replace(move, requests=asks), load_shapes(),
        )  # fmt: skip
    except selection.Manual as exc:
        return ByHand(str(exc))
    spec: dict[str, Any] = {}
    if sel.terms is not None:
        spec["affinity"] = _nest(AFFINITY[1:], {"nodeSelectorTerms": sel.terms})
    if sel.node_selector:
        spec["nodeSelector"] = sel.node_selector
    placed: set[str] = set()
    notes = list(sel.notes)
    for field in ("initContainers", "containers"):
        names = [c.get("name") for c in _containers(template, field)]
        changed: dict[str, dict[str, Any]] = {}
        for r in held:
            if r.container in names:
                container = _containers(template, field)[names.index(r.container)]
                new = _renamed(container, r, owner, where)
                if isinstance(new, str):
                    return new
                entry: dict[str, Any] = {} if new is None else {"resources": new}
                resized = (r.count, r.to_count) if r.to_count is not None else None
                if resized or (move.memory > 0 and move.current_memory != move.memory):
                    need = None if resized else move.need  # a group's need per GPU changes with its size
                    flags = server.check(
                        container, r.to_count or r.count, move.target, move.memory, need, resized
                    )
                    if flags.manual is not None:
                        return ByHand(f"container {r.container}: {flags.manual}")
                    notes += [f"container {r.container}: {n}" for n in flags.notes]
                    if flags.value is not None:
                        entry[flags.field] = flags.value
                if entry:
                    changed[r.container] = entry
                placed.add(r.container)
        if changed:  # every container named, in the manifest's order: kustomize keeps that order
            spec[field] = [{"name": n, **changed.get(str(n), {})} for n in names]
    missing = [r.container for r in held if r.container not in placed]
    if missing:
        return f"{where}: {owner.kind} {owner.name} has no container {missing[0]} in its pod template"
    meta = {
        "name": owner.name,
        **({"namespace": owner.namespace} if (obj["metadata"].get("namespace")) else {}),
    }
    return Body(_document(owner, meta, spec), where, tuple(notes), tuple(sel.labels))
