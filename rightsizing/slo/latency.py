"""Latency histograms: the counts an inference server publishes, and what a window of them says.

A ``Histogram`` is one Prometheus histogram in seconds: finite upper bounds (``le``) in ascending
order, the cumulative count at each and then at ``+Inf`` (the number of observations), and the sum
of the observations. Servers publish them cumulative since they started, so everything judged is a
difference between two of them (``minus``) or a sum of such differences (``plus``).

A histogram with no finite bound is a mean and nothing more (Triton's cumulative duration counters
over its request count): it has a count and a sum, no quantile and no share under a target, so a
mean is never passed off as a percentile.

Quantiles follow PromQL's ``histogram_quantile``: linear interpolation inside the bucket holding the
rank, the first bucket starting at 0, and a rank in the ``+Inf`` bucket answered by the highest finite
bound. The share of observations at or under a target is exact when the target is a bucket bound and
interpolated linearly inside its bucket otherwise (``share_at_or_under`` says which); past the highest
finite bound only the observations under that bound are known to be under the target.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

KINDS = ("ttft", "itl", "e2e", "queue")
WORDS = {"ttft": "TTFT", "itl": "inter-token latency", "e2e": "end-to-end latency", "queue": "queue time"}
_SAME = 1e-9  # relative tolerance of two bounds being the same bound (ms and us read as seconds)


def same_bound(a: float, b: float) -> bool:
    return abs(a - b) <= _SAME * max(abs(a), abs(b), 1e-12)


@dataclass(frozen=True, slots=True)
class Histogram:
    bounds: tuple[float, ...]  # finite upper bounds, ascending
    counts: tuple[float, ...]  # cumulative count at each bound, then at +Inf (len(bounds) + 1)
    total: float  # sum of the observations, seconds

    @property
    def count(self) -> float:
        return self.counts[-1] if self.counts else 0.0

    @property
    def mean_only(self) -> bool:
        """No finite bucket: a mean (sum over count), never a quantile."""
        return not self.bounds

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count > 0 else None

    def same_layout(self, other: Histogram) -> bool:
        if self.bounds is other.bounds or self.bounds == other.bounds:
            return True
        return len(self.bounds) == len(other.bounds) and all(
            same_bound(a, b) for a, b in zip(self.bounds, other.bounds, strict=True)
        )

    def minus(self, older: Histogram) -> Histogram | None:
        """The observations since ``older``, on the bounds both layouts have; None when a count
        went down (the server restarted)."""
        if not self.same_layout(older):
            common = common_bounds(self.bounds, older.bounds)
            return self.project(common).minus(older.project(common))
        counts = tuple(a - b for a, b in zip(self.counts, older.counts, strict=True))
        if any(c < 0 for c in counts) or self.total < older.total - 1e-9 * max(1.0, abs(older.total)):
            return None
        return Histogram(self.bounds, counts, max(0.0, self.total - older.total))

    def project(self, bounds: Sequence[float]) -> Histogram:
        """The same observations on ``bounds`` (ascending, a subset of this layout's bounds): one
        pass over both."""
        mine, n = self.bounds, len(self.bounds)
        counts = []
        i = 0
        for b in bounds:
            while i < n and mine[i] != b and not same_bound(mine[i], b):
                i += 1
            if i == n:
                raise ValueError(f"{b:g} is not a bound of this histogram")
            counts.append(self.counts[i])
        return Histogram(tuple(bounds), (*counts, self.count), self.total)

    def plus(self, other: Histogram) -> Histogram:
        """Both histograms' observations, on the bounds they share (always at least +Inf)."""
        if self.same_layout(other):
            counts = tuple(a + b for a, b in zip(self.counts, other.counts, strict=True))
            return Histogram(self.bounds, counts, self.total + other.total)
        common = common_bounds(self.bounds, other.bounds)
        a, b = self.project(common), other.project(common)
        return Histogram(
            common, tuple(x + y for x, y in zip(a.counts, b.counts, strict=True)), a.total + b.total
        )


def common_bounds(a: Sequence[float], b: Sequence[float]) -> tuple[float, ...]:
    """The bounds of ``a`` that ``b`` has too (both ascending): a sorted merge, linear in both."""
    out = []
    j, nb = 0, len(b)
    for x in a:
        while j < nb and b[j] < x and not same_bound(x, b[j]):
            j += 1
        if j < nb and same_bound(x, b[j]):
            out.append(x)
            j += 1
    return tuple(out)


def empty(bounds: tuple[float, ...] = ()) -> Histogram:
    return Histogram(bounds, (0.0,) * (len(bounds) + 1), 0.0)


def quantile(h: Histogram, q: float) -> float | None:
    """The ``q`` quantile (0-1) as PromQL's histogram_quantile gives it; None without observations
    or without a finite bucket (a mean)."""
    n = h.count
    if n <= 0 or h.mean_only or not 0.0 <= q <= 1.0:
        return None
    rank = q * n
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(h.bounds, h.counts, strict=False):
        if cumulative >= rank and cumulative > below:
            if bound <= 0:
                return bound
            return lower + (bound - lower) * (rank - below) / (cumulative - below)
        lower, below = bound, cumulative
    return h.bounds[-1]  # in the +Inf bucket: the highest finite bound


@dataclass(frozen=True, slots=True)
class Share:
    value: float  # share of observations at or under the target, 0-1
    exact: bool  # the target is a bucket bound (else interpolated, or a lower bound past the last)


def share_at_or_under(h: Histogram, target: float) -> Share | None:
    """The share of observations at or under ``target`` seconds; None without observations or
    without a finite bucket."""
    n = h.count
    if n <= 0 or h.mean_only:
        return None
    lower, below = 0.0, 0.0
    for bound, cumulative in zip(h.bounds, h.counts, strict=False):
        if same_bound(bound, target):
            return Share(min(1.0, cumulative / n), True)
        if target < bound:
            inside = (target - lower) / (bound - lower) if bound > lower else 1.0
            return Share(min(1.0, (below + (cumulative - below) * max(0.0, inside)) / n), False)
        lower, below = bound, cumulative
    return Share(min(1.0, below / n), False)  # past the highest finite bound: at least this many


def shares_along(h: Histogram, targets: Sequence[float]) -> list[Share]:
    """``share_at_or_under`` of each of ``targets`` (ascending), in one pass over the buckets:
    linear in bounds + targets where asking each would be their product. ``h`` has observations
    and a finite bucket."""
    n = h.count
    assert n > 0 and not h.mean_only
    bounds, counts, size = h.bounds, h.counts, len(h.bounds)
    out: list[Share] = []
    i, lower, below = 0, 0.0, 0.0
    for target in targets:
        while i < size and not same_bound(bounds[i], target) and not target < bounds[i]:
            lower, below = bounds[i], counts[i]
            i += 1
        if i == size:
            out.append(Share(min(1.0, below / n), False))
        elif same_bound(bounds[i], target):
            out.append(Share(min(1.0, counts[i] / n), True))
        else:
            bound, cumulative = bounds[i], counts[i]
            inside = (target - lower) / (bound - lower) if bound > lower else 1.0
            out.append(Share(min(1.0, (below + (cumulative - below) * max(0.0, inside)) / n), False))
    return out


def at_or_under(h: Histogram, target: float) -> float | None:
    """Observations at or under ``target`` (``share_at_or_under`` x count)."""
    share = share_at_or_under(h, target)
    return None if share is None else share.value * h.count


def finite(values: Sequence[float]) -> bool:
    return all(math.isfinite(v) for v in values)


MAX_COUNT = float(2**53)  # past it a float no longer counts one by one, and sums of counts overflow


def problem(h: Histogram) -> str | None:
    """Why ``h`` is not a latency histogram (None: it is): bounds finite, at least 0 and strictly
    ascending; counts finite, at least 0, at most 2^53 and not going down; one more count than
    bounds; a sum finite and at least 0. What reads histograms checks them with this first."""
    bounds, counts = h.bounds, h.counts
    if len(counts) != len(bounds) + 1:
        return "the counts do not match the bounds"
    if not all(0.0 <= b < math.inf for b in bounds):
        return "an le bound is negative or not finite"
    if any(b <= a for a, b in itertools.pairwise(bounds)):
        return "le bounds are not strictly ascending"
    if not all(0.0 <= c <= MAX_COUNT for c in counts):
        return "a bucket count is negative, not finite or over 2^53"
    if any(b < a for a, b in itertools.pairwise(counts)):
        return "bucket counts go down as le goes up"
    if not 0.0 <= h.total <= MAX_COUNT:
        return "the sum is negative, not finite or over 2^53"
    return None


# A request's end-to-end latency is at least its TTFT, which is at least its time in the queue: at
# any latency x, the share of requests whose e2e is at or under x is at most that of TTFT, which is
# at most that of queue time. Along this chain, shares at one x never fall.
CHAIN = ("e2e", "ttft", "queue")


def ordered(histograms: Mapping[str, Histogram]) -> dict[str, Histogram]:
    """A workload's histograms with the per-request kinds (``CHAIN``) read together, on the bounds
    of all of them: a kind's share at a bound it lacks (else interpolated inside its bucket) is held
    between the exact shares the others count there, and past its own highest finite bound (where
    PromQL answers that bound, the least the quantile can be) it is the least share of the stages
    before it (queue time for TTFT): its quantile is then at least theirs. So no quantile of one
    kind crosses another's where their buckets differ (vLLM's TTFT bucket 640-2560 s against end to
    end's 960 and 1920 s). Counted shares are never changed; other kinds pass as they are."""
    out = dict(histograms)
    chain = [k for k in CHAIN if k in histograms and histograms[k].count > 0 and not histograms[k].mean_only]
    if len(chain) < 2 or all(histograms[k].same_layout(histograms[chain[0]]) for k in chain):
        return out
    union: list[float] = []
    for x in sorted(b for k in chain for b in histograms[k].bounds):
        if not union or not same_bound(union[-1], x):
            union.append(x)
    along = {k: shares_along(histograms[k], union) for k in chain}  # linear, not bounds x bounds
    tops = {k: histograms[k].bounds[-1] for k in chain}
    shares: dict[str, list[float]] = {k: [] for k in chain}
    for j, x in enumerate(union):
        row = [(along[k][j].value, along[k][j].exact, x <= tops[k] or same_bound(x, tops[k])) for k in chain]
        for k, v in zip(chain, _in_order(row), strict=True):
            if v is not None and len(shares[k]) == j:  # contiguous from the first bound
                shares[k].append(v)
    for k in chain:
        n = histograms[k].count
        rising = list(itertools.accumulate(shares[k], max))
        counts = (*(min(1.0, s) * n for s in rising), n)
        out[k] = Histogram(tuple(union[: len(rising)]), counts, histograms[k].total)
    return out


def _in_order(row: list[tuple[float, bool, bool]]) -> list[float | None]:
    """Shares along CHAIN at one latency, rising: an interpolated share is held between the
    nearest counted ones before and after it, then raised to the share before it; past a kind's
    highest finite bound, the least share after it in the chain, never under its own there (None:
    no kind after it reaches that far). Counted shares that disagree with each other (histograms
    of different request sets) are left as counted."""
    out: list[float | None] = []
    for i, (v, exact, within) in enumerate(row):
        if within and not exact:
            low = max((w for w, e, _ in row[:i] if e), default=0.0)
            high = min((w for w, e, _ in row[i + 1 :] if e), default=1.0)
            if low <= high:
                v = min(max(v, low), high)
            before = out[-1] if out else None
            if before is not None and v < before <= high:
                v = before
        out.append(v if within else None)
    for i in reversed(range(len(row))):
        later = [w for w in out[i + 1 :] if w is not None]
        if out[i] is None and later:
            out[i] = max(row[i][0], min(later))
    return out
