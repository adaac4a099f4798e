"""The evidence of a rule's source states (``evidence.py``), asked inside the rules' own queries.

A rule with a source family needs, beside its values, a few more vectors (its *parts*: its
family's series now, their sample times, when each was last seen; every scrape target's health).
No query is added for them: the first rule of a refresh needing a part carries it in its own query,

    (<its query>) or label_replace(<part 1>, "rightsizer_adapter_source_state", "p0", "", "")
                  or label_replace(<part 2>, "rightsizer_adapter_source_state", "p1", "", "") ...

The marker label makes every part's series differ from the values and from each other part's, so
``or`` keeps every half whole (Prometheus and VictoriaMetrics alike); the answer is split on the
marker, which is removed, and the other rules needing a part await its carrier. Rules rendering
the same part (the two built-in queue rules, and every rule for the targets' health) share it.
If a carrier's query fails, the first rule that needs one of its parts asks that part on its own:
extra queries only in a refresh whose carrier failed (a Prometheus that is down fails their own
queries first, so none is sent then).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ..vectors import Series

MARKER = "rightsizer_adapter_source_state"
PartAnswer = tuple[list[Series], float]  # the part's series, the engine's evaluation time


def with_parts(query: str, parts: Sequence[str]) -> str:
    """One query answering ``query``'s series and, each marked ``p<i>``, every part's."""
    marked = "".join(f' or label_replace({p}, "{MARKER}", "p{i}", "", "")' for i, p in enumerate(parts))
    return f"({query}){marked}" if parts else query


def split_parts(
    series: Iterable[Series], parts: Sequence[str]
) -> tuple[list[Series], dict[str, list[Series]]]:
    """(the rule's own series, each part's series without the marker) from ``with_parts``' answer."""
    values: list[Series] = []
    found: dict[str, list[Series]] = {p: [] for p in parts}
    for s in series:
        mark = s.labels.get(MARKER)
        if mark is None:
            values.append(s)
            continue
        index = int(mark[1:]) if mark[1:].isascii() and mark[1:].isdigit() else -1
        if 0 <= index < len(parts):
            found[parts[index]].append(Series({k: v for k, v in s.labels.items() if k != MARKER}, s.value))
    return values, found


class SharedParts:
    """One refresh's parts, per rendered query: carried by one rule, read by the others."""

    def __init__(self, ask_alone: Callable[[str], Awaitable[PartAnswer]]) -> None:
        self._ask_alone = ask_alone
        self._carried: dict[str, asyncio.Future[PartAnswer | Exception]] = {}
        self._alone: dict[str, asyncio.Future[PartAnswer]] = {}

    def claim(self, part: str) -> bool:
        """True for the first rule asking: it carries ``part`` and must call ``carried``."""
        if part in self._carried:
            return False
        self._carried[part] = asyncio.get_running_loop().create_future()
        return True

    def carried(self, part: str, outcome: PartAnswer | Exception) -> None:
        """The carrier's answer for ``part``, or why its query gave none (later calls: no-op)."""
        future = self._carried[part]
        if not future.done():
            future.set_result(outcome)

    async def get(self, part: str) -> PartAnswer:
        """``part``'s answer; raises what asking it alone raised."""
        outcome = await self._carried[part]
        if not isinstance(outcome, Exception):
            return outcome
        if part not in self._alone:
            self._alone[part] = asyncio.ensure_future(self._ask_alone(part))
        return await self._alone[part]
