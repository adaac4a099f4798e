"""Each workload's latency histograms over the right-sizing window and the short scaling window.

Fed every cycle with each queue's latest cumulative histograms (``links.QueueReading.latency``);
each queue keeps, per kind, a ``HistogramWindow`` over ``window_seconds`` (``window_buckets``
buckets) and one over ``slo_scaling_window_seconds`` (12 buckets). A workload is the queues with
the same ``namespace`` and ``workload`` labels (a queue without them is a workload of its own,
named after it), or the queues an SLO declaration names; its window is the sum of its queues'.

Every kind's observations and their sum count on from the exporter's start (``counted``), and
for a declared target those at or under it (interpolated inside a bucket like the attainment):
the counters a report or a burn-rate alert divides over any window of its own. They only ever add
finite differences, so they stay finite whatever a server publishes.

A histogram the poll refused (``QueueReading.latency_refused``: negative or disordered bounds, counts
that are not finite or go down...) is never read: its windows and counters wait for the next good
page, which counts everything since the last good one. While a declared target's histogram is
refused, the workload's SLO is not judged over the scaling window ("invalid histogram: <why>").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..settings import RightsizingSettings
from .attainment import SloDeclaration, SloEvidence, declaration_for, evaluate
from .latency import KINDS, Histogram, at_or_under, empty, problem
from .latency_window import HistogramWindow

SCALING_BUCKETS = 12


@dataclass
class _Queue:
    key: tuple[str, str]  # (namespace, workload)
    declared: SloDeclaration | None
    server: str | None
    long: dict[str, HistogramWindow] = field(default_factory=dict)
    short: dict[str, HistogramWindow] = field(default_factory=dict)
    last: dict[str, Histogram] = field(default_factory=dict)  # latest cumulative reading per kind
    last_t: float | None = None
    seen_at: float = 0.0
    fresh: bool = False  # read in the latest cycle
    refused: dict[str, str] = field(default_factory=dict)  # kinds refused in the latest poll -> why
    unread: set[str] = field(default_factory=set)  # kinds refused before any good reading of them
    read: bool = False  # read before: a kind that appears later started from zero


@dataclass
class Counted:
    """Cumulative observations of one kind of latency (and their sum), and those at or under its
    target when one is declared."""

    requests: float = 0.0
    good: float = 0.0  # declared targets only
    seconds: float = 0.0  # sum of the observations


@dataclass(frozen=True, slots=True)
class Scaling:
    """A workload's SLO over the scaling window: evidence when it can be judged, else why not."""

    evidence: SloEvidence | None
    why_not: str | None  # "1 of 2 sources down", "12 requests in the window", ...
    # ``why_not`` without the figures that change from cycle to cycle (a label value must not churn)
    reason: str | None = None


