"""A queue's depth over the window as fixed-size bucket sums: latest, maximum and least-squares trend.

Each time bucket keeps n, Σdt, Σdt², Σy, Σdt·y (dt from the bucket's start, so sums stay small and
exact enough) and its maximum; the trend's slope is the ordinary least-squares fit over every
sample in the window, combined from the bucket sums when asked. ``rise`` is that slope times the
time the samples span: how many items the queue gained over the window by its fitted line.
"""

from __future__ import annotations

import math


class QueueTrend:
    __slots__ = ("_buckets", "_closed", "_last", "_last_t", "_newest", "bucket_count", "width")

    def __init__(self, length_seconds: float, bucket_count: int = 60) -> None:
        self.bucket_count = bucket_count
        self.width = length_seconds / bucket_count
        # bucket number -> [n, Σdt, Σdt², Σy, Σdt·y, max, first t, last t]
        self._buckets: dict[int, list[float]] = {}
        self._newest: int | None = None
        # Sums of every bucket but the newest, relative to the oldest bucket's start; recomputed only
        # when a bucket closes or expires, so reading the trend each cycle is O(1).
        self._closed: tuple[int, int, list[float]] | None = None
        self._last: float | None = None
        self._last_t: float | None = None

    def add(self, t: float, depth: float) -> None:
        if depth != depth or math.isinf(depth):
            return
        bucket = math.floor(t / self.width)
        newest = self._newest
        if newest is not None and newest - bucket >= self.bucket_count:
            self._buckets.clear()  # time jumped far back: start afresh
            newest = self._newest = None
            self._closed = None
        if newest is not None and bucket < newest:
            bucket = newest  # slightly out of order: count it in the newest bucket
        if newest is None or bucket > newest:
            self._newest = bucket
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
        if depth > sums[5]:
            sums[5] = depth
        if t < sums[6]:
            sums[6] = t
        if t > sums[7]:
            sums[7] = t
        if self._last_t is None or t >= self._last_t:
            self._last, self._last_t = depth, t

    def _totals(self) -> tuple[int, list[float]] | None:
        """(oldest bucket, [n, Σt, Σt², Σy, Σty, max, first t, last t]), t from the oldest bucket's start."""
        if not self._buckets or self._newest is None:
            return None
        newest = self._newest
        if self._closed is None or self._closed[1] != newest:  # closed buckets change only then
            oldest = min(self._buckets)
            acc = [0.0, 0.0, 0.0, 0.0, 0.0, -math.inf, math.inf, -math.inf]
            for b, sums in self._buckets.items():
                if b != newest:
                    _combine(acc, sums, (b - oldest) * self.width)
            self._closed = (oldest, newest, acc)
        oldest = self._closed[0]
        acc = list(self._closed[2])
        if newest in self._buckets:
            _combine(acc, self._buckets[newest], (newest - oldest) * self.width)
        return oldest, acc

    @property
    def last_timestamp(self) -> float | None:
        return self._last_t

    @property
    def samples(self) -> int:
        totals = self._totals()
        return 0 if totals is None else int(totals[1][0])

    @property
    def last(self) -> float | None:
        return self._last

    @property
    def maximum(self) -> float | None:
        totals = self._totals()
        return None if totals is None else totals[1][5]

    def slope(self) -> float | None:
        """Items per second of the least-squares line through the window's samples."""
        totals = self._totals()
        return None if totals is None else _slope(totals[1])

    def summary(self) -> tuple[int, float | None, float | None, float]:
        """(samples, latest depth, maximum depth, rise) in one pass over the bucket sums."""
        totals = self._totals()
        if totals is None:
            return 0, None, None, 0.0
        acc = totals[1]
        return int(acc[0]), self._last, acc[5], _rise(acc)

    def level(self) -> tuple[float | None, float]:
        """(mean depth, seconds the samples span) over the window."""
        totals = self._totals()
        if totals is None or not totals[1][0]:
            return None, 0.0
        acc = totals[1]
        return acc[3] / acc[0], max(0.0, acc[7] - acc[6])

    def rise(self) -> float:
        """Items gained over the window along the fitted line (0 without a trend)."""
        totals = self._totals()
        return 0.0 if totals is None else _rise(totals[1])


