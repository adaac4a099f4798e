"""Latency histograms: quantiles by PromQL's convention, the share under a target (exact at a bucket
bound, interpolated otherwise), and windows over cumulative histograms that survive restarts and
bucket-layout changes. Expected values are worked out by hand in each test."""

from __future__ import annotations

import pytest

from rightsizing.settings import RightsizingSettings
from rightsizing.slo.attainment import SloDeclaration, evaluate
from rightsizing.slo.latency import Histogram, quantile, share_at_or_under
from rightsizing.slo.latency_window import HistogramWindow
from rightsizing.slo.windows import SloTracker

# 100 observations: 10 <= 0.1 s, 60 <= 0.5 s, 90 <= 1.0 s, all 100 <= +Inf; sum 50 s.
H = Histogram((0.1, 0.5, 1.0), (10.0, 60.0, 90.0, 100.0), 50.0)


def test_quantile_interpolates_inside_the_bucket_like_histogram_quantile() -> None:
    # p50: rank 50 in (0.1, 0.5] holding 10..60: 0.1 + 0.4 x (50 - 10) / 50 = 0.42
    assert quantile(H, 0.5) == pytest.approx(0.42)
    # p5: rank 5 in the first bucket, which starts at 0: 0.1 x 5 / 10 = 0.05
    assert quantile(H, 0.05) == pytest.approx(0.05)
    # p95: rank 95 is in the +Inf bucket: the highest finite bound answers
    assert quantile(H, 0.95) == pytest.approx(1.0)
    assert quantile(Histogram((0.1,), (0.0, 0.0), 0.0), 0.5) is None  # no observations
    assert quantile(Histogram((), (10.0,), 5.0), 0.5) is None  # a mean only: no quantile


def test_share_under_a_target_is_exact_at_a_bound_and_interpolated_inside_a_bucket() -> None:
    at_bound = share_at_or_under(H, 0.5)
    assert at_bound is not None and at_bound.exact and at_bound.value == pytest.approx(0.60)
    inside = share_at_or_under(H, 0.3)  # 10 + 50 x (0.3 - 0.1) / 0.4 = 35 of 100
    assert inside is not None and not inside.exact and inside.value == pytest.approx(0.35)
    past = share_at_or_under(H, 2.0)  # past the last finite bound: at least the 90 under 1.0 s
    assert past is not None and not past.exact and past.value == pytest.approx(0.90)
    assert share_at_or_under(Histogram((), (10.0,), 5.0), 0.5) is None  # a mean says nothing of shares


def test_difference_of_cumulative_histograms_and_what_a_restart_or_new_layout_gives() -> None:
    later = Histogram((0.1, 0.5, 1.0), (15.0, 70.0, 120.0, 130.0), 70.0)
    delta = later.minus(H)
    assert delta == Histogram((0.1, 0.5, 1.0), (5.0, 10.0, 30.0, 30.0), 20.0)
    restarted = Histogram((0.1, 0.5, 1.0), (1.0, 2.0, 2.0, 2.0), 0.5)
    assert restarted.minus(H) is None  # counts went down
    relaid = Histogram((0.25, 0.5), (3.0, 4.0, 5.0), 2.0)
    assert relaid.minus(H) is None
    both = H.plus(relaid)  # only 0.5 s is a bound of both: 60 + 4 under it, 105 in all
    assert both == Histogram((0.5,), (64.0, 105.0), 52.0)


def test_window_counts_increases_and_restarts_from_zero_like_increase() -> None:
    w = HistogramWindow(600.0, 6)
    assert w.add(0.0, H) is None and w.total() is None  # a baseline: nothing known before it
    w.add(10.0, Histogram((0.1, 0.5, 1.0), (20.0, 80.0, 110.0, 120.0), 60.0))  # +20
    # the server restarts: its 3 new observations count in full (PromQL's increase)
    w.add(20.0, Histogram((0.1, 0.5, 1.0), (1.0, 2.0, 3.0, 3.0), 1.0))
    w.add(30.0, Histogram((0.1, 0.5, 1.0), (2.0, 4.0, 5.0, 5.0), 2.0))  # +2
    total = w.total()
    assert total == Histogram((0.1, 0.5, 1.0), (10.0 + 1 + 1, 20.0 + 2 + 2, 20.0 + 3 + 2, 25.0), 10.0 + 1 + 1)


def test_window_survives_a_bucket_layout_change_and_regains_resolution_as_it_slides() -> None:
    w = HistogramWindow(600.0, 6)  # buckets of 100 s
    w.add(0.0, H)
    w.add(50.0, Histogram((0.1, 0.5, 1.0), (20.0, 80.0, 110.0, 120.0), 60.0))  # +20
    # the operator set other bounds (a restart): 10 new observations on (0.5, 2.0)
    w.add(150.0, Histogram((0.5, 2.0), (6.0, 9.0, 10.0), 7.0))
    mixed = w.total()
    assert mixed == Histogram((0.5,), (20.0 + 6.0, 30.0), 17.0)  # the bound both layouts share
    w.add(650.0, Histogram((0.5, 2.0), (8.0, 12.0, 14.0), 9.0))  # +4; 0-100 s left
    assert w.total() == Histogram((0.5, 2.0), (6.0 + 2.0, 9.0 + 3.0, 14.0), 9.0)


