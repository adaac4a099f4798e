"""The evidence of a rule's source states (``evidence.py``): one shared query per refresh, and the
rest inside the rules' own queries.

Once per refresh, one **evidence query** asks every scrape target's health (``up``, its time, its
last good scrape within the horizon, whether its exporter is frozen): one series per target and
part, shared by every rule with a source family. Each such rule then asks, inside its own query,
its family's series per (key, ``instance``, ``job``) (its *parts*: the series now, the samples
older than ``stale_after``, the series seen within the horizon but not now):

    (<its query>) or label_replace(<part 1>, "rightsizer_adapter_source_state", "p0", "", "")
                  or label_replace(<part 2>, "rightsizer_adapter_source_state", "p1", "", "") ...

The marker label makes every part's series differ from the values and from each other part's, so
``or`` keeps every half whole (Prometheus and VictoriaMetrics alike); the answer is split on the
marker, which is removed. So a refresh sends one query per rule and at most one evidence query,
whatever fails: a failed rule query fails that rule alone; a failed evidence query fails every
rule with a source family (503 with its reason), none asked again before the next refresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence

from ..giveway import EVERY, give_way
from ..vectors import Series
from .evidence import Evidence

MARKER = "rightsizer_adapter_source_state"


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
    for read, s in enumerate(series, 1):
        if not read % EVERY:
            give_way()
        mark = s.labels.get(MARKER)
        if mark is None:
            values.append(s)
            continue
        index = int(mark[1:]) if mark[1:].isascii() and mark[1:].isdigit() else -1
        if 0 <= index < len(parts):
            found[parts[index]].append(Series({k: v for k, v in s.labels.items() if k != MARKER}, s.value))
    return values, found


def parts_only(parts: Sequence[str]) -> str:
    """One query answering every part's series, each marked ``p<i>`` (at least one part)."""
    return " or ".join(f'label_replace({p}, "{MARKER}", "p{i}", "", "")' for i, p in enumerate(parts))


class SharedEvidence:
    """One refresh's evidence query (the scrape targets' health), asked once, when the first rule
    needing it asks; every rule with a source family awaits the same answer or the same error."""

    def __init__(self, ask: Callable[[], Awaitable[Evidence]]) -> None:
        self._ask = ask
        self._answer: asyncio.Future[Evidence] | None = None

    async def get(self) -> Evidence:
        """The evidence answer, read once (``Evidence``); raises what asking it raised."""
        if self._answer is None:
            self._answer = asyncio.ensure_future(self._ask())
        return await asyncio.shield(self._answer)

    def close(self) -> None:
        """Cancel a query still running (the refresh ended without it)."""
        if self._answer is not None and not self._answer.done():
            self._answer.cancel()
