"""Rules: which metrics the adapter serves, and how each is read from Prometheus or the exporters.

A rule has a name (the metric name HPA and KEDA ask for), a PromQL template for Prometheus mode
(``<<.LabelMatchers>>`` receives the rule's ``match``) and/or a ``direct`` block for direct mode
(a family from the exporters, an aggregation and a label mapping). Either way the refresh yields
one vector per rule, and every request's namespace and label selector are applied to that cached
vector as label matchers: one upstream query per rule per refresh, however many HPAs ask.

The built-in rules (``BUILTIN_RULES``) work with no configuration. Their source families are the
exporter's, from ``exporter/metrics.py``; a test checks every one is in that table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from rightsizer_core.settings import build, setting

from .promql import Matcher, parse_matcher

Aggregation = Literal["sum", "avg", "max", "min"]
Api = Literal["external", "custom"]
NamespaceMode = Literal["match", "match_or_unlabelled", "ignore"]

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:.\-]*")  # full matches only (``$`` admits a final newline)
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_PROM_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # a family name PromQL can select as written
DEFAULT_OBJECTS = {"deployments": "workload", "statefulsets": "workload", "replicasets": "workload"}


def _check_labels(labels: list[str], what: str) -> None:
    for label in labels:
        if not _LABEL.fullmatch(label):
            raise ValueError(f"{what}: {label!r} is not a Prometheus label name")


@dataclass(frozen=True)
class DirectRule:
    family: str = setting("", "Metric family read from the exporters' /metrics (required).", env=False)
    aggregation: Aggregation = setting("sum", "How series that fall into one group combine.", env=False)
    by: list[str] = setting([], "Labels kept, grouping the series; empty: every label but `without`.")
    without: list[str] = setting(
        ["instance"], "Labels dropped before grouping; used only when `by` is empty."
    )
    rename: dict[str, str] = setting({}, "Labels renamed after grouping, {from: to}.")
    scale: float = setting(
        1.0, "Factor applied to every sample (0.01 turns percent into a ratio).", env=False
    )
    offset: float = setting(
        0.0, "Added to every sample after `scale` (scale -1, offset 1: one minus a 0/1 flag).", env=False
    )

    def validate(self) -> None:
        if not self.family:
            raise ValueError("family is required")
        _check_labels(self.by, "by")
        _check_labels(self.without, "without")
        _check_labels([*self.rename, *self.rename.values()], "rename")


@dataclass(frozen=True)
class RuleConfig:
    name: str = setting("", "Metric name served to HPA and KEDA (required).", env=False)
    apis: list[Api] = setting(["external"], "APIs serving it: external.metrics and/or custom.metrics.")
    query: str | None = setting(
        None, "PromQL template for Prometheus mode; <<.LabelMatchers>> receives `match`.", env=False
    )
    direct: DirectRule | None = setting(None, "How to compute it in direct mode (from exporters).", env=False)
    match: list[str] = setting([], 'PromQL label matchers limiting the source series, e.g. pod!="".')
    up_family: str | None = setting(
        None,
        "Family saying, per source and with the values' labels, whether it is up (1) or down (0), "
        "e.g. rightsizer_queue_source_up. With it a request is answered only when every source it "
        "selects is up and current (0 then is a real 0): one selecting a source that is down or stale "
        "gets 503, one selecting no source 404 (see Outages in docs/adapter.md).",
        env=False,
    )
    source_family: str | None = setting(
        None,
        "Family whose series, with the values' labels, say which exporter publishes what (any value; "
        "the built-in GPU rules use their own family). With it a request is answered only when every "
        "exporter that published a matching series, now or at its last good scrape, is up and current; "
        "otherwise 503 naming it. Not with up_family.",
        env=False,
    )
    why_family: str | None = setting(
        None,
        "With up_family: an info family whose series, with the values' labels, carry a `reason` "
        "label saying why the flag is 0; the 503 then quotes it (both modes; at most 200 characters).",
        env=False,
    )
    every_source: bool = setting(
        False,
        "With a source family: several exporters publish parts of one key (an SLO over replicas on "
        "several nodes), so a key is answered only while every exporter publishing it is up and "
        "current; without it a key another exporter that is up publishes is answered from it.",
        env=False,
    )

    namespace: NamespaceMode = setting(
        "match",
        "How the request's namespace selects series: the namespace label must equal it (match), "
        "or series without a namespace label also count (match_or_unlabelled), or not at all (ignore).",
        env=False,
    )
    workload_from_pod: bool = setting(
        False,
        "Add a `workload` label derived from the `pod` label (Deployment/StatefulSet naming).",
        env=False,
    )
    aggregation: Aggregation = setting(
        "sum", "How the series of one pod or one object combine in custom-metrics answers.", env=False
    )
    objects: dict[str, str] = setting(
        dict(DEFAULT_OBJECTS), "Custom-metrics object queries: resource → label holding the object's name."
    )
    hide_labels: list[str] = setting(
        [], "Labels left out of external answers' metricLabels (kept for selection only)."
    )
    pod_selector_prefix: str = setting(
        "", "Prefix of pod-label names on the series for pods' labelSelector (label_ for kube_pod_labels)."
    )

    def validate(self) -> None:
        if not self.name:
            raise ValueError("name is required")
        if not _METRIC_NAME.fullmatch(self.name):
            raise ValueError(f"name {self.name!r} must look like a metric name ([a-zA-Z_:][a-zA-Z0-9_:.-]*)")
        if not self.apis:
            raise ValueError(f"rule {self.name!r}: apis must name external and/or custom")
        if self.query is None and self.direct is None:
            raise ValueError(f"rule {self.name!r}: give a query (Prometheus mode) or direct (direct mode)")
        for text in self.match:
            parse_matcher(text)
        named = (("up_family", self.up_family), ("source_family", self.source_family))
        for key, family in (*named, ("why_family", self.why_family)):
            if family is not None and not _PROM_NAME.fullmatch(family):
                raise ValueError(f"rule {self.name!r}: {key} {family!r} is not a metric name")
        if self.up_family is not None and self.source_family is not None:
            raise ValueError(f"rule {self.name!r}: give up_family or source_family, not both")
        if self.why_family is not None and self.up_family is None:
            raise ValueError(f"rule {self.name!r}: why_family needs up_family")
        if self.every_source and self.states_family is None:
            raise ValueError(f"rule {self.name!r}: every_source needs up_family or source_family")
        _check_labels(list(self.objects.values()), f"rule {self.name!r} objects")

    @property
    def matchers(self) -> tuple[Matcher, ...]:
        return tuple(parse_matcher(text) for text in self.match)

    @property
    def states_family(self) -> str | None:
        """The family whose series tell the rule's sources (``up_family`` or ``source_family``)."""
        return self.up_family or self.source_family

    @property
    def key_labels(self) -> tuple[list[str], frozenset[str]]:
        """(labels kept, labels dropped) grouping a source's series into the keys requests select
        on: the direct block's ``by`` (kept; empty: all) and ``without`` (dropped), and always
        ``instance`` and ``job``, which name the source itself."""
        d = self.direct
        by = list(d.by) if d is not None else []
        drop = {"__name__", "instance", "job", *(d.without if d is not None and not d.by else ())}
        return by, frozenset(drop)

    def key_of(self, labels: dict[str, str] | Any) -> dict[str, str]:
        """The key (renamed like the values) of a source's series with ``labels``."""
        by, drop = self.key_labels
        if by:
            key = {name: labels[name] for name in by if labels.get(name)}
        else:
            key = {k: v for k, v in labels.items() if k not in drop and v and k[:1] != "@"}
        rename = self.direct.rename if self.direct is not None else {}
        return {rename.get(k, k): v for k, v in key.items()} if rename else key


