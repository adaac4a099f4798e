"""Window percentiles read with a cumulative sum and a binary search give exactly what a scan down
the histogram from the maximum's bin gives (the nearest-rank rule in the module docstring), for any
samples and any percentiles, in order or not."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from rightsizing.windows import BINS, Window

values = st.lists(st.one_of(st.floats(-0.5, 1.5), st.sampled_from([0.0, 0.5, 1.0])), min_size=1, max_size=300)
quantiles = st.lists(st.floats(0.001, 1.0), min_size=1, max_size=5)


def scanned(hist: list[int], n: int, top: float, qs: list[float]) -> list[float]:
    """The reference: scan down one bin at a time, carrying the position from one q to the next."""
    out = []
    b = 0 if top <= 0.0 else (BINS if top >= 1.0 else int(top * BINS))
    seen = hist[b]
    for q in qs:
        needed = n - max(1, math.ceil(q * n)) + 1
        while seen < needed and b > 0:
            b -= 1
            seen += hist[b]
        out.append(min((b + 1) / BINS, top))
    return out


@settings(max_examples=300, deadline=None)
@given(values, quantiles)
def test_percentiles_equal_the_bin_by_bin_scan(samples: list[float], qs: list[float]) -> None:
    w = Window(60, ("x",), 6)
    for i, v in enumerate(samples):
        w.add(i * 0.1, [v])
    n, top = w.count(0), max(min(max(samples), math.inf), -math.inf)
    hist = [0] * (BINS + 1)
    for v in samples:
        hist[0 if v <= 0.0 else (BINS if v >= 1.0 else int(v * BINS))] += 1
    assert w.percentiles(0, qs) == scanned(hist, n, top, qs)
    assert [w.percentile(0, q) for q in qs] == [scanned(hist, n, top, [q])[0] for q in qs]
