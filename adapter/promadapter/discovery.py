"""From the series ``seriesQuery`` finds to the adapter's rules: one per exposed metric.

Each exposed metric gets the query that answers all its requests in one refresh (``batching``)
and the label renames that let the adapter's selection read the namespace and pod labels
whatever the file calls them. A metric whose template cannot be batched is left out, with why.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rightsizer_core.settings import ConfigError, build

from ..rules import RuleConfig
from .batching import REAGGREGATE, NotBatchable, plan
from .naming import listed_resources, metric_name, namespace_label, resource_labels
from .per_request import PerRequest
from .schema import PromAdapterRule

_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # a series name PromQL selects as written


@dataclass
class Discovered:
    rules: list[RuleConfig] = field(default_factory=list)
    renames: dict[str, dict[str, str]] = field(default_factory=dict)  # metric -> {label: new label}
    unbatchable: dict[str, str] = field(default_factory=dict)  # "rules[i]/metric" -> reason
    not_served: dict[str, str] = field(default_factory=dict)  # "rules[i]/metric" -> reason
    per_request: dict[str, PerRequest] = field(default_factory=dict)  # metrics only served per request
    plans: dict[str, PerRequest] = field(default_factory=dict)  # every metric: its per-request query
    kept: dict[str, frozenset[str] | None] = field(default_factory=dict)  # batched external: Batch.kept
    by_rule: dict[str, list[str]] = field(default_factory=dict)  # "rules[i]" -> metric names
    # custom metrics: (discovery name, namespaced) of each resource their series' labels map to
    listed: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)


def _metrics_of(
    rule: PromAdapterRule, series: Iterable[Mapping[str, str]]
) -> dict[str, tuple[str, set[str]]]:
    """Exposed name -> (first series name giving it, every label seen on its series)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for labels in series:
        name = labels.get("__name__", "")
        exposed = metric_name(rule, name) if name else None
        if exposed is None:
            continue
        first, seen = found.setdefault(exposed, (name, set()))
        seen.update(k for k in labels if k != "__name__")
        if name < first:
            found[exposed] = (name, seen)
    return found


def _rule_for(
    rule: PromAdapterRule, exposed: str, series_name: str, labels: set[str], out: Discovered
) -> tuple[dict[str, Any], dict[str, str]]:
    mapped = resource_labels(rule.resources, labels)
    ns_label = namespace_label(mapped)
    if rule.kind == "external":
        keys = [ns_label or "namespace"] if rule.resources.namespaced else []
        batch = plan(rule.metrics_query, series_name, keys)
        visible = plan(rule.metrics_query, series_name, []).query == batch.query
        out.kept[exposed] = batch.kept
        renames = {}
        if keys and keys[0] != "namespace":
            if visible:
                raise NotBatchable(f"the namespace label {keys[0]!r} stays in the answer under another name")
            renames[keys[0]] = "namespace"
        data: dict[str, Any] = {
            "name": exposed,
            "apis": ["external"],
            "query": batch.query,
            "namespace": "match" if keys else "ignore",
            "hide_labels": [] if visible else ["namespace"],
        }
        return data, renames
    objects = {res: label for label, res in mapped.items() if res != "namespaces"}
    keys = sorted({*([ns_label] if ns_label else []), *objects.values()})
    if not objects and not ns_label:
        raise NotBatchable("no label of its series maps to a resource")
    batch = plan(rule.metrics_query, series_name, keys)
    if len(objects) > 1 and batch.outer not in REAGGREGATE:
        raise NotBatchable(
            f"series name several resources ({', '.join(sorted(objects))}) and the outer aggregation "
            f"({batch.outer or 'none'}) cannot be combined again"
        )
    renames = {ns_label: "namespace"} if ns_label and ns_label != "namespace" else {}
    pod_label = next((label for res, label in objects.items() if res == "pods"), None)
    if pod_label and pod_label != "pod":
        renames[pod_label] = "pod"
        objects["pods"] = "pod"
    data = {
        "name": exposed,
        "apis": ["custom"],
        "query": batch.query,
        "namespace": "match" if ns_label else "ignore",
        "aggregation": REAGGREGATE.get(batch.outer or "", "sum"),
        "objects": objects,
    }
    return data, renames


def _per_request(
    rule: PromAdapterRule, exposed: str, series_name: str, labels: set[str], out: Discovered
) -> tuple[dict[str, Any], dict[str, str]]:
    """A metric answered with one query per request, as prometheus-adapter does for every metric."""
    per_request = out.per_request[exposed] = _plan(rule, series_name, labels)
    data = {
        "name": exposed,
        "apis": [rule.kind],
        "query": rule.metrics_query,
        "namespace": "match" if per_request.namespace_label else "ignore",
        "objects": dict(per_request.objects),
    }
    return data, {}


def _plan(rule: PromAdapterRule, series_name: str, labels: set[str]) -> PerRequest:
    mapped = resource_labels(rule.resources, labels)
    ns_label = namespace_label(mapped)
    objects = {res: label for label, res in mapped.items() if res != "namespaces"}
    if rule.kind == "external":
        ns_label = (ns_label or "namespace") if rule.resources.namespaced else None
    return PerRequest(rule.kind, rule.metrics_query, series_name, ns_label, objects)


def discover(
    rules: Iterable[PromAdapterRule],
    series: Mapping[str, Sequence[Mapping[str, str]]],
    source_checks: bool = False,
) -> Discovered:
    """Rules for every metric ``series`` (seriesQuery -> label sets) exposes; the first rule wins a name."""
    out = Discovered()
    taken: set[str] = set()
    for rule in rules:
        names = out.by_rule.setdefault(rule.where, [])
        for exposed, (series_name, labels) in sorted(
            _metrics_of(rule, series.get(rule.series_query, [])).items()
        ):
            if exposed in taken:
                continue
            names.append(exposed)
            try:
                data, renames = _rule_for(rule, exposed, series_name, labels, out)
            except NotBatchable as exc:
                out.unbatchable[f"{rule.where}/{exposed}"] = str(exc)
                data, renames = _per_request(rule, exposed, series_name, labels, out)
            if source_checks and exposed not in out.per_request and _PLAIN_NAME.fullmatch(series_name):
                # which target publishes what (see Outages); each series keyed by all its labels but
                # instance and job, so one target standing in for another is one series for another
                data["source_family"] = series_name
            try:
                config = build(RuleConfig, data, f"{rule.where} metric {exposed}")
            except ConfigError as exc:
                out.not_served[f"{rule.where}/{exposed}"] = str(exc)
                out.unbatchable.pop(f"{rule.where}/{exposed}", None)
                out.per_request.pop(exposed, None)
                continue
            out.plans[exposed] = _plan(rule, series_name, labels)
            if rule.kind == "custom":
                out.listed[exposed] = listed_resources(resource_labels(rule.resources, labels))
            taken.add(exposed)
            out.rules.append(config)
            if renames:
                out.renames[exposed] = renames
    return out
