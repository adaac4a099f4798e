"""Reasons name the resource that decided: what every cheaper option lacks (memory for an idle GPU
holding 72 GiB, not compute at 0 %), and, when young history widens the margins enough to change
the verdict, they say so. Expectations written from the catalog's figures before running."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from test_rightsizing_scenarios import conclusions
from test_rightsizing_verdicts import ev

from exporter.sources.simulated.scenario import SCENARIO_DIR
from rightsizing.catalog import load_catalog
from rightsizing.deciding import lacks
from rightsizing.recommend import demand, fits
from rightsizing.settings import RightsizingSettings
from rightsizing.verdicts import assess

GIB = 2**30
CATALOG = load_catalog()
S = RightsizingSettings()
H100_TOTAL = 81559 * 2**20
DECIDES = r"((?:[a-zA-Z ]+?)(?:, [a-zA-Z ]+?)*) (?:decides?|rules out most)\b"

# What decides each GPU of the built-in scenarios, from the catalog (usable memory, dense FP16
# TFLOPS, bandwidth, list prices) and the scenario's signals. Several names: each rules out every
# cheaper option. Verdicts: idle -> activity, insufficient_data -> history.
BUILTIN = {
    "default": {
        "idle-h100": {"activity"},
        # L4 chosen: cheaper are the T4 (15 GiB, 65 TFLOPS), the A100 40GB 1g.5gb and the A100 80GB
        # 1g.10gb (<= 9.5 GiB, 44.6 TFLOPS); the A100 80GB 1g.20gb costs $5.1207 x 2/8 = $1.28, more.
        # vLLM's pool is known (Llama 2 7B): the need is 12.55 GiB of weights + 0.63 of context + ~31 %
        # of its 5.3 GiB pool = 14.8 GiB, x 1.15 = 17.0, which none of them holds; SM p95 ~7 % of 989
        # TFLOPS is also > 70 % of every one of them: memory and compute each decide.
        "small-model-on-h100": {"memory", "compute"},
        # Nothing under the L40S's $1.86 holds 43.7 GiB; utilization p95 ~0.63 x 362 needs > 326
        # TFLOPS at 70 %, more than any of them.
        "rightsized-l40s": {"memory", "compute"},
        # KV pressure: more than the L4's 22.5 GiB x 1.15 = 25.9 GiB; nothing under $1.86 holds it.
        "full-l4": {"memory"},
        "new-a100": {"history"},
        # 60 x 1.15 = 69 GiB: nothing under the A100 80GB's $5.12 holds it (L40S 45, A100 40GB 40);
        # compute (utilization p95 ~0.6 x 312 = 187 TFLOPS) an L40S would carry.
        "starved-a100": {"memory"},
        # 23 GiB and SM p95 ~14 % x 989 = 138 TFLOPS (>= 198 at 70 %): nothing under the L40S.
        "tiny-kernels-h100": {"memory", "compute"},
        # Its latency SLO is missed on inter-token latency (p95 ~29 ms against 25 ms): memory-bound
        # decode, so memory bandwidth decides the move (the B200's 8 TB/s projects ~18 ms).
        "bandwidth-bound-h200": {"memory bandwidth"},
    },
    "golden": {
        "inference-h100": {"memory", "compute"},
        "idle-l4": {"activity"},
        # 70 x 1.15 = 80.5 GiB is more than the A100 80GB's own 80: nothing cheaper holds it, and
        # utilization ~0.97 x 312 TFLOPS is over 70 % of every cheaper option.
        "training-a100": {"memory", "compute"},
    },
    "mig": {
        "whole-a100": {"memory", "compute"},
        # SM p95 ~0.66 x 424 TFLOPS = 280: over 70 % of every option that holds 34.5 GiB under the
        # B200 2g.45gb's $5.27 (L40S 77 %, A100 90 %, H100 PCIe 3g 86 %, B200 1g.45gb 87 %).
        "mig-h100/chat-3g": {"compute"},
        # SM p95 ~0.74 x 283 TFLOPS = 209 (>= 299 at 70 %): nothing under the L40S's 362. DRAM p95
        # ~0.59 x 838 GB/s = 494 (>= 706 at 70 %): nothing under it either now that the 838 GB/s H100
        # 1g.20gb costs $12.29 x 2/8 = $3.07 and the 778 GB/s A100 40GB 3g.20gb $2.05 (A10G: 600).
        "mig-h100/embed-2g": {"compute", "memory bandwidth"},
        "mig-h100/notebook-1g-a": {"activity"},
        # SM p95 ~0.88 of a 1g.10gb (141 TFLOPS): the slices under $1.76 have 44.6.
        "mig-h100/notebook-1g-b": {"compute"},
    },
}


@pytest.mark.parametrize("name", sorted(BUILTIN))
async def test_the_reason_names_the_deciding_resource_for_every_builtin_gpu(name: str) -> None:
    got = await conclusions(SCENARIO_DIR / f"{name}.yaml")
    assert set(got) == set(BUILTIN[name])
    for gpu, want in BUILTIN[name].items():
        a = got[gpu]
        assert a["deciding"] in want, f"{gpu}: decided by {a['deciding']!r}, expected {want}: {a['reason']}"
        reason = a["reason"]
        if a["verdict"] == "idle":
            assert reason.startswith(("sm active below", "gpu utilization below")), reason
        elif a["verdict"] == "insufficient_data":
            assert "samples over" in reason, reason
        else:
            names = " and ".join(r for r in ("memory", "compute", "memory bandwidth") if r in want)
            assert f"{names} decide" in reason, f"{gpu}: {names!r} not named as deciding in {reason!r}"


def young_idle_h100(held_gib: float) -> dict[str, object]:
    """An H100 at 0 % activity, judged by a 7-day report that found 11 minutes of history."""
    return dict(
        samples=660, history_seconds=660.0, window_seconds=7 * 86400.0, memory_total_bytes=H100_TOTAL,
        memory_peak_bytes=held_gib * GIB, memory_p95_bytes=held_gib * GIB, activity_p50=0.0,
        activity_p95=0.0, activity_p99=0.0, activity_recent_max=0.0, utilization_p50=0.0,
        utilization_recent_max=0.0, sm_active_p50=0.0, sm_active_high=0.0, dram_active_high=0.0,
        dram_active_p95=0.0,
    )  # fmt: skip


def test_an_idle_h100_holding_72_gib_is_decided_by_memory_not_compute() -> None:
    # 11 min of a 7 d window widen the margins x1.50: 72 x 1.15 x 1.5 = 124.2 GiB, which only the
    # dearer H200 (140.4 GiB) holds. Memory decides; compute at 0 % rules out nothing.
    a = assess(ev(**young_idle_h100(72)), S, CATALOG)
    assert (a.verdict, a.recommended, a.deciding) == ("rightsized", "H100-SXM-80GB", "memory"), a.reason
    assert "memory decides: no cheaper option holds 124.2 GiB" in a.reason
    assert "compute decides" not in a.reason
    # The live exporter, with a full window of the same GPU, calls it idle: the report says why not.
    assert "Activity has stayed below 5% for all 11 min found; idle needs 15 min" in a.reason
    # A full window (x1.00) needs 82.8 GiB, which the B200 3g.90gb slice (88.5 GiB, $7.90/h) holds:
    # the widening changed the verdict, and the reason says so.
    assert (
        "History 11 min of a 7 d window: judged with margins x1.50; a full window of the same signals says "
        "overprovisioned (B200-SXM-180GB/3g.90gb)"
    ) in a.reason


@pytest.mark.parametrize(
    ("held", "young", "full"),
    [
        # 60 x 1.15 x 1.5 = 103.5 GiB: only the dearer H200; a full window needs 69 GiB: A100 80GB.
        (60, ("rightsized", "H100-SXM-80GB"), ("overprovisioned", "A100-SXM-80GB")),
        # 38 x 1.15 x 1.5 = 65.5 GiB: the A100 80GB; a full window needs 43.7 GiB: the L40S (45.0).
        (38, ("overprovisioned", "A100-SXM-80GB"), ("overprovisioned", "L40S-48GB")),
    ],
)
def test_the_reason_says_when_short_history_changes_the_verdict(
    held: float, young: tuple[str, str], full: tuple[str, str]
) -> None:
    a = assess(ev(**young_idle_h100(held)), S, CATALOG)
    assert (a.verdict, a.recommended) == young, a.reason
    assert a.deciding == "memory", a.reason
    assert (
        f"History 11 min of a 7 d window: judged with margins x1.50; a full window of the same signals "
        f"says {full[0]} ({full[1]})"
    ) in a.reason
    # And a full window does say it (the same 11 minutes as a whole window: no widening).
    whole = assess(ev(**{**young_idle_h100(held), "window_seconds": 660.0 / 0.98}), S, CATALOG)
    assert (whole.verdict, whole.recommended) == full and "History" not in whole.reason


def test_lacks_agrees_with_fits_on_every_option() -> None:
    """``lacks`` (what the reason counts) and ``fits`` (what the recommendation uses) never disagree."""
    cases = [
        ev(),
        ev(**young_idle_h100(72)),
        ev(memory_peak_bytes=40 * GIB, activity_p95=0.6, dram_active_p95=0.9, pcie_link_high=0.8),
        ev(activity_p95=None, activity_source="gpu_utilization", dram_active_p95=None, dram_active_high=None),
        ev(activity_p95=0.1, activity_p99=0.9, dram_active_p99=0.95, nvlink_high=0.3, workload_gpus=1),
    ]
    current = CATALOG.candidate("H100-SXM-80GB")
    assert current is not None
    for e in cases:
        d = demand(e, dataclasses.replace(S))
        for c in CATALOG.candidates():
            assert (fits(d, current, c, S) is None) == bool(lacks(d, current, c, S)), (
                c.key,
                lacks(d, current, c, S),
            )


def test_every_reason_of_the_scenario_suite_names_what_decided() -> None:
    """Beyond the built-ins: every sized verdict of tests/scenarios says '<resource> decide(s)' or
    '<resource> rules out most cheaper options'."""
    import asyncio

    for path in sorted((Path(__file__).parent / "scenarios").glob("*.yaml")):
        for gpu, a in asyncio.run(conclusions(path)).items():
            if a["verdict"] in ("idle", "insufficient_data") or a["deciding"] is None:
                continue
            named = re.findall(DECIDES, a["reason"])
            said = any(a["deciding"] in clause for clause in named)
            memory_full = a["reason"].startswith("memory ") and a["deciding"] == "memory"
            assert said or memory_full, f"{path.name} {gpu}: {a['deciding']!r} not named in {a['reason']!r}"
