"""When to scrape an exporter next: just after it publishes its next sample.

A Rightsizer exporter says when its values were sampled (``rightsizer_last_sample_timestamp_seconds``)
and samples on a fixed interval, so the adapter can scrape once per exporter cycle, a few tens of
milliseconds after each new snapshot, instead of polling blindly. If a scrape comes too early (the
timestamp has not moved) it tries again shortly after; exporters that publish no timestamp, or
clocks too far apart to make sense of it, fall back to the fixed ``scrape_interval_seconds``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

STAMP_FAMILY = "rightsizer_last_sample_timestamp_seconds"
MARGIN = 0.03  # after the expected publication: rendering takes a few milliseconds
CHASE_STEP = 0.05  # retry step when a scrape found no new sample yet
MAX_CHASES = 5


@dataclass
class Pace:
    fallback: float  # seconds between scrapes when the exporter's cycle is unknown
    due: float = 0.0  # monotonic time of the next scrape
    last_stamp: float | None = None
    gaps: deque[float] = field(default_factory=lambda: deque(maxlen=5))
    chases: int = 0

    @property
    def period(self) -> float | None:
        """The exporter's sampling interval as observed (the smallest recent gap)."""
        return min(self.gaps) if self.gaps else None

    def failed(self, now: float) -> None:
        self.chases = 0
        self.due = now + self.fallback

    def scraped(self, stamp: float | None, now: float, wall: float) -> None:
        """Plan the next scrape after one that saw sample time ``stamp`` (None: not published)."""
        if stamp is None:
            self.due = now + self.fallback
            return
        if self.last_stamp is not None and stamp <= self.last_stamp:
            self.chases += 1  # too early: the next snapshot is not out yet
            step = CHASE_STEP * self.chases
            self.due = now + (step if self.chases <= MAX_CHASES else self.fallback)
            return
        if self.last_stamp is not None and 0.01 <= stamp - self.last_stamp <= 3600:
            self.gaps.append(stamp - self.last_stamp)
        self.last_stamp = stamp
        self.chases = 0
        period = self.period
        if period is None:
            self.due = now + min(self.fallback, CHASE_STEP * 4)  # learn the period quickly
            return
        wait = stamp + period - wall + MARGIN  # clocks a little apart still land inside (0, 2 periods]
        self.due = now + (wait if 0 < wait <= 2 * period else self.fallback)
