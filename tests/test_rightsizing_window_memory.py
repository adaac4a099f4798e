"""What a GPU's right-sizing window holds once full, counted object by object (every list, array,
float and header reachable from the window, as ``sys.getsizeof`` reports them), against what its
counts need: a minute's bucket at 1 s its 60 samples' bins, a byte per signal (fewer than the 101
bins of a histogram), the running totals four bytes per bin, and a count and an exact maximum per
bucket and signal. Per-bucket Python objects (a list and an array per signal, a float per maximum)
cost more than the bins themselves and would show here."""

from __future__ import annotations

import sys
from array import array

from rightsizing.tracker import SIGNALS
from rightsizing.windows import BINS, Window


def held(obj: object, seen: set[int] | None = None) -> int:
    """Bytes of ``obj`` and of everything it reaches through containers and slots, each once."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, list | tuple | set | frozenset):
        size += sum(held(x, seen) for x in obj)
    elif isinstance(obj, dict):
        size += sum(held(k, seen) + held(v, seen) for k, v in obj.items())
    elif not isinstance(obj, array | str | bytes | int | float):
        for name in getattr(type(obj), "__slots__", ()):
            if hasattr(obj, name):
                size += held(getattr(obj, name), seen)
    return size


def test_a_full_gpu_window_holds_little_more_than_its_counts() -> None:
    k, buckets, width = len(SIGNALS), 60, BINS + 1
    w = Window(3600.0, SIGNALS, buckets)  # the defaults: an hour in one-minute buckets
    for t in range(3 * 3600):  # 1 s samples, every signal moving over many bins
        w.add(float(t), [((t * (i + 3)) % 97) / 100 for i in range(k)])
        if t % 600 == 0:
            w.percentiles(0, (0.95, 0.5))  # reads keep their caches bounded too
            w.maximum(1, 300.0)
    assert w.samples == 3600
    bins = buckets * k * 60  # a byte per sample and signal: fewer than the histograms' bins
    totals = k * width * 4
    per_bucket = buckets * k * (4 + 8)  # a count and a float maximum per bucket and signal
    counts = bins + totals + per_bucket  # 61,412 bytes with 13 signals
    # Headers and the per-bucket bookkeeping (bucket number, first time, samples) on top: 17 % with
    # Python 3.11 (71,738 bytes). Histograms in every bucket held 106,606 bytes here, and an array
    # per bucket and signal with two lists per bucket 204,690.
    assert held(w) <= 1.25 * counts
