"""``rightsizer_gpu_busy`` is one minus the idle state, in direct mode and through a real Prometheus.

The exporter publishes one ``rightsizer_gpu_verdict`` series per state for each GPU, 1 on the
current state and 0 on the others (exporter/metrics.py). So, written from that definition before
running: a GPU whose verdict is ``idle`` is not busy (0), a GPU in any other state, including
``insufficient_data``, is busy (1), and a GPU whose exporter publishes both the old and the new
pod's series during a rollout is busy as soon as one of them says it is not idle. The rule reads
the idle series alone (a quarter of the family), so what it costs the engine grows with GPUs, not
with GPUs times states.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from adapter_support import ExpositionServer, exposition
from servers import prom_query, prometheus

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.answers import external
from adapter.rules import BUILTIN_RULES
from adapter.selfmetrics import AdapterMetrics
from adapter.sources.prometheus import PrometheusSource
from adapter.sources.scrape import ScrapeSource

STATES = ("idle", "overprovisioned", "rightsized", "underprovisioned", "insufficient_data")
BUSY = {state: "0" if state == "idle" else "1" for state in STATES}  # external metrics' quantities


async def _until(url: str, query: str, count: int) -> None:
    """Waits (the exposition servers run on this loop) until ``query`` gives ``count`` series."""
    for _ in range(600):
        if len(await asyncio.to_thread(prom_query, url, query)) == count:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{query} never gave {count} series")


def _gpu(state: str) -> dict[str, str]:
    return {"gpu": str(STATES.index(state)), "UUID": f"GPU-{state}", "namespace": "prod",
            "pod": f"{state.replace('_', '-')}-7d9c5b6f8b-x2x4z", "container": "srv"}  # fmt: skip


def _fleet() -> str:
    rows = [({**_gpu(now), "verdict": s}, 1.0 if s == now else 0.0) for now in STATES for s in STATES]
    return exposition({"rightsizer_gpu_verdict": rows})


def _busy(cache: Cache) -> dict[str, str]:
    code, body = external(cache, "rightsizer_gpu_busy", "prod", {})
    data = json.loads(body)
    assert code == 200, data["message"]
    return {i["metricLabels"]["pod"].split("-7d9c")[0]: i["value"] for i in data["items"]}


def _expected() -> dict[str, str]:
    return {state.replace("_", "-"): busy for state, busy in BUSY.items()}


def test_the_rule_reads_the_idle_state_alone() -> None:
    busy = next(r for r in BUILTIN_RULES if r.name == "rightsizer_gpu_busy")
    assert busy.match == ['pod!=""', 'verdict="idle"'] and busy.source_family == "rightsizer_gpu_verdict"
    assert busy.query is not None and "1 - rightsizer_gpu_verdict{" in busy.query


@contextlib.asynccontextmanager
async def _cache(settings: dict[str, Any]) -> AsyncIterator[Cache]:
    """A cache of the built-in rules on a direct-mode or Prometheus-mode source, refreshed once."""
    cfg = load_config(None, settings, environ={})
    metrics = AdapterMetrics()
    source: ScrapeSource | PrometheusSource
    if "direct" in settings:
        source = ScrapeSource(cfg.direct, metrics)
    else:
        source = PrometheusSource(cfg.prometheus, metrics)
    await source.start()
    try:
        cache = Cache(cfg.effective_rules, source, metrics)
        await cache.refresh_once()
        yield cache
    finally:
        await source.close()


async def test_direct_mode_reads_one_minus_idle() -> None:
    async with ExpositionServer(_fleet()) as node, _cache({"direct": {"exporters": [node.url]}}) as cache:
        assert _busy(cache) == _expected()


async def test_prometheus_mode_reads_one_minus_idle_and_a_rollout_is_busy_if_either_says_so() -> None:
    async with ExpositionServer(_fleet()) as node, ExpositionServer() as replacement:
        # the idle GPU's new exporter (a DaemonSet rollout) already judges it rightsized
        idle = _gpu("idle")
        rows = [({**idle, "verdict": s}, 1.0 if s == "rightsized" else 0.0) for s in STATES]
        replacement.text = exposition({"rightsizer_gpu_verdict": rows})
        hosts = [u.split("/")[2] for u in (node.url, replacement.url)]
        with prometheus({"rightsizer-exporter": hosts}) as prom:
            await _until(prom.url, "count_over_time(up[1m]) >= 3", 2)  # three scrapes of both
            async with _cache({"prometheus": {"url": prom.url}}) as cache:
                assert _busy(cache) == {**_expected(), "idle": "1"}
                replacement.text = ""  # the new exporter has not judged it yet: the old one's idle stands
                gone = 'rightsizer_gpu_verdict{UUID="GPU-idle",verdict="rightsized"}'
                await _until(prom.url, gone, 1)  # the old exporter's 0 alone
                await cache.refresh_once()
                assert _busy(cache) == _expected()


@pytest.fixture(autouse=True)
def _quiet(caplog: Any) -> None:
    caplog.set_level("ERROR")
