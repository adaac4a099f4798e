"""A cycle's exposition is rendered only when someone wants it: never for cycles nobody scrapes, once
for a cycle however many scrapes read it, and ahead of the scrape (by the cycle) when the previous
cycle was scraped, so scrapers at least as frequent as cycles only copy bytes."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from fakes import FakeSource

from exporter.render import Exposition, Renderer
from exporter.sampler import Sampler
from exporter.server import create_app
from rightsizer_core.snapshot import Snapshot


class CountingRenderer(Renderer):
    def __init__(self) -> None:
        super().__init__()
        self.renders: list[float] = []  # timestamps of the snapshots rendered

    def render(self, snap: Snapshot) -> Exposition:
        self.renders.append(snap.timestamp)
        return super().render(snap)


@pytest.fixture
async def sampler() -> AsyncIterator[Sampler]:
    s = Sampler(FakeSource(2), CountingRenderer(), interval=3600, hostname="node-a")
    yield s
    await s.stop()


@pytest.fixture
async def client(aiohttp_client: Any, sampler: Sampler) -> TestClient:
    return await aiohttp_client(create_app(sampler))


def _renders(s: Sampler) -> list[float]:
    assert isinstance(s.renderer, CountingRenderer)
    return s.renderer.renders


async def test_cycles_nobody_scrapes_are_not_rendered(sampler: Sampler) -> None:
    await sampler.start()
    for _ in range(10):
        await sampler.cycle()
    assert sampler.cycles == 11
    assert _renders(sampler) == [] and sampler.renders == 0


async def test_a_scrape_renders_its_cycle_once(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    for _ in range(3):
        await sampler.cycle()
    current = sampler.current
    assert current is not None
    first = await (await client.get("/metrics")).read()
    again = await (await client.get("/metrics")).read()
    assert _renders(sampler) == [current.snapshot.timestamp]  # this cycle, once
    # The bytes are those of this cycle's snapshot, as a fresh renderer makes them.
    assert first == again == Renderer().render(current.snapshot).text
    # A gzip scrape of the same cycle compresses the rendered text; it does not render again.
    resp = await client.get("/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False)
    assert gzip.decompress(await resp.read()) == first
    assert sampler.renders == 1


async def test_after_a_scraped_cycle_the_next_is_rendered_ahead(client: TestClient, sampler: Sampler) -> None:
    await sampler.start()
    await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    published = await sampler.cycle()
    assert published.ready(False, True) is not None  # made by the cycle, before any scrape of it
    assert sampler.renders == 2
    await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert sampler.renders == 2  # the scrape only copied bytes
    # Scrapes stop: the cycle after the last scraped one is rendered ahead, later ones are not.
    for _ in range(5):
        await sampler.cycle()
    assert sampler.renders == 3
