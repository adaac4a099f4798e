"""A queue's depth over the window as fixed-size bucket sums: latest, maximum and least-squares trend.

Each time bucket keeps n, Σdt, Σdt², Σy, Σdt·y (dt from the bucket's start, so sums stay small and
exact enough) and its maximum; the trend's slope is the ordinary least-squares fit over every
sample in the window, combined from the bucket sums when asked. ``rise`` is that slope times the
time the samples span: how many items the queue gained over the window by its fitted line.
"""

from __future__ import annotations

import math


class QueueTrend:
    __slots__ = ("_buckets", "_last", "_last_t", "bucket_count", "width")

    def __init__(self, length_seconds: float, bucket_count: int = 60) -> None:
        self.bucket_count = bucket_count
        self.width = length_seconds / bucket_count
        # bucket number -> [n, Σdt, Σdt², Σy, Σdt·y, max, first t, last t]
        self._buckets: dict[int, list[float]] = {}
        self._last: float | None = None
        self._last_t: float | None = None

    def add(self, t: float, depth: float) -> None:
        if depth != depth or math.isinf(depth):
            return
        bucket = math.floor(t / self.width)
        newest = max(self._buckets) if self._buckets else None
        if newest is not None and newest - bucket >= self.bucket_count:
            self._buckets.clear()  # time jumped far back: start afresh
            newest = None
        if newest is not None and bucket < newest:
            bucket = newest  # slightly out of order: count it in the newest bucket
        oldest_kept = bucket - self.bucket_count + 1
        for b in [b for b in self._buckets if b < oldest_kept]:
            del self._buckets[b]
        sums = self._buckets.get(bucket)
        if sums is None:
            sums = self._buckets[bucket] = [0.0, 0.0, 0.0, 0.0, 0.0, -math.inf, t, t]
        dt = t - bucket * self.width
        sums[0] += 1
        sums[1] += dt
        sums[2] += dt * dt
        sums[3] += depth
        sums[4] += dt * depth
        sums[5] = max(sums[5], depth)
        sums[6] = min(sums[6], t)
        sums[7] = max(sums[7], t)
        if self._last_t is None or t >= self._last_t:
            self._last, self._last_t = depth, t

    @property
    def samples(self) -> int:
        return int(sum(s[0] for s in self._buckets.values()))

    @property
    def last(self) -> float | None:
        return self._last

    @property
    def maximum(self) -> float | None:
        return max((s[5] for s in self._buckets.values()), default=None)

    def slope(self) -> float | None:
        """Items per second of the least-squares line through the window's samples."""
        if not self._buckets:
            return None
        ref = min(self._buckets) * self.width
        n = st = stt = sy = sty = 0.0
        for b, (bn, sdt, sdt2, sby, sdty, *_rest) in self._buckets.items():
            o = b * self.width - ref
            n += bn
            st += bn * o + sdt
            stt += bn * o * o + 2 * o * sdt + sdt2
            sy += sby
            sty += o * sby + sdty
        denominator = n * stt - st * st
        if n < 2 or denominator <= 1e-9 * max(1.0, n * stt):
            return None
        return (n * sty - st * sy) / denominator

    def rise(self) -> float:
        """Items gained over the window along the fitted line (0 without a trend)."""
        slope = self.slope()
        if slope is None:
            return 0.0
        first = min(s[6] for s in self._buckets.values())
        last = max(s[7] for s in self._buckets.values())
        return slope * (last - first)
