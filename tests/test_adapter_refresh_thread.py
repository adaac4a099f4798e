"""A refresh at fleet scale does its work beside the event loop, not on it.

Building a refresh's vectors from tens of thousands of series (the workload label, the shared label
sets, the indexes requests select on) took the adapter's event loop 0.5-0.7 s per refresh at 40,000
GPUs, during which no request was answered (docs/fleet-scale.md). A large refresh is built in a
worker thread, and the indexes the last vectors had are built ahead, once those are dropped. Here
a source answers 30,000 GPU series: while the cache builds them, a task on the event loop keeps
running; the answers are those of a refresh built on the loop; the new vector's indexes are built
before any request asks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import pytest
from test_adapter_prometheus import FakePrometheus, cache_for, prom  # noqa: F401  (fixture)

from adapter import cache as cache_module
from adapter.cache import Cache
from adapter.kubernetes.selectors import parse as parse_selector
from adapter.rules import BUILTIN_RULES, RuleConfig
from adapter.selfmetrics import AdapterMetrics
from adapter.sources import RuleResult, evidence, prometheus
from adapter.vectors import Series

RULE = next(r for r in BUILTIN_RULES if r.name == "rightsizer_gpu_utilization_ratio")
GPUS = 30_000


ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # of the pod names a ReplicaSet gives


def suffix(i: int) -> str:
    return "".join(ALPHABET[i // len(ALPHABET) ** k % len(ALPHABET)] for k in range(5))


def fleet(generation: int) -> tuple[Series, ...]:
    return tuple(
        Series(
            {"namespace": f"ns{i % 40}", "pod": f"w{i % 3000}-7d9f8c6b5-{suffix(i)}", "UUID": f"GPU-{i:08d}"},
            (i * 7 + generation) % 100 / 100,
        )
        for i in range(GPUS)
    )


class Source:
    name = "fake"
    interval = 5.0

    def __init__(self) -> None:
        self.generation = 0

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        self.generation += 1
        return {r.name: RuleResult(fleet(self.generation), 1000.0 + self.generation) for r in rules}

    def next_delay(self, elapsed: float, age: float = 0.0) -> float:
        return self.interval


async def refreshed(threshold: int) -> tuple[Cache, int, int]:
    """Two refreshes with ``THREAD_SERIES`` at ``threshold``, an index asked for between them; the
    ticks of a task on the loop while the second was built, and the builds seen."""
    cache = Cache([RULE], Source(), AdapterMetrics())
    ticks = 0
    during: list[int] = []
    build = cache._build

    def timed_build(*args: object) -> object:
        during.append(ticks)
        out = build(*args)  # type: ignore[arg-type]
        during.append(ticks)
        return out

    cache._build = timed_build  # type: ignore[method-assign]

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        with pytest.MonkeyPatch.context() as patched:  # undone even when an assertion fails
            patched.setattr(cache_module, "THREAD_SERIES", threshold)
            await cache.refresh_once()
            vector = cache.states[RULE.name].vector
            assert vector is not None
            vector.select("ns7", "match", parse_selector("workload=w7"))  # builds the two indexes
            assert set(vector.indexed()) == {"namespace", "workload"}
            await cache.refresh_once()
    finally:
        task.cancel()
    return cache, during[-1] - during[-2], len(during) // 2


async def test_a_large_refresh_is_built_beside_the_event_loop() -> None:
    threaded, ticks, builds = await refreshed(20_000)
    assert builds == 2 and ticks > 0  # the loop ran while the second refresh was built
    inline, ticks_inline, _ = await refreshed(10**9)
    assert ticks_inline == 0  # the premise: built on the loop, nothing else runs meanwhile
    for cache in (threaded, inline):
        vector = cache.states[RULE.name].vector
        assert vector is not None and len(vector) == GPUS
        # the indexes the last vector had are built before any request asks
        assert set(vector.indexed()) == {"namespace", "workload"}
    a, b = (c.states[RULE.name].vector for c in (threaded, inline))
    assert a is not None and b is not None
    assert [(dict(s.labels), s.value) for s in a.series] == [(dict(s.labels), s.value) for s in b.series]
    selector = parse_selector("workload=w42")
    assert a.select("ns2", "match", selector) == b.select("ns2", "match", selector) != []


async def test_the_pause_is_told_how_old_the_values_were_when_put_in() -> None:
    """``next_delay`` gets the refresh's whole time and, apart, how old its values were when they
    were put in (from the answers' arrival, through building the vectors): the Prometheus source's
    pause subtracts it to keep answers within twice the interval (test_adapter_prometheus)."""

    class Slow(Source):
        def __init__(self) -> None:
            super().__init__()
            self.told: list[tuple[float, float]] = []
            self.cache: Cache | None = None

        async def collect(
            self, rules: Sequence[RuleConfig], everything: bool = True
        ) -> dict[str, RuleResult]:
            await asyncio.sleep(0.3)  # the answers take 0.3 s to come in
            return await super().collect(rules, everything)

        def next_delay(self, elapsed: float, age: float = 0.0) -> float:
            self.told.append((elapsed, age))
            assert self.cache is not None
            self.cache.stop()
            return 0.0

    source = Slow()
    cache = source.cache = Cache([RULE], source, AdapterMetrics())
    await asyncio.wait_for(cache.run(), 30)
    [(elapsed, age)] = source.told
    vector = cache.states[RULE.name].vector
    assert vector is not None and len(vector) == GPUS  # the values were put in before the pause
    assert elapsed >= 0.3  # the whole refresh, the answers' wait included
    assert 0 < age <= elapsed - 0.3  # from the answers' arrival on, their wait left out


async def test_the_evidence_is_read_once_per_refresh_beside_the_event_loop(
    prom: FakePrometheus,  # noqa: F811
) -> None:
    """The evidence answer (one series per scrape target and part: 20,000 at 5,000 nodes) is read
    into its targets, the instances not up and current and the scraped jobs once per refresh, with
    its decoding in the worker thread; read again by each rule's query, on the event loop, it held
    the loop some 25 ms per rule at 40,000 GPUs (docs/fleet-scale.md)."""
    cache, source, cfg = await cache_for(prom)
    read_on: list[int] = []
    targets = evidence.targets

    def counted(parts: Any) -> Any:
        read_on.append(threading.get_ident())
        return targets(parts)

    try:
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(evidence, "targets", counted)
            patched.setattr(prometheus, "THREAD_BYTES", 0)  # every answer decoded as a large one
            await cache.refresh_once()
            assert len(read_on) == 1
            await cache.refresh_once()
            assert len(read_on) == 2
    finally:
        await source.close()
    assert sum(r.states_family is not None for r in cfg.effective_rules) > 1  # several rules read it
    assert threading.get_ident() not in read_on
