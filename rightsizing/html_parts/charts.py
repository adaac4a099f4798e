"""Small inline SVG line charts of a GPU's right-sizing window, drawn on the server.

Each chart plots per-bucket means of one or two ratio signals (0-1) over the window, oldest on the
left; buckets without values leave a gap instead of a line drawn through zero. Colours come from
the page's CSS (classes ``s1``/``s2``), so one chart serves the light and the dark theme.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 160.0, 44.0
PAD = 2.0  # keeps a 100 % line inside the frame


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float | None]  # per bucket, oldest first, ratios 0-1


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    series: tuple[Series, ...]
    note: str = ""  # e.g. "of 80 GiB" for memory
    start: str = "window start"  # the x axis' left end ("1 h ago")
    end: str = "window end"  # and its right end ("now")


def _segments(values: Sequence[float | None]) -> list[list[tuple[float, float]]]:
    """Runs of consecutive known values as (x, y) points in the chart's coordinates."""
    n = len(values)
    step = (WIDTH - 2 * PAD) / max(1, n - 1)
    runs: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for i, v in enumerate(values):
        if v is None:
            if current:
                runs.append(current)
                current = []
            continue
        clamped = min(1.0, max(0.0, v))
        current.append((PAD + i * step, HEIGHT - PAD - clamped * (HEIGHT - 2 * PAD)))
    if current:
        runs.append(current)
    return runs


def _last(values: Sequence[float | None]) -> float | None:
    return next((v for v in reversed(values) if v is not None), None)


def _pct(v: float | None) -> str:
    return "&ndash;" if v is None else f"{v:.0%}"


def svg(chart: Chart) -> str:
    """The chart as an ``<figure>`` holding an inline ``<svg>``; ``data-points`` counts the plotted
    points of all its series (0: nothing to draw yet)."""
    parts: list[str] = []
    points = 0
    legend = []
    for number, series in enumerate(chart.series, start=1):
        cls = f"s{number}"
        for run in _segments(series.values):
            points += len(run)
            if len(run) == 1:  # a lone bucket: a dot, since a one-point polyline draws nothing
                x, y = run[0]
                parts.append(f'<circle class="{cls}" cx="{x:.1f}" cy="{y:.1f}" r="1.5"/>')
            else:
                coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                parts.append(f'<polyline class="{cls}" points="{coords}"/>')
        legend.append(f'<span class="key {cls}">{escape(series.name)} {_pct(_last(series.values))}</span>')
    label = escape(chart.title)
    body = "".join(parts)
    empty = "" if points else '<span class="empty">not reported</span>'
    note = f' <span class="note">{escape(chart.note)}</span>' if chart.note else ""
    # Axes as HTML beside the stretched drawing (text inside it would stretch too): the y axis is
    # the share of the GPU (0 to 100 %, gridlines at 50 and 100), the x axis the window's time.
    return (
        f'<figure class="chart" data-points="{points}"><figcaption>{label}{note}</figcaption>'
        '<div class="plot"><div class="yaxis" aria-hidden="true"><span>100%</span><span>50%</span>'
        '<span>0%</span></div>'
        f'<svg viewBox="0 0 {WIDTH:.0f} {HEIGHT:.0f}" preserveAspectRatio="none" role="img" '
        f'aria-label="{label}, 0 to 100 % over the window"><title>{label}</title>'
        f'<line class="grid" x1="0" y1="{PAD}" x2="{WIDTH:.0f}" y2="{PAD}"/>'
        f'<line class="grid" x1="0" y1="{HEIGHT / 2:.0f}" x2="{WIDTH:.0f}" y2="{HEIGHT / 2:.0f}"/>'
        f'<line class="axis" x1="0" y1="{HEIGHT - PAD}" x2="{WIDTH:.0f}" y2="{HEIGHT - PAD}"/>'
        f'{body}</svg></div>{empty}<div class="xaxis" aria-hidden="true"><span>{escape(chart.start)}</span>'
        f'<span>{escape(chart.end)}</span></div><div class="legend">{"".join(legend)}</div></figure>'
    )
