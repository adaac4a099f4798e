"""Answer bodies of the Kubernetes metrics APIs, built from cached vectors (PROTOCOLS §5).

External: one item per selected series, values as Quantity strings. Custom: one item per pod
(``pods/*``) or exactly one for an object. Errors are metav1.Status.

Rules with a source family (the queues, the GPU rules) answer only from sources that are up and
current (``availability``): a request selecting something whose source is down, stale or frozen
gets 503 naming it and why, one selecting nothing known 404, so neither an outage nor a typo reads
as an empty queue or an idle GPU; sources up and empty give a real 0. A custom-metrics ``pods/*``
answer leaves out the pods whose own source is not sound and serves the others.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Iterable, Mapping
from typing import Any

from ..cache import Answer, Cache, RuleState
from ..rules import NamespaceMode
from ..vectors import Series, aggregate
from .availability import Failure, check_sources, unsound_pods
from .quantities import format_quantity
from .selectors import EVERYTHING, Selector, SelectorError, parse

EXTERNAL_GROUP = "external.metrics.k8s.io"
CUSTOM_GROUP = "custom.metrics.k8s.io"
REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    500: "InternalError",
    503: "ServiceUnavailable",
}
# Kind and apiVersion of the objects custom-metrics object queries commonly describe.
KINDS = {
    "pods": ("Pod", "v1"),
    "namespaces": ("Namespace", "v1"),
    "services": ("Service", "v1"),
    "nodes": ("Node", "v1"),
    "deployments": ("Deployment", "apps/v1"),
    "statefulsets": ("StatefulSet", "apps/v1"),
    "replicasets": ("ReplicaSet", "apps/v1"),
    "daemonsets": ("DaemonSet", "apps/v1"),
    "jobs": ("Job", "batch/v1"),
    "cronjobs": ("CronJob", "batch/v1"),
    "ingresses": ("Ingress", "networking.k8s.io/v1"),
    "persistentvolumeclaims": ("PersistentVolumeClaim", "v1"),
    "persistentvolumes": ("PersistentVolume", "v1"),
    "replicationcontrollers": ("ReplicationController", "v1"),
    "horizontalpodautoscalers": ("HorizontalPodAutoscaler", "autoscaling/v2"),
}


_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # full matches only


def dumps(obj: Any) -> bytes:
    """Strict JSON: NaN or Infinity raise here (a bug, answered 500), never sent as bare tokens."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def status(code: int, message: str) -> Answer:
    reason = REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return code, dumps(body)


