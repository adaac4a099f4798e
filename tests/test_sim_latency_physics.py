"""The simulated inference servers keep their own physics in the latency histograms they publish:
every request's end-to-end time includes its TTFT, so at every bound both layouts share no more
requests finish end to end than got their first token; and the default fleet's trickle (0.35
requests a second on an H100 busy 6 % of the time) waits for nothing: its TTFT is prefill plus one
decode step (750 prompt tokens x 2 x 6.74e9 / 989e12 FLOP/s = 10.2 ms, + 4.6 ms), lognormal with a
0.25 spread: p95 ~ 1.46 x 14.8 = 22 ms, read in vLLM's (20 ms, 40 ms] bucket. It published 17.9 s
(2 requests always waiting behind an idle GPU: 2 / 0.35 = 5.7 s of mean wait)."""

from __future__ import annotations

import math
import random

import pytest

from exporter.sources.simulated.latency import (
    WAIT_STEPS,
    LatencyModel,
    _after_wait,
    _exponential_cdf,
    _lognormal_cdf,
)
from exporter.sources.simulated.scenario import builtin_names, load_scenario
from exporter.sources.simulated.source import SimulatedSource
from rightsizing.slo.latency import Histogram, quantile

HOUR = 3600.0


def over_the_hour(model: LatencyModel, kind: str) -> Histogram:
    """What the server counted between its first second and one hour on (counters differenced)."""
    at_hour, at_start = model.at(HOUR), model.at(1.0)
    assert at_hour is not None and at_start is not None
    later, first = at_hour[kind], at_start[kind]
    counts = tuple(a - b for a, b in zip(later.counts, first.counts, strict=True))
    return Histogram(later.bounds, counts, later.total - first.total)


def servers(scenario: str) -> list[tuple[str, LatencyModel]]:
    source = SimulatedSource(load_scenario(scenario))
    models = source._latency
    return [(d.gpu.name, models[d.gpu.uuid]) for d in source.devices if d.gpu.uuid in models]


@pytest.mark.parametrize("scenario", builtin_names())
def test_no_request_ends_before_its_first_token(scenario: str) -> None:
    checked = 0
    for name, model in servers(scenario):
        if "ttft" not in model.layout:
            continue
        ttft, e2e = over_the_hour(model, "ttft"), over_the_hour(model, "e2e")
        assert ttft.count == e2e.count > 0, name
        first = dict(zip(ttft.bounds, ttft.counts, strict=False))
        for bound, done in zip(e2e.bounds, e2e.counts, strict=False):
            if bound in first:
                why = f"{scenario} {name}: {done} ended by {bound} s, only {first[bound]} began"
                assert done <= first[bound], why
        assert e2e.total >= ttft.total, name
        checked += 1
    assert checked or scenario != "default"


def test_the_trickle_waits_for_nothing() -> None:
    (model,) = [m for name, m in servers("default") if name == "small-model-on-h100"]
    ttft, e2e = over_the_hour(model, "ttft"), over_the_hour(model, "e2e")
    p95 = quantile(ttft, 0.95)
    assert p95 is not None and 0.02 < p95 <= 0.04, p95
    assert 0.012 < ttft.total / ttft.count < 0.018  # 14.8 ms of prefill and one step, give or take
    e2e_p95 = quantile(e2e, 0.95)
    assert e2e_p95 is not None and e2e_p95 > p95


def lognormal_cdf(x: float, mean: float, variance: float) -> float:
    """A lognormal's CDF by its textbook form, written here apart from the simulator's."""
    if x <= 0:
        return 0.0
    if mean <= 0:
        return 1.0
    s2 = math.log1p(variance / (mean * mean))
    if s2 <= 1e-12:
        return 1.0 if x >= mean else 0.0
    mu = math.log(mean) - s2 / 2.0
    return 0.5 * (1.0 + math.erf((math.log(x) - mu) / math.sqrt(2.0 * s2)))


def after_wait_by_definition(x: float, wait: float, service: float, spread: float) -> float:
    """``_after_wait`` as its docstring defines it, span by span from the two CDFs."""
    if x <= 0:
        return 0.0
    variance = math.expm1(spread * spread) * service * service
    total, upper = 0.0, _exponential_cdf(x, wait)
    for k in reversed(range(WAIT_STEPS)):
        start = x * k / WAIT_STEPS
        lower = _exponential_cdf(start, wait)
        if upper > lower:
            share = lognormal_cdf(x - start, service, variance)
            assert share == _lognormal_cdf(x - start, service, variance)
            if share >= 1.0:
                return total + upper
            total += (upper - lower) * share
        upper = lower
    return total


def test_a_wait_then_a_service_is_its_definition_to_the_last_bit() -> None:
    """The simulator's hot loop computes what does not depend on the span once: the same floats."""
    rng = random.Random(7)
    corners = (0.0, 1e-13, 1e-7, 0.001, 0.25, 1.0, 30.0)
    checked = 0
    for _ in range(20_000):
        x = rng.choice((*corners, rng.random() * 10, rng.expovariate(1.0)))
        wait = rng.choice((*corners, rng.random(), rng.expovariate(3.0)))
        service = rng.choice((*corners, rng.random(), rng.expovariate(2.0)))
        spread = rng.choice((0.0, 1e-7, 0.25, rng.random()))
        want = after_wait_by_definition(x, wait, service, spread)
        assert _after_wait(x, wait, service, spread) == want, (x, wait, service, spread)
        checked += 0.0 < want < 1.0
    assert checked > 5_000  # most draws land between the extremes


@pytest.mark.parametrize("scenario", builtin_names())
def test_asking_twice_at_one_time_answers_what_a_fresh_model_does(scenario: str) -> None:
    """The queue collector and the right-sizing engine both read every server at the same time:
    the second read is the first's answer, equal to what a model never asked before computes."""
    asked = 0
    models = servers(scenario)
    for elapsed in (1.0, 95.0, 95.0, 612.5, 612.5, 300.0, 301.0):
        for (name, model), (_, fresh) in zip(models, servers(scenario), strict=True):
            first, again, alone = model.at(elapsed), model.at(elapsed), fresh.at(elapsed)
            assert first == again == alone, (scenario, name, elapsed)
            asked += first is not None
    assert asked or scenario != "default"