def test_a_window_judges_attainment_against_the_declared_target_and_min_requests() -> None:
    slo = SloDeclaration(namespace="chat", workload="llama", ttft_seconds=0.5, e2e_seconds=0.3, objective=0.9)
    ev = evaluate("chat", "llama", slo, {"ttft": H, "e2e": H}, min_requests=100)
    ttft, e2e = ev.get("ttft"), ev.get("e2e")
    assert ttft is not None and e2e is not None
    assert ttft.attainment == pytest.approx(0.60) and ttft.exact and ttft.missed
    assert e2e.attainment == pytest.approx(0.35) and not e2e.exact
    assert ttft.at_objective == pytest.approx(1.0)  # p90: rank 90 is exactly the 1.0 s bound
    assert ev.ratio == pytest.approx(1.0 / 0.3)  # the worst target: e2e, 1.0 s at p90 over 0.3 s
    few = evaluate("chat", "llama", slo, {"ttft": H}, min_requests=101)
    assert few.judged == () and not few.missed and few.ratio is None
    assert "100 requests in the window (needs 101)" in few.unjudged()[0]
    assert "no histogram read" in few.unjudged()[1]  # e2e declared, its histogram absent


def test_inter_token_latency_needs_enough_requests_not_tokens() -> None:
    """vLLM and SGLang observe inter-token latency once per token: 7,000 tokens of 72 requests are 72
    requests, under the 100 an SLO needs, as the end-to-end (or first-token) histogram counts them."""
    tokens = Histogram((0.025, 0.05), (6000.0, 7000.0, 7000.0), 210.0)
    requests = Histogram((1.0, 5.0), (10.0, 72.0, 72.0), 150.0)
    slo = SloDeclaration(namespace="legal", workload="qa", itl_seconds=0.05)
    few = evaluate("legal", "qa", slo, {"itl": tokens, "e2e": requests}, min_requests=100)
    itl = few.get("itl")
    assert itl is not None and itl.requests == 72 and not itl.judged and few.judged == ()
    assert "inter-token latency: 72 requests in the window (needs 100)" in few.unjudged()
    # With enough requests the attainment is still the share of tokens: 7,000 of 7,000 under 50 ms.
    many = evaluate("legal", "qa", slo, {"itl": tokens, "ttft": H, "e2e": requests}, min_requests=100)
    itl = many.get("itl")
    assert itl is not None and itl.requests == 100 and itl.judged and itl.attainment == 1.0
    # A server that publishes only its inter-token latency: its own count is all there is.
    alone = evaluate("legal", "qa", slo, {"itl": tokens}, min_requests=100).get("itl")
    assert alone is not None and alone.requests == 7000 and alone.judged


def test_met_with_room_needs_every_declared_target_judged_under_the_margin() -> None:
    fast = Histogram((0.1, 0.5, 1.0), (96.0, 100.0, 100.0, 100.0), 5.0)  # p95 = 0.1 x 95/96
    slo = SloDeclaration(queue="q", ttft_seconds=0.2, itl_seconds=0.05)
    both = evaluate("", "q", slo, {"ttft": fast, "itl": fast}, min_requests=10)
    assert not both.met_with_room(0.1)  # itl: p95 0.099 s > 0.9 x 0.05
    one = evaluate("", "q", SloDeclaration(queue="q", ttft_seconds=0.2), {"ttft": fast}, min_requests=10)
    assert one.met_with_room(0.1) and not one.met_with_room(0.6)  # 0.099 <= 0.18, > 0.08
    unjudged = evaluate("", "q", slo, {"ttft": fast}, min_requests=10)  # itl not measured
    assert not unjudged.met_with_room(0.1)


def test_the_tracker_forgets_queues_and_their_counters_after_a_window() -> None:
    settings = RightsizingSettings(window_seconds=600)
    tracker = SloTracker(settings, [SloDeclaration(queue="q", ttft_seconds=0.5)])
    later = Histogram(H.bounds, (20.0, 80.0, 110.0, 120.0), 60.0)
    for i, workload in enumerate(("a", "b")):
        labels = {"namespace": "n", "workload": workload}
        tracker.add(10.0 * i, f"q-{workload}", labels, "vllm", {"ttft": H})
        tracker.add(10.0 * i + 5, f"q-{workload}", labels, "vllm", {"ttft": later})
    assert set(tracker.counted) == {("n", "a", "ttft"), ("n", "b", "ttft")}
    assert tracker.counted[("n", "a", "ttft")].requests == 20
    tracker.add(700.0, "q-b", {"namespace": "n", "workload": "b"}, "vllm", {"ttft": later})
    tracker.forget(700.0 - 600)  # q-a not seen for a whole window
    assert set(tracker.workloads()) == {("n", "b")} and set(tracker.counted) == {("n", "b", "ttft")}


