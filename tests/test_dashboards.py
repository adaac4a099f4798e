"""dashboards/: the JSON is what the builder makes, loads through grafana-foundation-sdk's models
without losing keys, parses with promtool, names only published metrics, and every query over our
series returns data from a real Prometheus scraping the simulated exporter, variables substituted.

Syntax is checked with ``promtool check rules`` on a generated rule file holding every expression
as a recording rule (promtool 2.42 has no "parse" command); the real Prometheus then runs each one.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from adapter_support import get
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from metric_names import known_names, names_in
from monitoring_stack import Stack, exercise_adapter, monitoring_stack
from servers import ROOT, http_get, prom_query, prometheus_build, wait_for

DASHBOARDS = ROOT / "dashboards"
FILES = sorted(DASHBOARDS.glob("*.json"))
DS = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's built-in variables, as a 1 s scrape interval and a 1 h range would set them.
BUILTINS = {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "1h"}
# The job variables' values: the jobs deploy/ configures (the Services' names).
JOBS = {"exporter_job": "rightsizer-exporter", "adapter_job": "rightsizer-adapter"}
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$", re.S)


def load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


def panels(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in doc.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def variables(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(doc["templating"]["list"])


def targets() -> list[tuple[str, str]]:
    """(id, expression) of every query of every panel."""
    return [(f"{path.stem}/{p['id']} {p['title']}/{t['refId']}", t["expr"])
            for path in FILES for p in panels(load(path)) for t in p.get("targets", [])]


def variable_selectors() -> list[tuple[str, str, str]]:
    out = []
    for path in FILES:
        for var in variables(load(path)):
            if var["type"] == "query":
                m = LABEL_VALUES.match(var["query"])
                assert m, f"{path.name} ${var['name']}: expected label_values(selector, label)"
                out.append((f"{path.stem}/${var['name']}", m.group(1), m.group(2)))
    return out


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """Grafana's substitution for a Prometheus query: the built-ins, then each variable ("All" is
    the variables' allValue, ``.*``)."""
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: (values or {}).get(m.group(1) or m.group(2), ".*"), expr)


def ours(expr: str) -> bool:
    return bool(names_in(expr)) or "$exporter_job" in expr or "$adapter_job" in expr


# --- static checks -------------------------------------------------------------------------------

def test_there_are_four_dashboards_with_stable_uids() -> None:
    uids = {load(p)["uid"] for p in FILES}
    assert uids == {"rightsizer-fleet", "rightsizer-gpu", "rightsizer-autoscaling", "rightsizer-health"}


