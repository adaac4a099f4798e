"""Whether a request may be answered with values at all: unknown is never served as 0, and
partial is never served as a smaller number.

Rules with a source family (the queues, the GPU rules) carry one state per (key, source)
(``sources/__init__.py``). A request is answered only when every key it selects is sound: no
state of it is TAINTED (a value that may be old), and a key that a source lost (STALE) or whose
source is down (DOWN) is still published by a source that is up. One selecting a key that is not
sound fails with 503 naming the key, the source and why; one selecting no known key with 404 (the
SLO rules: "no SLO declared for <namespace>/<workload>"); one selecting only sound keys gets the
values (a real 0 when they are 0). A source whose series are
not known at all (an exporter that never answered) fails every request. For a rule with
``every_source`` (keys several exporters publish parts of: the SLO rules) a key is sound only while
every exporter publishing it is UP, so the survivors' part is never served as the whole.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cache import RuleState
from ..rules import NamespaceMode
from ..sources import DOWN, GONE, SOURCE, SOURCE_WHY, STALE, TAINTED, UP
from ..vectors import Series
from .selectors import EVERYTHING, Selector


class Failure(Exception):
    """A request that cannot be answered with values: an HTTP status and a one-line message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


Key = frozenset[tuple[str, str]]


def key_of(s: Series) -> Key:
    return frozenset((k, v) for k, v in s.labels.items() if k[:1] != "@")  # SOURCE, SOURCE_WHY, GONE


def _name(key: Key) -> str:
    labels = dict(key)
    derived = ("workload", "container") if "pod" in labels else ()  # a pod's key: its pod names it
    return labels.get("queue") or ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in derived)


def _names(keys: Iterable[Key]) -> str:
    shown = [_name(k) for k in keys]
    return ", ".join(repr(n) for n in shown[:10]) + (", ..." if len(shown) > 10 else "")


def unsound(
    states: Iterable[Series], every: bool = False, up: frozenset[Key] | set[Key] = frozenset()
) -> dict[Key, list[Series]]:
    """Keys that must not be answered, with the states that say why. ``every`` (a rule whose keys
    several exporters publish parts of): any source of a key not UP makes it unsound, but one
    that left service discovery (GONE) while another that is up publishes the key. ``up``: keys
    that a source up and current publishes although no UP state says so (``up_from_values``)."""
    by_key: dict[Key, list[Series]] = {}
    for s in states:
        by_key.setdefault(key_of(s), []).append(s)
    out = {}
    for key, found in by_key.items():
        codes = {s.value for s in found}
        if key in up:
            codes.add(UP)
        missed = UP not in codes and codes & {DOWN, STALE}
        partial = every and any(s.value != UP and GONE not in s.labels for s in found)
        if TAINTED in codes or missed or partial:
            out[key] = [s for s in found if s.value != UP]
    return out


def describe(metric: str, bad: dict[Key, list[Series]]) -> str:
    """One line: which keys are unavailable, from which source, and why (the first few)."""
    down = [k for k, states in bad.items() if all(s.value == DOWN for s in states)]
    parts = []
    if down:
        first = bad[down[0]][0].labels
        parts.append(f"source down for {_names(down)} ({first.get(SOURCE, '')}: {first.get(SOURCE_WHY, '')})")
    others = [k for k in bad if k not in down]
    if others:
        reasons: dict[str, list[Key]] = {}
        for key in others:
            for s in bad[key]:
                if s.value != DOWN:
                    reasons.setdefault(s.labels.get(SOURCE_WHY, "stale"), []).append(key)
                    break
        for why, keys in list(reasons.items())[:3]:
            parts.append(f"no current sample for {_names(keys)}: {why}")
    return f"{metric} unavailable: " + "; ".join(parts)


def _no_slo(namespace: str | None, selector: Selector, extra: tuple[tuple[str, str], ...]) -> str:
    """'no SLO declared for llm/chat' (or for what the request selects, when it names no one
    workload): no exporter publishes an SLO series for it."""
    named = {**selector.equalities(), **dict(extra)}
    workload = named.get("workload")
    space = namespace or named.get("namespace")
    if workload is not None:
        return f"no SLO declared for {space + '/' if space else ''}{workload[:200]}"
    where = f" in namespace {namespace}" if namespace else ""
    return f"no SLO declared for a workload that the request selects{where}"


def check_sources(
    state: RuleState,
    namespace: str | None,
    mode: NamespaceMode,
    selector: Selector,
    selector_text: str,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    """Raise Failure unless every key the request selects is sound (rules with a source family;
    others pass): 404 when it selects none, 503 when one is not sound or a source is unknown."""
    metric = state.rule.name
    if state.unknown:
        raise Failure(503, f"{metric} unavailable: {state.unknown}"[:1000])
    if state.sources is None:
        return
    assert state.vector is not None
    matched = state.sources.select(namespace, mode, selector, extra)
    up: set[Key] = set()
    if state.up_from_values:  # the values' keys stand for their UP states
        up = {key_of(s) for s in state.vector.select(namespace, mode, selector, extra)}
    if not matched and not up:
        if state.rule.every_source:  # the SLO rules: a workload nobody declared an SLO for
            raise Failure(404, f"{metric}: {_no_slo(namespace, selector, extra)}")
        where = f" in namespace {namespace}" if namespace else ""
        what = f"labelSelector {selector_text[:200]!r}" if selector_text.strip() else "the request"
        for label, value in extra:
            what += f" and {label}={value[:100]}"
        raise Failure(404, f"{metric}: no known source matches {what}{where}")
    bad = unsound(matched, state.rule.every_source, up)
    if bad:
        raise Failure(503, describe(metric, bad)[:1000])
    if state.rule.up_family is None:  # a GPU that stopped publishing is no longer selected
        return
    have = {frozenset(s.labels.items()) for s in state.vector.select(namespace, mode, selector, extra)}
    missing = {key_of(s) for s in matched} - have
    if missing and state.rule.every_source:  # declared and judged, but no usable value: not "none"
        raise Failure(503, f"{metric} unavailable: {_names(missing)} is up but has no usable value of it")
    if missing:  # e.g. a queue kind that has no in-flight count
        raise Failure(404, f"{metric}: {_names(missing)} is up but publishes no {metric}")


def unsound_pods(state: RuleState, namespace: str) -> dict[str, str]:
    """Custom-metrics pods answers: pod -> why its own source is not sound (rules with a source
    family): those pods are left out of ``pods/*`` answers, the others served."""
    if state.sources is None:
        return {}
    states = state.sources.select(namespace, state.rule.namespace, EVERYTHING)
    up: set[Key] = set()
    if state.up_from_values and states and state.vector is not None:
        up = {key_of(s) for s in state.vector.select(namespace, state.rule.namespace, EVERYTHING)}
    return {
        dict(key).get("pod", ""): describe(state.rule.name, {key: found})
        for key, found in unsound(states, state.rule.every_source, up).items()
    }
