"""A sampling cycle costs the event loop one wake-up: the sampling thread hands back the whole batch
with one ``call_soon_threadsafe`` that resumes the waiting sampler directly (no wrapped future, no
waiter task). Counted on a real selector event loop whose selector counts its ``select`` calls
(each loop iteration makes exactly one)."""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any

from exporter.sources.nvml.sampling import CallState, SamplingPool

RUNS = 20


class CountingSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.selects = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        self.selects += 1
        return super().select(timeout)


def read(state: CallState, gpu: int) -> int:
    state.mark("nvmlDeviceGetFieldValues")
    time.sleep(0.002)  # a GPU's calls: the loop is asleep in select() when the batch finishes
    return gpu


def test_a_cycle_of_eight_gpus_wakes_the_loop_once() -> None:
    selector = CountingSelector()
    loop = asyncio.SelectorEventLoop(selector)

    async def scenario() -> int:
        pool = SamplingPool()
        states = [CallState() for _ in range(8)]
        await pool.run([(s, read, (i,)) for i, s in enumerate(states)], timeout=5)  # thread started
        before = selector.selects
        for _ in range(RUNS):
            futures = await pool.run([(s, read, (i,)) for i, s in enumerate(states)], timeout=5)
            assert [f.result() for f in futures] == list(range(8))
        pool.close()
        return selector.selects - before

    try:
        selects = loop.run_until_complete(scenario())
    finally:
        loop.close()
    # Per cycle: one select that sleeps until the hand-off, one more to run the resumed sampler.
    # (Through a wrapped concurrent future and asyncio.wait it was three.)
    assert selects <= 2 * RUNS, selects / RUNS
