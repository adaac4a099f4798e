"""The prometheus-adapter file whose rules expose several metrics each (several-names.yaml) against
VictoriaMetrics scraping the simulated exporter: discovery through its ``/api/v1/series``, one
``/api/v1/query`` request per rule per refresh (the adapter's count of the queries it sent; its
own request counter lags the requests by a few seconds), and every metric's answer
equal to the per-name query prometheus-adapter would send, asked of the same engine at the same
instant (``label_replace``/``or`` branches are evaluated by MetricsQL as by PromQL).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from servers import Process, exporter, prom_query, wait_for
from victoria_metrics import victoria_metrics

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.quantities import format_quantity
from adapter.promadapter import schema
from adapter.promadapter.source import PromAdapterSource
from adapter.selfmetrics import AdapterMetrics

FILE = Path(__file__).parent / "fixtures" / "promadapter" / "several-names.yaml"
SENT = r'^rightsizer_adapter_upstream_queries_total\{outcome="success",source="prometheus"\} (\S+)$'


@pytest.fixture(scope="module")
def vm() -> Iterator[Process]:
    with exporter(["--simulate"]) as sim:
        target = sim.url.removeprefix("http://")
        scrape = "  - job_name: rightsizer\n    scrape_interval: 1s\n"
        scrape += f"    static_configs:\n      - targets: ['{target}']\n"
        with victoria_metrics(scrape) as engine:
            wait_for(
                lambda: len(prom_query(engine.url, "rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION[1m])")) >= 4,
                60,
                what="rates",
            )
            yield engine


def count(pattern: str, text: str) -> float:
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def answer_near(url: str, query: str, at: float, got: dict, exact: bool) -> dict:
    """The engine's answer to ``query`` at ``at``, asked now; or, where that is not ``got``, at the
    instant up to three scrapes earlier that is (exactly, with ``exact``). A scrape stamped just
    before ``at`` can become searchable only after the adapter's query was answered, under load:
    the adapter then read the samples before it. Any other difference (a wrong aggregation, a lost
    pod) matches no instant, and the answer at ``at`` is returned for the assertion to show."""
    first: dict = {}
    for back in range(13):  # every 0.25 s back to 3 s: the scrape interval is 1 s
        answer = {
            (s["metric"]["namespace"], s["metric"]["pod"]): float(s["value"][1])
            for s in prom_query(url, query, at - back * 0.25)
        }
        first = answer if back == 0 else first
        if not exact or answer == pytest.approx(got, rel=1e-9):
            return answer
    return first


async def test_one_query_per_rule_and_answers_equal_the_per_name_queries(vm: Process) -> None:
    cfg = load_config(
        None, {"prometheus": {"url": vm.url}, "prometheus_adapter": {"config_file": str(FILE)}}, environ={}
    )
    metrics = AdapterMetrics()
    source = PromAdapterSource(cfg.prometheus, schema.load(str(FILE)), 600, metrics)
    await source.start()
    try:
        cache = Cache(cfg.effective_rules, source, metrics)
        await cache.refresh_once()  # discovery, then the first refresh
        sent = count(SENT, generate_latest(metrics.registry).decode())
        await cache.refresh_once()
        assert count(SENT, generate_latest(metrics.registry).decode()) - sent == 3
        assert len(cache.rules) >= 25
        assert {n: s.error for n, s in cache.states.items() if s.error is not None} == {}
        for series in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"):
            power = series.endswith("USAGE")
            metric = "dcgm_POWER_USAGE" if power else "TOTAL_ENERGY_CONSUMPTION_per_second"
            state = cache.states[metric]
            assert state.vector is not None
            query = (
                f"avg({series}) by (namespace, pod)"
                if power
                else f"sum(rate({series}[1m])) by (namespace, pod)"
            )
            got = {(s.labels["namespace"], s.labels["pod"]): s.value for s in state.vector.series}
            expected = answer_near(vm.url, query, state.vector.timestamp, got, exact=power)
            # The energy counters move every 10 s (the slow cadence), so a rate over 1m shifts a
            # little with the exact evaluation instant (the adapter lets the engine pick it): equal
            # within 1 %, where a wrong aggregation or a lost pod would be far off.
            assert got == pytest.approx(expected, rel=0.01 if not power else 1e-9), metric
            assert len(expected) >= 4, metric
            if power:
                assert {k: format_quantity(v) for k, v in got.items()} == {
                    k: format_quantity(v) for k, v in expected.items()
                }
    finally:
        await source.close()
