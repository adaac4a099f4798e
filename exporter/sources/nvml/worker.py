"""A daemon thread that runs NVML calls one job at a time: the source's control thread
(initialisation, enumeration, shutdown). Each cycle's sampling runs in ``sampling``.

A daemon thread because a driver call can hang forever: a hung worker must never keep the process
from exiting (``concurrent.futures.ThreadPoolExecutor`` joins its threads at exit). The source
gives the worker new work only when its previous job has finished.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from .sampling import CallState

T = TypeVar("T")

_Job = tuple[Callable[..., Any], tuple[Any, ...], "Future[Any]"]


class HungError(Exception):
    """The worker's previous job has not returned: it gets no new work until it does."""


class NvmlWorker(CallState):
    def __init__(self, name: str) -> None:
        super().__init__()  # what the job is doing now, for "hung in <call>" messages
        self.name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"nvml-{name}", daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(self, *args)``. Raises ``HungError`` while the previous job is still running."""
        if self.busy:
            raise HungError(f"{self.current_call or 'a call'} has not returned for {self.hung_for():.1f} s")
        fut: Future[T] = Future()
        self.pending = fut
        self._jobs.put((fn, args, fut))
        return fut

    async def run(self, fn: Callable[..., T], *args: Any, timeout: float) -> T:
        """Submit and wait up to ``timeout`` seconds. Raises ``TimeoutError`` (the job keeps running
        on its thread; the worker stays busy until it returns) or ``HungError``."""
        fut = self.submit(fn, *args)
        if not await wait_all([fut], timeout):
            raise TimeoutError(f"{self.current_call or self.name} did not return within {timeout:g} s")
        return fut.result()

    def close(self) -> None:
        """Let the thread end after its current job (a hung thread just stays, as a daemon)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, args, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                result = fn(self, *args)
            except BaseException as exc:
                fut.set_exception(exc)
            else:
                fut.set_result(result)
            self.mark("")


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # the caller reads the outcome from the concurrent future


async def wait_all(futures: list[Future[Any]], timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for every future; True when all are done. Futures still
    running stay running (their outcome is read, or dropped, by the caller)."""
    wrapped = [asyncio.wrap_future(f) for f in futures]
    for w in wrapped:
        w.add_done_callback(_retrieve)  # no "exception was never retrieved" for late or failed jobs
    _, pending = await asyncio.wait(wrapped, timeout=timeout)
    return not pending
