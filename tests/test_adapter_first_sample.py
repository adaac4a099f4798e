"""Direct mode on a clean start: exporters that are still starting (connection refused, or 503 before
their first sample) are waited for quietly, one info line, instead of "exporter scrape failed" and
"rules have no values" warnings on every start of the quick start; answers stay 503 meanwhile
(unknown, never 0). A wait that outlasts ``START_GRACE``, or any other failure, is warned about as
before."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest
from adapter_support import ExpositionServer, adapter, exposition
from servers import exporter, free_port, wait_for

from adapter.cache import Cache
from adapter.config import load_config
from adapter.kubernetes.answers import external
from adapter.selfmetrics import AdapterMetrics
from adapter.sources import scrape
from adapter.sources.scrape import ScrapeSource

NODE = exposition({"DCGM_FI_DEV_GPU_UTIL": [({"UUID": "GPU-a", "pod": "p-0", "namespace": "prod"}, 50)]})
QUIET = ("waiting for the exporter's first sample", "waiting for the first sample")


async def direct(*urls: str) -> tuple[Cache, ScrapeSource]:
    cfg = load_config(None, {"direct": {"exporters": list(urls)}}, environ={})
    metrics = AdapterMetrics()
    source = ScrapeSource(cfg.direct, metrics)
    await source.start()
    return Cache(cfg.effective_rules, source, metrics), source


def utilization(cache: Cache) -> tuple[int, Any]:
    """The external metrics API's answer for pod p-0's GPU (code, values or the Status message)."""
    code, body = external(cache, "rightsizer_gpu_utilization_ratio", "prod", {"labelSelector": "pod=p-0"})
    data = json.loads(body)
    return code, [i["value"] for i in data["items"]] if code == 200 else data["message"]


def said(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name.startswith("rightsizer")]


async def test_an_exporter_not_ready_yet_is_waited_for_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    node = await ExpositionServer(NODE).__aenter__()
    node.status = 503  # the exporter answers 503 until its first sample
    cache, source = await direct(node.url)
    for _ in range(3):
        await cache.refresh_once()
    code, message = utilization(cache)
    assert code == 503 and "has not answered since the adapter started: HTTP 503" in message
    assert said(caplog, logging.WARNING) == []
    assert said(caplog, logging.INFO) == list(QUIET)  # each once
    node.status = 200
    await cache.refresh_once()
    assert utilization(cache) == (200, ["500m"])
    assert said(caplog, logging.WARNING) == [] and "exporter answers again" not in said(caplog, logging.INFO)
    assert "first refresh complete" in said(caplog, logging.INFO)
    await source.close()
    await node.__aexit__()


async def test_a_wait_past_the_grace_is_warned_about(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO)
    cache, source = await direct(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    await cache.refresh_once()
    assert said(caplog, logging.WARNING) == [] and said(caplog, logging.INFO) == list(QUIET)
    monkeypatch.setattr(scrape, "START_GRACE", 0.0)
    await cache.refresh_once()
    assert said(caplog, logging.WARNING) == ["exporter scrape failed", "rules have no values"]
    assert utilization(cache)[0] == 503
    await source.close()


async def test_other_failures_at_start_are_warned_about_at_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    node = await ExpositionServer(NODE).__aenter__()
    node.status = 500  # not an exporter starting: something is wrong
    cache, source = await direct(node.url)
    await cache.refresh_once()
    assert said(caplog, logging.WARNING) == ["exporter scrape failed", "rules have no values"]
    assert not [m for m in said(caplog, logging.INFO) if m.startswith("waiting")]
    await source.close()
    await node.__aexit__()


def test_the_quick_start_starts_without_warnings() -> None:
    """The adapter first, then the exporter on the port it scrapes (as the quick start's two
    background commands may race): no warning but the one --insecure-http asks for."""
    port = free_port()
    with (
        adapter([f"--exporter=http://127.0.0.1:{port}", "--insecure-http"], ready=False) as adp,
        exporter(["--simulate", "--listen", f"127.0.0.1:{port}"]),
    ):
        wait_for(lambda: "first refresh complete" in adp.log(), 60, what="the adapter's first values")
    warnings = [line for line in adp.log().splitlines() if "level=warning" in line]
    assert [re.search(r'msg="?([^"=]+)"?', w).group(1) for w in warnings] == [  # type: ignore[union-attr]
        "data endpoints answer without authentication"
    ], warnings
    assert "waiting for the exporter's first sample" in adp.log()
