"""The HTTP server: content negotiation as Prometheus does it, gzip, readiness, JSON API, and
scrapes that only copy bytes rendered by the sampling cycle."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from fakes import FakeSource
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om

from exporter.render import Renderer
from exporter.sampler import Sampler
from exporter.server import create_app

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


@pytest.fixture
async def sampler() -> AsyncIterator[Sampler]:
    s = Sampler(FakeSource(2), Renderer(), interval=3600, hostname="node-a")
    yield s
    await s.stop()


@pytest.fixture
async def client(aiohttp_client: Any, sampler: Sampler) -> TestClient:
    return await aiohttp_client(create_app(sampler))


async def test_not_ready_before_first_sample(client: TestClient) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 503
    assert (await client.get("/metrics")).status == 503
    assert (await client.get("/api/v1/gpus")).status == 503


async def test_prometheus_gets_openmetrics_gzipped(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    resp = await client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"},
                            auto_decompress=False)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert resp.headers["Content-Encoding"] == "gzip"
    body = gzip.decompress(await resp.read()).decode()
    assert any(f.name == "DCGM_FI_DEV_GPU_TEMP" for f in parse_om(body))
    # The format asked for is pre-built by the next cycle, so later scrapes only copy bytes.
    assert (True, True) in sampler.wanted_formats
    published = await sampler.cycle()
    assert (True, True) in published.exposition._cache


async def test_plain_scraper_gets_text(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    resp = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in resp.headers
    text = await resp.text()
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert 'rightsizer_collector_success{collector="fake"} 1' in text


async def test_gzip_refused_with_q0(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    resp = await client.get("/metrics", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "Content-Encoding" not in resp.headers


async def test_scrape_serves_the_cycle_bytes_unchanged(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    first = await (await client.get("/metrics")).read()
    assert first == sampler.current.exposition.text  # type: ignore[union-attr]
    sampler.source.samples[0] = sampler.source.samples[0].__class__(  # type: ignore[attr-defined]
        sampler.source.samples[0].identity, False, error="lost")  # type: ignore[attr-defined]
    assert await (await client.get("/metrics")).read() == first  # no new cycle, same bytes
    await sampler.cycle()
    second = await (await client.get("/metrics")).text()
    assert 'rightsizer_gpu_up{gpu="0"' in second and "} 0\n" in second


async def test_api_gpus_and_sections(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    data = await (await client.get("/api/v1/gpus")).json()
    assert data["hostname"] == "node-a"
    assert [g["index"] for g in data["gpus"]] == [0, 1]
    gpu = data["gpus"][0]
    assert gpu["up"] is True and "power_usage_watts" in gpu["supported"]
    assert gpu["fields"]["power_usage_watts"] == 312.25
    assert (await client.get("/api/v1/nothing")).status == 404
    assert (await client.get("/readyz")).status == 200


async def test_failed_collector_is_reported(client: TestClient, sampler: Sampler) -> None:
    sampler.source.success = False  # type: ignore[attr-defined]
    await sampler.start()
    text = await (await client.get("/metrics")).text()
    assert 'rightsizer_collector_success{collector="fake"} 0' in text
