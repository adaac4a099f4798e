"""Price sets (``catalog.price_set``): each cloud's published prices, read from
``rightsizing/prices/*.yaml``, checked at load (every price positive, with its source and date),
applied over the catalog's own list and under ``catalog.prices``. What a spot or committed price
means is checked against the same cloud's on-demand set; the arithmetic a file writes out in its
header is checked against what the loader computes. The report, ``plan`` and the status page:
tests/test_price_sets_report.py."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from exporter.docs import price_sets_table
from rightsizer_core.settings import ConfigError, build
from rightsizing.catalog import CatalogSettings, builtin_gpus, load_catalog
from rightsizing.price_sets import DATE, PRICES_DIR, PriceSetName, available, read_price_set
from rightsizing.words import price_source

SHAPES = Path(__file__).parents[1] / "rightsizing" / "patches" / "shapes.yaml"
DOC = Path(__file__).parents[1] / "docs" / "rightsizing.md"
KEYS = tuple(g.key for g in builtin_gpus())
SETS = available()[1:]


def _raw(name: str) -> dict[str, Any]:
    return yaml.safe_load((PRICES_DIR / f"{name}.yaml").read_text())  # type: ignore[no-any-return]


def per_gpu(entry: dict[str, Any]) -> float:
    """An entry's per-GPU hourly price, from the file's own figures (not through the loader)."""
    if "instance_hourly_dollars" in entry:
        hourly = entry["instance_hourly_dollars"]
    else:
        hourly = entry["instance_monthly_dollars"] / entry["hours_per_month"]
    return float(hourly) / entry["gpus_per_instance"]


def test_the_sets_offered_are_the_files_and_the_schema_lists_them() -> None:
    assert available() == [
        "catalog", "aws-on-demand", "aws-spot", "azure-on-demand",
        "gcp-committed-1y", "gcp-on-demand", "gcp-spot",
    ]  # fmt: skip
    assert sorted(get_args(PriceSetName)) == sorted(available())
    with pytest.raises(
        ConfigError, match=r"catalog.price_set: must be one of catalog, aws-on-demand, aws-spot"
    ):
        build(CatalogSettings, {"price_set": "aws-committed-1y"}, "catalog")
    with pytest.raises(
        ConfigError, match=r"unknown price set 'aws-reserved' \(known: catalog, aws-on-demand"
    ):
        load_catalog(CatalogSettings(price_set="aws-reserved"))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", SETS)
def test_every_entry_has_a_price_a_source_and_a_date_and_names_an_instance_that_carries_its_gpu(
    name: str,
) -> None:
    raw = _raw(name)
    shapes = yaml.safe_load(SHAPES.read_text())[raw["provider"].lower()]["shapes"]
    carries = {row[0]: (row[1], row[2]) for row in shapes}
    loaded = read_price_set(PRICES_DIR / f"{name}.yaml", KEYS)
    assert loaded.name == name and loaded.pricing == raw["pricing"]
    assert len(loaded.entries) == len(raw["prices"]) > 0
    for e in raw["prices"]:
        assert carries[e["instance"]] == (e["gpu"], e["gpus_per_instance"]), e
        assert e["source"].startswith("https://") and DATE.match(e["as_of"]), e
        got = loaded.entries[e["gpu"]]
        assert math.isfinite(got.per_gpu_dollars) and got.per_gpu_dollars > 0
        assert got.per_gpu_dollars == pytest.approx(per_gpu(e), abs=1e-6)
        for part in (name, raw["region"], e["instance"], e["source"], f"as of {e['as_of']}"):
            assert part in got.price_source, (part, got.price_source)
    assert raw["provider"] in loaded.description and raw["region"] in loaded.description


def _provider_sets(kind: str) -> list[tuple[str, str]]:
    """(set, the same cloud's on-demand set) for every set of that kind."""
    found = [(n, f"{_raw(n)['provider'].lower()}-on-demand") for n in SETS if _raw(n)["pricing"] == kind]
    assert found, kind
    return found


@pytest.mark.parametrize(("name", "on_demand"), _provider_sets("spot") + _provider_sets("committed-1y"))
def test_spot_and_committed_prices_are_below_the_same_clouds_on_demand_price(
    name: str, on_demand: str
) -> None:
    """Spot capacity and a commitment are discounts on the on-demand price: for every GPU both
    sets price, on the same instance, the discounted per-GPU price is the lower."""
    cheap = read_price_set(PRICES_DIR / f"{name}.yaml", KEYS).entries
    full = read_price_set(PRICES_DIR / f"{on_demand}.yaml", KEYS).entries
    both = sorted(set(cheap) & set(full))
    assert both, f"{name} and {on_demand} price no GPU in common"
    for gpu in both:
        assert cheap[gpu].instance == full[gpu].instance, gpu
        assert 0 < cheap[gpu].per_gpu_dollars < full[gpu].per_gpu_dollars, gpu


def test_a_monthly_price_is_divided_by_the_sources_hours_as_the_file_writes_it_out() -> None:
    """gcp-committed-1y quotes months; its header writes each division out. Every line of that
    arithmetic matches the entry's figures and what the loader computed."""
    text = (PRICES_DIR / "gcp-committed-1y.yaml").read_text()
    loaded = read_price_set(PRICES_DIR / "gcp-committed-1y.yaml", KEYS).entries
    written = re.findall(r"^#\s+(\S+)\s+\$([\d.]+) / (\d+) = \$([\d.]+)/h", text, re.M)
    by_instance = {e.instance: e for e in loaded.values()}
    assert sorted(w[0] for w in written) == sorted(by_instance)
    for e in _raw("gcp-committed-1y")["prices"]:
        assert "instance_hourly_dollars" not in e
    for instance, month, hours, hourly in written:
        e = by_instance[instance]
        raw = next(r for r in _raw("gcp-committed-1y")["prices"] if r["instance"] == instance)
        assert float(month) == raw["instance_monthly_dollars"] and float(hours) == raw["hours_per_month"]
        assert e.instance_hourly_dollars == pytest.approx(float(month) / float(hours), abs=1e-6)
        assert float(hourly) == pytest.approx(e.instance_hourly_dollars, abs=5e-7)
        assert f"${month}/month / {hours} h = ${hourly}/h" in e.price_source


@pytest.mark.parametrize("name", SETS)
def test_the_arithmetic_a_note_writes_out_is_the_entrys(name: str) -> None:
    """A note that derives the instance price ("8 x 12.29 = 98.32", per-GPU figures times the GPUs)
    or rounds the source's figure ("the list gives 88.4899999025753") agrees with the entry."""
    checked = 0
    for e in _raw(name)["prices"]:
        note = e.get("note", "")
        for count, each, total in re.findall(r"(\d+) x \$?([\d.]+) = \$?([\d.]+)", note):
            assert int(count) == e["gpus_per_instance"], e
            assert int(count) * float(each) == pytest.approx(float(total), abs=1e-9), e
            assert float(total) == e["instance_hourly_dollars"], e
            checked += 1
        for given in re.findall(r"the list gives ([\d.]+)", note):
            assert abs(float(given) - e["instance_hourly_dollars"]) < 5e-7, e
            checked += 1
    assert checked or name in {"aws-on-demand", "aws-spot", "gcp-committed-1y"}  # notes that derive nothing


def test_the_default_is_the_catalogs_own_list() -> None:
    default = load_catalog(CatalogSettings())
    assert default.price_set == "catalog"
    assert [(g.key, g.hourly_price_dollars, g.price_source) for g in default.all()] == [
        (g.key, g.hourly_price_dollars, g.price_source) for g in builtin_gpus()
    ]


def test_selecting_a_set_changes_prices_and_sources_and_marks_what_it_leaves_out() -> None:
    gcp = load_catalog(CatalogSettings(price_set="gcp-on-demand"))
    assert gcp.price_set == "gcp-on-demand" and "GCP on-demand, us-central1" in gcp.price_set_description
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
    for key in ("T4-16GB", "B200-SXM-180GB"):
        left, base = gcp.candidate(key), default.candidate(key)
        assert left is not None and base is not None
        assert left.hourly_price_dollars == base.hourly_price_dollars
        assert left.gpu.price_source == (
            f"not in gcp-on-demand: the catalog's default price applies ({base.gpu.price_source})"
        )
        assert price_source(left) == price_source(base)
    assert price_source(gcp.candidate("B200-SXM-180GB")) == "estimate"


def test_configured_prices_win_over_the_set() -> None:
    c = load_catalog(CatalogSettings(price_set="gcp-spot", prices={"NVIDIA H100 80GB HBM3": 3.0}))
    h100 = c.candidate("H100-SXM-80GB")
    assert h100 is not None and h100.hourly_price_dollars == 3.0
    assert price_source(h100) == "configured" and c.price_set == "gcp-spot"


GOOD = {"gpu": "L4-24GB", "instance": "g2-standard-4", "instance_hourly_dollars": 0.7, "gpus_per_instance": 1,
        "source": "https://example.test/prices", "as_of": "2026-07-30"}  # fmt: skip
EITHER = "give instance_hourly_dollars or instance_monthly_dollars"
MONTHLY = {**{k: v for k, v in GOOD.items() if k != "instance_hourly_dollars"},
           "instance_monthly_dollars": 500.0}  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({**GOOD, "gpu": "RTX-4090"}, "unknown GPU 'RTX-4090'"),
        ({**GOOD, "instance_hourly_dollars": 0}, "must be a positive finite number; got 0"),
        ({**GOOD, "instance_hourly_dollars": -1.5}, "must be a positive finite number; got -1.5"),
        ({**GOOD, "instance_hourly_dollars": float("nan")}, "hourly_dollars: must be a number; got NaN"),
        ({**GOOD, "instance_hourly_dollars": float("inf")}, "must be a positive finite number; got inf"),
        ({**GOOD, "instance_hourly_dollars": None}, EITHER),
        ({**GOOD, "instance_monthly_dollars": 500.0}, EITHER),
        ({**GOOD, "hours_per_month": 730}, "hours_per_month goes with instance_monthly_dollars"),
        (MONTHLY, "hours_per_month is required"),
        ({**MONTHLY, "hours_per_month": 0}, "hours_per_month: must be a positive finite number; got 0"),
        ({**GOOD, "gpus_per_instance": 0}, "gpus_per_instance"),
        ({**GOOD, "instance": ""}, "instance is required"),
        ({**GOOD, "source": " "}, "source is required"),
        ({**{k: v for k, v in GOOD.items() if k != "source"}}, "source is required"),
        ({**GOOD, "as_of": "last spring"}, "must be a date, YYYY, YYYY-MM or YYYY-MM-DD; got 'last spring'"),
        ({**GOOD, "as_of": ""}, "as_of: must be a date"),
        ({**GOOD, "discount": 0.3}, "discount"),
    ],
)  # fmt: skip
def test_a_bad_entry_is_refused_naming_file_and_entry(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    first = {**GOOD, "gpu": "A100-SXM-40GB", "instance": "a2-highgpu-1g"}
    raw = {**_raw("gcp-on-demand"), "name": "mine", "prices": [first, entry]}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"mine\.yaml") as err:
        read_price_set(path, KEYS)
    assert message in str(err.value) and ("prices[1]" in str(err.value)), str(err.value)


