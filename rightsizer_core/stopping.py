"""Stopping on SIGTERM or SIGINT at any point of a program's life, start-up included: exit code 0.

Before the event loop runs (reading the configuration, building a scenario), a stop signal
raises ``SystemExit(0)`` where the program is (``exiting_on_stop_signals``). Once the loop runs,
``stop_event`` turns the signals into an event, and ``unless_stopped`` runs a start-up step (NVML
initialisation, history replay, the first connections) only until that event is set: the step is
then cancelled and the program shuts down as after a normal stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from types import FrameType
from typing import TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _exit_now(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


@contextlib.contextmanager
def exiting_on_stop_signals() -> Iterator[None]:
    """Within: a stop signal ends the program at once with code 0, until ``stop_event`` takes over.
    The previous handlers are back afterwards (``main`` may run inside another program's tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; it also is the only one signals interrupt
        return
    previous = {sig: signal.signal(sig, _exit_now) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


SHUTDOWN_DEADLINE = 8.0  # seconds from the stop signal to exit, whatever hangs (exporter grace: 10 s)
SHUTDOWN_REQUEST_GRACE = 3.0  # seconds in-flight HTTP requests get to finish at a stop


def stop_event(
    deadline: float | None = None, last_words: Callable[[], None] | None = None
) -> asyncio.Event:
    """An event the stop signals set (call from inside the running event loop). With ``deadline``
    the first signal also starts ``exit_after(deadline, last_words)``: the process is gone by then
    even if its shutdown hangs."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def stopping() -> None:
        if deadline is not None and not stop.is_set():
            exit_after(deadline, last_words)
        stop.set()

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stopping)
    return stop


class Stopped(Exception):
    """A stop signal arrived before the awaited start-up step finished (it was cancelled)."""


async def unless_stopped(step: Awaitable[T], stop: asyncio.Event) -> T:
    """``step``'s result, or ``Stopped`` (with ``step`` cancelled) if ``stop`` is set first."""
    task = asyncio.ensure_future(step)
    waiter = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    if task.cancelled():
        raise Stopped()
    return task.result()


def exit_after(seconds: float, last_words: Callable[[], None] | None = None) -> threading.Timer:
    """Start a watchdog that ends the process with code 0 after ``seconds`` (``last_words`` first,
    e.g. a log line), whatever a shutdown step is still waiting on: a stop is bounded even when a
    cleanup hangs or a cancellation is lost. Cancel it once the program has stopped by itself."""

    def expire() -> None:
        if last_words is not None:
            with contextlib.suppress(Exception):
                last_words()
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(0)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer
