"""Metrics whose ``metricsQuery`` cannot be batched: one query per request, as prometheus-adapter.

The template is rendered like prometheus-adapter's ``pkg/naming`` does: ``<<.LabelMatchers>>`` =
the selector's requirements (``k="v"``, ``k!="v"``, ``k=~"a|b"`` for ``in``, ``k!~`` for
``notin``, ``k!=""`` / ``k=""`` for exists / does-not-exist), then the namespace, then (custom)
the object names (``pod="a"``, or ``pod=~"a|b"`` for several); ``<<.GroupBy>>`` = the object's label
(custom) or nothing (external).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ..cache import Answer
from ..kubernetes import answers
from ..kubernetes.answers import EXTERNAL_GROUP, KINDS, dumps, rfc3339, selector_from, status
from ..kubernetes.availability import Failure
from ..kubernetes.quantities import format_quantity
from ..kubernetes.selectors import Selector
from ..vectors import Series

Query = Callable[[str], Awaitable[list[Series]]]


@dataclass(frozen=True)
class PerRequest:
    kind: Literal["custom", "external"]
    template: str
    series: str
    namespace_label: str | None  # None: not namespaced
    objects: Mapping[str, str]  # plural resource -> label (custom)

    def render(self, matchers: Sequence[str], group_by: str) -> str:
        return (
            self.template.replace("<<.Series>>", self.series)
            .replace("<<.LabelMatchers>>", ",".join(matchers))
            .replace("<<.GroupBy>>", group_by)
        )


def _q(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def selector_matchers(selector: Selector) -> list[str]:
    """prometheus-adapter's conversion of a label selector into PromQL matchers, on the label names
    the keys are matched against (``app.kubernetes.io/name`` -> ``app_kubernetes_io_name``, as the
    batched path matches them: a key as written is not PromQL and Prometheus would refuse it)."""
    out = []
    for r in selector.requirements:
        values = sorted(set(r.values))
        joined = "|".join(values)
        name = r.label
        if r.op == "exists":
            out.append(f'{name}!=""')
        elif r.op == "!":
            out.append(f'{name}=""')
        elif r.op == "=":
            out.append(f"{name}={_q(joined)}" if len(values) == 1 else f"{name}=~{_q(joined)}")
        elif r.op == "!=":
            out.append(f"{name}!={_q(joined)}" if len(values) == 1 else f"{name}!~{_q(joined)}")
        elif r.op == "in":
            out.append(f"{name}=~{_q(joined)}")
        elif r.op == "notin":
            out.append(f"{name}!~{_q(joined)}")
        else:
            raise Failure(400, f"operator {r.op} of {r.key!r} cannot be turned into a Prometheus matcher")
    return out


async def external_series(
    plan: PerRequest, query: Query, namespace: str | None, params: Mapping[str, str]
) -> list[Series]:
    """The series prometheus-adapter's query for this request gives (no namespace: none added)."""
    matchers = selector_matchers(selector_from(params, "labelSelector"))
    if plan.namespace_label and namespace is not None:
        matchers.append(f"{plan.namespace_label}={_q(namespace)}")
    return await query(plan.render(matchers, ""))


async def external(
    plan: PerRequest, query: Query, metric: str, namespace: str, params: Mapping[str, str]
) -> Answer:
    stamp = rfc3339(time.time())
    items = [
        {
            "metricName": metric,
            "metricLabels": dict(s.labels),
            "timestamp": stamp,
            "value": format_quantity(s.value),
        }
        for s in await external_series(plan, query, namespace, params)
    ]
    body = {"kind": "ExternalMetricValueList", "apiVersion": f"{EXTERNAL_GROUP}/v1beta1", "metadata": {}}
    return 200, dumps({**body, "items": items})


async def keda_series(
    plans: Mapping[str, PerRequest],
    only: Collection[str],
    kept: Mapping[str, frozenset[str] | None],
    query: Query,
    metric: str,
    namespace: str | None,
    selector: str,
) -> list[Series] | None:
    """KEDA's series for a trigger on a metric answered per request; None when the cached vector
    answers it. Raises Failure: 404 when no series match (unknown is not 0), 400 for a bad selector."""
    plan = plans.get(metric)
    params = {"labelSelector": selector}
    if plan is None or plan.kind != "external":
        return None
    if metric not in only and not _needs_own_query("external", params, kept.get(metric)):
        return None
    answers.check_namespace(namespace)
    found = await external_series(plan, query, namespace, params)
    if not found:
        where = f" in namespace {namespace}" if namespace else ""
        raise Failure(404, f"no series of {metric} match labelSelector {selector[:200]!r}{where}")
    return found