def _slope(acc: list[float]) -> float | None:
    n, st, stt, sy, sty = acc[:5]
    denominator = n * stt - st * st
    if n < 2 or denominator <= 1e-9 * max(1.0, n * stt):
        return None
    return (n * sty - st * sy) / denominator


def _rise(acc: list[float]) -> float:
    slope = _slope(acc)
    return 0.0 if slope is None else slope * (acc[7] - acc[6])


def _combine(acc: list[float], sums: list[float], o: float) -> None:
    """Add one bucket's sums, whose dt start ``o`` seconds after the reference, into ``acc``."""
    bn, sdt, sdt2, sy, sdty, top, first, last = sums
    acc[0] += bn
    acc[1] += bn * o + sdt
    acc[2] += bn * o * o + 2 * o * sdt + sdt2
    acc[3] += sy
    acc[4] += o * sy + sdty
    acc[5] = max(acc[5], top)
    acc[6] = min(acc[6], first)
    acc[7] = max(acc[7], last)


class WindowCounter:
    """A counter over the window: its increase since the oldest bucket kept and that increase per
    second of the time it spans. A restart's reset counts on from zero."""

    __slots__ = ("_first", "_last", "_last_t", "_resets", "bucket_count", "width")

    def __init__(self, width: float, bucket_count: int) -> None:
        self.width = width
        self.bucket_count = bucket_count
        self._first: dict[int, tuple[float, float]] = {}  # bucket -> (t, total) first seen in it
        self._last: float | None = None
        self._last_t = 0.0
        self._resets = 0.0

    def add(self, t: float, value: float) -> None:
        if self._last is not None and value < self._last - self._resets:
            self._resets = self._last  # the server restarted: its counter began again at 0
        total = value + self._resets
        bucket = math.floor(t / self.width)
        if bucket not in self._first:
            self._first[bucket] = (t, total)
            oldest = bucket - self.bucket_count + 1
            for b in [b for b in self._first if b < oldest]:
                del self._first[b]
        self._last, self._last_t = total, t

    def _oldest(self) -> tuple[float, float] | None:
        return self._first[min(self._first)] if self._last is not None and self._first else None

    def increase(self) -> float | None:
        oldest = self._oldest()
        return None if oldest is None or self._last is None else max(0.0, self._last - oldest[1])

    def rate(self) -> float | None:
        """Increase per second, None until two readings a bucket apart or more span some time."""
        oldest = self._oldest()
        if oldest is None or self._last is None or self._last_t <= oldest[0]:
            return None
        return max(0.0, self._last - oldest[1]) / (self._last_t - oldest[0])


class ServerCounters:
    """An inference server's KV-cache usage (p95 over the window), preemptions over the window, and
    its throughput over the window: tokens generated and prompted, and requests finished, per second."""

    __slots__ = ("_kv", "counters", "kv_bytes")

    def __init__(self, length_seconds: float, bucket_count: int = 60) -> None:
        from .windows import Window

        width = length_seconds / bucket_count
        self._kv = Window(length_seconds, ("kv_cache",), bucket_count)
        # preemptions, generated tokens, prompt tokens, requests
        self.counters = tuple(WindowCounter(width, bucket_count) for _ in range(4))
        self.kv_bytes: float | None = None  # the KV-cache pool in bytes, as last reported

    def add(
        self, t: float, kv_cache: float | None, *totals: float | None, kv_bytes: float | None = None
    ) -> None:
        if kv_bytes is not None:
            self.kv_bytes = kv_bytes
        if kv_cache is not None:
            self._kv.add(t, (kv_cache,))
        for counter, total in zip(self.counters, totals, strict=False):
            if total is not None:
                counter.add(t, total)

    def kv_cache_p95(self) -> float | None:
        return self._kv.percentile(0, 0.95)

    def preemptions(self) -> float | None:
        return self.counters[0].increase()

    def rates(self) -> tuple[float | None, float | None, float | None]:
        """Generated tokens, prompt tokens and requests per second over the window."""
        return (self.counters[1].rate(), self.counters[2].rate(), self.counters[3].rate())
