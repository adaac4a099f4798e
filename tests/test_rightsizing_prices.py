"""Prices configured in ``catalog.prices`` decide recommendations, in the live engine and in
``rightsizer report`` alike, and say so (``price_source: configured``).

``tests/scenarios/priced/`` holds fleets whose expectations hold only with the prices below (a
committed-use contract); they are left out of the list-price suites. The live engine is the real
right-sizing extension with the configured catalog; the report runs against a real Prometheus
holding the fleet's hour, given the same prices through ``--exporter-config``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from report_history import prometheus_with_history
from test_rightsizing_scenarios import conclusions

from exporter.config import CatalogSettings
from rightsizing.catalog import load_catalog

PRICED_DIR = Path(__file__).parent / "scenarios" / "priced"
# Each priced fleet with the catalog.prices its expectations were written for.
PRICED = {
    PRICED_DIR / "independent_configured_prices.yaml": {
        "H100-SXM-80GB": 2.50, "L4-24GB": 0.45, "NVIDIA A100-SXM4-40GB": 1.10,
    },
    PRICED_DIR / "judge_owned_hardware.yaml": {"H100-SXM-80GB": 3.00, "L40S-48GB": 0.70, "NVIDIA H200": 4.00},
}  # fmt: skip
FLEETS = pytest.mark.parametrize(("path", "prices"), list(PRICED.items()), ids=[p.stem for p in PRICED])


def _configured(path: Path, prices: dict[str, float]) -> dict[str, dict]:
    return asyncio.run(conclusions(path, catalog=load_catalog(CatalogSettings(prices=prices))))


def test_every_priced_fleet_states_its_prices() -> None:
    assert set(PRICED_DIR.glob("*.yaml")) == set(PRICED)


@FLEETS
def test_configured_prices_decide_in_the_live_engine(path: Path, prices: dict[str, float]) -> None:
    results = _configured(path, prices)
    assert len(results) == 3
    for name, got in results.items():
        e = got["expect"]
        have = (got["verdict"], got["bottlenecks"], got["recommended"])
        assert have == (e.verdict, list(e.bottlenecks), e.recommended), f"{name}: {got['reason']}"
        assert got["price_source"] == "configured", name
    # The same fleet at list prices goes elsewhere: the prices, not the physics, decided.
    listed = asyncio.run(conclusions(path))
    assert all(listed[n]["recommended"] != results[n]["recommended"] for n in results)


@FLEETS
@pytest.mark.timeout(600)
def test_report_judges_with_the_configured_prices(
    tmp_path: Path, path: Path, prices: dict[str, float]
) -> None:
    live = _configured(path, prices)
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"catalog": {"prices": prices}}))
    with prometheus_with_history([path], 3600.0, 15.0, instances=True) as (url, fleets):
        at = fleets[0].last + 1
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
               "--window", "1h", "--at", f"{at:.3f}", "--format", "json",
               "--exporter-config", str(config)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["gpus"]
    by_uuid = {r["uuid"]: r for r in rows}
    scenario = fleets[0].source.scenario
    assert len(rows) == len(scenario.gpus)
    for g in scenario.gpus:
        row, want = by_uuid[g.uuid], live[g.name]
        assert (row["verdict"], row["bottlenecks"], row["recommended"]) == (
            want["verdict"], want["bottlenecks"], want["recommended"]
        ), f"{g.name}: {row['reason']}"  # fmt: skip
        assert row["price_source"] == "configured", g.name
