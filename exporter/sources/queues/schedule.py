"""When to poll: just before the sampler renders, so a value is published as soon as it is read.

The sampler renders a snapshot every ``interval`` on a fixed grid and calls every extension's
``contribute`` right before rendering. ``RenderClock`` learns that grid from the times of those
calls; each poller fires ``lead`` seconds before a render, where ``lead`` follows the source's
recent poll durations. A change at the source is then published at most one interval plus the
lead later, instead of up to two intervals with an unaligned poll.
"""

from __future__ import annotations

import math
from collections import deque

LEAD_MIN = 0.010
LEAD_MARGIN = 0.005


class RenderClock:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._seen: deque[float] = deque(maxlen=4)

    def observe(self, now: float) -> None:
        """A render is happening now (called from ``contribute``)."""
        self._seen.append(now)

    @property
    def known(self) -> bool:
        return bool(self._seen)

    def next_render(self, after: float) -> float:
        """The earliest expected render at or after ``after`` (``after`` itself if none seen yet).

        Recent renders are projected onto the latest one's cycle and the earliest projection is the
        grid, because a render that came late (a slow GPU read delays it) must not push the polls
        late too."""
        if not self._seen:
            return after
        step, latest = self.interval, self._seen[-1]
        base = min(t + round((latest - t) / step) * step for t in self._seen)
        return base + max(0, math.ceil((after - base) / step - 1e-9)) * step


class Lead:
    """How long before a render to fire: 1.5 times the slowest of the last few successful polls plus a
    margin, at least 10 ms and at most a quarter of the render interval."""

    def __init__(self, interval: float) -> None:
        self.cap = interval / 4
        self._durations: deque[float] = deque(maxlen=8)

    def record(self, seconds: float) -> None:
        self._durations.append(seconds)

    @property
    def seconds(self) -> float:
        slowest = max(self._durations, default=0.0)
        return min(self.cap, max(LEAD_MIN, 1.5 * slowest + LEAD_MARGIN))


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
