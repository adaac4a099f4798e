"""One latency histogram family of one poll, series by series, checked before it counts.

A family's samples are kept per series (its labels but ``le``), in the order the page gives them.
The family is **refused** for the poll, with one reason that does not vary from poll to poll for
the same fault, when any series it sums:

- has an ``le`` that is not a number, is NaN or -Inf, is negative (a latency is never under 0),
  repeats an earlier bound or is lower than the bound before it (buckets are listed by ascending
  ``le``: OpenMetrics requires it, and every client library writes them so);
- has a count, ``_sum`` or ``_count`` that is not finite, is negative, or is over 2^53 (past it a
  float no longer counts one by one, and sums of such counts overflow to +Inf downstream);
- has cumulative counts that go down from one bound to the next, no ``+Inf`` bucket, or a
  ``_count`` other than its ``+Inf`` bucket;
- or a line of it does not parse.

The series of a family that pass are summed bucket by bucket on the bounds all of them have
(``+Inf`` always is). A layout of more than ``MAX_BOUNDS`` finite bounds is thinned to every n-th
bound (the highest one always kept): the counts at the bounds kept are exact, and what a poll costs
downstream stays bounded whatever the page holds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rightsizing.slo.latency import MAX_COUNT, Histogram

MAX_BOUNDS = 512  # finite bounds kept per histogram (vLLM's largest layout has 22)


@dataclass(slots=True)
class _Series:
    les: list[float] = field(default_factory=list)  # in page order (checked ascending)
    counts: list[float] = field(default_factory=list)
    total: float | None = None
    count: float | None = None


@dataclass(slots=True)
class Family:
    """One histogram family's matching series of one poll, or why it is refused."""

    series: dict[tuple[tuple[str, str], ...], _Series] = field(default_factory=dict)
    problem: str | None = None

    def refuse(self, why: str) -> None:
        if self.problem is None:  # the first fault met is the reason given
            self.problem = why

    def add(self, key: tuple[tuple[str, str], ...], part: str, le: str | None, value: float) -> None:
        if self.problem is not None:
            return
        what = "bucket count" if part == "_bucket" else part
        why = _bad_number(value, what)
        if why is not None:
            self.refuse(why)
            return
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _Series()
        if part == "_sum":
            if s.total is not None:
                self.refuse("a series has two _sum samples")
            s.total = value
            return
        if part == "_count":
            if s.count is not None:
                self.refuse("a series has two _count samples")
            s.count = value
            return
        bound = _bound(le)
        if isinstance(bound, str):
            self.refuse(bound)
            return
        if s.les and bound <= s.les[-1]:
            self.refuse("an le bound repeats" if bound == s.les[-1] else "le bounds go down (not ascending)")
            return
        s.les.append(bound)
        s.counts.append(value)

    def assemble(self, scale: float) -> Histogram | str | None:
        """The summed histogram in seconds, the reason it is refused, or None without samples."""
        if self.problem is not None:
            return self.problem
        if not self.series:
            return None
        common: dict[float, float] | None = None
        total = 0.0
        for s in self.series.values():
            if not s.les or not math.isinf(s.les[-1]):
                return "a series has no +Inf bucket"
            counts = s.counts
            if any(counts[i + 1] < counts[i] for i in range(len(counts) - 1)):
                return "bucket counts go down as le goes up"
            if s.count is not None and not _same(s.count, counts[-1]):
                return "_count disagrees with the +Inf bucket"
            total += s.total or 0.0
            if common is None:
                common = dict(zip(s.les, counts, strict=True))
            else:
                mine = dict(zip(s.les, counts, strict=True))
                common = {le: c + mine[le] for le, c in common.items() if le in mine}
        assert common is not None
        kept = list(common)  # ascending: the first series' order, checked ascending
        if not (math.isfinite(total) and all(math.isfinite(c) for c in common.values())):
            return "counts overflow when the series are summed"
        finite = kept[:-1]
        if len(finite) > MAX_BOUNDS:
            step = -(-len(finite) // MAX_BOUNDS)
            finite = finite[(len(finite) - 1) % step :: step]  # the highest bound kept
        bounds = tuple(le * scale for le in finite)
        summed = (*(common[le] for le in finite), common[kept[-1]])
        return Histogram(bounds, summed, total * scale)


def _bad_number(value: float, what: str) -> str | None:
    if math.isnan(value):
        return f"a {what} is NaN"
    if math.isinf(value):
        return f"a {what} is infinite"
    if value < 0:
        return f"a {what} is negative"
    if value > MAX_COUNT:
        return f"a {what} is over 2^53"
    return None


def _bound(le: str | None) -> float | str:
    """The bound of an ``le`` label, or why it is not one."""
    if le is None:
        return "a bucket has no le label"
    if not le.isascii() or "_" in le or le != le.strip():  # float() also reads '١٢', '1_0', ' 1'
        return "an le bound is not a number"
    try:
        bound = float(le)
    except ValueError:
        return "an le bound is not a number"
    if math.isnan(bound):
        return "an le bound is NaN"
    if bound < 0:
        return "an le bound is negative"
    return bound


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
