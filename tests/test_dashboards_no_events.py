"""Panels of counters whose series appear only with their first event (XIDs per code, adapter
requests per endpoint, KEDA calls per method) show 0 for a healthy target, not "No data"; a target
nobody scrapes still has no line (unknown is not zero). A real Prometheus scrapes the exporter on
the default simulated fleet, which has no XID, and an adapter nobody has asked anything yet."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from adapter_support import adapter
from servers import ROOT, exporter, http_get, prom_query, prometheus, wait_for

GPU_DASHBOARD = ROOT / "dashboards" / "rightsizer-gpu.json"
VARIABLES = {
    "$cluster": ".*", "$instance": ".*", "$model": ".*", "$gpu": ".*", "$adapter_job": "adapter",
    "$__rate_interval": "1m",
}  # fmt: skip


def panel(title: str, dashboard: str = "rightsizer-gpu.json") -> dict[str, Any]:
    path = ROOT / "dashboards" / dashboard
    found = [p for p in json.loads(path.read_text())["panels"] if p.get("title") == title]
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
        # Not waited for through /readyz: that would be a request, and the point is that there is none.
        with adapter(["--exporter", exp.url, "--insecure-http"], ready=False) as adp:
            targets = {"gpu": [exp.url.removeprefix("http://")], "adapter": [adp.url.removeprefix("http://")]}
            with prometheus(targets) as prom:
                wait_for(lambda: len(prom_query(prom.url, "rightsizer_gpu_up")) == gpus, 60, what="a scrape")
                wait_for(
                    lambda: prom_query(prom.url, "rightsizer_adapter_cached_answers"), 60, what="a scrape"
                )
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


@pytest.mark.parametrize(
    ("dashboard", "title", "label"),
    [
        ("rightsizer-health.json", "Requests by endpoint and code", "endpoint"),
        ("rightsizer-autoscaling.json", "KEDA calls and push streams", "method"),
    ],
)
def test_adapter_request_panels_are_zero_before_the_first_request(
    healthy: tuple[str, int], dashboard: str, title: str, label: str
) -> None:
    url, _ = healthy
    family = (
        "rightsizer_adapter_requests_total"
        if label == "endpoint"
        else "rightsizer_adapter_grpc_requests_total"
    )
    assert prom_query(url, family) == []  # nothing asked yet: the counter has no series
    result = prom_query(url, resolved(panel(title, dashboard)["targets"][0]["expr"]))
    assert [(r["metric"].get(label), float(r["value"][1])) for r in result] == [("none", 0.0)]
    gone = resolved(panel(title, dashboard)["targets"][0]["expr"]).replace('job=~"adapter"', 'job="nowhere"')
    assert prom_query(url, gone) == []