async def custom(
    plan: PerRequest,
    query: Query,
    version: str,
    namespace: str | None,
    resource: str,
    names: Sequence[str] | None,
    metric: str,
    params: Mapping[str, str],
) -> Answer:
    """``names`` None: every object (``pods/*`` with no pod list to choose from)."""
    plain = resource.split(".", 1)[0]
    label = plan.namespace_label if plain == "namespaces" else plan.objects.get(plain)
    if label is None:
        return status(404, f"{metric} is not served for {resource}")
    metric_selector = selector_from(params, "metricLabelSelector")
    matchers = selector_matchers(metric_selector)
    if namespace is not None and plan.namespace_label and plain != "namespaces":
        matchers.append(f"{plan.namespace_label}={_q(namespace)}")
    if names is None:
        matchers.append(f'{label}=~".+"')
    elif len(names) == 1:
        matchers.append(f"{label}={_q(names[0])}")
    else:
        matchers.append(f"{label}=~{_q('|'.join(names))}")
    found = {s.labels.get(label, ""): s.value for s in await query(plan.render(matchers, label))}
    wanted = sorted(found) if names is None else [n for n in names if n in found]
    if not wanted and names is not None and len(names) == 1:
        return status(404, f"no value of {metric} for {resource} {names[0][:200]}")
    stamp = rfc3339(time.time())
    kind, api_version = KINDS.get(plain, (plain[:1].upper() + plain[1:].rstrip("s"), ""))
    items = []
    for name in wanted:
        ref = {"kind": kind, "name": name, "apiVersion": api_version}
        if namespace is not None and plain != "namespaces":
            ref["namespace"] = namespace
        items.append(answers._item(version, metric, metric_selector, ref, stamp, found[name]))
    return answers._list(version, items)


async def answer(
    plans: Mapping[str, PerRequest],
    only: Collection[str],
    kept: Mapping[str, frozenset[str] | None],
    query: Query,
    api: str,
    version: str,
    parts: Sequence[str],
    params: Mapping[str, str],
    pod_labels: Mapping[str, Mapping[str, str]] | None,
) -> Answer | None:
    """The answer to a request for a per-request metric; None when ``parts`` names no such metric."""
    metric = parts[-1]
    plan = plans.get(metric)
    if plan is None or plan.kind != api:
        return None
    if metric not in only and not _needs_own_query(api, params, kept.get(metric)):
        return None
    try:
        answers.check_namespace(
            parts[0] if api == "external" else parts[1] if parts[0] == "namespaces" else None
        )
        if api == "external":
            return await external(plan, query, metric, parts[0], params)
        if len(parts) == 5 and parts[0] == "namespaces":
            _, ns, resource, name, _ = parts
            names: list[str] | None = [name]
            if resource == "pods" and name == "*":
                names = _pods(params, pod_labels)
            return await custom(plan, query, version, ns, resource, names, metric, params)
        if len(parts) == 4 and parts[0] == "namespaces" and parts[2] == "metrics":
            return await custom(plan, query, version, None, "namespaces", [parts[1]], metric, params)
        if len(parts) == 3:
            return await custom(plan, query, version, None, parts[0], [parts[1]], metric, params)
    except Failure as exc:
        return status(exc.code, exc.message)
    return None


def _needs_own_query(api: str, params: Mapping[str, str], kept: frozenset[str] | None) -> bool:
    """Whether a batched metric's vector cannot answer this request: its selector names labels the
    query aggregates away (prometheus-adapter applies selectors before aggregating)."""
    if api == "custom":
        return bool(params.get("metricLabelSelector", "").strip())
    text = params.get("labelSelector", "").strip()
    if not text or kept is None:
        return False
    try:
        keys = {r.key for r in selector_from(params, "labelSelector").requirements}
    except Failure:
        return False  # the batched path answers the 400
    return not keys <= kept


def _pods(params: Mapping[str, str], pod_labels: Mapping[str, Mapping[str, str]] | None) -> list[str] | None:
    selector = selector_from(params, "labelSelector")
    if not selector.requirements:
        return None if pod_labels is None else sorted(pod_labels)
    if pod_labels is None:
        raise Failure(
            503, "selecting pods by labelSelector needs the Kubernetes pod list (kubernetes.pod_labels)"
        )
    on_keys = selector.on_keys()
    return sorted(name for name, labels in pod_labels.items() if on_keys.matches(labels))
