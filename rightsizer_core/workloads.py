"""Which workload a pod belongs to, from Kubernetes' naming of generated pods.

Shared by the exporter's right-sizing (linking queues to GPUs), ``rightsizer report`` and the
adapter (the ``workload`` label of per-pod series); the PrometheusRule's recording rule mirrors it.
"""

from __future__ import annotations

import re

# The controller each pattern names pods for, in order (a name of the third shape is either).
RULES = ("Deployment", "StatefulSet", "DaemonSet or Job")
# Kubernetes' generated-name alphabet (k8s.io/apimachinery/pkg/util/rand): no vowels, no 0/1/3.
_POD_SUFFIX = "[bcdfghjklmnpqrstvwxz2456789]"
_WORKLOAD_PATTERNS = (
    re.compile(rf"^(.+)-{_POD_SUFFIX}{{5,10}}-{_POD_SUFFIX}{{5}}$"),  # Deployment: <name>-<hash>-<id>
    re.compile(r"^(.+)-\d+$"),  # StatefulSet: <name>-<ordinal>
    re.compile(rf"^(.+)-{_POD_SUFFIX}{{5}}$"),  # DaemonSet, Job: <name>-<id>
)


def workload_of(pod: str) -> str:
    """The workload a pod name belongs to; the pod name itself when it is not a generated name."""
    for pattern in _WORKLOAD_PATTERNS:
        m = pattern.match(pod)
        if m:
            return m.group(1)
    return pod


def named_by(pod: str) -> tuple[str, str] | None:
    """(workload, controller) when the pod's name has the shape a controller gives its pods
    (``RULES``: Deployment, StatefulSet, or "DaemonSet or Job"); None for any other name."""
    for rule, pattern in zip(RULES, _WORKLOAD_PATTERNS, strict=True):
        m = pattern.match(pod)
        if m:
            return m.group(1), rule
    return None
