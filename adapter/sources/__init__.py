"""Where rule values come from: the Prometheus query API, or the exporters' /metrics directly.

A source answers ``collect(rules)`` with one ``RuleResult`` per rule: the rule's series at one
instant, or a one-line reason why there are none (the backend is down, the query is wrong).
``collect`` never raises for an expected fault and finishes within its own deadline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..rules import RuleConfig
from ..vectors import Series

UP, DOWN, STALE = 1.0, 0.0, -1.0  # values of a rule's source states


@dataclass(frozen=True, slots=True)
class RuleResult:
    series: tuple[Series, ...] = ()
    timestamp: float = 0.0
    error: str | None = None
    # Rules with an ``up_family``: one series per known source, with the values' labels and value
    # UP, DOWN or STALE (seen before, no current sample); ``stale_reason`` says why they are stale.
    sources: tuple[Series, ...] | None = None
    stale_reason: str = ""


class Source(Protocol):
    name: str
    interval: float

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def collect(self, rules: Sequence[RuleConfig], everything: bool = True) -> dict[str, RuleResult]:
        """Values of ``rules``; ``everything`` False lets the source skip upstreams not due yet."""
        ...

    def next_delay(self, elapsed: float) -> float:
        """Seconds to wait before the next ``collect``, given that the last one took ``elapsed``."""
        ...


__all__ = ["DOWN", "STALE", "UP", "RuleResult", "Series", "Source"]
