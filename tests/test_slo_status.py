"""The status page's Latency SLOs table: each workload with a declared SLO, met (by how much
under) or missed (by how much over), from the same figures as /api/v1/rightsizing. The default
fleet has one of each: chat-70b misses its 25 ms ITL target, summarizer meets 150 ms with room."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings


@pytest.fixture
async def default_fleet() -> AsyncIterator[Sampler]:
    source = SimulatedSource(load_scenario(str(SCENARIO_DIR / "default.yaml")))
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source)
    s = Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext])
    await s.start()
    yield s
    await s.stop()


async def test_the_slo_table_says_met_or_missed_by_how_much(
    aiohttp_client: Any, default_fleet: Sampler
) -> None:
    client = await aiohttp_client(create_app(default_fleet))
    api = json.loads(await (await client.get("/api/v1/rightsizing")).read())["rightsizing"]
    slos = {s["workload"]: s for s in api["slos"] if s["state"] != "no_slo"}
    assert {w: s["state"] for w, s in slos.items()} == {"chat-70b": "missed", "summarizer": "met_with_room"}
    html = (await (await client.get("/")).read()).decode()
    table = html[html.index("<h2>Latency SLOs</h2>") :]
    rows = {m.group(1): m.group(0) for m in re.finditer(r'<tr class="slo">.*?<b>([^<]+)</b>.*?</tr>', table)}
    missed = slos["chat-70b"]["latency_ratio"]
    assert missed > 1 and f"missed by {missed - 1:.0%}" in rows["chat-70b"]
    room = slos["summarizer"]["latency_ratio"]
    assert room < 0.9 and f"met with room, {1 - room:.0%} under" in rows["summarizer"]
    assert "itl p95" in rows["chat-70b"] and "/ 25 ms" in rows["chat-70b"]
