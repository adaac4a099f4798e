"""Whether a request may be answered with values at all: unknown is never served as 0.

Rules with an ``up_family`` (the queues) answer only from sources that are up and current: a
request selecting a source that is down or stale fails with 503 naming it and why, one selecting
no known source with 404, and one selecting only sources that are up and empty gets a real 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..cache import RuleState
from ..rules import NamespaceMode
from ..sources import DOWN, STALE
from ..vectors import Series
from .selectors import Selector


class Failure(Exception):
    """A request that cannot be answered with values: an HTTP status and a one-line message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _names(series: Iterable[Series]) -> str:
    shown = [
        s.labels.get("queue") or ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) for s in series
    ]
    return ", ".join(repr(n) for n in shown[:10]) + (", ..." if len(shown) > 10 else "")


def check_sources(
    state: RuleState,
    namespace: str | None,
    mode: NamespaceMode,
    selector: Selector,
    selector_text: str,
    extra: tuple[tuple[str, str], ...] = (),
) -> None:
    """Raise Failure unless every source the request selects is up and has a value (rules with an
    ``up_family``; others pass): 404 when it selects none, 503 when one is down or stale."""
    if state.sources is None:
        return
    assert state.vector is not None
    metric, up_family = state.rule.name, state.rule.up_family
    matched = state.sources.select(namespace, mode, selector, extra)
    if not matched:
        where = f" in namespace {namespace}" if namespace else ""
        what = f"labelSelector {selector_text[:200]!r}" if selector_text.strip() else "the request"
        for label, value in extra:
            what += f" and {label}={value[:100]}"
        raise Failure(404, f"{metric}: no known source matches {what}{where}")
    down = [s for s in matched if s.value == DOWN]
    stale = [s for s in matched if s.value == STALE]
    if down or stale:
        why = []
        if down:
            why.append(f"source down ({up_family} 0) for {_names(down)}")
        if stale:
            why.append(f"no current sample for {_names(stale)}: {state.stale_reason or 'stale'}")
        raise Failure(503, f"{metric} unavailable: " + "; ".join(why))
    have = {frozenset(s.labels.items()) for s in state.vector.select(namespace, mode, selector, extra)}
    missing = [s for s in matched if frozenset(s.labels.items()) not in have]
    if missing:
        raise Failure(404, f"{metric}: {_names(missing)} is up but publishes no {metric}")
