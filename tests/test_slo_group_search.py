"""A tensor-parallel group whose utilisation move the SLO forbids: the other ways to carry it are
searched in price order, and when none keeps the SLO the reason names what was forbidden.

The workload is ``tp2-room-one-b200`` of tests/scenarios/slo_multi_gpu.yaml (arithmetic there): ITL
p95 9.7 ms against 15 ms, compute-bound decode; one H100 or one H200 project 19.4 ms, one B200 8.5 ms."""

from __future__ import annotations

from pathlib import Path

from test_rightsizing_scenarios import conclusions

from rightsizing.catalog import CatalogSettings, load_catalog

SCENARIO = Path(__file__).parent / "scenarios" / "slo_multi_gpu.yaml"


async def test_one_b200_keeps_what_one_h100_cannot() -> None:
    got = (await conclusions(SCENARIO))["tp2-room-one-b200-a"]
    assert (got["verdict"], got["recommended"]) == ("overprovisioned", "B200-SXM-180GB")
    reason = got["reason"]
    assert "1 x H100-SXM-80GB: inter-token latency 19 ms against 15 ms" in reason
    assert "1 x H200-SXM-141GB: inter-token latency 19 ms against 15 ms" in reason
    assert "saves $6.14/h" in reason and "B200-SXM-180GB's price is an estimate" in reason


async def test_when_no_cheaper_way_keeps_it_the_reason_lists_each_forbidden_one() -> None:
    # With one B200 at $30/h and an H100 PCIe at $12/h, neither one B200 nor the pair of H100 PCIe
    # ($24/h; 756 TFLOPS each would carry it and project 9.7 / (756/989) = 12.7 ms) is under 0.9 x
    # the H100 pair's $24.58/h = $22.12/h. The cheaper ways left carry it but project 19.4 ms
    # against 13.5: one H100 ($12.29) and one H200 ($13.52). Two A100s ($10.24) do not carry it (each
    # would need 466 TFLOPS at 70 %, an A100 has 312).
    catalog = load_catalog(CatalogSettings(prices={"B200-SXM-180GB": 30.0, "H100-PCIe-80GB": 12.0}))
    got = (await conclusions(SCENARIO, catalog=catalog))["tp2-room-one-b200-a"]
    assert (got["verdict"], got["recommended"]) == ("rightsized", "H100-SXM-80GB")
    assert "the SLO forbids each (1 x H100-SXM-80GB: inter-token latency 19 ms against 15 ms; " \
        "1 x H200-SXM-141GB: inter-token latency 19 ms against 15 ms" in got["reason"]
