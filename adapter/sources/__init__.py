"""Where rule values come from: the Prometheus query API, or the exporters' /metrics directly.

A source answers ``collect(rules)`` with one ``RuleResult`` per rule: the rule's series at one
instant, or a one-line reason why there are none (the backend is down, the query is wrong).
``collect`` never raises for an expected fault and finishes within its own deadline.

Rules with a source family (``up_family`` or ``source_family``) also get their **source states**:
one series per (key, source), where the key is the labels a request selects on and the source
names the exporter that published it (reserved label ``SOURCE``, which no label selector can
name). A key is answered only while no state of it says otherwise (``kubernetes/availability``):

- ``UP``: an exporter that is up and current publishes it now;
- ``DOWN``: the source behind it says it is down (a queue's ``rightsizer_queue_source_up`` 0);
- ``STALE``: an exporter that published it at its last good scrape no longer answers (or its
  target is gone): missed, unless another exporter that is up publishes the same key;
- ``TAINTED``: a value of it may still be served although its exporter is not current (frozen,
  not scraped since the engine restarted, a sample older than ``stale_after``): never answered.

``SOURCE_WHY`` carries the reason of a state that is not UP, for the 503's message; ``GONE``
marks a STALE state whose exporter left service discovery, or stopped publishing the key while up
(Prometheus mode). Where a result says ``up_from_values``, the UP states are not sent at all (one
per key would cost as much as the values): the values' keys stand for them.

A rule with ``every_source`` (keys that several exporters publish parts of: an SLO over replicas
on several nodes) is stricter: a key is answered only while every exporter that publishes it, or
published it at its last good scrape, is UP; one that left service discovery (a DaemonSet
rollout, a node removed with its pods) is no longer counted once another exporter that is up
publishes the key.

A value that is not a number (NaN, ±Inf) is never served: the key it belongs to gets a TAINTED
state naming it (``refuse_non_finite``), or a rule without source states fails whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from ..rules import RuleConfig
from ..vectors import Series

UP, DOWN, STALE, TAINTED = 1.0, 0.0, -1.0, -2.0  # values of a rule's source states
SOURCE, SOURCE_WHY = "@source", "@why"  # reserved labels of a state: no selector key can start with @
GONE = "@gone"  # on a STALE state: its exporter left service discovery
UNKNOWN = "@unknown"  # a state without a key: a source whose series are unknown (RuleResult.unknown)
MAX_REASON = 200  # characters of a source's own reason (a rule's ``why_family``) quoted in a 503


@dataclass(frozen=True, slots=True)
class RuleResult:
    series: tuple[Series, ...] = ()
    timestamp: float = 0.0
    error: str | None = None
    # Rules with a source family: the states of every (key, source) known (see above).
    sources: tuple[Series, ...] | None = None
    # Non-empty: a source whose series are not known at all (an exporter that never answered), so
    # any selection might include some: every request fails with this reason.
    unknown: str = ""
    # True: the UP states are left out (Prometheus mode, rules with a ``source_family``): a key the
    # values hold counts as published by a source up and current unless a state of it says otherwise.
    up_from_values: bool = False


def state(labels: dict[str, str], source: str, code: float, why: str = "") -> Series:
    """A source state: ``labels`` (the key) plus the source and, when not UP, why."""
    out = {**labels, SOURCE: source}
    if why:
        out[SOURCE_WHY] = why
    return Series(out, code)


def reasons(
    rule: RuleConfig, series: Iterable[Series], source_labels: Sequence[str] = ()
) -> dict[tuple[frozenset[tuple[str, str]], tuple[str, ...]], str]:
    """Why each key's flag is 0, from the series of ``rule``'s ``why_family`` (their ``reason``
    label), by (key, the values of ``source_labels``). The text is the source's own, so it is
    bounded: control characters and runs of white space become one space, at most ``MAX_REASON``
    characters; several reasons for one key give the first in order and how many more."""
    found: dict[tuple[frozenset[tuple[str, str]], tuple[str, ...]], set[str]] = {}
    for s in series:
        labels = {k: v for k, v in s.labels.items() if k != "reason"}
        text = " ".join("".join(c if c.isprintable() else " " for c in s.labels.get("reason", "")).split())
        if text:
            key = frozenset(rule.key_of(labels).items()), tuple(labels.get(n, "") for n in source_labels)
            found.setdefault(key, set()).add(text)
    out = {}
    for key, texts in found.items():
        first, *rest = sorted(texts)
        first = first if len(first) <= MAX_REASON else first[: MAX_REASON - 3] + "..."
        out[key] = f"{first} (and {len(rest)} more)" if rest else first
    return out


def split_unknown(states: Sequence[Series]) -> tuple[tuple[Series, ...], str]:
    """(the keyed states, the reasons of the UNKNOWN ones joined): what a RuleResult carries."""
    unknown = [s.labels[UNKNOWN] for s in states if UNKNOWN in s.labels]
    keyed = tuple(s for s in states if UNKNOWN not in s.labels)
    return keyed, "; ".join(unknown)[:500]


def non_finite(value: float) -> str:
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def refuse_non_finite(result: RuleResult, bad: Sequence[Series], where: str) -> RuleResult:
    """``result`` with the series in ``bad`` (values that are not numbers, left out of
    ``result.series``) refused: a TAINTED state for each one's labels, or, for a rule without
    source states, an error naming the first."""
    if not bad or result.error is not None:
        return result
    first = bad[0]
    labels = ",".join(f"{k}={v}" for k, v in sorted(first.labels.items()))
    why = f"{where} gave {non_finite(first.value)} for {{{labels}}}: not a number, never served"
    if result.sources is None:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return RuleResult(error=(why + more)[:500])
    tainted = tuple(
        state(dict(s.labels), where, TAINTED, f"{where} gave {non_finite(s.value)} for it: not a number")
        for s in bad
    )
    return replace(result, sources=result.sources + tainted)


class Source(Protocol):
    """A source may also say ``repeats_results = True``: ``collect`` then answers the very object it
    answered before while nothing changed, and the cache keeps its memoized answers; and
    ``query_deadline``: the deadline of one of its queries, a refresh being a few rounds of them
    (the cache cuts a refresh at six of them, at least: ``Cache.deadline``)."""

    name: str
    interval: float

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        """Values of ``rules``; ``everything`` False lets the source skip upstreams not due yet."""
        ...

    def next_delay(self, elapsed: float, age: float = 0.0) -> float:
        """Seconds to wait before the next ``collect``, given that the last refresh took ``elapsed``
        and that its values were ``age`` seconds old when they were put in the cache."""
        ...


__all__ = [
    "DOWN", "GONE", "MAX_REASON", "SOURCE", "SOURCE_WHY", "STALE", "TAINTED", "UNKNOWN", "UP", "RuleResult",
    "Series", "Source", "non_finite", "reasons", "refuse_non_finite", "split_unknown", "state",
]
