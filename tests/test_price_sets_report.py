"""What a price set changes where a user reads it: the report's prices, savings and
recommendations (against a real Prometheus holding an exporter's history), ``rightsizer plan`` and
the status page, each naming the set it priced with. The expected prices come from the set files'
own figures (instance price / GPUs, or the catalog's default for a GPU a set leaves out), not from
the loader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient
from report_history import prometheus_with_history
from test_price_sets import per_gpu

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizing.catalog import CatalogSettings, builtin_gpus, load_catalog
from rightsizing.price_sets import PRICES_DIR, available
from rightsizing.settings import RightsizingSettings

MIXED = Path(__file__).parent / "scenarios" / "mixed_inference_fleet.yaml"
DEFAULT = {g.key: g.hourly_price_dollars for g in builtin_gpus()}
HOURS_PER_MONTH = 730


def expected_prices(name: str) -> dict[str, float]:
    """Whole GPUs' per-GPU hourly prices under set ``name``, read from its file."""
    if name == "catalog":
        return dict(DEFAULT)
    raw = yaml.safe_load((PRICES_DIR / f"{name}.yaml").read_text())
    return {**DEFAULT, **{e["gpu"]: per_gpu(e) for e in raw["prices"]}}


def _cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "rightsizing.command.cli", *args],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _config(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"catalog": {"price_set": name}}))
    return path


def _slice_price(key: str, prices: dict[str, float]) -> float:
    """A MIG slice costs the share of its parent the catalog gives it; the share is the same under
    every set, so the slice's price is its parent's price under the set times that share."""
    default = load_catalog().candidate(key)
    assert default is not None
    parent = key.split("/")[0]
    return prices[parent] * default.hourly_price_dollars / DEFAULT[parent]


@pytest.mark.timeout(600)
def test_each_set_prices_the_reports_rows_savings_and_totals(tmp_path: Path) -> None:
    reports: dict[str, dict[str, Any]] = {}
    with prometheus_with_history([MIXED], 3600.0, 15.0, instances=True) as (url, fleets):
        at = f"{fleets[0].last + 1:.3f}"
        for name in available():
            out = _cli("report", "--prometheus-url", url, "--window", "1h", "--at", at, "--format", "json",
                       "--exporter-config", str(_config(tmp_path, name)))  # fmt: skip
            reports[name] = json.loads(out)
    for name, report in reports.items():
        prices = expected_prices(name)
        assert report["assumptions"]["price_set"]["name"] == name
        rows = report["gpus"]
        assert len(rows) == 6
        for r in rows:
            current, rec = r["current"], r["recommended"]
            assert r["hourly_price_dollars"] == pytest.approx(prices[current], abs=1e-6), (name, r)
            if rec == "release":
                saved = prices[current]
            elif rec == current:
                saved = 0.0
            else:
                saved = prices[current] - (_slice_price(rec, prices) if "/" in rec else prices[rec])
            assert r["hourly_savings_dollars"] == pytest.approx(saved, abs=1e-4), (name, r)
        totals = report["totals"]
        assert totals["hourly_price_dollars"] == pytest.approx(
            sum(prices[r["current"]] for r in rows), abs=1e-3
        )
        gained = sum(r["hourly_savings_dollars"] for r in rows if r["hourly_savings_dollars"] > 0)
        assert totals["hourly_savings_dollars"] == pytest.approx(gained, abs=1e-3)
        assert totals["monthly_savings_dollars"] == pytest.approx(gained * HOURS_PER_MONTH, abs=0.05)
        # The figures move exactly when the set prices a GPU this fleet has or is sent to differently.
        touched = {r["current"] for r in rows} | {r["recommended"].split("/")[0] for r in rows} - {"release"}
        moved = any(prices[k] != DEFAULT[k] for k in touched)
        base = reports["catalog"]["totals"]
        assert (totals != base) == moved, name
    # The spot H100s cost less than the on-demand ones, so moving them to an L4 saves less.
    spot = {r["pod"]: r for r in reports["gcp-spot"]["gpus"]}
    on_demand = {r["pod"]: r for r in reports["gcp-on-demand"]["gpus"]}
    assert spot["summarizer-0"]["recommended"] == on_demand["summarizer-0"]["recommended"] == "L4-24GB"
    assert (
        0
        < spot["summarizer-0"]["hourly_savings_dollars"]
        < on_demand["summarizer-0"]["hourly_savings_dollars"]
    )


