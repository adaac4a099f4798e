"""How much history the report found, to the sample: when each GPU was first and last sampled in
the window, the time each queue's counters span, and those counters' increase over it.

Rates are the increase of a counter over the time its samples span, first to last, as the live
engine divides a counter's increase by the time its readings span. Two things made a young
history look busier than it is, and are avoided here:

- ``increase()`` extrapolates beyond the first and last samples (by half a scrape interval at
  the start of a series younger than the window, up to one at the end): +6 to +19 % over 2
  minutes of 15 s scrapes. A counter's
  increase here is its last value less its first (``max_over_time - min_over_time``: a counter
  that did not restart is monotonic); only a series that restarted in the window is read with
  ``increase()``, whose extrapolation over a long history is small.
- The span read to a subquery step (``sample_span``: 60 s on a week's window) is 60 s of 120.
  ``timestamp()`` would name each sample's own time, but Prometheus evaluates it in a subquery
  with a fresh iterator per step (``promapi.sample_span`` says what that costs). The exporter
  says when each of its samples was taken instead: ``rightsizer_last_sample_timestamp_seconds``
  (per exporter) and ``rightsizer_queue_last_success_timestamp_seconds`` (per queue, the poll
  its depth and counters come from), whose least and greatest values over the window are the
  first and last sample's own times, read once each. A GPU sampled in every scrape that carried
  its exporter's timestamp (as many samples) was sampled first and last when they were; one that
  appeared, left or missed a scrape keeps its steps, as do GPUs of exporters that did not publish
  the timestamp then (a ``families`` list without it, or history from before it was added). A
  queue takes its exporter's span where its timestamp was sampled as often as its depth, else its
  depth's span to the step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .promapi import Sample, sample_span

STAMP = "rightsizer_last_sample_timestamp_seconds"
QUEUE_STAMP = "rightsizer_queue_last_success_timestamp_seconds"
# Marks an exporter's part of an answer (not a label of any series: the query sets it).
PART = "report_span_part"
Key = tuple[str, ...]


def with_exporter(expr: str, over_time: str, w: str) -> str:
    """``expr`` (per unit) and, marked ``PART``, each exporter's ``over_time`` (count, min or max)
    of its samples' times over the window: one more series per exporter."""
    agg = "min" if over_time == "min" else "max"
    own = f"{agg} by (instance) ({over_time}_over_time({STAMP}[{w}]))"
    return f'{expr} or label_replace({own}, "{PART}", "exporter", "", "")'


def samples_query(metric: str, by: str, w: str) -> str:
    """Each series' samples of ``metric`` over the window, and each exporter's."""
    return with_exporter(f"max by ({by}) (count_over_time({metric}[{w}]))", "count", w)


def edge_queries(metric: str, by: str, w: str, step: str) -> tuple[str, str]:
    """When each series of ``metric`` was first (last) sampled, to ``step``, and each exporter's
    first (last) sample's own time."""
    first, last = sample_span(metric, by, w, step)
    return with_exporter(first, "min", w), with_exporter(last, "max", w)


def split(
    answer: Sequence[Sample], key_of: Callable[[dict[str, str]], Key]
) -> tuple[dict[Key, float], dict[str, float]]:
    """An answer of the queries above: per unit, and per exporter (``instance``)."""
    units: dict[Key, float] = {}
    exporters: dict[str, float] = {}
    for s in answer:
        if s.labels.get(PART) == "exporter":
            exporters[s.labels.get("instance", "")] = s.value
        else:
            units[key_of(dict(s.labels))] = s.value
    return units, exporters


@dataclass(frozen=True)
class History:
    """When each unit was first and last sampled in the window (``at``: its end)."""

    at: float
    step: float  # the subquery step of ``first`` and ``last``, seconds
    first: dict[Key, float]  # per unit: the step holding its first sample
    last: dict[Key, float]
    exporter_count: dict[str, float]  # per exporter: its samples, and their first and last times
    exporter_first: dict[str, float]
    exporter_last: dict[str, float]

    def edges(self, key: Key, instance: str, samples: float | None) -> tuple[float, float]:
        """The unit's first and last sample: its exporter's where it was sampled as often (every
        scrape of it), else the steps' (a unit sampled only after the last step of the window,
        as at the window's end: a step holds the samples of the ``step`` before it)."""
        count, first, last = (self.exporter_count.get(instance), self.exporter_first.get(instance),
                              self.exporter_last.get(instance))  # fmt: skip
        if samples and count == samples and first is not None and last is not None:
            return first, last
        return self.first.get(key, self.at), self.last.get(key, self.at)

    def earliest(self) -> float | None:
        """No sample of the answers is older than this (None: no sample)."""
        times = [t - self.step for t in self.first.values()] + list(self.exporter_first.values())
        return min(times, default=None)


def queue_span_queries(depth: str, by: str, w: str, step: str) -> tuple[str, str]:
    """Per queue: the time from its first poll in the window to its last, as the exporter
    timestamped them (where the timestamp was sampled as often as the depth), and the same from
    the depth's samples, to ``step``."""
    first, last = sample_span(depth, by, w, step)
    stamps = f"{QUEUE_STAMP}[{w}]"
    exact = f"max by ({by}) (max_over_time({stamps}) - min_over_time({stamps}))"
    same = f"max by ({by}) (count_over_time({stamps})) == max by ({by}) (count_over_time({depth}[{w}]))"
    return f"{exact} and on ({by}) ({same})", f"{last} - {first}"


def counted(metric: str, w: str) -> str:
    """A counter's increase over the window's samples, first to last, not extrapolated (a series
    that restarted in the window: ``increase()``)."""
    r = f"{metric}[{w}]"
    return f"((max_over_time({r}) - min_over_time({r})) unless (resets({r}) > 0)) or increase({r})"
