"""Panels of counters whose series appear only with their first event (XIDs per code) show 0 for
a healthy GPU, not "No data"; a GPU nobody scrapes still has no line (unknown is not zero). A real
Prometheus scrapes the exporter on the default simulated fleet, which has no XID."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from servers import ROOT, exporter, http_get, prom_query, prometheus, wait_for

GPU_DASHBOARD = ROOT / "dashboards" / "rightsizer-gpu.json"
VARIABLES = {"$cluster": ".*", "$instance": ".*", "$model": ".*", "$gpu": ".*", "$__rate_interval": "1m"}


def panel(title: str) -> dict[str, Any]:
    found = [p for p in json.loads(GPU_DASHBOARD.read_text())["panels"] if p.get("title") == title]
    assert len(found) == 1, title
    return found[0]


def resolved(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


@pytest.fixture(scope="module")
def healthy() -> Iterator[tuple[str, int]]:
    with exporter(["--simulate"]) as exp:
        gpus = len(json.loads(http_get(exp.url + "/api/v1/gpus")[2])["gpus"])
        with prometheus({"gpu": [exp.url.removeprefix("http://")]}) as prom:
            wait_for(lambda: len(prom_query(prom.url, "rightsizer_gpu_up")) == gpus, 60, what="a scrape")
            yield prom.url, gpus


def test_xid_panel_is_zero_per_gpu_on_a_healthy_fleet(healthy: tuple[str, int]) -> None:
    url, gpus = healthy
    assert prom_query(url, "rightsizer_xid_errors_total") == []  # no XID: the counter has no series
    per_code = resolved(panel("XID errors")["targets"][0]["expr"])
    result = prom_query(url, per_code)
    assert len(result) == gpus
    assert {float(r["value"][1]) for r in result} == {0.0}
    assert {r["metric"]["xid"] for r in result} == {"none"}


def test_an_unscraped_gpu_stays_without_a_line(healthy: tuple[str, int]) -> None:
    url, _ = healthy
    per_code = resolved(panel("XID errors")["targets"][0]["expr"]).replace(
        'instance=~".*"', 'instance="nowhere"'
    )
    assert prom_query(url, per_code) == []
