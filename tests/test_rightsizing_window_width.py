"""A window's bucket keeps one byte per signal and sample until it has taken as many samples as a
histogram has bins; then its histograms take one byte per bin until a bin outgrows it, then two,
then four (the bucket's histograms of every signal are one array, widened together): the counts
(percentiles, bucket means, expiry) are those of four-byte bins throughout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rightsizing.windows import BINS, WIDTH, Window

SIGNALS = 12  # what a GPU tracker keeps


def bucket_bytes(w: Window) -> int:
    return sum(memoryview(h).nbytes for h in w._slot_hist if h is not None)


def test_a_gpus_hour_at_one_second_takes_a_byte_per_sample() -> None:
    w = Window(3600.0, ("s",) * SIGNALS, 60)
    for i in range(3600):
        w.add(float(i), [(i % 7) / 10] * SIGNALS)
    assert w.samples == 3600
    # 60 buckets x 12 signals x 60 samples, one byte each (histograms of four-byte bins: 290,880).
    assert bucket_bytes(w) == 60 * SIGNALS * 60


def test_a_bin_past_255_and_past_65535_widens_its_bucket_and_keeps_every_count() -> None:
    w = Window(60.0, ("a", "b"), 2)  # 30 s buckets
    n = 70_000  # one bucket, every sample of signal a in bin 90, b spread over bins 0..9
    for i in range(n):
        w.add(0.0 + i * (29.0 / n), [0.905, (i % 10) / 100])
    assert w.count(0) == n and w.count(1) == n
    first = w._slot_hist[0]
    assert first is not None
    assert first.typecode == "I" and first[90] == n
    assert first[WIDTH + 3] == n // 10
    assert w.percentile(0, 0.5) == 0.905  # capped at the exact maximum
    assert w.percentile(1, 0.95) == 0.09  # bin 9, capped at the exact maximum
    assert w.percentile(1, 0.5) == 0.05  # the 35,000th value is 0.04: upper edge of bin 4
    series = w.bucket_series(1)
    assert series[-1][2] == 0.09 and abs((series[-1][1] or 0) - 0.05) < 1e-9  # mean of bin midpoints
    # Both buckets expire: the totals are back to nothing and the new bucket keeps its sample's bins.
    w.add(200.0, [0.5, 0.5])
    assert w.count(0) == 1 and w.percentile(0, 0.5) == 0.5 and w.percentile(1, 0.99) == 0.5
    assert [bytes(h) for h in w._slot_hist if h is not None] == [bytes([50, 50])]
    assert sum(w._total_hist[0]) == 1


ratio = st.floats(0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 0.3), ratio, st.one_of(st.none(), ratio)), min_size=1, max_size=600))
def test_bucket_means_are_the_same_from_samples_bins_and_from_histograms(stream) -> None:
    """10 s buckets fed up to 0.3 s apart: some keep their samples' bins, some pass 101 samples and
    hold histograms; either way a bucket's mean is that of its samples' bin midpoints."""
    w = Window(120.0, ("a", "b"), 12)
    t, kept = 1000.0, []
    for dt, a, b in stream:
        t += dt
        w.add(t, (a, b))
        kept.append((t, a, b))
    for signal in (0, 1):
        for start, mean, top in w.bucket_series(signal):
            inside = [r[1 + signal] for r in kept if start <= r[0] < start + 10.0]
            values = [v for v in inside if v is not None]
            if not values:
                assert mean is None and top is None
                continue
            bins = [min(BINS, int(v * BINS)) for v in values]
            assert top == max(values)
            assert mean == pytest.approx(min(sum((b + 0.5) / BINS for b in bins) / len(bins), top), abs=1e-12)
