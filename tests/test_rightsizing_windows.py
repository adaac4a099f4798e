"""Window maths against a model that keeps every raw sample (hypothesis property tests)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rightsizing.trend import QueueTrend
from rightsizing.windows import BINS, Window

ratio = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
gap = st.floats(min_value=0.0, max_value=400.0, allow_nan=False)
streams = st.lists(st.tuples(gap, ratio, st.one_of(st.none(), ratio)), min_size=1, max_size=300)
shapes = st.sampled_from([(600.0, 6), (3600.0, 60), (120.0, 12), (1000.0, 7)])
quantiles = st.sampled_from([0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0])


def fill(length: float, buckets: int, stream: list[tuple[float, float, float | None]]) -> tuple[Window, list]:
    w = Window(length, ("a", "b"), buckets)
    t, raw = 1000.0, []
    for dt, a, b in stream:
        t += dt
        w.add(t, (a, b))
        raw.append((t, a, b))
    width = length / buckets
    newest = math.floor(raw[-1][0] / width)
    kept = [r for r in raw if math.floor(r[0] / width) >= newest - buckets + 1]
    return w, kept


def nearest_rank(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


@settings(max_examples=300, deadline=None)
@given(shapes, streams, quantiles)
def test_percentile_is_never_below_the_exact_one_and_at_most_one_bin_above(shape, stream, q) -> None:
    w, kept = fill(*shape, stream)
    assert w.samples == len(kept)
    for signal, column in ((0, [r[1] for r in kept]), (1, [r[2] for r in kept if r[2] is not None])):
        assert w.count(signal) == len(column)
        if not column:
            assert w.percentile(signal, q) is None
            assert w.maximum(signal) is None
            continue
        exact = nearest_rank(column, q)
        got = w.percentile(signal, q)
        assert got is not None
        assert exact - 1e-12 <= got <= exact + 1.0 / BINS + 1e-12, (exact, got)
        assert w.maximum(signal) == max(column)
        assert w.percentile(signal, 1.0) == max(column)
        several = sorted({q, 0.99, 0.5, 0.01}, reverse=True)
        assert w.percentiles(signal, several) == [w.percentile(signal, x) for x in several]


@settings(max_examples=200, deadline=None)
@given(shapes, streams, ratio)
def test_fraction_at_least_counts_the_bins_at_or_above(shape, stream, threshold) -> None:
    w, kept = fill(*shape, stream)
    column = [r[1] for r in kept]

    def bin_of(v: float) -> int:
        return 0 if v <= 0 else (BINS if v >= 1 else int(v * BINS))

    expected = sum(1 for v in column if bin_of(v) >= bin_of(threshold)) / len(column)
    assert w.fraction_at_least(0, threshold) == expected


@settings(max_examples=200, deadline=None)
@given(shapes, streams, st.floats(min_value=1.0, max_value=5000.0))
def test_recent_maximum_reads_the_buckets_overlapping_the_last_seconds(shape, stream, seconds) -> None:
    length, buckets = shape
    w, kept = fill(length, buckets, stream)
    width = length / buckets
    last = kept[-1][0]
    recent = [r[1] for r in kept if (math.floor(r[0] / width) + 1) * width > last - seconds]
    assert w.maximum(0, seconds) == (max(recent) if recent else None)
    # The recent maximum covers at least every sample of the last ``seconds``.
    strictly_recent = [r[1] for r in kept if r[0] >= last - seconds]
    assert max(strictly_recent) <= (w.maximum(0, seconds) or 0.0)


@settings(max_examples=200, deadline=None)
@given(shapes, streams)
def test_history_spans_the_kept_samples(shape, stream) -> None:
    length, buckets = shape
    w, kept = fill(length, buckets, stream)
    assert w.history_seconds == kept[-1][0] - kept[0][0]
    assert w.history_seconds <= length


def _held_bytes(w: Window) -> int:
    buffers = [*w._total_hist, *(h for h in w._slot_hist if h is not None)]
    return sum(memoryview(a).nbytes for a in buffers)


def test_memory_is_bounded_whatever_the_number_of_samples() -> None:
    w = Window(3600.0, ("a",) * 10, 60)
    bound = 10 * 101 * 4 + 60 * 10 * 101  # running totals + a byte per bin of every bucket
    for i in range(3600):  # a whole window: every bucket has taken samples
        w.add(float(i), [0.5] * 10)
    assert _held_bytes(w) <= bound
    for i in range(3600 * 3, 3600 * 3 + 20000):  # 3 a second: 180 samples a bucket
        w.add(float(i) / 3, [i % 100 / 100] * 10)
    assert w.samples == 59 * 180 + 20 and _held_bytes(w) <= bound  # 59 full buckets, the newest 20


def test_a_bucket_holds_its_samples_bins_then_histograms() -> None:
    # Running totals: 4 bytes x 101 bins per signal; each bucket that took a sample: 1 byte per
    # signal and sample until it has taken 101 samples, then 1 byte x 101 bins per signal.
    w = Window(3600.0, ("a", "b", "c"), 60)
    totals = 3 * 101 * 4
    assert _held_bytes(w) == totals
    w.add(0.0, [0.5, 0.5, 0.5])
    assert _held_bytes(w) == totals + 3
    for i in range(1, 600):  # ten minutes at 1 s: ten one-minute buckets of 60 samples
        w.add(float(i), [0.5, 0.2, None])
    assert _held_bytes(w) == totals + 600 * 3
    for i in range(600, 3600 * 2):  # two hours: the 60 buckets of the window, no more
        w.add(float(i), [0.5, 0.2, 0.9])
    assert _held_bytes(w) == totals + 60 * 60 * 3
    for i in range(7200 * 2, 10800 * 2):  # the next hour at 0.5 s: 120 samples a bucket
        w.add(i / 2, [0.5, 0.2, 0.9])
    assert _held_bytes(w) == totals + 60 * 3 * 101
    assert w.count(2) == 7200 and w.percentile(2, 0.5) == 0.9


def test_time_running_backwards_far_starts_afresh_and_a_little_counts_in_the_newest_bucket() -> None:
    w = Window(600.0, ("a",), 6)
    for t in range(1000, 1600, 10):
        w.add(float(t), [0.9])
    w.add(1595.0 - 150, [0.1])  # a late sample, within the window: kept
    assert w.samples == 61
    w.add(10.0, [0.2])  # a restart of simulated time: the old samples are meaningless now
    assert w.samples == 1 and w.maximum(0) == 0.2


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=-100, max_value=100),
    st.floats(min_value=-0.5, max_value=0.5),
    st.lists(st.floats(min_value=0.1, max_value=30.0), min_size=3, max_size=300),
)
def test_trend_slope_recovers_a_line(intercept, slope, gaps) -> None:
    q = QueueTrend(3600.0, 60)
    t = 5000.0
    for dt in gaps:
        t += dt
        q.add(t, intercept + slope * t)
    got = q.slope()
    assert got is not None
    assert math.isclose(got, slope, rel_tol=1e-6, abs_tol=1e-7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 200.0), st.floats(0, 1000)), min_size=3, max_size=200))
def test_trend_is_least_squares_over_the_kept_samples(points) -> None:
    q = QueueTrend(600.0, 6)
    t, raw = 0.0, []
    for dt, y in points:
        t += dt
        q.add(t, y)
        raw.append((t, y))
    newest = math.floor(raw[-1][0] / 100.0)
    kept = [(x, y) for x, y in raw if math.floor(x / 100.0) >= newest - 5]
    assert q.samples == len(kept)
    assert q.last == raw[-1][1]
    assert q.maximum == max(y for _, y in kept)
    mx = sum(x for x, _ in kept) / len(kept)
    my = sum(y for _, y in kept) / len(kept)
    sxx = sum((x - mx) ** 2 for x, _ in kept)
    got = q.slope()
    if len(kept) < 2 or sxx < 1e-6:
        return
    expected = sum((x - mx) * (y - my) for x, y in kept) / sxx
    assert got is not None
    assert math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-6)
    assert math.isclose(q.rise(), expected * (kept[-1][0] - kept[0][0]), rel_tol=1e-6, abs_tol=1e-4)
