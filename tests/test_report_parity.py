"""One judgement, two callers: every scenario fleet through the live engine and through
``rightsizer report`` against a real Prometheus (and, again, a real VictoriaMetrics) holding the
same hour, with identical verdicts, bottlenecks, recommendations and workload moves, each as its
scenario file says.

All fleets live in one Prometheus (each as its own ``instance``, so host CPUs stay apart); the
live engine is the real right-sizing extension fed the very readings the history was rendered from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from report_history import ENGINES, HOUR, HOUR_STEP, Fleet, engine_holding, scenario_hour

from rightsizing.balance import findings
from rightsizing.cost import cost_json

Key = tuple[str, str, str]  # (fleet, UUID, MIG profile/GPU instance id or "")


@pytest.fixture(scope="module")
def hour() -> tuple[dict[str, list[str]], list[Fleet]]:
    """The hour's samples (family -> lines) and the fleets fed them, built once for both engines
    and test_rule_engines (the report is asked ``--at`` the history's end, so an engine started
    later reads it alike)."""
    return scenario_hour(keep=True)


@pytest.fixture(scope="module", params=ENGINES)
def history(
    request: pytest.FixtureRequest, hour: tuple[dict[str, list[str]], list[Fleet]]
) -> Iterator[tuple[str, list[Fleet]]]:
    """The same hour in Prometheus and in VictoriaMetrics: the report must judge alike from either."""
    families, fleets = hour
    with engine_holding(request.param, families) as url:
        yield url, fleets


def live_conclusions(fleet: Fleet) -> dict[Key, tuple[object, ...]]:
    out: dict[Key, tuple[object, ...]] = {}
    for sample in fleet.source.reading_at(fleet.last).gpus:
        ident = sample.identity
        a = fleet.live.assessments.get(ident.key)
        if a is None:
            continue  # a GPU in MIG mode: its instances are judged
        mig = f"{ident.mig_profile}/{ident.mig_instance_id}" if ident.mig_profile else ""
        key = (fleet.name, ident.parent_uuid or ident.uuid, mig)
        out[key] = (a.verdict, list(a.bottlenecks), a.recommended, a.workload_change or None)
    return out


def expected(fleet: Fleet) -> dict[Key, tuple[object, ...]]:
    out: dict[Key, tuple[object, ...]] = {}
    for g in fleet.source.scenario.gpus:
        if g.history_seconds <= 0:
            continue  # appears only now: no past for either caller to judge
        units = [(g.uuid, "", g.expect)]
        if g.mig:
            units = [(g.uuid, f"{m.profile.name}/{m.instance_id}", m.expect) for m in g.mig]
        for uuid, profile, e in units:
            assert e is not None
            # Several sound answers: the recommendation must be one of them.
            rec = frozenset(e.recommended_one_of) if e.recommended_one_of else e.recommended
            want = (e.verdict, list(e.bottlenecks), rec, e.workload_change)
            out[(fleet.name, uuid, profile)] = want
    return out


def test_live_engine_and_report_judge_every_fleet_alike(history: tuple[str, list[Fleet]]) -> None:
    url, fleets = history
    at = max(f.last for f in fleets) + 1
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--window", "1h", "--at", f"{at:.3f}", "--format", "json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    by_fleet = {f.name: f for f in fleets}
    report: dict[Key, tuple[object, ...]] = {}
    for g in data["gpus"]:
        fleet = g["instance"]  # the fleet's name
        key = (fleet, g["uuid"], f"{g['mig_profile']}/{g['mig_instance_id']}" if g["mig_profile"] else "")
        assert key not in report, f"{key} judged twice (a MIG parent beside its instances?)"
        report[key] = (g["verdict"], g["bottlenecks"], g["recommended"], g["workload_change"])
    live: dict[Key, tuple[object, ...]] = {}
    want: dict[Key, tuple[object, ...]] = {}
    for fleet in fleets:
        live.update(live_conclusions(fleet))
        want.update(expected(fleet))
    assert set(live) == set(want), set(live) ^ set(want)
    assert set(report) == set(live), set(report) ^ set(live)
    wrong = [
        f"{k}: live {live[k]}, report {report[k]}, scenario {want[k]}"
        for k in sorted(want)
        if not (live[k] == report[k] and _agrees(want[k], live[k]))
    ]
    assert not wrong, "\n".join(wrong)
    assert by_fleet  # every fleet was judged
    # System balance: the same findings (a GPU trained below its PCIe maximum in one scenario).
    live_findings = {
        (f.name, s.identity.parent_uuid or s.identity.uuid, s.identity.mig_profile or "", x.name)
        for f in fleets
        for s in f.source.reading_at(f.last).gpus
        if s.identity.key in f.live.assessments
        for x in findings(f.live.evidence[s.identity.key])
    }
    report_findings = {
        (g["instance"], g["uuid"], g["mig_profile"] or "", name)
        for g in data["gpus"]
        for name in g["findings"]
    }
    assert report_findings == live_findings and live_findings, report_findings ^ live_findings
    # Cost per inference: the same workloads, rates and dollars (live: counter increase over the
    # readings' span; report: increase() over the queue's span in Prometheus).
    live_costs = {(f.name, c.queue): cost_json(c) for f in fleets for c in f.live.costs}
    report_costs = {(c["instance"], c["queue"]): c for c in data["inference_costs"]}
    assert set(report_costs) == set(live_costs) and len(live_costs) >= 10, set(report_costs) ^ set(live_costs)
    for key, mine in live_costs.items():
        theirs = report_costs[key]
        same = ("unit", "gpus", "server")
        assert [theirs[f] for f in same] == [mine[f] for f in same], key
        for field, value in mine.items():
            if isinstance(value, float):
                assert theirs[field] == pytest.approx(value, rel=0.02), (key, field)
            else:
                assert theirs[field] == value, (key, field)
    assert data["totals"]["history_found_seconds"] >= HOUR - 2 * HOUR_STEP


def _agrees(want: tuple[object, ...], got: tuple[object, ...]) -> bool:
    return all(
        w is None or w == g or (isinstance(w, frozenset) and g in w) for w, g in zip(want, got, strict=True)
    )