def test_merging_two_layouts_is_one_sorted_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 3,000-bound layouts that differ in their last bound (a server alternating it every poll)
    merge with a number of bound comparisons linear in the bounds, not 3,000 x 3,000."""
    import rightsizing.slo.latency as latency

    compared = 0
    real = latency.same_bound

    def counting(a: float, b: float) -> bool:
        nonlocal compared
        compared += 1
        return real(a, b)

    monkeypatch.setattr(latency, "same_bound", counting)
    n = 3000
    one = Histogram(tuple(0.001 * k for k in range(1, n + 1)), tuple(float(k) for k in range(n + 1)), 9.0)
    other = Histogram((*one.bounds[:-1], 4.5), tuple(float(k) for k in range(n + 1)), 9.0)
    both = one.plus(other)
    assert compared <= 4 * n, compared
    assert both.bounds == one.bounds[:-1]  # the shared bounds
    assert both.counts == (*(2.0 * k for k in range(n - 1)), 2.0 * n)
    compared = 0
    assert one.minus(other) == Histogram(both.bounds, (0.0,) * n, 0.0)  # nothing new on the shared bounds
    assert compared <= 4 * n, compared


@pytest.mark.parametrize(
    ("garbage", "why"),
    [
        (Histogram((-1.0, -0.5), (150.0, 150.0, 150.0), 0.0), "an le bound is negative or not finite"),
        (
            Histogram((0.5, 0.1, 1.0), (70.0, 80.0, 110.0, 120.0), 60.0),
            "le bounds are not strictly ascending",
        ),
        (
            Histogram(H.bounds, (20.0, 80.0, 1.7e308, 1.7e308), 60.0),
            "a bucket count is negative, not finite or over 2^53",
        ),
        (Histogram(H.bounds, (20.0, 80.0, 70.0, 120.0), 60.0), "bucket counts go down as le goes up"),
        (
            Histogram(H.bounds, (20.0, 80.0, 110.0, 120.0), float("nan")),
            "the sum is negative, not finite or over 2^53",
        ),
    ],
)
def test_the_tracker_never_reads_a_histogram_that_is_not_one(garbage: Histogram, why: str) -> None:
    """Whatever hands the tracker a reading (an inference server's poll, a scenario): garbage is
    refused for that reading, the counters keep what came before, and the next good reading counts
    everything since the last good one (20 + 10 requests)."""
    tracker = SloTracker(RightsizingSettings(), [SloDeclaration(queue="q", ttft_seconds=0.5)])
    labels = {"namespace": "n", "workload": "w"}
    tracker.add(0.0, "q", labels, "vllm", {"ttft": H})
    tracker.add(5.0, "q", labels, "vllm", {"ttft": Histogram(H.bounds, (20.0, 80.0, 110.0, 120.0), 60.0)})
    tracker.begin_cycle()
    tracker.add(10.0, "q", labels, "vllm", {"ttft": garbage})
    assert tracker.scaling()[("", "q")].why_not == f"invalid histogram: {why}"
    assert tracker.counted[("", "q", "ttft")].requests == 20
    tracker.begin_cycle()
    tracker.add(15.0, "q", labels, "vllm", {"ttft": Histogram(H.bounds, (25.0, 85.0, 115.0, 130.0), 65.0)})
    assert tracker.scaling()[("", "q")].evidence is not None
    assert tracker.counted[("", "q", "ttft")].requests == 30


def test_a_histogram_refused_from_its_first_reading_starts_with_a_baseline() -> None:
    """Garbage at the first polls, then a good page holding 120 requests: they may all predate the
    window, so that page is only a baseline; the next one's 10 requests are counted."""
    tracker = SloTracker(RightsizingSettings(), [SloDeclaration(queue="q", ttft_seconds=0.5)])
    labels = {"namespace": "n", "workload": "w"}
    tracker.add(0.0, "q", labels, "vllm", None, {"ttft": "an le bound is negative"})
    tracker.add(5.0, "q", labels, "vllm", {"ttft": Histogram(H.bounds, (20.0, 80.0, 110.0, 120.0), 60.0)})
    assert ("", "q", "ttft") not in tracker.counted
    tracker.add(10.0, "q", labels, "vllm", {"ttft": Histogram(H.bounds, (25.0, 85.0, 115.0, 130.0), 65.0)})
    assert tracker.counted[("", "q", "ttft")].requests == 10
