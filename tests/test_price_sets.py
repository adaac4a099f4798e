"""Price sets (``catalog.price_set``): each cloud's published prices, read from
``rightsizing/prices/*.yaml``, checked at load, applied over the catalog's own list and under
``catalog.prices``; the report and the status page say which set priced their GPUs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from aiohttp.test_utils import TestClient
from report_history import prometheus_with_history

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sampler import Sampler
from exporter.server import create_app
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.settings import ConfigError, build
from rightsizing.catalog import CatalogSettings, builtin_gpus, load_catalog
from rightsizing.price_sets import PRICES_DIR, PriceSetName, available, read_price_set
from rightsizing.settings import RightsizingSettings
from rightsizing.words import price_source

SHAPES = Path(__file__).parents[1] / "rightsizing" / "patches" / "shapes.yaml"
CLOUDS = {"aws-on-demand": "aws", "gcp-on-demand": "gcp", "azure-on-demand": "azure"}
KEYS = tuple(g.key for g in builtin_gpus())
MIXED = Path(__file__).parent / "scenarios" / "mixed_inference_fleet.yaml"


def _raw(name: str) -> dict[str, Any]:
    return yaml.safe_load((PRICES_DIR / f"{name}.yaml").read_text())  # type: ignore[no-any-return]


def test_the_sets_offered_are_one_per_cloud_besides_the_catalogs_own() -> None:
    """The files present are the names the configuration accepts (its schema lists them)."""
    assert available() == ["catalog", "aws-on-demand", "azure-on-demand", "gcp-on-demand"]
    assert sorted(get_args(PriceSetName)) == sorted(available())


@pytest.mark.parametrize("name", list(CLOUDS))
def test_each_set_loads_and_names_instances_that_carry_its_gpus(name: str) -> None:
    """Every entry's instance is one the cloud's shape list says carries that GPU, that many times:
    the per-GPU price divides by the right count."""
    shapes = yaml.safe_load(SHAPES.read_text())[CLOUDS[name]]["shapes"]
    carries = {row[0]: (row[1], row[2]) for row in shapes}
    loaded = read_price_set(PRICES_DIR / f"{name}.yaml", KEYS)
    raw = _raw(name)
    assert loaded.name == name and raw["as_of"] in loaded.description
    assert len(loaded.prices) == len(raw["prices"]) > 0
    for e in raw["prices"]:
        assert carries[e["instance"]] == (e["gpu"], e["gpus_per_instance"]), e
        per_gpu, source = loaded.prices[e["gpu"]]
        assert per_gpu == pytest.approx(e["instance_hourly_dollars"] / e["gpus_per_instance"], abs=1e-6)
        assert math.isfinite(per_gpu) and per_gpu > 0
        for part in (name, raw["source"], raw["region"], e["instance"], f"as of {raw['as_of']}"):
            assert part in source, (part, source)


def test_the_default_is_the_catalogs_own_list() -> None:
    default = load_catalog(CatalogSettings())
    assert default.price_set == "catalog"
    assert [(g.key, g.hourly_price_dollars, g.price_source) for g in default.all()] == [
        (g.key, g.hourly_price_dollars, g.price_source) for g in builtin_gpus()
    ]


def test_selecting_a_set_changes_prices_and_sources_and_marks_what_it_leaves_out() -> None:
    gcp = load_catalog(CatalogSettings(price_set="gcp-on-demand"))
    assert gcp.price_set == "gcp-on-demand" and "GCP on-demand" in gcp.price_set_description
    h100 = gcp.candidate("H100-SXM-80GB")
    assert h100 is not None
    assert h100.hourly_price_dollars == pytest.approx(88.49 / 8, abs=1e-6)  # a3-highgpu-8g, 8 GPUs
    assert "a3-highgpu-8g (8 x H100-SXM-80GB) $88.49/h / 8 GPUs" in h100.gpu.price_source
    assert price_source(h100) == "list"
    # A MIG slice follows its parent's price in the set.
    default = load_catalog()
    slice_ = gcp.candidate("H100-SXM-80GB/1g.10gb")
    was = default.candidate("H100-SXM-80GB/1g.10gb")
    assert slice_ is not None and was is not None and slice_.hourly_price_dollars < was.hourly_price_dollars
    # Left out: the catalog's price applies, said so; an estimate stays an estimate.
    for key in ("L4-24GB", "B200-SXM-180GB"):
        left, base = gcp.candidate(key), default.candidate(key)
        assert left is not None and base is not None
        assert left.hourly_price_dollars == base.hourly_price_dollars
        assert left.gpu.price_source == (
            f"not in gcp-on-demand: the catalog's default price applies ({base.gpu.price_source})"
        )
        assert price_source(left) == price_source(base)
    assert price_source(gcp.candidate("B200-SXM-180GB")) == "estimate"


def test_configured_prices_win_over_the_set() -> None:
    c = load_catalog(CatalogSettings(price_set="azure-on-demand", prices={"NVIDIA H100 80GB HBM3": 3.0}))
    h100 = c.candidate("H100-SXM-80GB")
    assert h100 is not None and h100.hourly_price_dollars == 3.0
    assert price_source(h100) == "configured" and c.price_set == "azure-on-demand"


def test_an_unknown_set_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"catalog.price_set: must be one of catalog, aws-on-demand, "):
        build(CatalogSettings, {"price_set": "aws-spot"}, "catalog")
    with pytest.raises(ConfigError, match=r"unknown price set 'aws-spot' \(known: catalog, aws-on-demand"):
        load_catalog(CatalogSettings(price_set="aws-spot"))  # type: ignore[arg-type]


GOOD = {"gpu": "L4-24GB", "instance": "g2-standard-4", "instance_hourly_dollars": 0.7, "gpus_per_instance": 1}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**GOOD, "gpu": "RTX-4090"}, "unknown GPU 'RTX-4090'"),
        ({**GOOD, "instance_hourly_dollars": 0}, "must be a positive finite number; got 0"),
        ({**GOOD, "instance_hourly_dollars": -1.5}, "must be a positive finite number; got -1.5"),
        ({**GOOD, "instance_hourly_dollars": float("nan")}, "hourly_dollars: must be a number; got NaN"),
        ({**GOOD, "instance_hourly_dollars": float("inf")}, "must be a positive finite number; got inf"),
        ({**GOOD, "instance_hourly_dollars": None}, "must be a positive finite number; got None"),
        ({**GOOD, "gpus_per_instance": 0}, "gpus_per_instance"),
        ({**GOOD, "instance": ""}, "instance is required"),
        ({**GOOD, "discount": 0.3}, "discount"),
    ],
)
def test_a_bad_entry_is_refused_naming_file_and_entry(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    first = {**GOOD, "gpu": "T4-16GB", "instance": "n1-standard-4"}
    raw = {**_raw("gcp-on-demand"), "name": "mine", "prices": [first, entry]}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"mine\.yaml") as err:
        read_price_set(path, KEYS)
    assert message in str(err.value) and ("prices[1]" in str(err.value)), str(err.value)


def test_a_gpu_priced_twice_or_a_name_not_its_files_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**_raw("gcp-on-demand"), "name": "mine", "prices": [GOOD, GOOD]}))
    with pytest.raises(ConfigError, match="L4-24GB is priced twice"):
        read_price_set(path, KEYS)
    path.write_text(yaml.safe_dump({**_raw("gcp-on-demand"), "prices": [GOOD]}))
    with pytest.raises(ConfigError, match="differs from the file's name"):
        read_price_set(path, KEYS)


async def test_the_status_page_and_its_json_name_the_set(aiohttp_client: Any) -> None:
    source = SimulatedSource(load_scenario(str(SCENARIO_DIR / "default.yaml")))
    catalog = load_catalog(CatalogSettings(price_set="aws-on-demand"))
    ext = RightsizingExtension(RightsizingSettings(), catalog, 1.0, source)
    sampler = Sampler(source, Renderer(), interval=3600, hostname="node-a", extensions=[ext])
    await sampler.start()
    try:
        client: TestClient = await aiohttp_client(create_app(sampler))
        api = await (await client.get("/api/v1/rightsizing")).json()
        named = api["rightsizing"]["price_set"]
        assert named == {"name": "aws-on-demand", "description": catalog.price_set_description}
        html = (await (await client.get("/")).read()).decode()
    finally:
        await sampler.stop()
    assert (
        '<p class="note" id="price-set">Prices: <code>aws-on-demand</code>, AWS on-demand, us-east-1, '
        "as of 2024, from the AWS EC2 On-Demand Pricing page, Linux. Chosen with catalog.price_set"
    ) in html


@pytest.mark.timeout(600)
def test_the_report_prices_with_the_set_and_names_it_in_every_format(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"catalog": {"price_set": "gcp-on-demand"}}))
    out: dict[str, str] = {}
    with prometheus_with_history([MIXED], 3600.0, 15.0, instances=True) as (url, fleets):
        at = fleets[0].last + 1
        for fmt in ("json", "markdown", "html"):
            cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
                   "--window", "1h", "--at", f"{at:.3f}", "--format", fmt,
                   "--exporter-config", str(config)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stderr
            out[fmt] = done.stdout
    a = json.loads(out["json"])["assumptions"]
    gcp = load_catalog(CatalogSettings(price_set="gcp-on-demand"))
    assert a["price_set"] == {"name": "gcp-on-demand", "description": gcp.price_set_description}
    prices = {p["gpu"]: p for p in a["prices"]}
    assert prices["H100-SXM-80GB"]["hourly_price_dollars"] == pytest.approx(88.49 / 8, abs=1e-6)
    assert prices["H100-SXM-80GB"]["source"].startswith("gcp-on-demand: ")
    assert prices["B200-SXM-180GB"]["source"].startswith("not in gcp-on-demand: ")
    shown = out["markdown"].replace("\\", "")  # the Markdown escapes; the reader sees the text
    assert f"Price set (catalog.price_set): `gcp-on-demand`, {gcp.price_set_description}." in shown
    assert "<dt>Price set</dt><dd><code>gcp-on-demand</code>: GCP on-demand, US regions" in out["html"]