def test_json_is_what_the_builder_makes() -> None:
    result = subprocess.run([sys.executable, str(DASHBOARDS / "build" / "generate.py"), "--check"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def lost(original: Any, copy: Any, where: str = "") -> list[str]:
    """Paths of ``original`` that ``copy`` lacks or holds a different value at."""
    if isinstance(original, dict):
        if not isinstance(copy, dict):
            return [where or "/"]
        return [p for k, v in original.items()
                for p in (lost(v, copy[k], f"{where}/{k}") if k in copy else [f"{where}/{k}"])]
    if isinstance(original, list):
        if not isinstance(copy, list) or len(copy) != len(original):
            return [where]
        pairs = enumerate(zip(original, copy, strict=True))
        return [p for i, (a, b) in pairs for p in lost(a, b, f"{where}/{i}")]
    return [] if original == copy else [f"{where}: {original!r} became {copy!r}"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_loads_through_grafana_models_and_round_trips(path: Path) -> None:
    doc = load(path)
    model = Dashboard.from_json(doc)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    assert lost(doc, again) == []
    assert doc["schemaVersion"] == Dashboard().schema_version  # the schema of Grafana 11.6


def test_round_trip_check_sees_a_dropped_key() -> None:
    doc = load(FILES[0])
    doc["panels"][1]["notAPanelField"] = 1  # panels are typed: unknown keys do not survive
    again = json.loads(json.dumps(Dashboard.from_json(doc), cls=JSONEncoder))
    assert lost(doc, again)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_data_source_is_a_variable_everywhere(path: Path) -> None:
    doc = load(path)
    (ds,) = [v for v in variables(doc) if v["type"] == "datasource"]
    assert (ds["name"], ds["query"]) == ("datasource", "prometheus")
    for var in variables(doc):
        if var["type"] == "query":
            assert var["datasource"] == DS and var["includeAll"] and var["allValue"] == ".*", var["name"]
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids))
    for panel in panels(doc):
        if panel["type"] != "row":
            assert panel["datasource"] == DS, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == DS and target["expr"].strip(), panel["title"]


def test_template_variables_cover_cluster_instance_namespace_and_model() -> None:
    names = {path.stem: {v["name"] for v in variables(load(path))} for path in FILES}
    assert {"datasource", "cluster", "instance", "model", "namespace"} <= names["rightsizer-fleet"]
    assert {"datasource", "cluster", "instance", "model", "gpu"} <= names["rightsizer-gpu"]
    assert {"datasource", "cluster", "namespace", "queue"} <= names["rightsizer-autoscaling"]
    assert {"datasource", "cluster", "instance", "exporter_job", "adapter_job"} <= names["rightsizer-health"]
    builtins = {name[1:] for name in BUILTINS}
    for where, expr in targets():
        dashboard = where.split("/")[0]
        assert set(re.findall(r"\$(\w+)", expr)) - builtins <= names[dashboard], where


@pytest.mark.usefixtures("prometheus_version")  # the parsers of 2.42 and 3.5
def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    exprs = [substitute(e) for _, e in targets()] + [substitute(s) for _, s, _ in variable_selectors()]
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:expression_{i}:check", "expr": e} for i, e in enumerate(exprs)]}]}
    (tmp_path / "dashboards.rules.yaml").write_text(yaml.safe_dump(rules))
    result = subprocess.run([prometheus_build().promtool, "check", "rules", "dashboards.rules.yaml"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


@pytest.mark.parametrize(("where", "expr"), targets(), ids=[t[0] for t in targets()])
def test_names_only_published_metrics(where: str, expr: str) -> None:
    unknown = names_in(expr) - known_names()
    assert not unknown, f"{where}: not in exporter/metrics.py or the adapter's metrics: {unknown}"


def test_provisioning_points_grafana_at_the_dashboards() -> None:
    provisioning = DASHBOARDS / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources/rightsizer.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")
    (provider,) = yaml.safe_load((provisioning / "dashboards/rightsizer.yaml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    assert all(p.suffix == ".json" for p in DASHBOARDS.iterdir() if p.is_file()), \
        "the provider loads every file of the folder: keep only dashboards at its top"


# --- against a real Prometheus scraping the simulated exporter -------------------------------------

@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with monitoring_stack() as s:
        wait_for(lambda: get(s.adapter.url + "/readyz")[0] == 200, 60, what="the adapter's first refresh")
        exercise_adapter(s.adapter)
        yield s


def has_data(prom_url: str, expr: str) -> bool:
    return bool(prom_query(prom_url, expr))


def label_values(prom_url: str, selector: str, label: str) -> set[str]:
    query = urllib.parse.urlencode({"match[]": selector})
    status, _, body = http_get(f"{prom_url}/api/v1/series?{query}")
    assert status == 200, body[:300]
    return {s[label] for s in json.loads(body)["data"] if label in s}


@pytest.mark.parametrize(("where", "expr"), [t for t in targets() if ours(t[1])],
                         ids=[t[0] for t in targets() if ours(t[1])])
def test_query_returns_data_from_the_simulated_fleet(stack: Stack, where: str, expr: str) -> None:
    query = substitute(expr, JOBS)
    wait_for(lambda: has_data(stack.prometheus.url, query), 90, interval=0.5,
             what=f"data for {where}: {query}")


SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(?:=~|!~|!=|=)\s*"')


def filtered_labels() -> list[tuple[str, str]]:
    """(metric, label) for every label a query or variable filters our series on, but cluster
    (absent on a single Prometheus, matched by the variables' "All")."""
    exprs = [e for _, e in targets()] + [s for _, s, _ in variable_selectors()]
    pairs = {(metric, label) for e in exprs for metric, body in SELECTOR.findall(e)
             for label in MATCHER.findall(body) if label != "cluster"}
    return sorted((m, lbl) for m, lbl in pairs if ours(f"{m}{{{lbl}}}") or ":" in m or m in (
        "up", "scrape_duration_seconds"))


@pytest.mark.parametrize(("metric", "label"), filtered_labels(),
                         ids=[f"{m}:{lbl}" for m, lbl in filtered_labels()])
def test_every_filter_label_exists_on_its_series(stack: Stack, metric: str, label: str) -> None:
    """An "All" variable substitutes ``.*``, which also matches series without the label: a
    misspelt label name (modelName on a rightsizer_* family) would go unnoticed above."""
    query = f'count({metric}{{{label}!=""}})'
    wait_for(lambda: has_data(stack.prometheus.url, query), 90, interval=0.5, what=query)


@pytest.mark.parametrize(("where", "selector", "label"), variable_selectors(),
                         ids=[v[0] for v in variable_selectors()])
def test_variable_offers_values(stack: Stack, where: str, selector: str, label: str) -> None:
    resolved = substitute(selector, JOBS)
    if label == "cluster":
        # One Prometheus puts no cluster label on series: the variable offers only "All", whose
        # .* every query above was run with. Its selector must still find the series.
        wait_for(lambda: has_data(stack.prometheus.url, resolved), 90, interval=0.5, what=where)
        assert label_values(stack.prometheus.url, resolved, label) == set()
        return
    wait_for(lambda: label_values(stack.prometheus.url, resolved, label), 90, interval=0.5, what=where)
