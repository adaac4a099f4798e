"""When to poll: just before the sampler renders, so a value is published as soon as it is read.

The sampler renders a snapshot every ``interval`` on a fixed grid and calls every extension's
``contribute`` right before rendering. ``RenderClock`` learns that grid from the times of those
calls; each poller fires ``lead`` seconds before a render. A change at the source is then
published at most one interval plus the lead later, instead of up to two intervals with an
unaligned poll.

Sources share one lead (``BurstLead``): they fire together, in one loop wakeup, and the lead is
how long the recent bursts took to complete. A source slower than that on its own (a distant
server) fires earlier, by its own recent duration (``Lead``), and does not hold the others back.
"""

from __future__ import annotations

import math
from collections import deque

LEAD_STEP = 0.020  # leads are whole steps, so sources of similar speed fire in the same loop wakeup
LEAD_MARGIN = 0.010


class RenderClock:
    """Observed from the sampler's thread, read from the pollers' thread: the recent render times
    are an immutable tuple, replaced as a whole."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._seen: tuple[float, ...] = ()

    def observe(self, now: float) -> None:
        """A render is happening now (called from ``contribute``)."""
        self._seen = (*self._seen[-3:], now)

    @property
    def known(self) -> bool:
        return bool(self._seen)

    def next_render(self, after: float) -> float:
        """The earliest expected render at or after ``after`` (``after`` itself if none seen yet).

        Recent renders are projected onto the latest one's cycle and the earliest projection is the
        grid, because a render that came late (a slow GPU read delays it) must not push the polls
        late too."""
        seen = self._seen
        if not seen:
            return after
        step, latest = self.interval, seen[-1]
        base = min(t + round((latest - t) / step) * step for t in seen)
        return base + max(0, math.ceil((after - base) / step - 1e-9)) * step


def _lead(seconds: float, cap: float) -> float:
    """``seconds`` plus a margin, rounded up to a whole LEAD_STEP, at most ``cap``."""
    steps = max(1, math.ceil((seconds + LEAD_MARGIN) / LEAD_STEP - 1e-9))
    return min(cap, steps * LEAD_STEP)


class Lead:
    """One source's own lead: its slowest of the last few successful polls (plus margin, in whole
    steps, at most a quarter of the render interval). Too short and the value misses its render
    (a whole interval late); too long and the value is older than it need be."""

    def __init__(self, interval: float, keep: int = 4) -> None:
        self.cap = interval / 4
        self._durations: deque[float] = deque(maxlen=keep)

    def record(self, seconds: float) -> None:
        self._durations.append(seconds)

    @property
    def seconds(self) -> float:
        return _lead(max(self._durations, default=0.0), self.cap)


class BurstLead:
    """The lead shared by the sources that fire together: 1.25 times the longest time one of the
    last eight bursts took, from firing to its last successful poll (plus margin, in whole steps,
    capped). A burst takes longer when other processes want the CPU; the long memory keeps the
    lead up while such load comes and goes, so values keep making their render."""

    KEEP = 8

    def __init__(self, interval: float) -> None:
        self.cap = interval / 4
        self._spans: dict[int, float] = {}  # burst (its firing time in 10 ms units) -> span so far

    @property
    def seconds(self) -> float:
        return _lead(1.25 * max(self._spans.values(), default=0.0), self.cap)

    def completed(self, fired_at: float, end: float) -> None:
        """A member of the burst fired at ``fired_at`` finished a successful poll at ``end``. Members
        compute the firing time each on its own: equal give or take float rounding."""
        key = round(fired_at * 100)
        if key not in self._spans:
            self._spans[key] = 0.0
            if len(self._spans) > self.KEEP:
                del self._spans[next(iter(self._spans))]
        self._spans[key] = max(self._spans[key], end - fired_at)


def next_fire(clock: RenderClock, lead: float, now: float, last_fire: float | None, wait: float) -> float:
    """When to start the next poll: ``lead`` before the first render that is at least ``wait``
    (give or take half a render interval) after the previous poll started."""
    if last_fire is None:
        return now
    earliest = last_fire + wait - clock.interval / 2
    if not clock.known:
        return max(now, last_fire + wait)
    render = clock.next_render(max(earliest, now) + lead)
    return render - lead
