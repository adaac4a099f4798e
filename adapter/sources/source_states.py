"""Which sources of the queue rules are up, down or stale, asked inside a rule's own query.

A rule with an ``up_family`` needs, beside its values, the state of every source it reads (its
rendered ``up_query``). Rules that render the same up query (the built-in queue rules do) share it,
and no query is added for it: the first of them in a refresh, the carrier, sends

    (<its query>) or label_replace(<up query>, "rightsizer_adapter_source_state", "1", "", "")

The marker label makes every state series differ from every value series, so ``or`` keeps both
halves whole (Prometheus and VictoriaMetrics alike); the answer is split on the marker, which is
removed, and the other rules await the carrier's states. If the carrier's query fails, the first
of them that needs the states asks the up query on its own, once for all of them: one extra query,
only in a refresh whose carrier failed (a Prometheus that is down fails their own queries first,
so none is sent then).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

from ..vectors import Series

MARKER = "rightsizer_adapter_source_state"


def with_states(query: str, up_query: str) -> str:
    """One query answering ``query``'s series and, marked, ``up_query``'s."""
    return f'({query}) or label_replace({up_query}, "{MARKER}", "1", "", "")'


def split_states(series: Iterable[Series]) -> tuple[list[Series], list[Series]]:
    """(the rule's series, the source states without the marker) from ``with_states``' answer."""
    values: list[Series] = []
    states: list[Series] = []
    for s in series:
        if MARKER in s.labels:
            states.append(Series({k: v for k, v in s.labels.items() if k != MARKER}, s.value))
        else:
            values.append(s)
    return values, states


class SharedStates:
    """One refresh's source states, per rendered up query: carried by one rule, read by the others."""

    def __init__(self, ask_alone: Callable[[str], Awaitable[list[Series]]]) -> None:
        self._ask_alone = ask_alone
        self._carried: dict[str, asyncio.Future[list[Series] | Exception]] = {}
        self._alone: dict[str, asyncio.Future[list[Series]]] = {}

    def claim(self, up_query: str) -> bool:
        """True for the first rule asking: it carries ``up_query`` and must call ``carried``."""
        if up_query in self._carried:
            return False
        self._carried[up_query] = asyncio.get_running_loop().create_future()
        return True

    def carried(self, up_query: str, outcome: list[Series] | Exception) -> None:
        """The carrier's states, or why its query gave none."""
        future = self._carried[up_query]
        if not future.done():
            future.set_result(outcome)

    async def states(self, up_query: str) -> list[Series]:
        """The states of ``up_query``'s sources; raises what asking the up query alone raised."""
        outcome = await self._carried[up_query]
        if not isinstance(outcome, Exception):
            return outcome
        if up_query not in self._alone:
            self._alone[up_query] = asyncio.ensure_future(self._ask_alone(up_query))
        return await self._alone[up_query]
