"""prometheus-adapter's configuration format: reading, naming, resources and batched templates.

Cases follow prometheus-adapter's docs/config.md (``matches``/``as`` defaults and captures,
``seriesFilters``, ``resources`` overrides and template) and its loader, which is strict: unknown
keys are errors there too (yaml.UnmarshalStrict)."""

from __future__ import annotations

import re

import pytest

from adapter.promadapter.batching import NotBatchable, plan
from adapter.promadapter.discovery import discover
from adapter.promadapter.naming import go_expand, metric_name, resource_labels
from adapter.promadapter.schema import PromAdapterRule, parse

CONTAINER = {
    "seriesQuery": '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}',
    "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
    "name": {"matches": "^container_(.*)_seconds_total$"},
    "metricsQuery": 'sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[2m])) by (<<.GroupBy>>)',
}


def one(rule: dict[str, object], kind: str = "rules") -> PromAdapterRule:
    return parse({kind: [rule]}).rules[0]


def test_as_defaults_to_the_only_capture_group_or_the_whole_match() -> None:
    assert metric_name(one(CONTAINER), "container_cpu_usage_seconds_total") == "cpu_usage"
    assert metric_name(one(CONTAINER), "container_memory_usage_bytes") is None
    whole = one({**CONTAINER, "name": {"matches": "^container_.*_total$"}})
    assert metric_name(whole, "container_fs_reads_total") == "container_fs_reads_total"
    no_name = one({**CONTAINER, "name": {}})
    assert metric_name(no_name, "anything_at_all") == "anything_at_all"


def test_as_expands_like_go() -> None:
    found = re.search(r"^(?P<kind>\w+?)_(\w+)$", "http_requests")
    assert found is not None
    assert go_expand("${2}_per_${kind}", found) == "requests_per_http"
    assert go_expand("$2_x", found) == ""  # Go reads the name "2_x", which is no group
    assert go_expand("$$1 $9 $", found) == "$1  $"
    rule = one({**CONTAINER, "name": {"matches": "^container_(.*)_(seconds)_total$", "as": "${1}_$2"}})
    assert metric_name(rule, "container_cpu_usage_seconds_total") == "cpu_usage_seconds"


def test_series_filters_are_unanchored_searches() -> None:
    rule = one(
        {
            **CONTAINER,
            "name": {"matches": "^container_(.*)_total$"},
            "seriesFilters": [{"isNot": "_seconds_total$"}, {"is": "fs"}],
        }
    )
    assert metric_name(rule, "container_fs_reads_total") == "fs_reads"
    assert metric_name(rule, "container_fs_io_time_seconds_total") is None
    assert metric_name(rule, "container_network_receive_bytes_total") is None


def test_resources_from_overrides_and_template() -> None:
    rule = one(CONTAINER)
    assert resource_labels(rule.resources, ["namespace", "pod", "container", "job"]) == {
        "namespace": "namespaces",
        "pod": "pods",
    }
    templated = one({**CONTAINER, "resources": {"template": "kube_<<.Group>>_<<.Resource>>"}})
    labels = ["kube__pod", "kube_apps_deployment", "kube__namespace", "kube_x_cheese", "pod"]
    assert resource_labels(templated.resources, labels) == {
        "kube__pod": "pods",
        "kube_apps_deployment": "deployments",
        "kube__namespace": "namespaces",
    }


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"rules": [{**CONTAINER, "metricQuery": "count(x)"}]}, "rules[0]: unknown key 'metricQuery'"),
        ({"rules": [{**CONTAINER, "name": {"matches": "(a)(b)"}}]}, "rules[0].name.as: must be given"),
        ({"rules": [{**CONTAINER, "name": {"matches": "(unclosed"}}]}, "rules[0].name.matches: '(unclosed'"),
        ({"externalRules": [{"seriesQuery": "x"}]}, "externalRules[0].metricsQuery: is required"),
        ({"rules": [{**CONTAINER, "seriesFilters": [{"is": "a", "isNot": "b"}]}]}, "exactly one of is"),
        ({"rules": [{**CONTAINER, "metricsQuery": "<<.Nope>>"}]}, "<<.Nope>> is not supported"),
        (
            {"rules": [{**CONTAINER, "metricsQuery": "<<.GroupBySlice>>"}]},
            "<<.GroupBySlice>> is not supported",
        ),
        (
            {"rules": [{**CONTAINER, "metricsQuery": '<<index .LabelValuesByName "pod">>'}]},
            '<<index .LabelValuesByName "pod">> is not supported',
        ),
        ({"rules": [{**CONTAINER, "resources": {"namespaced": False}}]}, "applies to externalRules only"),
        ({"resourceRules": {"cpu": {}}}, "no rules and no externalRules"),
        ({"rule": []}, "top level: unknown key 'rule'"),
    ],
)
def test_malformed_files_are_refused_naming_the_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse(data)