def _gpu_rule(
    name: str, family: str, aggregation: Aggregation, complement: bool = False, **extra: Any
) -> RuleConfig:
    """A per-pod GPU rule: series keyed by namespace, pod, container and GPU UUID. ``complement``:
    one minus each sample (a 0/1 flag read as its opposite)."""
    keys = ["namespace", "pod", "container", "UUID"]
    scale = extra.pop("scale", 1.0)
    suffix = f" * {scale!r}" if scale != 1.0 else ""
    selected = f"{family}{{<<.LabelMatchers>>}}"
    direct: dict[str, Any] = {"family": family, "aggregation": aggregation, "by": keys, "scale": scale}
    if complement:
        selected = f"1 - {selected}"
        direct.update(scale=-scale, offset=1.0)
    data: dict[str, Any] = {
        "name": name,
        "apis": ["external", "custom"],
        "query": f"{aggregation} by ({', '.join(keys)}) ({selected}){suffix}",
        "direct": direct,
        "workload_from_pod": True,
        "source_family": family,  # which exporter publishes which pod's GPU: see Outages
        "aggregation": aggregation,
        "objects": {**DEFAULT_OBJECTS, "pods": "pod"},
        **extra,
    }
    data["match"] = ['pod!=""', *data.get("match", [])]
    return build(RuleConfig, data, f"built-in rule {name}")