@pytest.mark.timeout(600)
def test_the_report_names_a_new_set_in_every_format(tmp_path: Path) -> None:
    config = _config(tmp_path, "gcp-committed-1y")
    out: dict[str, str] = {}
    with prometheus_with_history([MIXED], 3600.0, 15.0, instances=True) as (url, fleets):
        at = f"{fleets[0].last + 1:.3f}"
        for fmt in ("json", "markdown", "html"):
            out[fmt] = _cli("report", "--prometheus-url", url, "--window", "1h", "--at", at, "--format", fmt,
                            "--exporter-config", str(config))  # fmt: skip
    gcp = load_catalog(CatalogSettings(price_set="gcp-committed-1y"))
    a = json.loads(out["json"])["assumptions"]
    assert a["price_set"] == {"name": "gcp-committed-1y", "description": gcp.price_set_description}
    prices = {p["gpu"]: p for p in a["prices"]}
    assert prices["H100-SXM-80GB"]["hourly_price_dollars"] == pytest.approx(
        44810.08066464 / 730 / 8, abs=1e-6
    )
    assert prices["H100-SXM-80GB"]["source"].startswith("gcp-committed-1y: GCP committed-1y, us-central1, ")
    assert prices["B200-SXM-180GB"]["source"].startswith("not in gcp-committed-1y: ")
    shown = out["markdown"].replace("\\", "")  # the Markdown escapes; the reader sees the text
    assert f"Price set (catalog.price_set): `gcp-committed-1y`, {gcp.price_set_description}." in shown
    assert "<dt>Price set</dt><dd><code>gcp-committed-1y</code>: GCP committed-1y, us-central1" in out["html"]


def test_plan_names_the_set_and_prices_its_options_with_it(tmp_path: Path) -> None:
    spot = expected_prices("gcp-spot")
    table = _cli(
        "plan", "--model", "llama-3-8b", "--all", "--exporter-config", str(_config(tmp_path, "gcp-spot"))
    )
    described = load_catalog(CatalogSettings(price_set="gcp-spot")).price_set_description
    assert f"Prices: gcp-spot, {described} (catalog.price_set)." in table
    plain = _cli("plan", "--model", "llama-3-8b")
    assert "Prices: catalog, the built-in list in catalog.yaml (catalog.price_set)." in plain
    data = json.loads(_cli("plan", "--model", "llama-3-8b", "--all", "--format", "json",
                           "--exporter-config", str(_config(tmp_path, "gcp-spot"))))  # fmt: skip
    assert data["price_set"] == {"name": "gcp-spot", "description": described}
    options = {o["gpu"]: o for o in data["options"]}
    for key in ("L4-24GB", "A100-SXM-40GB", "H100-SXM-80GB", "T4-16GB"):
        if key in options:
            assert options[key]["hourly_price_dollars"] == pytest.approx(spot[key], abs=1e-4), key
    assert "L4-24GB" in options and options["L4-24GB"]["price_source"].startswith("gcp-spot: ")


async def test_the_status_page_and_its_json_name_a_spot_set(aiohttp_client: Any) -> None:
    source = SimulatedSource(load_scenario(str(SCENARIO_DIR / "default.yaml")))
    catalog = load_catalog(CatalogSettings(price_set="aws-spot"))
    ext = RightsizingExtension(RightsizingSettings(), catalog, 1.0, source)
    sampler = Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext])
    await sampler.start()
    try:
        client: TestClient = await aiohttp_client(create_app(sampler))
        api = await (await client.get("/api/v1/rightsizing")).json()
        assert api["rightsizing"]["price_set"] == {
            "name": "aws-spot",
            "description": catalog.price_set_description,
        }
        html = (await (await client.get("/")).read()).decode()
    finally:
        await sampler.stop()
    assert catalog.price_set_description.startswith("AWS spot, us-east-1, 2 GPUs priced, sources dated ")
    assert (
        f'<p class="note" id="price-set">Prices: <code>aws-spot</code>, {catalog.price_set_description}. '
        "Chosen with catalog.price_set"
    ) in html