def test_group_by_gets_the_selection_labels_and_matchers_go_away() -> None:
    batch = plan(str(CONTAINER["metricsQuery"]), "container_cpu_usage_seconds_total", ["namespace", "pod"])
    assert (
        batch.query
        == 'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="POD"}[2m]))'
    )
    assert batch.outer == "sum"
    external = plan("sum(<<.Series>>{<<.LabelMatchers>>}) by (name)", "queue_depth", ["namespace"])
    assert external.query == "sum by (name, namespace) (queue_depth{})"
    assert plan("sum(<<.Series>>{<<.LabelMatchers>>}) by (name)", "queue_depth", []).query == (
        "sum by (name) (queue_depth{})"
    )
    nested = plan("max by (<<.GroupBy>>) (sum without (gpu) (x{<<.LabelMatchers>>}))", "x", ["pod"])
    assert nested.query == "max by (pod) (sum without (gpu) (x{}))"


@pytest.mark.parametrize(
    "template",
    [
        "topk(1, <<.Series>>{<<.LabelMatchers>>})",
        "sum(a{<<.LabelMatchers>>}) / on(pod) sum(b{<<.LabelMatchers>>})",
        'label_replace(x, "a", "<<.LabelMatchers>>", "", "")',
        "sum without (namespace) (<<.Series>>{<<.LabelMatchers>>})",
        "<<.Series>>{<<.LabelMatchers>>} > <<.GroupBy>>",
    ],
)
def test_templates_selection_cannot_commute_with_are_not_batched(template: str) -> None:
    with pytest.raises(NotBatchable):
        plan(template, "x", ["namespace", "pod"])


def test_discovery_maps_series_to_metrics_and_renames_labels() -> None:
    rules = parse(
        {
            "rules": [
                {
                    "seriesQuery": "{__name__=~'gpu_.*'}",
                    "resources": {
                        "overrides": {
                            "kubernetes_namespace": {"resource": "namespace"},
                            "kubernetes_pod_name": {"resource": "pods"},
                        }
                    },
                    "name": {"matches": "^gpu_(.*)$", "as": "accel_$1"},
                    "metricsQuery": "avg(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
                },
            ]
        }
    ).rules
    series = [
        {"__name__": "gpu_util", "kubernetes_namespace": "a", "kubernetes_pod_name": "p"},
        {"__name__": "cpu_util", "kubernetes_namespace": "a"},
    ]
    found = discover(rules, {"{__name__=~'gpu_.*'}": series})
    [rule] = found.rules
    assert rule.name == "accel_util" and rule.apis == ["custom"] and rule.objects == {"pods": "pod"}
    assert rule.query == "avg by (kubernetes_namespace, kubernetes_pod_name) (gpu_util{})"
    assert found.renames == {
        "accel_util": {"kubernetes_namespace": "namespace", "kubernetes_pod_name": "pod"}
    }
