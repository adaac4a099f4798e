"""Verdicts, bottlenecks and recommendations from hand-built evidence, against the real catalog."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.config import CatalogSettings
from rightsizing.bottlenecks import find_bottlenecks
from rightsizing.catalog import load_catalog
from rightsizing.evidence import Evidence, QueueEvidence
from rightsizing.settings import RightsizingSettings
from rightsizing.verdicts import assess, decision_inputs

GIB = 2**30
CATALOG = load_catalog()
S = RightsizingSettings()
H100 = "NVIDIA H100 80GB HBM3"


def ev(**kw: object) -> Evidence:
    base: dict[str, object] = dict(
        samples=3600, history_seconds=3599.0, window_seconds=3600.0, model=H100, mig_profile=None,
        memory_total_bytes=80 * GIB, memory_peak_bytes=18.5 * GIB, memory_p95_bytes=18 * GIB,
        activity_source="sm_active", activity_p50=0.05, activity_p95=0.07, activity_p99=0.08,
        activity_recent_max=0.08, utilization_p50=0.3, sm_active_p50=0.05, sm_active_high=0.07,
        dram_active_high=0.05, dram_active_p95=0.05,
    )  # fmt: skip
    base.update(kw)
    return Evidence(**base)  # type: ignore[arg-type]


def test_idle_rests_on_activity_never_on_memory() -> None:
    reserved = assess(ev(memory_peak_bytes=72 * GIB, activity_recent_max=0.0, activity_p95=0.0), S, CATALOG)
    assert reserved.verdict == "idle" and reserved.recommended == "release"
    assert reserved.hourly_savings_dollars == CATALOG.lookup(H100).hourly_price_dollars  # type: ignore[union-attr]
    assert reserved.fit_score == 0.0
    busy_small = assess(ev(memory_peak_bytes=1 * GIB, activity_recent_max=0.5, activity_p95=0.5), S, CATALOG)
    assert busy_small.verdict != "idle"
    # Kernels still running (utilization 10 %) on a trickle of SM activity: work, not idle.
    trickle = assess(ev(activity_recent_max=0.04, activity_p95=0.04, utilization_recent_max=0.1), S, CATALOG)
    assert trickle.verdict == "overprovisioned" and trickle.recommended != "release"
    quiet = assess(ev(activity_recent_max=0.0, activity_p95=0.0, utilization_recent_max=0.0), S, CATALOG)
    assert quiet.verdict == "idle"
    # Idle needs idle_after_seconds of history, whatever the activity.
    young = ev(activity_recent_max=0.0, history_seconds=S.idle_after_seconds - 1)
    assert assess(young, S, CATALOG).verdict != "idle"


def test_quiet_while_requests_wait_is_not_idle() -> None:
    """Nothing ran for 15 minutes while 40 requests wait in the GPU's queue: the server is not
    serving them (stuck, or waiting on something else). Releasing the GPU would take it from a
    service with demand; sizing it from a server that runs nothing says nothing either."""
    stuck = (QueueEvidence("chat", 40, 45, 30.0, 25.0, 3599.0, "vllm", 0.0, 0.0),)
    quiet = dict(
        memory_peak_bytes=72 * GIB, activity_recent_max=0.0, activity_p95=0.0, utilization_recent_max=0.0
    )
    a = assess(ev(**quiet, queues=stuck), S, CATALOG)
    assert (a.verdict, a.recommended, a.deciding) == ("insufficient_data", "none", "activity"), a.reason
    assert "requests wait in its queue 'chat'" in a.reason and "not serving" in a.reason
    # The same GPU with its queue empty at the end of the window is idle: the requests were served.
    drained = (QueueEvidence("chat", 0, 45, -30.0, 25.0, 3599.0, "vllm", 0.0, 0.0),)
    assert assess(ev(**quiet, queues=drained), S, CATALOG).verdict == "idle"
    # Requests waiting change what assess reads (the live engine reuses an assessment on equal inputs).
    assert decision_inputs(ev(**quiet, queues=stuck), S) != decision_inputs(ev(**quiet, queues=drained), S)


@pytest.mark.parametrize(
    ("samples", "history", "judged"),
    [(59, 3000.0, False), (60, 599.0, False), (60, 600.0, True), (3600, 3599.0, True)],
)
def test_insufficient_data_until_enough_samples_and_history(
    samples: int, history: float, judged: bool
) -> None:
    a = assess(ev(samples=samples, history_seconds=history), S, CATALOG)
    assert (a.verdict != "insufficient_data") == judged
    if not judged:
        assert a.recommended == "none" and a.hourly_savings_dollars is None and a.fit_score is None
        assert "needs 60 samples over 10 min before judging: " in a.reason
        # What is missing, said: the samples, the history or both.
        # 59 samples over 3000 s: one every 52 s (3000 / 58), so the last one is 52 s away
        lacking = {
            (59, 3000.0): "1 more sample: about 52 s at one sample every 52 s",
            (60, 599.0): "1 s more history",
        }[(samples, history)]
        assert a.reason.endswith(f"before judging: {lacking}"), a.reason


def test_insufficient_data_says_what_is_missing() -> None:
    a = assess(ev(samples=62, history_seconds=62.0), S, CATALOG)
    said = "62 samples over 1 min; needs 60 samples over 10 min before judging: 9 min more history"
    assert a.reason == said  # 600 s - 62 s: 538 s, 9 min in words
    a = assess(ev(samples=12, history_seconds=60.0), S, CATALOG)
    assert a.reason.endswith("before judging: 9 min more history and 48 more samples"), a.reason


def test_the_wait_for_samples_comes_from_the_scrape_interval() -> None:
    """At a 15 s scrape, 5 samples span a minute: the 55 samples still missing take 55 x 15 s =
    825 s (14 min), longer than the 9 min of history missing: the wait said is the longer one."""
    a = assess(ev(samples=5, history_seconds=60.0), S, CATALOG)
    assert a.reason.endswith(
        "before judging: 9 min more history and 55 more samples: about 14 min at one sample every 15 s"
    ), a.reason


def test_a_model_outside_the_catalog_is_not_judged_on_price() -> None:
    a = assess(ev(model="NVIDIA Imaginary 9000"), S, CATALOG)
    assert a.verdict == "insufficient_data" and "not in the catalog" in a.reason


def test_overprovisioned_names_the_cheapest_option_and_the_saving() -> None:
    a = assess(ev(), S, CATALOG)
    h100, l4 = CATALOG.candidate("H100-SXM-80GB"), CATALOG.candidate("L4-24GB")
    assert a.verdict == "overprovisioned" and a.recommended == "L4-24GB"
    assert a.hourly_savings_dollars == pytest.approx(h100.hourly_price_dollars - l4.hourly_price_dollars)  # type: ignore[union-attr]
    assert a.fit_score == pytest.approx(l4.hourly_price_dollars / h100.hourly_price_dollars)  # type: ignore[union-attr]
    # 0.07 x 989 / 121 TFLOPS = 0.57 projected on the L4, under the 0.70 target.
    assert a.projected_activity == pytest.approx(0.07 * 989 / 121, rel=0.01)
    assert a.memory_need_bytes == pytest.approx(18.5 * GIB * 1.15)


def test_short_history_widens_the_bounds() -> None:
    full = assess(ev(), S, CATALOG)
    short = assess(ev(history_seconds=900.0, samples=900), S, CATALOG)
    # 900 s of a 3600 s window: x(1 + 0.5 x (1 - 900/3528)) = 1.37: 18.5 GiB x 1.15 x 1.37 = 29 GiB.
    assert short.memory_need_bytes is not None and full.memory_need_bytes is not None
    assert short.memory_need_bytes == pytest.approx(full.memory_need_bytes * (1 + 0.5 * (1 - 900 / 3528)))
    assert short.recommended != "L4-24GB"  # 24 GiB no longer holds it
    assert CATALOG.candidate(short.recommended).memory_bytes >= short.memory_need_bytes  # type: ignore[union-attr]


def test_saving_below_the_minimum_keeps_the_gpu() -> None:
    strict = dataclasses.replace(S, min_savings_ratio=0.9 + 0.05)  # the L4 saves 93 %
    a = assess(ev(), strict, CATALOG)
    assert a.verdict == "rightsized" and a.recommended == "H100-SXM-80GB" and a.hourly_savings_dollars == 0


def test_mig_profiles_are_options_unless_turned_off() -> None:
    # 7 GiB (x 1.15 = 8.05) and SM p95 0.09 x 989 = 89 TFLOPS-worth (>= 127 at 70 %). Cheaper than the
    # H100's 1g.10gb ($12.29 / 7 = $1.76: 9.62 GiB, 141.3 TFLOPS -> 63 %) every option has less
    # compute: T4 65, L4 121, A10G 70, H100 PCIe 1g.10gb 108, the A100 profiles <= 89. Without MIG the
    # L40S ($1.86, 362 TFLOPS) is the cheapest.
    h100 = ev(memory_peak_bytes=7 * GIB, memory_p95_bytes=7 * GIB, activity_p95=0.09, activity_p99=0.09,
              activity_recent_max=0.09, sm_active_high=0.09)  # fmt: skip
    assert assess(h100, S, CATALOG).recommended == "H100-SXM-80GB/1g.10gb"
    whole = assess(h100, dataclasses.replace(S, recommend_mig=False), CATALOG).recommended
    assert "/" not in whole and whole == "L40S-48GB"


def vllm(kv: float | None, preemptions: float | None = 0.0) -> tuple[QueueEvidence, ...]:
    return (QueueEvidence("chat", 3, 5, 0.0, 3.0, 3599.0, "vllm", kv, preemptions),)


def test_memory_full_recommends_an_upgrade_only_under_pressure() -> None:
    full = dict(memory_peak_bytes=78 * GIB, activity_p95=0.5, sm_active_high=0.5)
    a = assess(ev(**full, queues=vllm(0.99, 12.0)), S, CATALOG)
    assert a.verdict == "underprovisioned" and "memory_capacity" in a.bottlenecks
    up = CATALOG.candidate(a.recommended)
    assert up is not None and up.usable_memory >= 80 * GIB * 1.15
    assert a.hourly_savings_dollars is not None and a.hourly_savings_dollars < 0
    assert a.fit_score is not None and 0 < a.fit_score < 1
    assert "/h more" in a.reason and "$-" not in a.reason
    # The same full GPU without pressure evidence: the server's reservation, need unknown.
    for queues in (vllm(None, None), vllm(0.4, 0.0)):
        b = assess(ev(**full, queues=queues), S, CATALOG)
        assert b.verdict == "rightsized" and b.recommended == "H100-SXM-80GB", queues
        assert "memory reserved by the server; need unknown" in b.reason
    # No server at all (a trainer filling the GPU): need unknown, without claiming a reservation.
    alone = assess(ev(**full, queues=()), S, CATALOG)
    assert alone.verdict == "rightsized" and alone.recommended == "H100-SXM-80GB"
    assert "need unknown (no inference server linked" in alone.reason and "server;" not in alone.reason
    assert "memory_capacity" in alone.bottlenecks
    assert "memory_capacity" not in assess(ev(**full, queues=vllm(0.4, 0.0)), S, CATALOG).bottlenecks


def test_nothing_big_enough_says_so() -> None:
    b200 = ev(
        model="NVIDIA B200", memory_total_bytes=180 * GIB, memory_peak_bytes=175 * GIB, queues=vllm(0.99)
    )
    a = assess(b200, S, CATALOG)
    assert a.verdict == "underprovisioned" and a.recommended == "none" and "tensor parallel" in a.reason


def test_saturation_is_underprovisioned_only_while_a_queue_grows_by_its_own_level() -> None:
    hot = dict(activity_p50=0.95, activity_p95=0.99, sm_active_high=0.99, memory_peak_bytes=40 * GIB)
    # A trickle over 7 days: 100 -> 106 items is 0.04 % of the level per hour.
    trickle = (QueueEvidence("q", 106, 106, 6.0, 103.0, 7 * 86400.0),)
    # Real growth over 15 minutes: 2 -> 6 items is ~400 % of the level per hour.
    fast = (QueueEvidence("q", 6, 6, 4.0, 4.0, 900.0),)
    assert assess(ev(**hot, queues=trickle), S, CATALOG).verdict == "rightsized"
    growing = assess(ev(**hot, queues=fast), S, CATALOG)
    assert growing.verdict == "underprovisioned" and "grew by 4" in growing.reason
    assert growing.hourly_savings_dollars is not None and growing.hourly_savings_dollars < 0


def test_bottlenecks() -> None:
    b = S.bottlenecks
    assert find_bottlenecks(ev(), b) == ()
    assert find_bottlenecks(ev(sm_active_high=0.85), b) == ("compute",)
    # Without SM active (no GPM), the activity signal stands in for compute.
    assert find_bottlenecks(
        ev(activity_source="gpu_utilization", sm_active_high=None, activity_p95=0.9), b
    ) == ("compute",)
    assert find_bottlenecks(ev(utilization_p50=0.93, sm_active_p50=0.12), b) == ("launch_overhead",)
    # SMs waiting on DRAM are memory-bandwidth-bound, not launch-bound.
    assert find_bottlenecks(ev(utilization_p50=0.9, sm_active_p50=0.3, dram_active_high=0.8), b) == (
        "memory_bandwidth",
    )
    assert find_bottlenecks(ev(pcie_link_high=0.8), b) == ("data_loading",)
    assert find_bottlenecks(ev(starved_share=0.3), b) == ("data_loading",)
    assert find_bottlenecks(ev(host_cpu_high=0.95, starved_share=0.01), b) == ("host_cpu",)
    assert find_bottlenecks(ev(memory_peak_bytes=77 * GIB), b) == ("memory_capacity",)


def test_configured_prices_change_the_money() -> None:
    cheap_h100 = load_catalog(CatalogSettings(prices={"H100-SXM-80GB": 1.0}))
    a = assess(ev(), S, cheap_h100)
    # At $1/h the H100's own MIG profiles cost the larger of memory slices / 8 and compute slices
    # / 7: 18.5 GiB x 1.15 needs the 3g.40gb profile (2g.20gb holds 19.62 GiB), 4 of 8 memory slices
    # at $0.50 per hour, cheaper than an L4 ($0.8048).
    assert a.verdict == "overprovisioned" and a.recommended == "H100-SXM-80GB/3g.40gb"
    assert a.hourly_savings_dollars == pytest.approx(1.0 - 4 / 8, abs=1e-5)


ratios = st.floats(0, 1)


@settings(max_examples=200, deadline=None)
@given(ratios, ratios, st.floats(1, 79), st.integers(60, 100000), st.floats(3530, 3600), st.floats(1, 500))
def test_assessment_depends_only_on_its_decision_inputs(p50, p95, peak_gib, samples, history, depth) -> None:
    """The live engine reuses an assessment while decision_inputs are unchanged: that is only right
    if nothing else the evidence holds changes it. (Requests waiting at the end of the window, a
    last depth of at least 1, is an input: the queue keeps them here.)"""
    a = ev(
        activity_p50=min(p50, p95),
        activity_p95=p95,
        activity_recent_max=p95,
        sm_active_high=p95,
        memory_peak_bytes=peak_gib * GIB,
        queues=(QueueEvidence("q", depth, depth, 0.0, depth + 1, 3000.0),),
    )
    later = (QueueEvidence("q", depth + 7, depth + 9, 0.0, depth + 1.2, 3100.0),)
    # activity p99 decides (bursts), so it is not among what may change here.
    b = dataclasses.replace(a, samples=samples, history_seconds=history, memory_p95_bytes=1.0, queues=later)
    assert decision_inputs(a, S) == decision_inputs(b, S)
    assert assess(a, S, CATALOG) == assess(b, S, CATALOG)


def test_a_mig_instance_is_judged_as_its_profile() -> None:
    # A 3g.40gb instance of an H100 ($12.29 x 3/7, 989 x 3/7 = 424 TFLOPS) holding 10 GiB at SM
    # active p95 0.1: the $0.53 T4 holds 11.5 GiB and carries 0.1 x 424 / 65 = 0.65 <= 0.70.
    mig = ev(mig_profile="3g.40gb", memory_total_bytes=40 * GIB, memory_peak_bytes=10 * GIB,
             activity_p95=0.1, sm_active_high=0.1)  # fmt: skip
    a = assess(mig, S, CATALOG)
    assert a.current == "H100-SXM-80GB/3g.40gb"
    assert a.verdict == "overprovisioned" and a.recommended == "T4-16GB"
    current = CATALOG.candidate("H100-SXM-80GB/3g.40gb")
    t4 = CATALOG.candidate("T4-16GB")
    assert current is not None and t4 is not None
    assert a.hourly_savings_dollars == pytest.approx(current.hourly_price_dollars - t4.hourly_price_dollars)
    assert a.projected_activity == pytest.approx(0.1 * current.fp16_dense_tflops / t4.fp16_dense_tflops)


def test_no_activity_signal_is_not_zero_activity() -> None:
    """A100 MIG instances report memory only: no option with less compute or bandwidth than the
    slice, and idle only when no process held memory."""
    unseen = dict(
        model="NVIDIA A100-SXM4-80GB", mig_profile="2g.20gb", memory_total_bytes=20 * GIB,
        activity_source="gpu_utilization", activity_p50=None, activity_p95=None, activity_p99=None,
        activity_recent_max=None, utilization_p50=None, sm_active_p50=None, sm_active_high=None,
        dram_active_high=None, dram_active_p95=None,
    )  # fmt: skip
    busy = assess(ev(**unseen, memory_peak_bytes=12 * GIB), S, CATALOG)
    # Cheaper options exist with less compute (A10G, A100 1g.20gb) or less bandwidth (L4): unseen.
    assert (busy.verdict, busy.recommended) == ("rightsized", "A100-SXM-80GB/2g.20gb"), busy.reason
    assert "no activity or bandwidth signal" in busy.reason
    empty = assess(ev(**unseen, memory_peak_bytes=0.0), S, CATALOG)
    assert empty.verdict == "idle" and empty.recommended == "release"
    assert "no process held memory" in empty.reason


def test_a_transfer_bound_gpu_keeps_its_host_link() -> None:
    """PCIe at 84 % of an H100's Gen5 x16 link: no Gen4 GPU (half the link) and no MIG slice (its
    share of the link) carries it, however little compute it needs."""
    light = dict(memory_peak_bytes=20 * GIB, activity_p95=0.27, sm_active_high=0.27)
    bound = assess(ev(**light, pcie_link_high=0.84), S, CATALOG)
    rec = CATALOG.candidate(bound.recommended)
    h100 = CATALOG.candidate("H100-SXM-80GB")
    assert rec is not None and h100 is not None
    assert rec.mig is None and rec.gpu.pcie_bytes_per_second >= h100.gpu.pcie_bytes_per_second
    # The same work without the transfers goes to a slice or a Gen4 GPU.
    free = CATALOG.candidate(assess(ev(**light, pcie_link_high=0.02), S, CATALOG).recommended)
    assert free is not None
    assert free.mig is not None or free.gpu.pcie_bytes_per_second < h100.gpu.pcie_bytes_per_second


def test_rare_bursts_must_not_saturate_the_option() -> None:
    """p95 5 % but p99 75 % (a 20 s burst every 10 min): the option carries the p99 at <= 100 %."""
    quiet = dict(activity_p95=0.05, sm_active_high=0.05, dram_active_p95=0.04, dram_active_high=0.04)
    steady = assess(ev(**quiet, activity_p99=0.06, dram_active_p99=0.05), S, CATALOG)
    bursty = assess(ev(**quiet, activity_p99=0.75, dram_active_p99=0.55), S, CATALOG)
    assert steady.recommended == "L4-24GB"
    rec = CATALOG.candidate(bursty.recommended)
    assert bursty.verdict == "overprovisioned" and rec is not None
    assert 0.75 * 989 / rec.fp16_dense_tflops <= 1.0
    assert 0.55 * 3.35e12 / rec.memory_bandwidth_bytes_per_second <= 1.0
    assert "bursts (p99) decide" in bursty.reason