class SloTracker:
    def __init__(self, settings: RightsizingSettings, slos: Iterable[SloDeclaration] = ()) -> None:
        self.s = settings
        self.slos = tuple(slos)
        self._queues: dict[str, _Queue] = {}
        self.counted: dict[tuple[str, str, str], Counted] = {}  # (namespace, workload, kind)

    def add(
        self,
        t: float,
        queue: str,
        labels: Mapping[str, str],
        server: str | None,
        latency: Mapping[str, Histogram] | None,
        refused: Mapping[str, str] | None = None,
    ) -> None:
        q = self._queues.get(queue)
        if q is None:
            declared = declaration_for(self.slos, queue, labels)
            if declared is not None:
                key = declared.key(queue)
            elif "namespace" in labels and "workload" in labels:
                key = (labels["namespace"], labels["workload"])
            else:
                key = ("", queue)
            q = self._queues[queue] = _Queue(key, declared, server)
        if q.last_t is not None and t < q.last_t:
            return  # out of time order (a replay behind the live cycles): ignored
        q.last_t = t
        q.seen_at, q.fresh = t, True
        first, q.read = not q.read, True
        q.refused = dict(refused) if refused else {}
        for kind, h in (latency or {}).items():
            why = problem(h) if kind in KINDS else None
            if why is not None:  # whatever the source: garbage is never read
                q.refused.setdefault(kind, why)
        # a kind never read well: its first good reading is only a baseline
        q.unread.update(kind for kind in q.refused if kind not in q.long)
        if latency is None:
            return
        s = self.s
        targets = q.declared.targets if q.declared is not None else {}
        for kind, h in latency.items():
            if kind not in KINDS or kind in q.refused:
                continue
            long = q.long.get(kind)
            if long is None:
                long = q.long[kind] = HistogramWindow(s.window_seconds, s.window_buckets)
                q.short[kind] = HistogramWindow(s.slo_scaling_window_seconds, SCALING_BUCKETS)
                # absent from the previous readings: the server creates it on first use, from zero
                # (unless it was there, refused: what it counts then may predate the window)
                baseline = first or kind in q.unread
                q.unread.discard(kind)
                q.last[kind] = h if baseline else empty(h.bounds)
                if baseline:
                    long.add_delta(t, empty(h.bounds))  # a baseline: the window starts here
                    q.short[kind].add_delta(t, empty(h.bounds))
                    continue
            last = q.last[kind]
            q.last[kind] = h
            delta = h.minus(last)
            if delta is None:  # restarted (or new bounds): everything it counts is new
                delta = h
            long.add_delta(t, delta)
            q.short[kind].add_delta(t, delta)
            counted = self.counted.setdefault((*q.key, kind), Counted())
            good = at_or_under(delta, targets[kind]) if kind in targets else None
            grown = (counted.requests + delta.count, counted.seconds + delta.total,
                     counted.good + (good or 0.0))  # fmt: skip
            if all(math.isfinite(x) for x in grown):  # never NaN or +Inf, whatever was published
                counted.requests, counted.seconds, counted.good = grown

    def begin_cycle(self) -> None:
        """Before a cycle's readings: a queue not read in it is down (its source failed)."""
        for q in self._queues.values():
            q.fresh = False

    def forget(self, horizon: float) -> None:
        """Drop queues not seen since ``horizon`` (gone for a whole window)."""
        for name in [n for n, q in self._queues.items() if q.seen_at < horizon]:
            del self._queues[name]
        present = {q.key for q in self._queues.values()}  # counters of workloads gone go too
        for key in [k for k in self.counted if k[:2] not in present]:
            del self.counted[key]

    def workloads(self) -> dict[tuple[str, str], list[_Queue]]:
        out: dict[tuple[str, str], list[_Queue]] = {}
        for q in self._queues.values():
            out.setdefault(q.key, []).append(q)
        return out

    def queue_key(self, queue: str) -> tuple[str, str] | None:
        q = self._queues.get(queue)
        return None if q is None else q.key

    def _sum(self, queues: list[_Queue], short: bool) -> dict[str, Histogram]:
        out: dict[str, Histogram] = {}
        for q in queues:
            for kind, w in (q.short if short else q.long).items():
                h = w.total()
                if h is not None:
                    out[kind] = h if kind not in out else out[kind].plus(h)
        return out

    def evidence(self) -> dict[tuple[str, str], SloEvidence]:
        """Each workload's latencies over the right-sizing window, with its SLO where declared."""
        out = {}
        for key, queues in self.workloads().items():
            found = self._sum(queues, short=False)
            declared = next((q.declared for q in queues if q.declared is not None), None)
            if not found and declared is None:
                continue
            server = next((q.server for q in queues if q.server), None)
            span = max((w.span_seconds() for q in queues for w in q.long.values()), default=0.0)
            ev = evaluate(*key, declared, found, self.s.slo_min_requests, server, span)
            out[key] = ev.with_invalid(_refused(queues))
        return out

    def scaling(self) -> dict[tuple[str, str], Scaling]:
        """Each workload with a declared SLO over the scaling window: judged only when every one of
        its queues was read in the latest cycle and the window holds enough requests."""
        out = {}
        for key, queues in self.workloads().items():
            declared = next((q.declared for q in queues if q.declared is not None), None)
            if declared is None:
                continue
            down = [q for q in queues if not q.fresh]
            if down:
                out[key] = Scaling(None, f"{len(down)} of {len(queues)} sources down", "sources down")
                continue
            invalid = [why for kind, why in _refused(queues).items() if kind in declared.targets]
            if invalid:
                why = f"invalid histogram: {invalid[0]}"
                out[key] = Scaling(None, why, why)
                continue
            server = next((q.server for q in queues if q.server), None)
            found = self._sum(queues, short=True)
            ev = evaluate(*key, declared, found, self.s.slo_scaling_min_requests, server,
                          self.s.slo_scaling_window_seconds)  # fmt: skip
            judged = [x for x in ev.latencies if x.judged]
            if not judged:
                n = max((x.requests for x in ev.latencies), default=0.0)
                why = "no requests in the window" if n <= 0 else f"{n:.0f} requests in the window"
                if not found:
                    out[key] = Scaling(None, "no latency histogram read", "no latency histogram read")
                elif any(x.mean_only for x in ev.latencies if x.kind in declared.targets):
                    out[key] = Scaling(None, why, "the server publishes only a mean")
                else:
                    out[key] = Scaling(None, why, "too few requests in the window")
                continue
            ratio = ev.ratio
            if ratio is not None and not math.isfinite(ratio):  # cannot happen on checked input
                out[key] = Scaling(None, "latency ratio not finite", "latency ratio not finite")
                continue
            out[key] = Scaling(ev, None)
        return out


def _refused(queues: list[_Queue]) -> dict[str, str]:
    """Kinds refused in the latest poll of any of ``queues`` -> why (the first queue's reason)."""
    out: dict[str, str] = {}
    for q in queues:
        if q.fresh:
            for kind, why in q.refused.items():
                out.setdefault(kind, why)
    return out
