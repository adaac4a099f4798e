"""Rolling windows as fixed-size summaries: a ring of time buckets, each holding a histogram per signal.

A window keeps the last ``length_seconds`` of samples (on the samples' own timestamps, so simulated
time may run faster than wall time) as ``bucket_count`` buckets of equal width. Each bucket holds,
per signal, a histogram of ``BINS`` equal bins over [0, 1], its exact maximum and its sample count;
the window keeps running totals that are incremented on every sample and decremented when a bucket
expires. Adding a sample is O(signals); a percentile scans the summed histogram down from the
maximum's bin. Memory is bounded whatever the sampling rate: a bucket holds its samples' bins, one
byte per signal and sample, until it has taken as many samples as a histogram has bins; from then on
its histograms, one flat array of one byte per bin (widened to two or four bytes when a bin outgrows
it). The buckets' maxima and counts are two flat arrays of the window. A bucket so costs at most
``signals x (BINS + 1)`` bytes and a few more, and a minute's bucket at 1 s 60 bytes per signal.

Values are ratios in [0, 1] (memory is kept as a share of the device's capacity); values outside are
clamped into the end bins. A percentile is the upper edge of the bin holding the nearest-rank sample,
capped at the window's exact maximum: it is never below the exact percentile and at most one bin
width (1 %) above it. The window covers whole buckets: a sample leaves it when its bucket is more
than ``bucket_count - 1`` buckets older than the newest one.
"""

from __future__ import annotations

import math
import operator
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from itertools import accumulate

BINS = 100  # 1 % resolution for ratios
WIDTH = BINS + 1  # bins per signal in a histogram (values of 1.0 and above in the last)
_EMPTY = array("I", bytes(4 * WIDTH))
# A bucket's histograms (once it has taken WIDTH samples) start with one byte per bin and widen to
# two, then four, on the first count that does not fit: 1.3 KB per bucket of 13 signals where
# four-byte bins took 5.2 KB, the same counts.
_WIDER = {"B": "H", "H": "I"}
_ZERO_BYTE = array("B", [0])  # repeated into a bucket's bins: an array made so holds no spare room
ABSENT = 255  # a signal without a value in a sample, in a bucket that keeps its samples' bins
# A bucket: its samples' bins (signal i of sample j at j * signals + i), a bytearray while it is the
# newest, bytes once closed; or its histograms (signal i's bin b at i * WIDTH + b).
Bucket = bytearray | bytes | array
_MIDPOINTS = tuple((b + 0.5) / BINS for b in range(BINS + 1))


def _rank_bin(below: list[int], top_bin: int, needed: int) -> int:
    """The bin a scan down from ``top_bin`` stops at: the first where the bins seen hold ``needed``
    samples, or bin 0. ``below[j]`` is the count of bins ``top_bin - j`` .. ``top_bin``; summing
    and searching in C costs a few microseconds where the scan in Python cost ~20 per long read."""
    return max(0, top_bin - bisect_left(below, needed))


def _histograms(bins: bytes | bytearray, k: int) -> array[int]:
    """The histograms (signal i's bin b at i * WIDTH + b) of samples' bins kept ``k`` per sample."""
    hists = _ZERO_BYTE * (k * WIDTH)
    for j, b in enumerate(bins):
        if b != ABSENT:
            hists[(j % k) * WIDTH + b] += 1
    return hists


