"""Would a node admit a pod? The kube-scheduler's filter predicates a GPU move depends on, written
from the Kubernetes documentation ("Assigning Pods to Nodes", "Taints and Tolerations", "Resource
Management for Pods and Containers"), independent of the code under test:

- NodeAffinity: every ``nodeSelector`` pair is a node label; at least one required node-affinity
  term has every expression true (In, NotIn, Exists, DoesNotExist, Gt, Lt);
- TaintToleration: every NoSchedule/NoExecute taint is tolerated (Equal: key, value and effect;
  Exists: key, or every key when empty; an empty effect tolerates every effect);
- NodeResourcesFit: the pod's requests (containers summed, a missing request taken from its limit,
  the largest init container where more) fit the node's allocatable, extended resources included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_Q = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_S = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
      "Ti": 2**40}  # fmt: skip


def q(value: Any) -> float:
    if isinstance(value, int | float):
        return float(value)
    m = _Q.match(str(value))
    assert m, f"not a quantity: {value!r}"
    return float(m[1]) * _S[m[2]]


@dataclass(frozen=True)
class Node:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)


def _expr(e: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = e["key"], e["operator"], [str(v) for v in e.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels:
        a, b = int(labels[key]), int(values[0])
        return a > b if op == "Gt" else a < b
    return False


def _tolerated(taint: dict[str, str], tolerations: list[dict[str, Any]]) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and str(t.get("value", "")) == taint.get("value", ""):
            return True
    return False


def requests(spec: dict[str, Any]) -> dict[str, float]:
    def asks(c: dict[str, Any]) -> dict[str, float]:
        r = c.get("resources") or {}
        merged = {**(r.get("limits") or {}), **(r.get("requests") or {})}
        return {k: q(v) for k, v in merged.items()}

    total: dict[str, float] = {}
    for c in spec["containers"]:
        for k, v in asks(c).items():
            total[k] = total.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in asks(c).items():
            total[k] = max(total.get(k, 0.0), v)
    return total


def why_not(node: Node, spec: dict[str, Any]) -> str | None:
    """None when ``node`` admits a pod of ``spec``; otherwise the predicate that fails."""
    for k, v in (spec.get("nodeSelector") or {}).items():
        if node.labels.get(k) != str(v):
            return f"nodeSelector {k}={v}"
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})  # fmt: skip
    terms = required.get("nodeSelectorTerms")
    if terms and not any(all(_expr(e, node.labels) for e in t.get("matchExpressions") or []) for t in terms):
        return "required node affinity"
    for taint in node.taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not _tolerated(
            taint, spec.get("tolerations") or []
        ):
            return f"taint {taint['key']}={taint.get('value', '')}:{taint['effect']}"
    for k, v in requests(spec).items():
        if v > q(node.allocatable.get(k, 0)):
            return f"{k}: requests {v:g}, allocatable {node.allocatable.get(k, 0)}"
    return None
