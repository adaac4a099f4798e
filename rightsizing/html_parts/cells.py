"""Formatting of table cells shared by the status page and the HTML report. ``e`` escapes every
value that comes from outside (pod names, namespaces, models, error texts): they are user input."""

from __future__ import annotations

import time
from html import escape

VERDICT_ORDER = ("underprovisioned", "overprovisioned", "idle", "rightsized", "insufficient_data")
VERDICT_WORDS = {
    "idle": "idle",
    "overprovisioned": "overprovisioned",
    "rightsized": "rightsized",
    "underprovisioned": "underprovisioned",
    "insufficient_data": "not enough data",
}
HOURS_PER_MONTH = 730
NONE = '<span class="muted">&ndash;</span>'


def e(value: object) -> str:
    return escape(str(value), quote=True)


def utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))




def money(dollars: float) -> str:
    return f"${dollars:,.2f}"


def verdict_chip(verdict: str | None) -> str:
    key = verdict or "unknown"
    word = VERDICT_WORDS.get(key, "unknown")
    return f'<span class="verdict v-{e(key)}">{e(word)}</span>'
