"""One name, one window: the adapter's SLO metrics and the exporter's SLO families never share a name.

The adapter serves ``rightsizer_workload_slo_latency_ratio`` and ``…_attainment_ratio`` to HPA and
KEDA from the exporters' short scaling window (``…_scaling_…`` in Prometheus); the right-sizing
window's figures are ``…_window_…``. A name served by the adapter is an exporter family only where
it is that very family (the queue depth), so a query against Prometheus and an autoscaler reading
the adapter never get different windows under one name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import yaml
from servers import ROOT

from adapter.rules import BUILTIN_RULES
from exporter.metrics import FAMILIES_BY_NAME


def exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from [str(value)] if key in ("expr", "promql") else exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from exprs(item)


def prometheus_queries() -> Iterator[tuple[str, str]]:
    """(where, text) of what reads Prometheus or the exporters' pages rather than the adapter: the
    dashboards' queries, the alerting and recording rules, the ServiceMonitor's kept families and
    the report's code."""
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for expr in re.findall(r'"(?:expr|query)": "((?:[^"\\]|\\.)*)"', path.read_text()):
            yield path.name, expr
    for path in sorted((ROOT / "deploy/monitoring").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            yield from ((path.name, expr) for expr in exprs(doc))
    yield "servicemonitor-headless.yaml", (ROOT / "deploy/examples/servicemonitor-headless.yaml").read_text()
    for path in sorted((ROOT / "rightsizing/command").glob("*.py")):
        yield path.name, path.read_text()


def adapter_only() -> set[str]:
    return {r.name for r in BUILTIN_RULES if r.direct is not None and r.direct.family != r.name}


def test_a_served_name_is_an_exporter_family_only_when_it_is_that_family() -> None:
    for rule in BUILTIN_RULES:
        assert rule.direct is not None
        if rule.name in FAMILIES_BY_NAME:
            assert rule.direct.family == rule.name, (rule.name, rule.direct.family)


def test_the_slo_signals_read_the_scaling_window_and_the_window_families_exist() -> None:
    served = {r.name: r.direct.family for r in BUILTIN_RULES if r.direct is not None}
    for what in ("latency", "attainment"):
        scaling = f"rightsizer_workload_slo_scaling_{what}_ratio"
        assert served[f"rightsizer_workload_slo_{what}_ratio"] == scaling
        help_text = FAMILIES_BY_NAME[f"rightsizer_workload_slo_window_{what}_ratio"].help
        assert "right-sizing window" in help_text, what


def test_nothing_that_queries_prometheus_names_an_adapter_only_metric() -> None:
    names = adapter_only()
    assert "rightsizer_workload_slo_latency_ratio" in names
    queries = list(prometheus_queries())
    assert len(queries) > 50 and any("rightsizer_workload_slo_window_latency_ratio" in q for _, q in queries)
    found = [f"{where}: {name}" for where, q in queries for name in names if re.search(rf"\b{name}\b", q)]
    assert found == []
