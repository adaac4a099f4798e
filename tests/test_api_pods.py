"""``/api/v1/pods`` without kubelet attribution: a fleet whose GPU source names the pods (the
simulated one) lists them; a fleet without pods says attribution is off, never an empty success."""

from __future__ import annotations

from typing import Any

from fakes import FakeSource

from exporter.render import Renderer
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.simulated.source import SimulatedSource, load_scenario


async def _pods(aiohttp_client: Any, sampler: Sampler) -> tuple[int, Any]:
    await sampler.start()
    try:
        client = await aiohttp_client(create_app(sampler))
        response = await client.get("/api/v1/pods")
        return response.status, await response.json()
    finally:
        await sampler.stop()


async def test_simulated_pods_are_listed(aiohttp_client: Any) -> None:
    scenario = load_scenario("mig")
    sampler = Sampler(SimulatedSource(scenario), Renderer(), interval=3600, hostname="node-a")
    status, doc = await _pods(aiohttp_client, sampler)
    assert status == 200
    view = doc["pods"]
    expected = {m.uuid: m.pod for g in scenario.gpus for m in (g.mig or (g,)) if m.pod is not None}
    assert expected and view["enabled"] is True and view["source"] == "simulated"
    assert {uuid: d["containers"][0]["pod"] for uuid, d in view["devices"].items()} == {
        uuid: p.pod for uuid, p in expected.items()
    }
    assert view["pods"] == len({(p.namespace, p.pod) for p in expected.values()})


async def test_without_pods_attribution_is_reported_off(aiohttp_client: Any) -> None:
    sampler = Sampler(FakeSource(2), Renderer(), interval=3600, hostname="node-a")
    status, doc = await _pods(aiohttp_client, sampler)
    assert status == 200
    assert doc["pods"]["enabled"] is False and "devices" not in doc["pods"] and doc["pods"]["why"]


async def test_other_unknown_sections_are_still_404(aiohttp_client: Any) -> None:
    sampler = Sampler(FakeSource(1), Renderer(), interval=3600, hostname="node-a")
    await sampler.start()
    try:
        client = await aiohttp_client(create_app(sampler))
        response = await client.get("/api/v1/nothing")
        assert response.status == 404 and (await response.json())["error"] == "unknown section 'nothing'"
    finally:
        await sampler.stop()
