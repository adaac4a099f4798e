"""Which object owns a pod: from kube-state-metrics when its series are there, else from the pod's
name with the kind it assumes said aloud, else nobody (and why). Never a silent guess.

kube-state-metrics publishes ``kube_pod_owner{namespace,pod,owner_kind,owner_name}`` (a
Deployment's pods are owned by a ReplicaSet), ``kube_replicaset_owner{namespace,replicaset,...}``
(the Deployment) and ``kube_job_owner{namespace,job_name,...}`` (a CronJob's Jobs).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rightsizer_core.workloads import named_by

Ref = tuple[str, str]  # (kind, name)
_HASH = re.compile(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{5,10}$")  # <deployment>-<pod-template-hash>
KSM = "from kube-state-metrics"


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    namespace: str
    source: str  # how it was found, in words: "from kube-state-metrics: ...", "ASSUMED from the pod name ..."
    assumed: bool  # the kind comes from a naming rule, not from kube-state-metrics


@dataclass(frozen=True)
class OwnerSeries:
    """What kube-state-metrics says, keyed by (namespace, pod / replicaset / job)."""

    pods: Mapping[tuple[str, str], Ref] = field(default_factory=dict)
    replicasets: Mapping[tuple[str, str], Ref] = field(default_factory=dict)
    jobs: Mapping[tuple[str, str], Ref] = field(default_factory=dict)
    present: bool = False  # kube_pod_owner has series at all (kube-state-metrics is scraped)


Exists = Callable[[str, str, str], bool]  # (kind, namespace, name) -> in the manifests read


def resolve(
    namespace: str, pod: str, series: OwnerSeries | None, exists: Exists | None = None
) -> Owner | str:
    """The pod's owner, or why none can be named."""
    if series is not None and (namespace, pod) in series.pods:
        return _from_series(namespace, pod, series.pods[(namespace, pod)], series)
    if series is None or not series.present:
        missing = "no kube-state-metrics series (kube_pod_owner) to read"
    else:
        missing = "kube-state-metrics has no kube_pod_owner for this pod"
    return _from_name(namespace, pod, missing, exists)


def _from_series(namespace: str, pod: str, ref: Ref, series: OwnerSeries) -> Owner | str:
    kind, name = ref
    if kind == "ReplicaSet":
        above = series.replicasets.get((namespace, name))
        if above is not None and above[0] not in ("", "<none>"):
            return Owner(
                *above, namespace, f"{KSM}: kube_pod_owner (ReplicaSet {name}), kube_replicaset_owner", False
            )
        if above is not None:
            return Owner(kind, name, namespace, f"{KSM}: kube_pod_owner; the ReplicaSet has no owner", False)
        m = _HASH.match(name)
        if m is None:
            return Owner(kind, name, namespace, f"{KSM}: kube_pod_owner (no kube_replicaset_owner)", False)
        return Owner(
            "Deployment", m.group(1), namespace,
            f"{KSM}: kube_pod_owner (ReplicaSet {name}); no kube_replicaset_owner, so the Deployment "
            "is ASSUMED from the ReplicaSet's name (<deployment>-<pod-template-hash>)",
            True,
        )  # fmt: skip
    if kind == "Job":
        above = series.jobs.get((namespace, name))
        if above is not None and above[0] not in ("", "<none>"):
            return Owner(*above, namespace, f"{KSM}: kube_pod_owner (Job {name}), kube_job_owner", False)
        return Owner(kind, name, namespace, f"{KSM}: kube_pod_owner", False)
    if kind in ("", "<none>"):
        return Owner("Pod", pod, namespace, f"{KSM}: kube_pod_owner says the pod has no owner", False)
    if kind == "Node":
        return f"a static pod (owned by Node {name}, {KSM}): its manifest lives on the node"
    return Owner(kind, name, namespace, f"{KSM}: kube_pod_owner", False)


def _from_name(namespace: str, pod: str, missing: str, exists: Exists | None) -> Owner | str:
    found = named_by(pod)
    if found is None:
        return (
            f"{missing}, and the pod name follows no controller's naming (a bare Pod, or another controller)"
        )
    name, rule = found
    if rule == "Deployment":
        shape = "<deployment>-<pod-template-hash>-<suffix>"
    elif rule == "StatefulSet":
        shape = "<statefulset>-<ordinal>"
    else:
        kinds = [k for k in ("DaemonSet", "Job") if exists is not None and exists(k, namespace, name)]
        if len(kinds) != 1:
            return f"{missing}, and the pod name (<name>-<suffix>) fits a DaemonSet and a Job alike" + (
                "" if exists is None else f" (the manifests hold {len(kinds)} of them named so)"
            )
        rule, shape = (
            kinds[0],
            "<name>-<suffix>, and it is the only DaemonSet or Job so named in the manifests",
        )
    return Owner(rule, name, namespace, f"ASSUMED from the pod name ({missing}): {shape}", True)
