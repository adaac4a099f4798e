"""The scenario suite: every GPU of every scenario earns the verdict, bottlenecks and recommendation
written in its scenario file.

``tests/scenarios/`` holds one scenario per verdict and per bottleneck plus mixed fleets; the
built-in ``default`` and ``golden`` scenarios are held to their expectations too. Each scenario runs
through the real simulated source and the real right-sizing extension: the past is replayed into
the windows at start, one live cycle follows, and the conclusions are read from what the
extension publishes (rows and the /api/v1/gpus additions). Every reason is also read for the
clauses independent readers found false (``reason_clauses``): a move onto an estimated price that
does not say so, "no cheaper option holds" beside one that does, "no cheaper option" on the
catalog's cheapest, a server's reservation read as the need, an offload ruled out on a host link,
an upgrade's price inside a rightsized reason.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from pathlib import Path

import pytest
from reason_clauses import false_clauses
from side_by_side import side_by_side

from exporter.api import gpus_json
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.snapshot import Snapshot
from rightsizing.bottlenecks import BOTTLENECKS
from rightsizing.catalog import Catalog, load_catalog
from rightsizing.settings import RightsizingSettings
from rightsizing.verdicts import VERDICTS

SUITE = sorted((Path(__file__).parent / "scenarios").glob("*.yaml"))
CATALOG = load_catalog()
BUILTIN = [SCENARIO_DIR / "default.yaml", SCENARIO_DIR / "golden.yaml", SCENARIO_DIR / "mig.yaml"]


# A scenario file's conclusions on the embedded catalog, by (path, size, mtime): several modules ask
# for the whole suite's (this one, test_rightsizing_deciding), a minute and more of replay each.
_CONCLUDED: dict[tuple[str, int, int], dict[str, dict]] = {}


async def conclusions(
    path: Path, start: float | None = None, catalog: Catalog | None = None
) -> dict[str, dict]:
    """What the engine concludes per GPU; ``start`` pins the simulated clock (noise follows it).
    Without ``start`` or ``catalog``, a file already concluded in this session answers as then."""
    if start is not None or catalog is not None:
        return await _conclude(path, start, catalog)
    key = _key(path)
    if key not in _CONCLUDED and path in SUITE + BUILTIN:
        _conclude_all()
    if key not in _CONCLUDED:
        _CONCLUDED[key] = await _conclude(path, None, None)
    return copy.deepcopy(_CONCLUDED[key])


def _key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def _conclude_all() -> None:
    """Concludes every file of the suite and the built-ins not yet concluded, side by side (each
    file's replay is its own)."""
    todo = [p for p in SUITE + BUILTIN if _key(p) not in _CONCLUDED]
    for path, got in zip(todo, side_by_side(_conclude_in_process, todo), strict=True):
        _CONCLUDED[_key(path)] = got


def _conclude_in_process(path: Path) -> dict[str, dict]:
    return asyncio.run(_conclude(path, None, None))


async def _conclude(path: Path, start: float | None, catalog: Catalog | None) -> dict[str, dict]:
    scenario = load_scenario(str(path))
    if start is not None:
        scenario = dataclasses.replace(scenario, start=start, frozen=True)
    source = SimulatedSource(scenario)
    ext = RightsizingExtension(RightsizingSettings(), catalog or load_catalog(), 1.0, source)
    await ext.start()
    try:
        reading = await source.collect()
        contribution = ext.contribute(reading, reading.gpus)
    finally:
        await ext.stop()
    snap = Snapshot(reading.timestamp, "node", reading.gpus, (), contribution.rows, contribution.api)
    # A GPU in MIG mode has no verdict of its own: its instances are judged.
    api = {g["uuid"]: g["rightsizing"] for g in gpus_json(snap)["gpus"] if "rightsizing" in g}
    verdict_rows = {
        (r.gpu.identity.uuid, dict(r.labels)["verdict"]): r.value
        for r in contribution.rows["rightsizer_gpu_verdict"]
        if r.gpu is not None
    }
    out = {}
    judged = [(g.name, g.uuid, g.expect) for g in scenario.gpus if not g.mig]
    judged += [(f"{g.name}/{m.name}", m.uuid, m.expect) for g in scenario.gpus for m in g.mig]
    for name, uuid, expect in judged:
        got = api[uuid]
        # The published series say the same as the API: exactly one verdict series is 1.
        assert [v for v in VERDICTS if verdict_rows[(uuid, v)] == 1.0] == [got["verdict"]]
        out[name] = {**got, "expect": expect}
    return out


@pytest.mark.parametrize("path", SUITE + BUILTIN, ids=lambda p: p.stem)
async def test_every_gpu_earns_what_its_scenario_expects(path: Path) -> None:
    results = await conclusions(path)
    wrong = []
    for name, got in results.items():
        expect = got["expect"]
        assert expect is not None, f"{path.name}: {name} states no expectation"
        checks = [
            ("verdict", expect.verdict, got["verdict"]),
            ("bottlenecks", list(expect.bottlenecks), got["bottlenecks"]),
            ("recommended", expect.recommended, got["recommended"]),
            ("workload_change", expect.workload_change, got["workload_change"]),
        ]
        for what, want, have in checks:
            if want is not None and want != have and not (what == "bottlenecks" and expect.verdict is None):
                wrong.append(f"{name}: {what} {have!r}, expected {want!r} ({got['reason']})")
        if expect.recommended_one_of and got["recommended"] not in expect.recommended_one_of:
            wanted = list(expect.recommended_one_of)
            have = got["recommended"]
            wrong.append(f"{name}: recommended {have!r}, expected one of {wanted} ({got['reason']})")
        assert got["reason"], f"{name}: no reason given"
        wrong += [f"{name}: false clause: {f} ({got['reason']})" for f in false_clauses(got, CATALOG)]
    assert not wrong, f"{path.name}:\n" + "\n".join(wrong)


def test_the_suite_covers_every_verdict_and_bottleneck_and_mixed_fleets() -> None:
    verdicts, bottlenecks, mixed = set(), set(), 0
    for path in SUITE:
        scenario = load_scenario(str(path))
        assert all(
            g.expect is not None
            and (g.expect.verdict or g.expect.recommended_one_of)
            and (g.expect.recommended or g.expect.recommended_one_of)
            for g in scenario.gpus
            if not g.mig
        ), path
        verdicts |= {g.expect.verdict for g in scenario.gpus if g.expect and g.expect.verdict}
        bottlenecks |= {b for g in scenario.gpus if g.expect for b in g.expect.bottlenecks}
        mixed += len({g.expect.verdict for g in scenario.gpus if g.expect}) >= 2 and len(scenario.gpus) >= 5
    assert verdicts == set(VERDICTS)
    assert bottlenecks == set(BOTTLENECKS)
    assert mixed >= 2
    for name in [*VERDICTS, *BOTTLENECKS]:
        assert any(name in p.stem for p in SUITE), f"no scenario file named for {name}"
