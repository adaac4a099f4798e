"""One queue source on its own schedule: poll with a deadline, keep the latest outcome, back off
on errors, and log a fault once when it starts or changes (not on every poll)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from rightsizer_core.logs import event

from .base import QueueSource, QueueSourceError, QueueValue, redact, shorten
from .schedule import BurstLead, Lead, RenderClock, next_fire
from .settings import QueueSettings

log = logging.getLogger("rightsizer.queues")


@dataclass(frozen=True, slots=True)
class Outcome:
    """The latest poll of one source. ``value`` is set only when that poll succeeded."""

    up: bool
    value: QueueValue | None
    duration_seconds: float
    last_success: float | None  # Unix time of the latest successful poll, ever
    error: str | None


def describe(exc: BaseException, timeout: float) -> tuple[str, bool]:
    """(one-line reason, expected?) for a failed poll."""
    if isinstance(exc, QueueSourceError):
        return str(exc), True
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g} s", True
    # redis-py is imported with the first Redis source; before that no Redis error can be raised.
    errors = sys.modules.get("redis.exceptions")
    if errors is not None:
        if isinstance(exc, errors.TimeoutError):
            return f"no answer within {timeout:g} s", True
        if isinstance(exc, errors.AuthenticationError | errors.AuthorizationError):
            return shorten(f"Redis refused the credentials: {exc}"), True
        if isinstance(exc, errors.ConnectionError):
            return shorten(f"Redis connection failed: {exc}"), True
        if isinstance(exc, errors.RedisError):
            return shorten(f"Redis error: {exc}"), True
    if isinstance(exc, OSError):
        why = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
        return shorten(f"connection error: {why}"), True
    return shorten(f"unexpected {type(exc).__name__}: {exc}"), False


class Poller:
    def __init__(
        self,
        cfg: QueueSettings,
        make_source: Callable[[], QueueSource],
        clock: RenderClock,
        multiple: int,
        timeout: float,
        burst: BurstLead | None = None,
    ) -> None:
        self.cfg = cfg
        self.name = cfg.name
        self.kind = cfg.kind
        self.clock = clock
        self.every = multiple * clock.interval
        self.timeout = timeout
        self.lead = Lead(clock.interval)
        self.burst = burst or BurstLead(clock.interval)
        self.outcome: Outcome | None = None
        self.first_done = asyncio.Event()
        self.target = (
            redact(cfg.url)
            + (f" key {cfg.key}" if cfg.key else "")
            + (f" group {cfg.group}" if cfg.group else "")
        )
        queue = (("queue", cfg.name),)
        self.queue_labels = queue  # duration and last-success series
        self.series_labels = (*queue, ("kind", cfg.kind), *cfg.labels.items())  # depth and up series
        # GPU UUIDs the server runs on, when its source knows them exactly (a discovered pod's
        # devices): right-sizing then links the queue to those GPUs only, not by its labels.
        self.gpus: tuple[str, ...] = ()
        self.exact = False  # ``gpus`` are all the GPUs it feeds (set by discovery)
        self.origin = "static"  # or "discovered" (a pod found on the node)
        self._make_source = make_source
        self._source: QueueSource | None = None
        self._failures = 0
        self._last_fire: float | None = None

    @property
    def wait(self) -> float:
        """Time between poll starts: the interval, doubled per consecutive failure up to backoff_max."""
        if self._failures <= 1:
            return self.every
        return max(self.every, min(self.cfg.backoff_max, self.every * 2.0 ** (self._failures - 1)))

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            own, shared = self.lead.seconds, self.burst.seconds
            in_burst = own <= shared
            fire = next_fire(self.clock, shared if in_burst else own, now, self._last_fire, self.wait)
            if fire > now:
                await asyncio.sleep(fire - now)
            self._last_fire = time.monotonic()
            outcome = await self.poll()
            if in_burst and outcome.up:
                self.burst.completed(fire, time.monotonic())

    async def poll(self) -> Outcome:
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                if self._source is None:
                    self._source = self._make_source()
                value = await self._source.read()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            reason, expected = describe(exc, self.timeout)
            self._failed(reason, time.perf_counter() - started, None if expected else exc)
        else:
            duration = time.perf_counter() - started
            self.lead.record(duration)
            previous = self.outcome
            self.outcome = Outcome(True, value, duration, time.time(), None)
            if self._failures or previous is None:
                msg = "queue source back" if self._failures else "queue source up"
                level = logging.INFO if self._failures else logging.DEBUG
                event(log, level, msg, queue=self.name, kind=self.kind, target=self.target)
            self._failures = 0
        self.first_done.set()
        assert self.outcome is not None
        return self.outcome

    def _failed(self, reason: str, duration: float, unexpected: BaseException | None) -> None:
        previous = self.outcome
        last_success = previous.last_success if previous else None
        self.outcome = Outcome(False, None, duration, last_success, reason)
        self._failures += 1
        if previous is None or previous.error != reason:
            level = logging.ERROR if unexpected is not None else logging.WARNING
            log.log(
                level,
                "queue source down",
                exc_info=unexpected,
                extra={"queue": self.name, "kind": self.kind, "target": self.target, "reason": reason},
            )

    async def close(self) -> None:
        if self._source is not None:
            await self._source.close()