def test_a_gpu_priced_twice_a_name_not_its_files_or_an_unknown_pricing_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**_raw("gcp-on-demand"), "name": "mine", "prices": [GOOD, GOOD]}))
    with pytest.raises(ConfigError, match="L4-24GB is priced twice"):
        read_price_set(path, KEYS)
    path.write_text(yaml.safe_dump({**_raw("gcp-on-demand"), "prices": [GOOD]}))
    with pytest.raises(ConfigError, match="differs from the file's name"):
        read_price_set(path, KEYS)
    path.write_text(yaml.safe_dump({**_raw("gcp-on-demand"), "name": "mine", "pricing": "reserved"}))
    with pytest.raises(ConfigError, match="pricing: must be one of on-demand, spot, committed-1y"):
        read_price_set(path, KEYS)


def test_the_docs_table_lists_every_set_with_its_gpus_and_dates() -> None:
    """docs/rightsizing.md carries the generated table (python -m exporter.docs); its rows come from
    the files themselves."""
    table = price_sets_table()
    assert table in DOC.read_text()
    rows = table.splitlines()[2:]
    assert [r.split(" | ")[0] for r in rows] == [f"| `{n}`" for n in SETS]
    for name, row in zip(SETS, rows, strict=True):
        raw = _raw(name)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1:4] == [raw["provider"], raw["pricing"], raw["region"]]
        assert cells[4].split(", ") == [k for k in KEYS if k in {e["gpu"] for e in raw["prices"]}]
        dates = sorted({e["as_of"] for e in raw["prices"]})
        assert cells[5] == (dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}")
