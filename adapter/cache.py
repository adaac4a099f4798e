"""The cache: every rule's vector, refreshed on its own cadence, and answers memoized per refresh.

One refresh asks the source once per rule (Prometheus mode) or scrapes each exporter once
(direct mode), whatever the number of HPAs, ScaledObjects and selectors asking. Requests are
answered from the cached vectors; each distinct answer (metric, namespace, selector) is computed
once per refresh and then served as ready bytes until the next refresh.

Rules nobody asks for cost nothing (Prometheus mode, ``prometheus.rule_idle_seconds``): a rule no
request asked for in that long (counted from the start, so every rule is refreshed at first) is
*idle*: its query is not sent and its values are dropped. A request for it is answered 503 (its
values are not known: never old ones, never 0), and wakes the refresher at once, so the rule has
values from the refresh that follows, before an HPA's next sync. An autoscaler using a rule asks
for it at every sync (HPA every 15 s, KEDA every 30 s by default), so a rule in use never idles.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rightsizer_core.heap import full_collection_due
from rightsizer_core.logs import Repeats, event, shape

from . import labelsets
from .giveway import EVERY, give_way
from .rules import RuleConfig
from .selfmetrics import AdapterMetrics
from .sources import RuleResult, Source, split_unknown
from .vectors import Series, Vector, add_workload

log = logging.getLogger("rightsizer.adapter.cache")

Answer = tuple[int, bytes]  # HTTP status, body
THREAD_SERIES = 20_000  # refreshes with at least this many series are built in a worker thread


def idle_reason(seconds: float) -> str:
    return (
        f"no request asked for this metric in the last {seconds:g} s, so it was not refreshed; "
        "asked now, it has values from the next refresh (within seconds): ask again"
    )


@dataclass(frozen=True, slots=True)
class RuleState:
    rule: RuleConfig
    vector: Vector | None  # None while the rule has no good values
    error: str | None
    updated: float | None  # monotonic time of the last successful refresh
    sources: Vector | None = None  # rules with a source family: the state of each (key, source)
    unknown: str = ""  # a source whose series are unknown: every request fails with this
    up_from_values: bool = False  # UP states left out: the values' keys stand for them


def shared(series: tuple[Series, ...]) -> tuple[Series, ...]:
    """``series`` with every label set interned (``labelsets``): those of a Prometheus answer
    already are; a direct scrape's and the source states are interned here."""
    if all(type(s.labels) is labelsets.Labels for s in series):
        return series
    out = []
    for read, s in enumerate(series, 1):
        if not read % EVERY:
            give_way()
        out.append(Series(labelsets.intern(s.labels), s.value))
    return tuple(out)


def _after_refresh(indexes: Sequence[tuple[Vector, tuple[str, ...]]]) -> None:
    labelsets.sweep()
    for vector, labels in indexes:
        vector.prepare(labels)


