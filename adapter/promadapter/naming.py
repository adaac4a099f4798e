"""Series names to metric names (``name.matches``/``as``) and series labels to resources.

Semantics are prometheus-adapter's ``pkg/naming``: ``as`` is expanded like Go's
``Regexp.ExpandString`` against the first match of ``matches`` in the series name (``$1``,
``${name}``, ``$$``; unknown groups give ""), a series whose name does not match is skipped, and
``seriesFilters`` are unanchored searches. A label maps to a resource through ``overrides`` or the
``template`` (``<<.Group>>`` with dots as underscores, ``<<.Resource>>`` singular).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .schema import PromAdapterRule, Resources

_GO_NAME = re.compile(r"[A-Za-z0-9_]+")
# Resources the custom metrics API is asked about, singular -> plural (what the REST mapper knows).
KNOWN_RESOURCES = {
    "pod": "pods",
    "namespace": "namespaces",
    "service": "services",
    "node": "nodes",
    "deployment": "deployments",
    "statefulset": "statefulsets",
    "replicaset": "replicasets",
    "daemonset": "daemonsets",
    "job": "jobs",
    "ingress": "ingresses",
    "persistentvolumeclaim": "persistentvolumeclaims",
    "horizontalpodautoscaler": "horizontalpodautoscalers",
    "persistentvolume": "persistentvolumes",
    "cronjob": "cronjobs",
    "replicationcontroller": "replicationcontrollers",
}
PLURALS = set(KNOWN_RESOURCES.values())
# API groups of the resources outside the core group, as a current cluster's REST mapper has them:
# discovery names a resource with its group (``deployments.apps``), as Kubernetes' GroupResource does.
GROUPS = {
    "deployments": "apps",
    "statefulsets": "apps",
    "replicasets": "apps",
    "daemonsets": "apps",
    "jobs": "batch",
    "cronjobs": "batch",
    "ingresses": "networking.k8s.io",
    "horizontalpodautoscalers": "autoscaling",
}
CLUSTER_SCOPED = {"namespaces", "nodes"}  # never listed as namespaced, whatever the series' labels


def go_expand(template: str, match: re.Match[str]) -> str:
    """``template`` with ``$n``, ``$name``, ``${name}`` and ``$$`` expanded as Go does."""
    out: list[str] = []
    i = 0
    while i < len(template):
        ch = template[i]
        if ch != "$" or i + 1 >= len(template):
            out.append(ch)
            i += 1
            continue
        rest = template[i + 1 :]
        if rest[0] == "$":
            out.append("$")
            i += 2
            continue
        if rest[0] == "{":
            end = rest.find("}")
            name = rest[1:end] if end > 0 else ""
            if not name or not _GO_NAME.fullmatch(name):
                out.append("$")
                i += 1
                continue
            i += end + 2
        else:
            found = _GO_NAME.match(rest)
            if found is None:
                out.append("$")
                i += 1
                continue
            name = found.group()
            i += len(name) + 1
        out.append(_group(match, name))
    return "".join(out)


def _group(match: re.Match[str], name: str) -> str:
    try:
        value = match.group(int(name)) if name.isdigit() else match.group(name)
    except IndexError:  # no such group: Go expands it to nothing
        return ""
    return value or ""


def metric_name(rule: PromAdapterRule, series_name: str) -> str | None:
    """The name ``series_name`` is exposed as, or None when filters or ``matches`` reject it."""
    if any(f.search(series_name) is None for f in rule.is_filters):
        return None
    if any(f.search(series_name) is not None for f in rule.is_not_filters):
        return None
    match = rule.matches.search(series_name)
    if match is None:
        return None
    return go_expand(rule.as_, match) or None


def plural(resource: str) -> str:
    resource = resource.lower()
    if resource in PLURALS:
        return resource
    return KNOWN_RESOURCES.get(resource, resource if resource.endswith("s") else resource + "s")


def _template_regex(template: str) -> re.Pattern[str] | None:
    if not template:
        return None
    parts = re.split(r"(<<\.Group>>|<<\.Resource>>)", template)
    pattern = "".join(
        "(?P<group>[A-Za-z0-9_]*?)"
        if p == "<<.Group>>"
        else "(?P<resource>[A-Za-z0-9]+)"
        if p == "<<.Resource>>"
        else re.escape(p)
        for p in parts
    )
    return re.compile(pattern)


def resource_labels(resources: Resources, labels: Iterable[str]) -> dict[str, str]:
    """Label -> plural resource, for the labels of a series that name a Kubernetes object."""
    regex = _template_regex(resources.template)
    out: dict[str, str] = {}
    for label in labels:
        if label in resources.overrides:
            out[label] = plural(resources.overrides[label][1])
            continue
        if regex is None:
            continue
        found = regex.fullmatch(label)
        if found is None or "resource" not in found.groupdict():
            continue
        singular = found.group("resource").lower()
        if singular in KNOWN_RESOURCES:  # the REST mapper knows only real resources
            out[label] = KNOWN_RESOURCES[singular]
    return out


def namespace_label(mapped: dict[str, str]) -> str | None:
    return next((label for label, res in sorted(mapped.items()) if res == "namespaces"), None)


def listed_resources(mapped: dict[str, str]) -> list[tuple[str, bool]]:
    """(discovery name, namespaced) of each resource the labels map to, as prometheus-adapter lists
    them: a resource only when a label maps to it, namespaced when a label maps to namespaces
    (except namespaces and nodes themselves), named with its API group."""
    namespaced = "namespaces" in mapped.values()
    return [
        (f"{res}.{GROUPS[res]}" if res in GROUPS else res, namespaced and res not in CLUSTER_SCOPED)
        for res in sorted(set(mapped.values()))
    ]
