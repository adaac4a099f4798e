"""Discovery documents (``/apis``, ``/apis/{group}``, ``/apis/{group}/{version}``), built once.

The aggregator probes discovery every 30 s with a 5 s deadline and marks the APIService
``FailedDiscoveryCheck`` when it fails, which breaks ``kubectl`` discovery cluster-wide; so these
are fixed bytes made at start from the rules, answered 200 whatever the backend is doing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..rules import RuleConfig
from .answers import CUSTOM_GROUP, EXTERNAL_GROUP, dumps

VERSIONS = {EXTERNAL_GROUP: ("v1beta1",), CUSTOM_GROUP: ("v1beta2", "v1beta1")}  # preferred first


def _group(name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in VERSIONS[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def _resource(name: str, kind: str, namespaced: bool = True) -> dict[str, Any]:
    return {"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get"]}


def _resources(
    group: str, rules: Sequence[RuleConfig], listed: Mapping[str, Sequence[tuple[str, bool]]]
) -> list[dict[str, Any]]:
    if group == EXTERNAL_GROUP:
        return [_resource(r.name, "ExternalMetricValueList") for r in rules if "external" in r.apis]
    out = []
    for r in rules:
        if "custom" not in r.apis:
            continue
        if r.name in listed:  # a discovering source said which resources this metric's series name
            out += [_resource(f"{res}/{r.name}", "MetricValueList", ns) for res, ns in listed[r.name]]
            continue
        out.append(_resource(f"pods/{r.name}", "MetricValueList"))
        out += [_resource(f"{res}/{r.name}", "MetricValueList") for res in sorted(r.objects) if res != "pods"]
        out.append(_resource(f"namespaces/{r.name}", "MetricValueList", namespaced=False))
    return out


class Discovery:
    """The discovery bodies for a set of rules, keyed by request path."""

    def __init__(self, rules: Sequence[RuleConfig], generation: int = 0) -> None:
        self.rebuild(rules, generation)

    def rebuild(
        self,
        rules: Sequence[RuleConfig],
        generation: int,
        listed: Mapping[str, Sequence[tuple[str, bool]]] | None = None,
    ) -> None:
        """New bodies for a new rule set (a discovering source found other metrics); ``listed``:
        metric -> (resource, namespaced) for custom metrics whose resources the source knows."""
        self.generation = generation
        groups = [_group(EXTERNAL_GROUP), _group(CUSTOM_GROUP)]
        self.bodies: dict[str, bytes] = {
            "/apis": dumps({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
        }
        for group in groups:
            name = group["name"]
            self.bodies[f"/apis/{name}"] = dumps({"kind": "APIGroup", "apiVersion": "v1", **group})
            for version in VERSIONS[name]:
                self.bodies[f"/apis/{name}/{version}"] = dumps(
                    {
                        "kind": "APIResourceList",
                        "apiVersion": "v1",
                        "groupVersion": f"{name}/{version}",
                        "resources": _resources(name, rules, listed or {}),
                    }
                )

    def get(self, path: str) -> bytes | None:
        return self.bodies.get(path.rstrip("/") or "/")
