"""Figures as a reader takes them in: latencies in the unit that keeps them short, how far over a
target something is without a six-digit percentage, and monthly money without false precision.

Used by the status page, the reports and the SLO words; a leaf (imports nothing of ours)."""

from __future__ import annotations

import math

CAP = 100.0  # a latency this many times its target or more reads ">100x the target"


def latency(seconds: float | None) -> str:
    """'820 ms', '4.10 s', '33.4 min', '2.50 h': milliseconds under a second, seconds under a
    minute, then minutes and hours to three significant digits; never '2006500 ms'."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    for unit, size in (("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{_three(seconds / size)} {unit}"
    return f"{seconds:.2f} s"


def _three(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}" if x < 100 else f"{x:.0f}"


def over_target(ratio: float) -> str:
    """How far a latency at ``ratio`` times its target is over it: '64 %' up to twice the target,
    then '4.0x the target', and '>100x the target' past the cap (no '401200%')."""
    if not math.isfinite(ratio) or ratio >= CAP:
        return f">{CAP:.0f}x the target"
    if ratio < 2:
        return f"{ratio - 1:.0%}"
    return f"{ratio:.1f}x the target"


def missed_by(ratio: float) -> str:
    """'missed by 64%', 'missed: 4.0x the target', 'missed: >100x the target'."""
    words = over_target(ratio)
    return f"missed by {words}" if ratio < 2 else f"missed: {words}"


def monthly(dollars: float) -> str:
    """A monthly figure to three significant digits: '$25,000', '$1,230', '$87.6', '$0.412'
    ('$24,969.07 a month' claims a precision that hourly prices times 730 hours do not have)."""
    if not math.isfinite(dollars):
        return "n/a"
    sign = "-" if dollars < 0 else ""
    x = abs(dollars)
    if x == 0:
        return "$0"
    digits = 3 - 1 - math.floor(math.log10(x))
    rounded = round(x, digits)
    if digits <= 0:
        return f"{sign}${rounded:,.0f}"
    return f"{sign}${rounded:,.{digits}f}"