class Window:
    """Histogram summaries of several ratio signals over the last ``length_seconds``."""

    __slots__ = (
        "_bucket_of_slot",
        "_last_t",
        "_newest",
        "_recent",
        "_slot_count",
        "_slot_first",
        "_slot_hist",
        "_slot_max",
        "_slot_samples",
        "_total_count",
        "_total_hist",
        "_window_max",
        "bucket_count",
        "length_seconds",
        "signals",
        "width",
    )

    def __init__(self, length_seconds: float, signals: Sequence[str], bucket_count: int = 60) -> None:
        if length_seconds <= 0 or bucket_count < 1:
            raise ValueError("a window needs a positive length and at least one bucket")
        self.length_seconds = float(length_seconds)
        self.bucket_count = bucket_count
        self.width = self.length_seconds / bucket_count
        self.signals = tuple(signals)
        k = len(self.signals)
        self._bucket_of_slot: list[int | None] = [None] * bucket_count
        # A bucket's storage (``Bucket``) is made when it first takes a sample: a window fills over
        # ``length_seconds``, and a process that just started holds only the buckets it used.
        # Expiry drops it.
        self._slot_hist: list[Bucket | None] = [None] * bucket_count
        # Per bucket and signal (at slot * k + i): exact maximum (-inf: none) and sample count.
        self._slot_max = array("d", [-math.inf]) * (bucket_count * k)
        self._slot_count = array("I", [0]) * (bucket_count * k)
        self._slot_samples = [0] * bucket_count
        self._slot_first = [math.inf] * bucket_count  # earliest sample time per bucket
        self._total_hist = [array("I", _EMPTY) for _ in range(k)]
        self._total_count = [0] * k
        # The window's maxima: raised by ``add``, recomputed from the buckets after one expires.
        self._window_max: list[float] | None = None
        # Maxima of the older buckets a recent-maximum read covers, by (signal, newest, lowest bucket).
        self._recent: dict[tuple[int, int, int], float] = {}
        self._newest: int | None = None
        self._last_t: float | None = None

    # -- feeding ------------------------------------------------------------------------------
    def add(self, t: float, values: Sequence[float | None]) -> None:
        """Add one sample at time ``t``: one value per signal, ``None`` where the signal is absent."""
        bucket = math.floor(t / self.width)
        slot = self._advance(bucket, t)
        hists = self._slot_hist[slot]
        assert hists is not None  # _advance allocates a bucket's storage
        k = len(self.signals)
        dense: array[int] | None  # the bucket's histograms, or None while it keeps its samples' bins
        if isinstance(hists, array):
            dense = hists
        elif len(hists) < k * WIDTH:
            dense = None
        else:  # as many samples as bins: histograms from now on (counts of at most WIDTH fit a byte)
            dense = self._slot_hist[slot] = _histograms(hists, k)
        raw = [ABSENT] * k if dense is None else []  # this sample's bins
        maxes = self._slot_max
        counts = self._slot_count
        base = slot * k
        totals = self._total_hist
        self._slot_samples[slot] += 1
        if t < self._slot_first[slot]:
            self._slot_first[slot] = t
        window_max = self._window_max
        total_count = self._total_count
        for i, v in enumerate(values):
            if v is None or v != v:
                continue
            b = 0 if v <= 0.0 else (BINS if v >= 1.0 else int(v * BINS))
            if dense is None:
                raw[i] = b
            else:
                try:
                    dense[i * WIDTH + b] += 1
                except OverflowError:  # the bin outgrew its bucket's counter width: widen the bucket
                    dense = self._slot_hist[slot] = array(_WIDER[dense.typecode], dense)
                    dense[i * WIDTH + b] += 1
            totals[i][b] += 1
            counts[base + i] += 1
            total_count[i] += 1
            if v > maxes[base + i]:
                maxes[base + i] = v
                if window_max is not None and v > window_max[i]:
                    window_max[i] = v
        if dense is None:
            assert isinstance(hists, bytearray)  # only the newest bucket takes samples
            hists.extend(raw)

    def _advance(self, bucket: int, t: float) -> int:
        newest = self._newest
        if newest is None or abs(bucket - newest) >= self.bucket_count:
            # First sample, a gap longer than the window, or time jumped far back: start afresh.
            if newest is not None:
                self.clear()
            self._newest = bucket
        elif bucket > newest:
            closed = self._slot_hist[newest % self.bucket_count]
            if isinstance(closed, bytearray):  # no more samples: drop the room kept for growth
                self._slot_hist[newest % self.bucket_count] = bytes(closed)
            for b in range(newest + 1, bucket + 1):
                self._expire(b % self.bucket_count)
            self._newest = bucket
        elif bucket < newest:
            bucket = newest  # slightly out of order: count it in the newest bucket
        slot = bucket % self.bucket_count
        if self._bucket_of_slot[slot] != bucket:
            self._expire(slot)
            self._bucket_of_slot[slot] = bucket
            if self._slot_hist[slot] is None:
                self._slot_hist[slot] = bytearray()
        if self._last_t is None or t > self._last_t:
            self._last_t = t
        return slot

    def _expire(self, slot: int) -> None:
        if self._bucket_of_slot[slot] is None:
            return
        k = len(self.signals)
        base = slot * k
        counts = self._slot_count
        hists = self._slot_hist[slot]
        assert hists is not None  # allocated when the bucket took its first sample
        dense = isinstance(hists, array)
        for i in range(k):
            n = counts[base + i]
            if n:
                total = self._total_hist[i]
                if dense:
                    for b, c in enumerate(hists[i * WIDTH : (i + 1) * WIDTH]):
                        if c:
                            total[b] -= c
                else:  # the signal's bins, counted in C
                    for b, c in Counter(hists[i::k]).items():
                        if b != ABSENT:
                            total[b] -= c
                self._total_count[i] -= n
                counts[base + i] = 0
            self._slot_max[base + i] = -math.inf
        self._slot_hist[slot] = None
        self._slot_samples[slot] = 0
        self._slot_first[slot] = math.inf
        self._bucket_of_slot[slot] = None
        self._window_max = None
        self._recent.clear()

    def clear(self) -> None:
        for slot in range(self.bucket_count):
            self._expire(slot)
        self._newest = None
        self._last_t = None

    # -- reading ------------------------------------------------------------------------------
    @property
    def oldest_bucket(self) -> int | None:
        return None if self._newest is None else self._newest - self.bucket_count + 1

    @property
    def samples(self) -> int:
        """Samples (calls to ``add``) inside the window."""
        return sum(self._slot_samples)

    @property
    def history_seconds(self) -> float:
        """Time covered by the samples in the window (first to last sample kept)."""
        first = min(self._slot_first)
        if self._last_t is None or first == math.inf:
            return 0.0
        return max(0.0, self._last_t - first)

    @property
    def last_timestamp(self) -> float | None:
        return self._last_t

    def index(self, signal: str) -> int:
        return self.signals.index(signal)

    def count(self, signal: int) -> int:
        return self._total_count[signal]

    def percentile(self, signal: int, q: float) -> float | None:
        """Nearest-rank percentile ``q`` (0 < q <= 1) of the signal, or None with no values."""
        n = self._total_count[signal]
        if n == 0:
            return None
        top = self._maxima()[signal]
        hist = self._total_hist[signal]
        # Scan down from the maximum's bin until the bins seen hold the rank's sample; bins above
        # the maximum are empty, so a busy GPU's p95 or an idle GPU's anything takes a few steps.
        needed = n - max(1, math.ceil(q * n)) + 1
        b = 0 if top <= 0.0 else (BINS if top >= 1.0 else int(top * BINS))
        if hist[b] < needed:
            b = _rank_bin(list(accumulate(hist[b::-1])), b, needed)
        return min((b + 1) / BINS, top)

    def percentiles(self, signal: int, qs: Sequence[float]) -> list[float | None]:
        """Nearest-rank percentiles ``qs`` (in descending order) read in one scan of the histogram."""
        n = self._total_count[signal]
        if n == 0:
            return [None] * len(qs)
        top = self._maxima()[signal]
        hist = self._total_hist[signal]
        out: list[float | None] = []
        top_bin = b = 0 if top <= 0.0 else (BINS if top >= 1.0 else int(top * BINS))
        below: list[int] | None = None
        for q in qs:
            needed = n - max(1, math.ceil(q * n)) + 1
            if hist[top_bin] < needed:
                if below is None:
                    below = list(accumulate(hist[top_bin::-1]))
                b = min(b, _rank_bin(below, top_bin, needed))  # the scan never goes back up
            out.append(min((b + 1) / BINS, top))
        return out

    def fraction_at_least(self, signal: int, value: float) -> float | None:
        """Share of the signal's samples in bins at or above the bin of ``value``."""
        n = self._total_count[signal]
        if n == 0:
            return None
        b = 0 if value <= 0 else (BINS if value >= 1 else int(value * BINS))
        return sum(self._total_hist[signal][b:]) / n

    def _maxima(self) -> list[float]:
        cached = self._window_max
        if cached is None:
            # An expired or unused bucket's maxima are -inf, so every bucket's column will do.
            k = len(self.signals)
            cached = self._window_max = [max(self._slot_max[i::k]) for i in range(k)]
        return cached

    def bucket_series(
        self, signal: int, memo: dict[int, tuple[float | None, float | None]] | None = None
    ) -> list[tuple[float, float | None, float | None]]:
        """(bucket start time, mean, maximum) of each bucket of the window, oldest first; mean and
        maximum are None for a bucket without values. The mean is read from the bucket's histogram
        (bin midpoints, capped at its exact maximum): good to 1 %, for charts, not for decisions.

        ``memo`` (the caller's, one per window and signal) keeps the figures of buckets older than
        the newest, which no later sample changes, so a caller reading every cycle computes one
        bucket, not the whole window."""
        if self._newest is None:
            return []
        newest = self._newest
        oldest = newest - self.bucket_count + 1
        out: list[tuple[float, float | None, float | None]] = []
        for bucket in range(oldest, newest + 1):
            known = memo.get(bucket) if memo is not None else None
            if known is None:
                known = self._bucket_figures(bucket, signal)
                if memo is not None and bucket < newest:
                    memo[bucket] = known
            out.append((bucket * self.width, known[0], known[1]))
        if memo is not None and len(memo) > self.bucket_count:
            for bucket in [b for b in memo if not oldest <= b < newest]:
                del memo[bucket]
        return out

    def _bucket_figures(self, bucket: int, signal: int) -> tuple[float | None, float | None]:
        slot = bucket % self.bucket_count
        at = slot * len(self.signals) + signal
        n = self._slot_count[at] if self._bucket_of_slot[slot] == bucket else 0
        if not n:
            return None, None
        top = self._slot_max[at]
        hists = self._slot_hist[slot]
        assert hists is not None  # the bucket holds samples
        if isinstance(hists, array):
            hist: Sequence[int] = hists[signal * WIDTH : (signal + 1) * WIDTH]
        else:
            hist = [0] * WIDTH
            for b in hists[signal :: len(self.signals)]:
                if b != ABSENT:
                    hist[b] += 1
        mean = sum(map(operator.mul, hist, _MIDPOINTS)) / n
        return min(mean, top), top

    def maximum(self, signal: int, seconds: float | None = None) -> float | None:
        """Exact maximum over the window, or over the buckets that overlap the last ``seconds``."""
        if self._last_t is None or self._newest is None:
            return None
        if seconds is None:
            best = self._maxima()[signal]
        else:
            newest = self._newest
            lowest = max(newest - self.bucket_count + 1, math.floor((self._last_t - seconds) / self.width))
            # The older buckets' part changes only when the newest or the lowest bucket moves.
            key = (signal, newest, lowest)
            cached = self._recent.get(key)
            if cached is None:
                cached = -math.inf
                k = len(self.signals)
                for bucket in range(lowest, newest):
                    slot = bucket % self.bucket_count
                    if self._bucket_of_slot[slot] == bucket and self._slot_max[slot * k + signal] > cached:
                        cached = self._slot_max[slot * k + signal]
                if len(self._recent) > 64:
                    self._recent.clear()
                self._recent[key] = cached
            slot = newest % self.bucket_count
            at = slot * len(self.signals) + signal
            newest_max = self._slot_max[at] if self._bucket_of_slot[slot] == newest else -math.inf
            best = max(cached, newest_max)
        return None if best == -math.inf else best