def rfc3339(timestamp: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


def selector_from(query: Mapping[str, str], name: str) -> Selector:
    text = query.get(name, "")
    if not text.strip():
        return EVERYTHING
    try:
        return parse(text)
    except SelectorError as exc:
        raise Failure(400, f"invalid {name} {text[:200]!r}: {exc}") from None


def check_namespace(namespace: str | None) -> None:
    if namespace is not None and not _NAMESPACE.fullmatch(namespace):
        raise Failure(400, f"{namespace[:100]!r} is not a valid namespace name (a DNS-1123 label)")


def rule_state(cache: Cache, metric: str, api: str) -> RuleState:
    state = cache.states.get(metric)
    if state is None or api not in state.rule.apis:
        known = sorted(n for n, s in cache.states.items() if api in s.rule.apis)
        shown = ", ".join(known[:20]) + (", ..." if len(known) > 20 else "")
        raise Failure(404, f"{api} metric {metric[:200]!r} is not served here (served: {shown})")
    cache.asked(metric)  # kept refreshed; an idle rule (no values) is refreshed from now on
    if state.vector is None:
        raise Failure(503, f"no current values for {metric}: {state.error}")
    return state


def external(cache: Cache, metric: str, namespace: str | None, query: Mapping[str, str]) -> Answer:
    try:
        check_namespace(namespace)
        state = rule_state(cache, metric, "external")
        selector = selector_from(query, "labelSelector")
    except Failure as exc:
        return status(exc.code, exc.message)
    assert state.vector is not None
    try:
        check_sources(state, namespace, state.rule.namespace, selector, query.get("labelSelector", ""))
    except Failure as exc:
        return status(exc.code, exc.message)
    stamp = rfc3339(state.vector.timestamp)
    chosen = state.vector.select(namespace, state.rule.namespace, selector)
    hidden = set(state.rule.hide_labels)
    items = [
        {
            "metricName": metric,
            "metricLabels": {k: v for k, v in s.labels.items() if k not in hidden},
            "timestamp": stamp,
            "value": format_quantity(s.value),
        }
        for s in chosen
    ]
    return 200, dumps(
        {
            "kind": "ExternalMetricValueList",
            "apiVersion": f"{EXTERNAL_GROUP}/v1beta1",
            "metadata": {},
            "items": items,
        }
    )


def _item(
    version: str, metric: str, selector: Selector, ref: dict[str, str], stamp: str, value: float
) -> Any:
    if version == "v1beta1":
        return {
            "describedObject": ref,
            "metricName": metric,
            "timestamp": stamp,
            "value": format_quantity(value),
            "selector": selector.as_label_selector(),
        }
    return {
        "describedObject": ref,
        "metric": {"name": metric, "selector": selector.as_label_selector()},
        "timestamp": stamp,
        "value": format_quantity(value),
    }


def _list(version: str, items: list[Any]) -> Answer:
    return 200, dumps(
        {"kind": "MetricValueList", "apiVersion": f"{CUSTOM_GROUP}/{version}", "metadata": {}, "items": items}
    )


def custom_pods(
    cache: Cache,
    version: str,
    namespace: str,
    pod: str,
    metric: str,
    query: Mapping[str, str],
    pod_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> Answer:
    """``namespaces/{ns}/pods/{pod|*}/{metric}``: one item per pod, the pod's series combined.

    ``labelSelector`` selects pods by their labels: from ``pod_labels`` (the namespace's pods as
    the Kubernetes API lists them) when given, else from the series' own labels."""
    try:
        check_namespace(namespace)
        state = rule_state(cache, metric, "custom")
        pods = selector_from(query, "labelSelector")
        metric_selector = selector_from(query, "metricLabelSelector")
    except Failure as exc:
        return status(exc.code, exc.message)
    assert state.vector is not None
    if state.unknown:
        return status(503, f"{metric} unavailable: {state.unknown}"[:1000])
    unsound = unsound_pods(state, namespace)  # pods whose own source is not sound: never served
    if pod in unsound:
        return status(503, unsound[pod])
    extra = () if pod == "*" else (("pod", pod),)
    chosen = state.vector.select(namespace, state.rule.namespace, metric_selector, extra)
    if unsound:
        chosen = [s for s in chosen if s.labels.get("pod") not in unsound]
    if pod_labels is not None and pods.requirements:
        on_keys = pods.on_keys()
        allowed = {name for name, labels in pod_labels.items() if on_keys.matches(labels)}
        chosen = [s for s in chosen if s.labels.get("pod") in allowed]
    else:
        on_series = pods.with_prefix(state.rule.pod_selector_prefix)
        chosen = [s for s in chosen if s.labels.get("pod") and on_series.matches(s.labels)]
    by_pod: dict[str, list[float]] = {}
    for s in chosen:
        by_pod.setdefault(s.labels["pod"], []).append(s.value)
    if pod != "*" and not by_pod:
        return status(404, f"no value of {metric} for pod {namespace}/{pod[:200]}")
    stamp = rfc3339(state.vector.timestamp)
    items = [
        _item(
            version,
            metric,
            metric_selector,
            {"kind": "Pod", "namespace": namespace, "name": name, "apiVersion": "v1"},
            stamp,
            aggregate(state.rule.aggregation, values),
        )
        for name, values in sorted(by_pod.items())
    ]
    return _list(version, items)


def custom_object(
    cache: Cache,
    version: str,
    namespace: str | None,
    resource: str,
    name: str,
    metric: str,
    query: Mapping[str, str],
) -> Answer:
    """``namespaces/{ns}/{resource}/{name}/{metric}`` (or root-scoped): exactly one item."""
    plain = resource.split(".", 1)[0]
    try:
        check_namespace(namespace if plain != "namespaces" else name)
        state = rule_state(cache, metric, "custom")
        metric_selector = selector_from(query, "metricLabelSelector")
    except Failure as exc:
        return status(exc.code, exc.message)
    assert state.vector is not None
    extra: tuple[tuple[str, str], ...] = ()
    if plain == "namespaces" and namespace is None:  # namespaces/{ns}/metrics/{metric}
        namespace = name
    else:
        label = state.rule.objects.get(plain)
        if label is None:
            return status(
                404,
                f"{metric} is not served for {resource} (served for: "
                f"{', '.join(sorted(state.rule.objects)) or 'pods'})",
            )
        extra = ((label, name),)
    mode: NamespaceMode = state.rule.namespace if namespace else "ignore"
    try:
        check_sources(state, namespace, mode, metric_selector, query.get("metricLabelSelector", ""), extra)
    except Failure as exc:
        return status(exc.code, exc.message)
    values = [s.value for s in state.vector.select(namespace, mode, metric_selector, extra)]
    if not values:
        return status(404, f"no value of {metric} for {resource} {name[:200]}")
    value = aggregate(state.rule.aggregation, values)
    kind, api_version = KINDS.get(plain, (plain[:1].upper() + plain[1:].rstrip("s"), ""))
    ref = {"kind": kind, "name": name, "apiVersion": api_version}
    if namespace is not None and plain != "namespaces":
        ref["namespace"] = namespace
    return _list(
        version, [_item(version, metric, metric_selector, ref, rfc3339(state.vector.timestamp), value)]
    )


def selected(
    cache: Cache, metric: str, namespace: str | None, selector_text: str
) -> tuple[list[Series], float]:
    """Series of ``metric`` for KEDA (either API), never none; raises Failure (no series: 404)."""
    check_namespace(namespace)
    state = rule_state(cache, metric, "external")
    selector = selector_from({"labelSelector": selector_text}, "labelSelector")
    assert state.vector is not None
    check_sources(state, namespace, state.rule.namespace, selector, selector_text)
    chosen = state.vector.select(namespace, state.rule.namespace, selector)
    if not chosen:  # unknown is not 0: HPA too treats an answer with no items as an error
        where = f" in namespace {namespace}" if namespace else ""
        raise Failure(404, f"no series of {metric} match labelSelector {selector_text[:200]!r}{where}")
    return chosen, state.vector.timestamp


def total(series: Iterable[Series]) -> float:
    """What HPA computes from an external answer: the sum of the items, always finite (a sum past
    the largest float is that float; one that is not a number is no value: 503)."""
    value = sum(s.value for s in series)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        raise Failure(503, "the sum of the selected series is not a number")
    return math.copysign(sys.float_info.max, value)
