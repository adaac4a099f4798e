"""Building blocks shared by Rightsizer's dashboards (grafana-foundation-sdk builders, 11.6 schema).

Every panel and query reads the data source from the ``datasource`` variable, so a dashboard
imports into any Grafana without editing; every dashboard gets stable panel ids and refIds.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus as prom
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAGS = ["rightsizer", "gpu"]

# Label matchers of the template variables, as each family spells them.
CLUSTER = 'cluster=~"$cluster"'
INSTANCE = 'instance=~"$instance"'
MODEL_DCGM = 'modelName=~"$model"'  # dcgm-exporter's families
MODEL_OWN = 'model_name=~"$model"'  # rightsizer_* families (promtool-clean spelling)
NAMESPACE = 'namespace=~"$namespace"'


def sel(*matchers: str) -> str:
    return "{" + ", ".join(matchers) + "}"


# --- variables ---------------------------------------------------------------------------------


def datasource_variable() -> db.DatasourceVariable:
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(name: str, label: str, query: str, *, multi: bool = True) -> db.QueryVariable:
    """A label_values() variable with an "All" that also matches series without the label."""
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(query)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(True)
        .all_value(".*")
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )


def cluster_variable() -> db.QueryVariable:
    # Empty on a single Prometheus (no cluster label): "All" then matches everything.
    return query_variable("cluster", "Cluster", "label_values(rightsizer_build_info, cluster)", multi=False)


# --- queries and panels ------------------------------------------------------------------------


def zero_when_none(expr: str, present: str, on: str, label: tuple[str, str]) -> str:
    """``expr``, or 0 for each series of ``present`` (matched ``on`` these labels) that ``expr`` has
    no series for: a counter whose labelled series appear only with their first event (XIDs per
    code, adapter requests per endpoint) shows 0 on a healthy target instead of "No data", while a
    target that is not scraped at all (no ``present`` series) still shows "No data". ``on`` empty:
    the zero line only while ``expr`` is empty altogether (an aggregate). ``label`` names the zero
    line (e.g. xid="none")."""
    name, value = label
    return f'{expr} or on ({on}) label_replace(0 * {present}, "{name}", "{value}", "", "")'


def query(
    expr: str, legend: str = "", *, instant: bool = False, table_format: bool = False
) -> prom.Dataquery:
    q = prom.Dataquery().expr(expr).datasource(DS)
    if legend:
        q = q.legend_format(legend)
    q = q.instant() if instant else q.range()
    if table_format:
        q = q.format(PromQueryFormat.TABLE)
    return q


def timeseries_panel(
    title: str, description: str, unit: str, *queries: prom.Dataquery, width: int = 12, height: int = 8
) -> timeseries.Panel:
    panel = timeseries.Panel().title(title).description(description).datasource(DS).unit(unit)
    for q in queries:
        panel = panel.with_target(q)
    return panel.span(width).height(height)


def stat_panel(
    title: str,
    description: str,
    unit: str,
    expr: str,
    *,
    width: int = 4,
    height: int = 5,
    decimals: float | None = None,
) -> stat.Panel:
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .with_target(query(expr, instant=True))
        .span(width)
        .height(height)
    )
    return panel.decimals(decimals) if decimals is not None else panel


def bar_panel(
    title: str, description: str, unit: str, expr: str, legend: str, *, width: int = 12, height: int = 8
) -> bargauge.Panel:
    return (
        bargauge.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .with_target(query(expr, legend, instant=True))
        .span(width)
        .height(height)
    )


def state_panel(
    title: str, description: str, expr: str, legend: str, *, width: int = 12, height: int = 8
) -> statetimeline.Panel:
    return (
        statetimeline.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .with_target(query(expr, legend))
        .span(width)
        .height(height)
    )


HIDDEN_COLUMNS = ("Time", "__name__", "job", "pci_bus_id", "device", "DCGM_FI_DRIVER_VERSION", "container")


def table_panel(
    title: str,
    description: str,
    *queries: prom.Dataquery,
    rename: dict[str, str],
    merge: bool = False,
    width: int = 24,
    height: int = 8,
) -> table.Panel:
    """Instant queries as a table: label columns kept, identity noise hidden, values renamed."""
    panel = table.Panel().title(title).description(description).datasource(DS)
    for q in queries:
        panel = panel.with_target(q.instant().format(PromQueryFormat.TABLE))
    if merge:
        panel = panel.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
    organize = {"excludeByName": dict.fromkeys(HIDDEN_COLUMNS, True), "renameByName": rename}
    panel = panel.with_transformation(dm.DataTransformerConfig(id_val="organize", options=organize))
    return panel.span(width).height(height)


def dashboard_links() -> list[Builder[dm.DashboardLink]]:
    return [
        db.DashboardLink("Rightsizer")
        .type(dm.DashboardLinkType.DASHBOARDS)
        .tags(["rightsizer"])
        .as_dropdown(True)
        .include_vars(True)
        .keep_time(True)
    ]


def new_dashboard(uid: str, title: str, description: str) -> db.Dashboard:
    return (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(TAGS)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .links(dashboard_links())
    )


def to_json(dashboard: db.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana stores it, with stable panel ids and refIds A, B, ..."""
    doc: dict[str, Any] = json.loads(json.dumps(dashboard.build(), cls=JSONEncoder))
    next_id = 1
    for panel in doc.get("panels", []):
        for p in [panel, *panel.get("panels", [])]:
            p["id"] = next_id
            next_id += 1
            for index, target in enumerate(p.get("targets", [])):
                target["refId"] = chr(ord("A") + index)
    return doc
