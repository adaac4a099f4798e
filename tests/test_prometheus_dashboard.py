"""A real Prometheus scrapes the real exporter on the simulated fleet, and every query of NVIDIA's
own dcgm-exporter dashboard (id 12239, read unmodified from ../shared/dashboards) returns data for
every GPU, with the dashboard's template variables resolved the way Grafana resolves them."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from servers import SHARED, exporter, http_get, prom_query, prometheus, wait_for

DASHBOARD = SHARED / "dashboards" / "dcgm-exporter-dashboard.json"


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def label_values(base: str, query: str) -> list[str]:
    m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query.strip())
    assert m, f"unexpected variable query {query!r}"
    metric, label = m.groups()
    status, _, body = http_get(
        f"{base}/api/v1/label/{label}/values?" + urllib.parse.urlencode({"match[]": metric})
    )
    assert status == 200
    return list(json.loads(body)["data"])


def all_regex(values: list[str]) -> str:
    """Grafana's 'All' for a multi-value variable in a regex matcher: regex-escaped, then the backslash
    doubled for the PromQL string (Grafana's prometheusRegularEscape)."""
    return "(" + "|".join(re.escape(v).replace("\\", "\\\\") for v in values) + ")"


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[str, dict[str, Any]]]:
    with exporter(["--simulate"]) as exp:
        gpus = json.loads(http_get(exp.url + "/api/v1/gpus")[2])
        target = exp.url.removeprefix("http://")
        with prometheus({"gpu": [target]}) as prom:
            wait_for(
                lambda: len(prom_query(prom.url, "DCGM_FI_DEV_GPU_TEMP")) == len(gpus["gpus"]),
                60,
                what="Prometheus to scrape every GPU",
            )
            yield prom.url, gpus


def test_every_dashboard_query_returns_data_for_every_gpu(fleet: tuple[str, dict[str, Any]]) -> None:
    base, gpus = fleet
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"] if v["type"] == "query"}
    assert set(variables) == {"instance", "gpu"}
    resolved = {
        name: label_values(base, v["query"] if isinstance(v["query"], str) else v["query"]["query"])
        for name, v in variables.items()
    }
    all_gpus = {str(g["index"]) for g in gpus["gpus"]}
    assert set(resolved["gpu"]) == all_gpus
    assert len(resolved["instance"]) == 1

    checked = 0
    for panel in panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name, values in resolved.items():
                expr = expr.replace(f"${name}", all_regex(values))
            result = prom_query(base, expr)
            assert result, f"panel {panel['title']!r}: {expr} returned nothing"
            if "gpu" in result[0]["metric"]:
                got = {r["metric"]["gpu"] for r in result}
                metric = re.match(r"\w+", target["expr"]).group(0)  # type: ignore[union-attr]
                expected = all_gpus
                if metric.startswith("DCGM_FI_PROF_"):
                    # NVML's GPM gives profiling ratios on Hopper and newer only; those GPUs must all
                    # have it, and /api/v1/gpus says which do.
                    expected = {
                        str(g["index"]) for g in gpus["gpus"] if "tensor_active_ratio" in g["supported"]
                    }
                    assert expected, "the default fleet has no GPU with profiling ratios"
                assert got == expected, f"panel {panel['title']!r}: GPUs {sorted(got)} != {sorted(expected)}"
            checked += 1
    assert checked == 8  # every target of the dashboard


def test_prometheus_scrape_is_healthy(fleet: tuple[str, dict[str, Any]]) -> None:
    base, _ = fleet
    (up,) = prom_query(base, 'up{job="gpu"}')
    assert up["value"][1] == "1"
    # Prometheus negotiated OpenMetrics; nothing it scraped was rejected.
    query = 'scrape_samples_post_metric_relabeling{job="gpu"} - scrape_samples_scraped'
    (rejected,) = prom_query(base, query)
    assert rejected["value"][1] == "0"
