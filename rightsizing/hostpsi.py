"""Host pressure stall information (PSI): ``<procfs>/pressure/memory`` and ``<procfs>/pressure/io``.

Each file has a ``some`` line (at least one task stalled on the resource) and a ``full`` line (all
non-idle tasks stalled at once), each with a ``total=`` counter of stalled microseconds. The share
of time stalled between two reads is the counter's change over the time between them (more exact
than the kernel's 10 s average at the poller's cadence). Read by the host CPU poller, on its
cadence: no timer of its own.

A kernel without PSI (no ``pressure`` directory, or reads refused with EOPNOTSUPP when booted with
``psi=0``) publishes nothing, with one info line; a missing file leaves that resource unknown,
never 0.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from rightsizer_core.files import open_regular
from rightsizer_core.logs import event

log = logging.getLogger("rightsizer.rightsizing")
RESOURCES = ("memory", "io")
KINDS = ("some", "full")
Key = tuple[str, str]  # (resource, kind)


def parse_psi(text: str) -> dict[str, float] | None:
    """kind -> total stalled microseconds, or None when the text is not a PSI file."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in KINDS:
            continue
        for part in rest.split():
            name, _, value = part.partition("=")
            if name == "total":
                try:
                    out[kind] = float(value)
                except ValueError:
                    return None
    return out or None


class PsiReader:
    """``latest``: (resource, kind) -> share of time stalled over the last poll interval."""

    def __init__(self, procfs_root: str) -> None:
        self.root = Path(procfs_root) / "pressure"
        self.available: bool | None = None  # None: not read yet; False: this kernel has no PSI
        self.latest: dict[Key, float] = {}
        self._previous: dict[Key, tuple[float, float]] = {}  # (monotonic seconds, total µs)
        self._problem: str | None = None

    def poll(self, now: float) -> None:
        if self.available is False:
            return
        latest: dict[Key, float] = {}
        problems = []
        for resource in RESOURCES:
            path = self.root / resource
            try:
                with open_regular(path) as f:
                    totals = parse_psi(f.read(4096).decode("ascii", errors="replace"))
                if totals is None:
                    problems.append(f"{path} is not a PSI file")
            except OSError as exc:
                if not self.root.is_dir() or exc.errno == errno.EOPNOTSUPP:  # booted with psi=0
                    self._unavailable(str(exc.strerror or exc))
                    return
                problems.append(f"cannot read {path}: {exc.strerror or exc}")
                totals = None
            if totals is None:
                for kind in KINDS:
                    self._previous.pop((resource, kind), None)
                continue
            for kind, total in totals.items():
                key = (resource, kind)
                before = self._previous.get(key)
                self._previous[key] = (now, total)
                if before is not None and now > before[0] and total >= before[1]:
                    latest[key] = min(1.0, (total - before[1]) / ((now - before[0]) * 1e6))
        self.available = True
        self.latest = latest
        self._note(problems[0] if problems else None)

    def _unavailable(self, why: str) -> None:
        self.available, self.latest = False, {}
        event(
            log,
            logging.INFO,
            "host pressure (PSI) not available: not published",
            path=str(self.root),
            why=why,
        )

    def _note(self, problem: str | None) -> None:
        if problem != self._problem:
            self._problem = problem
            if problem is not None:
                event(log, logging.WARNING, "host pressure (PSI) partly unknown", error=problem)

    def full_stall(self) -> float | None:
        """The larger share of time fully stalled on memory or I/O; None when neither is known."""
        values = [v for (_, kind), v in self.latest.items() if kind == "full"]
        return max(values) if values else None