def _queue_rule(name: str, family: str) -> RuleConfig:
    """A queue rule: one series per queue with its static labels (namespace, workload, ...)."""
    return build(
        RuleConfig,
        {
            "name": name,
            "apis": ["external", "custom"],
            "query": f"max without (instance, job) ({family}{{<<.LabelMatchers>>}})",
            "direct": {"family": family, "aggregation": "max", "without": ["instance", "job"]},
            "up_family": "rightsizer_queue_source_up",
            "namespace": "match_or_unlabelled",
        },
        f"built-in rule {name}",
    )


def _slo_rule(name: str, family: str, aggregation: Aggregation) -> RuleConfig:
    """An SLO scaling rule: one series per workload (namespace, workload), over the exporters'
    scaling window; answered only while ``rightsizer_workload_slo_scaling_up`` says it can be judged
    (a source down or too few requests: 503; no SLO declared: 404) by every exporter publishing
    it: each holds some of the workload's replicas, so the others' answer alone is partial."""
    keys = ["namespace", "workload"]
    return build(
        RuleConfig,
        {
            "name": name,
            "apis": ["external", "custom"],
            "query": f"{aggregation} by ({', '.join(keys)}) ({family}{{<<.LabelMatchers>>}})",
            "direct": {"family": family, "aggregation": aggregation, "by": keys},
            "up_family": "rightsizer_workload_slo_scaling_up",
            "why_family": "rightsizer_workload_slo_scaling_unjudged_info",  # its `reason`, in the 503
            "every_source": True,
            "aggregation": aggregation,
            "objects": {"deployments": "workload", "statefulsets": "workload"},
        },
        f"built-in rule {name}",
    )


BUILTIN_RULES: tuple[RuleConfig, ...] = (
    _queue_rule("rightsizer_queue_depth", "rightsizer_queue_depth"),
    _queue_rule("rightsizer_queue_in_flight", "rightsizer_queue_in_flight"),
    _gpu_rule("rightsizer_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL", "avg", scale=0.01),
    _gpu_rule("rightsizer_gpu_memory_used_bytes", "rightsizer_pod_gpu_memory_used_bytes", "sum"),
    _gpu_rule("rightsizer_gpu_idle", "rightsizer_gpu_verdict", "max", match=['verdict="idle"']),
    # 1 unless idle, read from the idle state alone: exactly one verdict of a GPU is 1, so this is
    # the other states' max, from a quarter of their series (at 40,000 GPUs the other states'
    # 160,000 series cost the engine more than any other rule: docs/fleet-scale.md)
    _gpu_rule(
        "rightsizer_gpu_busy", "rightsizer_gpu_verdict", "max", complement=True, match=['verdict="idle"']
    ),
    _gpu_rule("rightsizer_gpu_fit_score", "rightsizer_gpu_fit_score", "avg"),
    # The worst target's latency at its objective over the target (0.8: 20 % under it), and the
    # lowest attainment of the workload's targets, both over the short scaling window.
    _slo_rule(
        "rightsizer_workload_slo_latency_ratio", "rightsizer_workload_slo_scaling_latency_ratio", "max"
    ),
    _slo_rule(
        "rightsizer_workload_slo_attainment_ratio", "rightsizer_workload_slo_scaling_attainment_ratio", "min"
    ),
)
