"""Young history in words: what a verdict judged on less than a full window would change.

With history shorter than the window the engine widens its margins (``recommend.widening``), so the
same signals can earn another verdict than a full window would: a report over 7 days run against a
Prometheus that holds 11 minutes, or an exporter that started a few minutes ago, disagrees with one
that holds the whole window. The reason says so, with the verdict the full window would give, and
says when the GPU has been idle all along but idleness needs more history (``idle_after_seconds``).
"""

from __future__ import annotations

from collections.abc import Callable

from .evidence import Evidence
from .recommend import widening
from .settings import RightsizingSettings
from .words import duration, pct


def history_note(
    judged: tuple[str, str], ev: Evidence, s: RightsizingSettings, full_window: Callable[[], tuple[str, str]]
) -> str:
    """What young history changed about ``judged`` (verdict, recommendation), as sentences to add to
    the reason ("" when nothing); ``full_window`` judges the same evidence without the widening
    (called only when there is a widening)."""
    if judged[0] in ("insufficient_data", "idle"):
        return ""
    notes = []
    w = widening(ev, s)
    if w > 1.0001:
        verdict, recommended = full_window()
        if (verdict, recommended) != judged:
            notes.append(
                f"History {duration(ev.history_seconds)} of a {duration(ev.window_seconds)} window: judged "
                f"with margins x{w:.2f}; a full window of the same signals says {verdict} ({recommended})"
            )
    quiet = ev.activity_recent_max is not None and ev.activity_recent_max < s.idle_activity_ratio
    kernels = ev.utilization_recent_max is None or ev.utilization_recent_max < s.idle_activity_ratio
    if quiet and kernels and ev.history_seconds < s.idle_after_seconds:
        notes.append(
            f"Activity has stayed below {pct(s.idle_activity_ratio)} for all {duration(ev.history_seconds)} "
            f"found; idle needs {duration(s.idle_after_seconds)}"
        )
    return f"{'. '.join(notes)}." if notes else ""
