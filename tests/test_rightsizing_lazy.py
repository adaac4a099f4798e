"""Right-sizing is computed when something reads it: windows are fed every cycle, but a cycle nobody
reads is never scored, and a read cycle is scored once however many readers (a scrape,
/api/v1/gpus, /api/v1/rightsizing, the status page) ask. What a read cycle publishes does not
depend on which earlier cycles were read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.rightsizing_live.publish import FAMILY_NAMES
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings


class Clock:
    """The simulated fleet's monotonic clock, moved by the test: one second per cycle."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fleet(clock: Clock) -> tuple[Sampler, RightsizingExtension, list[float]]:
    """The default scenario (pods, inference queues, host CPU and PSI, NUMA) with right-sizing;
    ``scored`` lists the sample time of every scoring (``score`` is wrapped, so the count holds
    whatever calls it)."""
    scenario = load_scenario(str(SCENARIO_DIR / "default.yaml"))
    source = SimulatedSource(scenario, monotonic=clock, wall=lambda: 1_700_000_000.0)
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), 1.0, source)
    scored: list[float] = []
    score = ext.score

    def counted(*args: Any, **kwargs: Any) -> None:
        scored.append(source.now())
        score(*args, **kwargs)

    ext.score = counted  # type: ignore[method-assign]
    return Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext]), ext, scored


@pytest.fixture
async def rig(aiohttp_client: Any) -> AsyncIterator[tuple[Sampler, list[float], TestClient, Clock]]:
    clock = Clock()
    sampler, _, scored = fleet(clock)
    await sampler.start()
    client: TestClient = await aiohttp_client(create_app(sampler))
    yield sampler, scored, client, clock
    await sampler.stop()


async def test_cycles_nobody_reads_are_fed_but_never_scored(
    rig: tuple[Sampler, list[float], TestClient, Clock],
) -> None:
    sampler, scored, _, clock = rig
    ext = sampler.extensions[0]
    assert isinstance(ext, RightsizingExtension)
    uuid = sampler.source.devices[0].identity.uuid  # type: ignore[attr-defined]
    before = ext.trackers[uuid].window.samples
    for _ in range(5):
        clock.now += 1.0
        await sampler.cycle()
    assert scored == []  # six cycles (start included), no reader: no scoring
    assert ext.trackers[uuid].window.samples == before + 5  # the evidence lost no sample


async def test_a_read_cycle_is_scored_once_whoever_reads_it(
    rig: tuple[Sampler, list[float], TestClient, Clock],
) -> None:
    sampler, scored, client, clock = rig
    for n in range(1, 4):
        clock.now += 1.0
        published = await sampler.cycle()
        metrics = await (await client.get("/metrics")).text()
        assert "rightsizer_gpu_verdict{" in metrics
        assert len(scored) == n  # a scrape per cycle: one scoring per cycle
    for path in ("/metrics", "/api/v1/gpus", "/api/v1/rightsizing", "/"):
        assert (await client.get(path)).status == 200
    gpus = json.loads(await (await client.get("/api/v1/gpus")).read())["gpus"]
    assert sum("rightsizing" in g for g in gpus) >= 8
    assert len(scored) == 3 and scored[-1] == published.snapshot.timestamp  # still once for the cycle
    clock.now += 1.0
    await sampler.cycle()
    await client.get("/api/v1/rightsizing")  # the JSON alone scores a cycle too
    assert len(scored) == 4


def _published(sampler: Sampler) -> tuple[list[str], object, object]:
    """The right-sizing series (rendered lines), /api/v1/gpus additions and /api/v1/rightsizing of
    the current cycle."""
    assert sampler.current is not None
    snap = sampler.current.snapshot
    text = Renderer().render(snap).text.decode()
    lines = [line for line in text.splitlines() if line.startswith(FAMILY_NAMES)]
    entries: Any = snap.api["gpus"]
    return lines, {u: entries[u] for u in entries}, snap.api["rightsizing"]


async def test_what_a_cycle_publishes_does_not_depend_on_earlier_reads() -> None:
    """Two identical fleets fed the same cycles: one read every cycle (what eager scoring did), one
    read every fourth; where both are read, every right-sizing value is the same."""
    clocks = Clock(), Clock()
    (every, _, scored_every), (sparse, _, scored_sparse) = fleet(clocks[0]), fleet(clocks[1])
    await every.start()
    await sparse.start()
    try:
        compared = 0
        for n in range(1, 13):
            for c in clocks:
                c.now += 1.0
            await every.cycle()
            await sparse.cycle()
            seen = _published(every)
            if n % 4 == 0:
                assert len(seen[0]) > 100
                assert _published(sparse) == seen, n
                compared += 1
        assert compared == 3
        assert len(scored_every) == 12 and len(scored_sparse) == 3
    finally:
        await every.stop()
        await sparse.stop()


def test_lazy_parts_are_merged_unread() -> None:
    """The sampler's merge of a lazy contribution builds nothing until read, then once."""
    from exporter.lazy import Deferred, LazyRows, LazySections

    built: list[str] = []

    def build(name: str) -> Callable[[], Any]:
        def make() -> Any:
            built.append(name)
            return {"x": ()} if name == "rows" else {"v": 1}

        return make

    rows, api = LazyRows(build("rows")), LazySections({"s": Deferred(build("api"))})
    assert "s" in api and list(api) == ["s"] and not rows.resolved and built == []
    assert rows.get("x") == () and rows.get("y", ()) == () and api["s"] == {"v": 1} == api["s"]
    assert built == ["rows", "api"]
