"""The NVML sampling pool on its own: one thread runs a cycle's jobs; a job stuck in a hung call
keeps that thread, the rest of the cycle moves to a new one, and the stuck GPU gets no new job
until its call returns. No NVML here: jobs are plain functions that can block on an event."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from exporter.sources.nvml.sampling import CallState, Job, SamplingPool


def read(
    state: CallState, name: str, ran: list[tuple[str, str]], block: threading.Event | None = None
) -> str:
    state.mark(f"read {name}")
    ran.append((name, threading.current_thread().name))
    if block is not None:
        block.wait(30)
    return name


def jobs(states: dict[str, CallState], ran: list[tuple[str, str]], **blocks: threading.Event) -> list[Job]:
    return [(s, read, (name, ran, blocks.get(name))) for name, s in states.items() if not s.busy]


def test_one_thread_runs_every_job_of_every_cycle() -> None:
    async def scenario() -> None:
        pool = SamplingPool()
        states = {n: CallState() for n in ("gpu0", "gpu1", "gpu2")}
        ran: list[tuple[str, str]] = []
        for _ in range(3):
            futures = await pool.run(jobs(states, ran), timeout=5)
            assert [f.result() for f in futures] == ["gpu0", "gpu1", "gpu2"]
        assert len(ran) == 9 and len({thread for _, thread in ran}) == 1
        assert pool.threads_started == 1
        pool.close()

    asyncio.run(scenario())


def test_hung_jobs_keep_their_thread_and_the_rest_of_the_cycle_moves_on() -> None:
    async def scenario() -> None:
        pool = SamplingPool()
        states = {n: CallState() for n in ("gpu0", "gpu1", "gpu2", "gpu3")}
        ran: list[tuple[str, str]] = []
        hang0, hang2 = threading.Event(), threading.Event()
        futures = await pool.run(jobs(states, ran, gpu0=hang0, gpu2=hang2), timeout=0.2)
        done = {f.result() for f in futures if f.done()}
        assert done == {"gpu1", "gpu3"}  # sampled in the same cycle, after each hang
        assert states["gpu0"].busy and states["gpu2"].busy
        assert states["gpu0"].current_call == "read gpu0"
        threads = {name: thread for name, thread in ran}
        assert len({threads["gpu0"], threads["gpu2"], threads["gpu3"]}) == 3  # each hang kept its thread

        # Next cycles: the hung GPUs get no job; the others run on the current thread.
        await pool.run(jobs(states, ran), timeout=0.2)
        assert [name for name, _ in ran[-2:]] == ["gpu1", "gpu3"]
        assert ran[-1][1] == threads["gpu3"]

        # The calls return: the stuck threads end, and the GPUs are sampled again.
        hang0.set()
        hang2.set()
        await asyncio.to_thread(lambda: [f.exception(5) for f in futures])
        assert not states["gpu0"].busy and not states["gpu2"].busy
        futures = await pool.run(jobs(states, ran), timeout=5)
        assert [f.result() for f in futures] == ["gpu0", "gpu1", "gpu2", "gpu3"]
        assert {thread for _, thread in ran[-4:]} == {threads["gpu3"]}
        assert not _still_alive(threads["gpu0"]) and not _still_alive(threads["gpu2"])
        pool.close()

    asyncio.run(scenario())


def _still_alive(name: str) -> bool:
    """Whether the thread named ``name`` is still alive after a bounded wait for it to end."""
    for t in threading.enumerate():
        if t.name == name:
            t.join(5)
            return t.is_alive()
    return False


def test_a_failing_job_is_its_own_outcome() -> None:
    def broken(state: CallState) -> Any:
        raise ValueError("malformed answer")

    async def scenario() -> None:
        pool = SamplingPool()
        ran: list[tuple[str, str]] = []
        a, b = CallState(), CallState()
        futures = await pool.run([(a, broken, ()), (b, read, ("gpu1", ran, None))], timeout=5)
        assert isinstance(futures[0].exception(), ValueError)
        assert futures[1].result() == "gpu1"
        pool.close()

    asyncio.run(scenario())
