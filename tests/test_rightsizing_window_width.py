"""A window's bucket histograms take one byte per bin until a bin outgrows it, then two, then four
(the bucket's histograms of every signal are one array, widened together): the counts
(percentiles, bucket means, expiry) are those of four-byte bins throughout."""

from __future__ import annotations

from rightsizing.windows import BINS, WIDTH, Window

SIGNALS = 12  # what a GPU tracker keeps


def bucket_bytes(w: Window) -> int:
    return sum(h.buffer_info()[1] * h.itemsize for h in w._slot_hist if h is not None)


def test_a_gpus_hour_at_one_second_takes_a_byte_per_bin() -> None:
    w = Window(3600.0, ("s",) * SIGNALS, 60)
    for i in range(3600):
        w.add(float(i), [(i % 7) / 10] * SIGNALS)
    assert w.samples == 3600
    # 60 buckets x 12 signals x 101 bins, one byte each (four bytes each: 290,880).
    assert bucket_bytes(w) == 60 * SIGNALS * (BINS + 1)


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
    # Both buckets expire: the totals are back to nothing and the slots are one byte per bin again.
    w.add(200.0, [0.5, 0.5])
    assert w.count(0) == 1 and w.percentile(0, 0.5) == 0.5 and w.percentile(1, 0.99) == 0.5
    assert {h.typecode for h in w._slot_hist if h is not None} == {"B"}
    assert sum(w._total_hist[0]) == 1
