"""``shares_along`` (one pass over the buckets for many targets, which keeps reading a workload's
histograms together linear) answers exactly what ``share_at_or_under`` answers for each target:
on bounds, between them, below the first and past the last, on random layouts."""

from __future__ import annotations

import random

import pytest

from rightsizing.slo.latency import Histogram, share_at_or_under, shares_along


def random_histogram(rng: random.Random) -> Histogram:
    n = rng.randint(1, 40)
    bounds = sorted({round(rng.uniform(0.001, 100.0), rng.randint(1, 4)) for _ in range(n)})
    counts: list[float] = []
    total = 0.0
    for _ in bounds:
        total += rng.choice((0, 0, 1, 5, 17))
        counts.append(total)
    counts.append(total + rng.choice((0, 3)))
    if counts[-1] == 0:
        counts[-1] = 1.0
    return Histogram(tuple(bounds), tuple(counts), counts[-1] * 0.5)


def test_one_pass_equals_one_target_at_a_time() -> None:
    rng = random.Random(20261128)
    for _ in range(500):
        h = random_histogram(rng)
        others = [round(rng.uniform(0.0, 120.0), rng.randint(1, 4)) for _ in range(rng.randint(0, 30))]
        targets = sorted({*others, *rng.sample(h.bounds, min(len(h.bounds), 5)), 0.0, 1e6})
        got = shares_along(h, targets)
        assert got == [share_at_or_under(h, t) for t in targets], (h, targets)


def test_a_target_on_a_bound_is_exact_and_past_the_last_is_a_lower_bound() -> None:
    h = Histogram((0.1, 0.5, 1.0), (10.0, 30.0, 40.0, 50.0), 20.0)
    got = shares_along(h, [0.05, 0.1, 0.3, 1.0, 5.0])
    # 0.05: half of (0, 0.1] holding 10 of 50; 0.1: 10 of 50 counted; 0.3: 10 + 20 x 0.5 = 20 of 50;
    # 1.0: 40 of 50 counted; 5.0: past the last finite bound, at least 40 of 50
    assert [s.value for s in got] == pytest.approx([0.1, 0.2, 0.4, 0.8, 0.8])
    assert [s.exact for s in got] == [False, True, False, True, False]