class Cache:
    def __init__(
        self,
        rules: Sequence[RuleConfig],
        source: Source,
        metrics: AdapterMetrics,
        max_answers: int = 10000,
        max_answer_bytes: int = 32 * 2**20,
    ) -> None:
        self.static_rules = tuple(rules)
        self.rules = {r.name: r for r in rules}
        self.rules_generation = 0  # bumped when a discovering source changes the rule set
        self.source = source
        self.metrics = metrics
        self.max_answers = max_answers
        self.max_answer_bytes = max_answer_bytes
        self.answer_bytes = 0  # the bodies memoized in this refresh
        self.states = {r.name: RuleState(r, None, "no refresh has completed yet", None) for r in rules}
        self.ready = False
        self.generation = 0
        self.answers: dict[tuple[Any, ...], Any] = {}
        self.refreshed = asyncio.Event()  # replaced by a fresh event after every refresh
        # a backstop against a refresh that never ends: each query has its own deadline, and a
        # refresh is the evidence query, rounds of the rules' queries and at most one more round
        self.deadline = max(30.0, source.interval * 4, 6 * getattr(source, "query_deadline", 0.0))
        self._previous: dict[str, RuleResult] | None = None
        self.values_age = 0.0  # the last refresh's values' age when put in (from when its collect returned)
        self._crashed: str | None = None
        self._waiting = False  # said "waiting for the first sample", not yet what fails
        self._repeats = Repeats()  # the same rules failing anew every refresh: once a minute
        self.stopping = False
        # rules not asked for in ``idle_after`` seconds are not refreshed (0: all always are)
        self.idle_after = float(getattr(source, "idle_after", 0.0))
        self._born = time.monotonic()
        self._asked: dict[str, float] = {}  # rule -> monotonic time of the last request for it
        self.idle: frozenset[str] = frozenset()  # rules the last refresh left out
        self.wake = asyncio.Event()  # set by a request for an idle rule: refresh now
        self._touched: list[str] | None = None  # the rules an answer being computed asked for
        self._memo_rules: dict[tuple[Any, ...], tuple[str, ...]] = {}  # memoized answer -> its rules
        metrics.attach_cache(self._rows, lambda: len(self.answers))
        labelsets.register(self)

    def _rows(self) -> list[tuple[str, bool | None, int, float | None]]:
        """(rule, up, series, age) per rule; up None for an idle rule (not refreshed, not down)."""
        now = time.monotonic()
        return [
            (
                name,
                None if name in self.idle else s.error is None,
                len(s.vector) if s.vector is not None else 0,
                None if s.updated is None or name in self.idle else now - s.updated,
            )
            for name, s in self.states.items()
        ]

    def asked(self, name: str) -> None:
        """A request asks for rule ``name``: it stays refreshed. When it is idle (no values now) the
        refresher is woken, so that it has values from the next refresh."""
        self._asked[name] = time.monotonic()
        if self._touched is not None:
            self._touched.append(name)
        if name in self.idle and not self.wake.is_set():
            event(log, logging.INFO, "an idle rule was asked for: refreshing it now", rule=name)
            self.wake.set()

    def _idle_now(self, rules: Sequence[RuleConfig]) -> frozenset[str]:
        """The rules no request asked for in ``idle_after`` seconds (none in the first ones)."""
        if self.idle_after <= 0:
            return frozenset()
        since = time.monotonic() - self.idle_after
        born = self._born
        return frozenset(r.name for r in rules if max(self._asked.get(r.name, born), born) <= since)

    def held_labels(self) -> Iterator[Mapping[str, str]]:
        """The label sets of every series this cache keeps (``labelsets.sweep`` keeps them shared)."""
        vectors = [v for s in self.states.values() for v in (s.vector, s.sources) if v is not None]
        yield from labelsets.held(v.series for v in vectors)

    def memo(self, key: tuple[Any, ...], compute: Callable[[], Any], keep: Callable[[Any], bool]) -> Any:
        """The answer for ``key`` in this refresh, computed on first use. ``key`` is the normalised
        request (metric, namespace, selectors: never the raw query string, which junk parameters
        would make unique); at most ``max_answers`` answers and ``max_answer_bytes`` of bodies are
        kept, the others computed again when asked."""
        found = self.answers.get(key)
        if found is not None:
            if self.idle_after > 0:  # the rules it was computed from are asked for again
                now = time.monotonic()
                for name in self._memo_rules.get(key, ()):
                    self._asked[name] = now
            return found
        self._touched = []
        try:
            found = compute()
        finally:
            touched, self._touched = self._touched, None
        size = len(found[1]) if isinstance(found, tuple) and isinstance(found[-1], bytes) else 64
        size += sum(len(str(part)) for part in key)
        room = len(self.answers) < self.max_answers and self.answer_bytes + size <= self.max_answer_bytes
        if keep(found) and room:
            self.answers[key] = found
            self.answer_bytes += size
            if touched:
                self._memo_rules[key] = tuple(touched)
        return found

    async def _discover(self) -> None:
        """Sources that discover their metrics (prometheus-adapter files) may change the rule set."""
        discover = getattr(self.source, "discover_rules", None)
        if discover is None:
            return
        try:
            async with asyncio.timeout(self.deadline):  # unlike wait_for, never loses a cancellation
                found = await discover()
        except TimeoutError:
            event(log, logging.WARNING, "series discovery timed out", seconds=self.deadline)
            return
        if found is None:
            return
        rules = {r.name: r for r in found}
        rules.update({r.name: r for r in self.static_rules})
        if rules == self.rules:
            return
        self.rules = rules
        self.states = {
            n: self.states[n]
            if n in self.states and self.states[n].rule == r
            else RuleState(r, None, "no refresh has completed yet", None)
            for n, r in rules.items()
        }
        self._previous = None
        self.rules_generation += 1

    async def refresh_once(self, everything: bool = True) -> None:
        """Bring the cache up to date: from every upstream, or (``everything`` False) from those due."""
        started = time.monotonic()
        await self._discover()
        every = list(self.rules.values())
        idle = self._idle_now(every)
        if idle != self.idle and idle - self.idle:
            event(log, logging.INFO, "rules no request asked for are not refreshed until asked",
                  rules=",".join(sorted(idle - self.idle)), seconds=self.idle_after)  # fmt: skip
        rules = [r for r in every if r.name not in idle]
        try:
            # Python 3.11's wait_for returns the result instead of raising CancelledError when the
            # collect ends in the loop turn that cancels it, and a stop would then be lost.
            async with asyncio.timeout(self.deadline):
                results = await self.source.collect(rules, everything)
        except TimeoutError:
            results = {r.name: RuleResult(error=f"refresh took longer than {self.deadline}s") for r in rules}
        except Exception as exc:  # a bug must not freeze the last values: every rule fails instead
            why = f"refresh failed: {type(exc).__name__}: {exc}".splitlines()[0][:300]
            if why != self._crashed:  # the traceback once per distinct failure, not once per refresh
                log.exception("refresh failed unexpectedly")
            self._crashed = why
            results = {r.name: RuleResult(error=why) for r in rules}
        else:
            self._crashed = None
        now = time.monotonic()
        if results is self._previous and not idle:  # the source saw no change: keep answers memoized
            self.states = {
                n: RuleState(s.rule, s.vector, None, now, s.sources, s.unknown, s.up_from_values)
                if s.error is None
                else s
                for n, s in self.states.items()
            }
            self.values_age = time.monotonic() - now
            self._say(self.states, {})
            self.metrics.refreshed(time.monotonic() - started)
            return
        # Kept only where the source may answer the very same results again (nothing changed): kept
        # otherwise, they would hold every series a second time (before add_workload) until the next.
        self._previous = results if getattr(self.source, "repeats_results", False) else None
        build = functools.partial(self._build, rules, results, now)
        large = sum(len(r.series) + len(r.sources or ()) for r in results.values()) >= THREAD_SERIES
        # at fleet scale hundreds of ms of work: in a worker thread, requests answered meanwhile
        states, failing, recovered, indexes = await asyncio.to_thread(build) if large else build()
        if idle:  # their values are dropped: never served once not refreshed
            reason = idle_reason(self.idle_after)
            states = {
                r.name: states.get(r.name) or RuleState(r, None, reason, self.states[r.name].updated)
                for r in every
            }
        self.idle = idle
        self._say(states, failing)
        if recovered:
            event(log, logging.INFO, "rules have values again", rules=",".join(recovered))
            self._repeats = Repeats()  # a new failure is said at once
        self.states = states
        self.values_age = time.monotonic() - now
        self.answers = {}
        self._memo_rules = {}
        self.answer_bytes = 0
        self.generation += 1
        if not self.ready and any(s.error is None for s in states.values()):
            self.ready = True
            event(log, logging.INFO, "first refresh complete", rules=len(states), source=self.source.name)
        # Forget the label sets no cache holds any more (pods replaced), and build the indexes the
        # last vectors had, once those are dropped (both at once would hold both). A request may
        # build one of them first: each builds the same index.
        if large:
            await asyncio.to_thread(_after_refresh, indexes)
        else:
            _after_refresh(indexes)
        self.metrics.refreshed(time.monotonic() - started)
        done, self.refreshed = self.refreshed, asyncio.Event()
        done.set()

    def _build(
        self, rules: list[RuleConfig], results: Mapping[str, RuleResult], now: float
    ) -> tuple[dict[str, RuleState], dict[str, list[str]], list[str], list[tuple[Vector, tuple[str, ...]]]]:
        """The new states from a refresh's ``results`` (and the old states); the reasons that newly
        fail (reason -> rules), the rules that have values again, and the indexes to build: the
        new vectors with the labels their old ones had built indexes of (requests select on them)."""
        states = {}
        indexes: list[tuple[Vector, tuple[str, ...]]] = []
        failing: dict[str, list[str]] = {}  # new reason → rules that now fail for it
        recovered: list[str] = []
        for rule in rules:
            result = results.get(rule.name) or RuleResult(error="the source gave no answer for this rule")
            old = self.states[rule.name]
            if result.error is not None:
                states[rule.name] = RuleState(rule, None, result.error, old.updated)
                if old.error != result.error:
                    failing.setdefault(result.error, []).append(rule.name)
                continue
            series, found, unknown = result.series, result.sources, result.unknown
            if found is not None:  # states without a key: sources whose series are unknown
                found, more = split_unknown(found)
                unknown = "; ".join(w for w in (unknown, more) if w)
            if rule.workload_from_pod:  # the states carry the labels the values carry
                series = tuple(add_workload(series))
                found = None if found is None else tuple(add_workload(found))
            series = shared(series)
            found = None if found is None else shared(found)
            sources = None if found is None else Vector(found, result.timestamp)
            values = Vector(series, result.timestamp)
            for new, before in ((values, old.vector), (sources, old.sources)):
                if new is not None and before is not None:
                    indexes.append((new, before.indexed()))
            states[rule.name] = RuleState(rule, values, None, now, sources, unknown, result.up_from_values)
            if old.error is not None and old.updated is not None and rule.name not in self.idle:
                recovered.append(rule.name)
        return states, failing, recovered, indexes

    def _say(self, states: dict[str, RuleState], failing: dict[str, list[str]]) -> None:
        """Warns about ``failing`` (new reason -> rules), one line per cause; while the source waits
        for the exporters' first sample (still starting), one info line instead, and what still
        fails once the wait is over."""
        if not self.ready and getattr(self.source, "waiting", False):
            if not self._waiting:
                event(log, logging.INFO, "waiting for the first sample", source=self.source.name)
            self._waiting, failing = True, {}
        elif self._waiting:
            self._waiting, failing = False, {}
            for name, st in states.items():
                if st.error is not None:
                    failing.setdefault(st.error, []).append(name)
        for reason, names in failing.items():
            rules = ",".join(names)
            key = (rules, shape(reason))
            self._repeats.warning(key, log, "rules have no values", rules=rules, reason=reason)

    async def run(self) -> None:
        """Refresh forever when the source says (a slow refresh delays the next, never overlaps)."""
        collected = time.monotonic()
        while not self.stopping:  # checked too, so a cancellation lost in a library cannot keep it going
            started = time.monotonic()
            try:
                await self.refresh_once(everything=False)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in a rule must not stop the refreshes of the others
                log.exception("refresh failed unexpectedly")
            # the cyclic GC's full collection, when due, right after the last values were dropped
            if full_collection_due(collected, time.monotonic()):
                collected = time.monotonic()
            if not self.stopping:
                await self._pause(self.source.next_delay(time.monotonic() - started, self.values_age))

    async def _pause(self, seconds: float) -> None:
        """Until the next refresh: ``seconds``, or less when a request asks for an idle rule."""
        try:
            async with asyncio.timeout(seconds):
                await self.wake.wait()
        except TimeoutError:
            pass
        self.wake.clear()

    def stop(self) -> None:
        """End ``run`` at its next step (the caller also cancels it)."""
        self.stopping = True
