"""Host CPU busy share from ``/proc/stat`` (procfs root configurable, as node_exporter's --path.procfs).

busy = 1 - (idle + iowait) / total over the interval between two reads of the aggregate ``cpu`` line.
``guest`` and ``guest_nice`` are already counted in ``user`` and ``nice`` and are left out of the
total. The right-sizing extension reads it (and the pressure stall figures, ``hostpsi``) once per
sampling cycle, before making the cycle's rows (a line of a procfs file, tens of microseconds; no
timer of its own, so the event loop wakes once less per cycle).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from rightsizer_core.files import open_regular
from rightsizer_core.logs import event

from .hostpsi import PsiReader

log = logging.getLogger("rightsizer.rightsizing")


class ProcStatError(Exception):
    """``/proc/stat`` is missing or unreadable in an expected way; the message says why."""


def read_cpu_times(procfs_root: str) -> tuple[float, float]:
    """(busy jiffies, total jiffies) of the aggregate ``cpu`` line."""
    path = Path(procfs_root) / "stat"
    try:
        with open_regular(path) as f:
            first = f.readline(65536).decode("ascii", errors="replace")
    except OSError as exc:
        raise ProcStatError(f"cannot read {path}: {exc.strerror or exc}") from None
    parts = first.split()
    if len(parts) < 5 or parts[0] != "cpu":
        raise ProcStatError(f"{path}: first line is not the aggregate 'cpu' line")
    try:
        values = [float(v) for v in parts[1:11]]
    except ValueError:
        raise ProcStatError(f"{path}: the 'cpu' line holds something that is not a number") from None
    values += [0.0] * (10 - len(values))
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    total = user + nice + system + idle + iowait + irq + softirq + steal
    return total - idle - iowait, total


def busy_ratio(before: tuple[float, float], after: tuple[float, float]) -> float | None:
    """Busy share between two reads; None when the counters did not move (or went backwards)."""
    busy, total = after[0] - before[0], after[1] - before[1]
    if total <= 0 or busy < 0:
        return None
    return min(1.0, busy / total)


class HostCpuMonitor:
    """Keeps ``latest``: the busy share between its last two ``poll`` calls (one per cycle)."""

    def __init__(self, procfs_root: str, interval: float) -> None:
        self.procfs_root = procfs_root
        self.interval = max(0.1, interval)  # the sampling interval the polls follow
        self.latest: float | None = None
        self.error: str | None = None
        self._previous: tuple[float, float] | None = None
        self.psi = PsiReader(procfs_root)  # read on this cadence: no timer of its own

    def poll(self) -> None:
        self.psi.poll(time.monotonic())
        try:
            now = read_cpu_times(self.procfs_root)
        except ProcStatError as exc:
            if self.error != str(exc):
                event(log, logging.WARNING, "host CPU unavailable", error=str(exc))
            self.error, self.latest, self._previous = str(exc), None, None
            return
        if self.error is not None:
            event(log, logging.INFO, "host CPU available again", path=self.procfs_root)
        self.error = None
        if self._previous is not None:
            ratio = busy_ratio(self._previous, now)
            if ratio is not None:
                self.latest = ratio
        self._previous = now

    async def start(self) -> None:
        self.poll()  # the first cycle's poll then has an interval to compare with

    async def stop(self) -> None:
        pass
