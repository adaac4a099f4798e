"""Discovery lists, per custom metric, only the resources its series' labels map to, as
prometheus-adapter lists them.

The case is prometheus-adapter's own series registry test ("should list all metrics", in
pkg/custom-provider/series_registry_test.go): the rules of its default configuration (cmd/config-gen,
label prefix ``kube_``, rate interval 1m), written below in its file format, and the same series.
Its expected list is kept, with one difference: its test REST mapper registers Ingress and
Deployment under ``extensions``; a current cluster serves them as ``networking.k8s.io`` and
``apps``, which is what a discovery name carries (``ingresses.networking.k8s.io/ingress_hits``).
"""

from __future__ import annotations

import json

from adapter.kubernetes.discovery import Discovery
from adapter.promadapter.discovery import discover
from adapter.promadapter.schema import parse

CONTAINER_QUERY = '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
NORMAL_QUERY = '{kube_namespace!="",__name__!~"^container_.*"}'
CONTAINER_RATE = 'sum(rate(<<.Series>>{<<.LabelMatchers>>,container!="POD"}[1m])) by (<<.GroupBy>>)'
CONTAINER_RESOURCES = {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}}
DEFAULT_RULES = {
    "rules": [
        {
            "seriesQuery": CONTAINER_QUERY,
            "resources": CONTAINER_RESOURCES,
            "name": {"matches": "^container_(.*)_seconds_total$"},
            "metricsQuery": CONTAINER_RATE,
        },
        {
            "seriesQuery": CONTAINER_QUERY,
            "seriesFilters": [{"isNot": "^container_.*_seconds_total$"}],
            "resources": CONTAINER_RESOURCES,
            "name": {"matches": "^container_(.*)_total$"},
            "metricsQuery": CONTAINER_RATE,
        },
        {
            "seriesQuery": CONTAINER_QUERY,
            "seriesFilters": [{"isNot": "^container_.*_total$"}],
            "resources": CONTAINER_RESOURCES,
            "name": {"matches": "^container_(.*)$"},
            "metricsQuery": 'sum(<<.Series>>{<<.LabelMatchers>>,container!="POD"}) by (<<.GroupBy>>)',
        },
        {
            "seriesQuery": NORMAL_QUERY,
            "seriesFilters": [{"isNot": ".*_total$"}],
            "resources": {"template": "kube_<<.Resource>>"},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        },
        {
            "seriesQuery": NORMAL_QUERY,
            "seriesFilters": [{"isNot": ".*_seconds_total"}],
            "name": {"matches": "^(.*)_total$"},
            "resources": {"template": "kube_<<.Resource>>"},
            "metricsQuery": "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)",
        },
        {
            "seriesQuery": NORMAL_QUERY,
            "name": {"matches": "^(.*)_seconds_total$"},
            "resources": {"template": "kube_<<.Resource>>"},
            "metricsQuery": "sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)",
        },
    ]
}
CONTAINER = {"pod": "somepod", "namespace": "somens", "container": "somecont"}
SERIES = {
    CONTAINER_QUERY: [
        {"__name__": "container_some_time_seconds_total", **CONTAINER},
        {"__name__": "container_some_count_total", **CONTAINER},
        {"__name__": "container_some_usage", **CONTAINER},
    ],
    NORMAL_QUERY: [
        {"__name__": "node_gigawatts", "kube_node": "somenode"},
        {"__name__": "service_proxy_packets", "kube_service": "somesvc", "kube_namespace": "somens"},
        *(
            {
                "__name__": "ingress_hits_total",
                "kube_ingress": "someingress",
                "kube_service": "somesvc",
                "kube_pod": pod,
                "kube_namespace": "somens",
            }
            for pod in ("backend1", "backend2")
        ),
        {"__name__": "volume_claims_total", "kube_persistentvolume": "somepv"},
        {
            "__name__": "work_queue_wait_seconds_total",
            "kube_deployment": "somedep",
            "kube_namespace": "somens",
        },
        {"__name__": "node_fan_seconds_total", "kube_node": "somenode"},
    ],
}
# (resource, namespaced, metric), prometheus-adapter's ListAllMetrics for these series.
UPSTREAM = {
    ("pods", True, "some_count"),
    ("namespaces", False, "some_count"),
    ("pods", True, "some_time"),
    ("namespaces", False, "some_time"),
    ("pods", True, "some_usage"),
    ("namespaces", False, "some_usage"),
    ("services", True, "ingress_hits"),
    ("ingresses.networking.k8s.io", True, "ingress_hits"),
    ("pods", True, "ingress_hits"),
    ("namespaces", False, "ingress_hits"),
    ("services", True, "service_proxy_packets"),
    ("namespaces", False, "service_proxy_packets"),
    ("deployments.apps", True, "work_queue_wait"),
    ("namespaces", False, "work_queue_wait"),
    ("nodes", False, "node_gigawatts"),
    ("persistentvolumes", False, "volume_claims"),
    ("nodes", False, "node_fan"),
}


def test_discovery_lists_what_prometheus_adapter_lists() -> None:
    found = discover(parse(DEFAULT_RULES).rules, SERIES)
    assert not found.not_served
    discovery = Discovery([])
    discovery.rebuild(found.rules, 1, found.listed)
    for version in ("v1beta2", "v1beta1"):
        body = discovery.get(f"/apis/custom.metrics.k8s.io/{version}")
        assert body is not None
        listed = set()
        for resource in json.loads(body)["resources"]:
            name, _, metric = resource["name"].partition("/")
            listed.add((name, resource["namespaced"], metric))
        assert listed == UPSTREAM


def test_a_metric_whose_series_carry_no_pod_label_lists_no_pods() -> None:
    found = discover(parse(DEFAULT_RULES).rules, SERIES)
    assert found.listed["node_gigawatts"] == [("nodes", False)]
    assert found.listed["service_proxy_packets"] == [("namespaces", False), ("services", True)]
