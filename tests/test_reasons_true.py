"""Each clause independent readers found false, fixed and read on a scenario written for it
(tests/scenarios/reasons_true.yaml, arithmetic there). The suite's test reads every scenario's
reasons for the same clauses (``reason_clauses``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from reason_clauses import false_clauses
from test_rightsizing_scenarios import conclusions

from rightsizing.catalog import CatalogSettings, load_catalog
from rightsizing.deciding import deciding
from rightsizing.recommend import Demand
from rightsizing.settings import RightsizingSettings

SCENARIO = Path(__file__).parent / "scenarios" / "reasons_true.yaml"
CATALOG = load_catalog()


@pytest.fixture(scope="module")
def reasons() -> dict[str, dict]:
    return asyncio.run(conclusions(SCENARIO))


def test_the_catalogs_cheapest_option_says_so(reasons: dict[str, dict]) -> None:
    reason = reasons["classifier-t4-cheapest"]["reason"]
    assert "T4-16GB is the catalog's cheapest option" in reason and "no cheaper option" not in reason


def test_an_unknown_served_model_says_the_peak_is_the_reservation(reasons: dict[str, dict]) -> None:
    reason = reasons["vllm-unknown-model-l40s"]["reason"]
    assert "peak memory 40.5 GiB (the vllm server's reservation, not a measured need" in reason
    assert "set model on queue 'wiki-answers'" in reason


def test_an_offload_is_not_ruled_out_on_a_host_link(reasons: dict[str, dict]) -> None:
    got = reasons["offload-batch-t4"]
    # The L4 ($0.8048, 22.49 GiB) is the cheapest that holds 17.25 GiB (the A100's 1g.20gb takes 2 of
    # 8 memory slices: $1.28); its Gen4 x16 link is narrower than the T4's traffic would need if the
    # offload stayed, which it does not once the model fits.
    assert got["recommended"] == "L4-24GB"
    assert "host link is too narrow" not in got["reason"] and "PCIe host link runs at" in got["reason"]


def test_a_rightsized_reason_prices_no_upgrade(reasons: dict[str, dict]) -> None:
    got = reasons["vllm-l40s-kv-pressure-slo-200ms"]
    assert got["verdict"] == "rightsized"
    assert "/h more" not in got["reason"] and " holds " not in got["reason"]
    assert "under pressure (KV cache" in got["reason"]  # the signs the SLO outweighs are still named


def test_a_cheaper_option_passed_over_for_saving_too_little_is_named() -> None:
    # At $0.95/h the L4 would save 5.6 % of the A10G's $1.006/h, under the 10 % bar: rightsized, and
    # "no cheaper option holds 20.7 GiB" would be false beside it (it holds 22.49 GiB).
    catalog = load_catalog(CatalogSettings(prices={"L4-24GB": 0.95}))
    got = asyncio.run(conclusions(SCENARIO, catalog=catalog))["batch-a10g-l4-close"]
    assert (got["verdict"], got["recommended"]) == ("rightsized", "A10G-24GB")
    assert "no other cheaper option holds 20.7 GiB (but L4-24GB, which would save under 10%)" in got["reason"]
    assert false_clauses(got, catalog) == []


def test_every_gpu_of_the_scenario_reads_true(reasons: dict[str, dict]) -> None:
    found = {name: false_clauses(got, CATALOG) for name, got in reasons.items()}
    assert {name: f for name, f in found.items() if f} == {}


def test_an_slo_decided_move_to_an_estimated_price_says_so(reasons: dict[str, dict]) -> None:
    got = reasons["itl-missed-h100-to-h200"]
    assert (got["verdict"], got["recommended"], got["price_source"]) == (
        "underprovisioned", "H200-SXM-141GB", "estimate"
    )  # fmt: skip
    assert "memory bandwidth decides: H200-SXM-141GB projects" in got["reason"]
    assert "H200-SXM-141GB's price is an estimate, not a list price" in got["reason"]


def test_a_cheaper_option_that_holds_the_memory_is_named_with_why_it_lost() -> None:
    """The A100 80GB at $3.00/h: its 1g.20gb takes 2 of 8 memory slices, 0.25 x $3.00 = $0.75/h,
    under the L4's $0.8048, and holds 19.5 GiB, more than the pair's 16 GiB x 1.15 = 18.4 GiB per
    GPU. It is a MIG slice, and a tensor-parallel pair needs whole GPUs: that, not its memory, is why
    it lost. The other cheaper options (T4 15 GiB; A100 40GB 1g.5gb 4.75 GiB; A100 80GB 1g.10gb
    9.5 GiB at $0.43) do not hold 18.4 GiB, the three slices are slices."""
    catalog = load_catalog(CatalogSettings(prices={"A100-SXM-80GB": 3.0}))
    assert catalog.candidate("A100-SXM-80GB/1g.20gb").hourly_price_dollars == pytest.approx(0.75)
    got = asyncio.run(conclusions(SCENARIO, catalog=catalog))["tp2-l4-pair-a"]
    assert (got["verdict"], got["recommended"]) == ("rightsized", "L4-24GB")
    assert "no cheaper option holds" not in got["reason"]
    assert "memory rules out most cheaper options (3 of 4, whole GPUs 3)" in got["reason"]
    why = "A100-SXM-80GB/1g.20gb holds 18.4 GiB but is a MIG slice, and the work needs whole GPUs"
    assert why in got["reason"]
    assert false_clauses(got, catalog) == []


def test_a_need_that_rounds_to_what_a_cheaper_option_holds_is_shown_finer() -> None:
    """19.53 GiB needed; the A100 80GB's 1g.20gb (at $0.75/h, cheaper than the L4) holds 19.50 GiB:
    "no cheaper option holds 19.5 GiB" would read false beside it, so the need shows to 0.01 GiB."""
    catalog = load_catalog(CatalogSettings(prices={"A100-SXM-80GB": 3.0}))
    l4 = catalog.candidate("L4-24GB")
    assert l4 is not None
    d = Demand(memory_bytes=19.53 * 2**30, activity=0.1, bandwidth=0.1, widening=1.0)
    words = deciding(d, l4, l4, catalog, RightsizingSettings()).words
    assert words == "memory decides: no cheaper option holds 19.53 GiB"
    d = Demand(memory_bytes=20.7 * 2**30, activity=0.1, bandwidth=0.1, widening=1.0)
    assert deciding(d, l4, l4, catalog, RightsizingSettings()).words.endswith("holds 20.7 GiB")
