"""A latency histogram over a rolling window, from the cumulative histograms a server publishes.

Each reading is compared with the previous one: the difference is what the server observed in
between, added into the time bucket of the reading (``width`` seconds each, ``bucket_count`` of
them: memory is bounded whatever the poll rate). The window is the sum of the buckets it still
covers. A count that went down is a restart: the new reading counts in full from zero, as PromQL's
``increase`` does. A bucket layout that changed is compared on the bounds both layouts have (a
restart when a count there went down, as when the operator set other bounds), and buckets of
different layouts add up on the bounds they share, so the window loses resolution only while it
still holds readings of both layouts. Layouts are merged in one sorted pass (linear in the bounds),
so a server whose layout changes every poll costs what one with a stable layout does. The first
reading is only a baseline: nothing before it is known to lie in the window.
"""

from __future__ import annotations

import math

from .latency import Histogram


class HistogramWindow:
    __slots__ = ("_buckets", "_closed", "_last", "_last_t", "_start", "bucket_count", "length", "width")

    def __init__(self, length_seconds: float, bucket_count: int) -> None:
        self.bucket_count = max(1, bucket_count)
        self.length = length_seconds
        self.width = length_seconds / self.bucket_count
        self._buckets: dict[int, Histogram] = {}  # bucket number -> observations in it
        self._last: Histogram | None = None
        self._last_t: float | None = None
        self._start: float | None = None  # the baseline reading's time
        # (newest bucket, sum of the buckets before it): recomputed only when a bucket closes, so
        # reading the window every cycle adds one histogram to it.
        self._closed: tuple[int, Histogram | None] | None = None

    @property
    def last_timestamp(self) -> float | None:
        return self._last_t

    def add(self, t: float, h: Histogram) -> Histogram | None:
        """Take one reading; returns what it adds to the window (None for a baseline or a reading
        out of time order, which is ignored)."""
        last, last_t = self._last, self._last_t
        if last_t is not None and t < last_t:
            return None
        self._last, self._last_t = h, t
        if last is None:
            self._start = t
            return None
        delta = h.minus(last)
        if delta is None:  # restarted (or new bounds): everything it counts is new
            delta = h
        self.add_delta(t, delta)
        return delta

    def add_delta(self, t: float, delta: Histogram) -> None:
        """Add observations made up to ``t`` (the difference ``add`` takes; one reading's difference
        can so feed several windows)."""
        if self._start is None:
            self._start = t
        if self._last_t is None or t > self._last_t:
            self._last_t = t
        bucket = math.floor(t / self.width)
        oldest = bucket - self.bucket_count + 1
        for b in [b for b in self._buckets if b < oldest]:
            del self._buckets[b]
        held = self._buckets.get(bucket)
        self._buckets[bucket] = delta if held is None else held.plus(delta)

    def total(self) -> Histogram | None:
        """The observations of the buckets the window covers at the latest reading; None before a
        second reading."""
        if self._last_t is None:
            return None
        newest = math.floor(self._last_t / self.width)
        closed = self._closed
        if closed is None or closed[0] != newest:
            oldest = newest - self.bucket_count + 1
            acc: Histogram | None = None
            for b, h in sorted(self._buckets.items()):
                if oldest <= b < newest:
                    acc = h if acc is None else acc.plus(h)
            closed = self._closed = (newest, acc)
        current = self._buckets.get(newest)
        if closed[1] is None:
            return current
        return closed[1] if current is None else closed[1].plus(current)

    def span_seconds(self) -> float:
        """Time the window's readings span: since the baseline, at most the window's length."""
        if self._last_t is None or self._start is None:
            return 0.0
        return max(0.0, min(self.length, self._last_t - self._start))
