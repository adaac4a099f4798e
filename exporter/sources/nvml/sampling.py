"""Every GPU's NVML calls of a cycle on one thread, with a watchdog for calls that hang.

A cycle is one batch: the sampling thread runs the GPUs' jobs one after the other and hands the
event loop one result for the whole batch (one wake-up per cycle, not one per GPU). If the batch
has not finished ``timeout`` seconds after it was handed over (or after the last hand-over), the
thread is stuck in one GPU's call: that thread is left to that GPU (it ends once the call
returns), and the jobs it had not started move to a new sampling thread, which gets its own
``timeout``. The hung GPU is published down and gets no new job until its call returns; the other
GPUs are sampled in the same cycle, and the scrape, which serves the last rendered cycle, never
waits. A cycle with k GPUs hanging for the first time waits at most (k + 1) x ``timeout``.

Daemon threads because a driver call can hang forever and must not keep the process from exiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class CallState:
    """One GPU's job as the sampling thread runs it: the call it is in (for "hung in <call>"
    messages; written by the thread) and whether the last job has returned."""

    def __init__(self) -> None:
        self.current_call = ""
        self.call_started = time.monotonic()
        self.pending: Future[Any] | None = None

    def mark(self, call: str) -> None:
        self.current_call = call
        self.call_started = time.monotonic()

    @property
    def busy(self) -> bool:
        return self.pending is not None and not self.pending.done()

    def hung_for(self) -> float:
        return time.monotonic() - self.call_started


Job = tuple[CallState, Callable[..., Any], tuple[Any, ...]]
_Entry = tuple[CallState, Callable[..., Any], tuple[Any, ...], "Future[Any]"]


class _Batch:
    """Jobs a sampling thread takes one at a time; the rest can be taken away from it at once."""

    def __init__(self, entries: list[_Entry], loop: asyncio.AbstractEventLoop) -> None:
        self._entries = entries
        self._next = 0
        self._lock = threading.Lock()
        self.loop = loop
        # Set to True on the loop by the thread's one hand-off when the batch is done, or to False by
        # the deadline's timer; whichever comes first.
        self.finished: asyncio.Future[bool] = loop.create_future()

    def take(self) -> _Entry | None:
        with self._lock:
            if self._next >= len(self._entries):
                return None
            self._next += 1
            return self._entries[self._next - 1]

    def take_rest(self) -> list[_Entry]:
        with self._lock:
            rest, self._next = self._entries[self._next :], len(self._entries)
            return rest


class _SamplingThread:
    def __init__(self, name: str) -> None:
        self.batches: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self.retired = False  # stuck in a hung call: left to that GPU, ends once the call returns
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while (batch := self.batches.get()) is not None:
            while not self.retired and (entry := batch.take()) is not None:
                state, fn, args, fut = entry
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn(state, *args))
                    except BaseException as exc:
                        fut.set_exception(exc)
                state.mark("")
            # One wake-up of the event loop per cycle; a loop that is closed (exit) needs none.
            with contextlib.suppress(RuntimeError):
                batch.loop.call_soon_threadsafe(_settle, batch.finished, True)
            if self.retired:
                return


class SamplingPool:
    """Runs each cycle's jobs on one sampling thread; see the module docstring for hangs."""

    def __init__(self) -> None:
        self._thread: _SamplingThread | None = None
        self.threads_started = 0

    async def run(self, jobs: list[Job], timeout: float) -> list[Future[Any]]:
        """Run ``fn(state, *args)`` for every job; return their futures once all have finished or
        the ones still running are stuck in hung calls (those stay running; their GPUs stay busy)."""
        entries: list[_Entry] = []
        for state, fn, args in jobs:
            fut: Future[Any] = Future()
            state.pending = fut
            entries.append((state, fn, args, fut))
        loop = asyncio.get_running_loop()
        batch = _Batch(entries, loop)
        while entries:
            thread = self._thread or self._start()
            thread.batches.put(batch)
            if await _wait(batch, timeout):
                break
            thread.retired, self._thread = True, None  # stuck: that GPU keeps this thread
            rest = batch.take_rest()
            if not rest:
                break
            batch = _Batch(rest, loop)
        return [e[3] for e in entries]

    def close(self) -> None:
        """Let the sampling thread end (a thread stuck in a hung call just stays, as a daemon)."""
        if self._thread is not None:
            self._thread.batches.put(None)
            self._thread = None

    def _start(self) -> _SamplingThread:
        self.threads_started += 1
        self._thread = _SamplingThread(f"nvml-sampling-{self.threads_started}")
        return self._thread


def _settle(fut: asyncio.Future[bool], finished: bool) -> None:
    if not fut.done():
        fut.set_result(finished)


async def _wait(batch: _Batch, timeout: float) -> bool:
    """True when the batch finished within ``timeout`` seconds (a timer, not a waiting task: the
    thread's hand-off resumes the sampler directly)."""
    timer = batch.loop.call_later(timeout, _settle, batch.finished, False)
    try:
        return await batch.finished
    finally:
        timer.cancel()
