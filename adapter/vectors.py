"""Cached vectors: one rule's series from one refresh, and selection from them.

A request's namespace and label selector act as label matchers on the vector. Selection starts
from the smallest per-label index among the labels the request pins (``namespace``, ``k=v``), so
answering a thousand distinct selectors costs each only the series it could match.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from rightsizer_core.workloads import workload_of

from . import labelsets
from .giveway import EVERY, give_way
from .kubernetes.selectors import Selector
from .rules import Aggregation, NamespaceMode


@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    value: float


AGGREGATIONS: dict[str, Callable[[Sequence[float]], float]] = {
    "sum": math.fsum,
    "avg": lambda values: math.fsum(values) / len(values),
    "max": max,
    "min": min,
}


def aggregate(how: Aggregation, values: Sequence[float]) -> float:
    return AGGREGATIONS[how](values)


Matches = Series | tuple[Series, ...]  # an index entry: the one series with that value, or several


class Vector:
    """Immutable series of one rule at one instant, with lazily built per-label indexes.

    An index maps each value of its label to the one series holding it, or to a tuple of several:
    most values (a pod, a GPU) name one series, and a list per value would cost more than the entry."""

    __slots__ = ("_index", "series", "timestamp")

    def __init__(self, series: Sequence[Series], timestamp: float) -> None:
        self.series = tuple(series)
        self.timestamp = timestamp
        self._index: dict[str, dict[str, Matches]] = {}

    def __len__(self) -> int:
        return len(self.series)

    def indexed(self) -> tuple[str, ...]:
        """The labels whose index is built (requests selected on them)."""
        return tuple(self._index)

    def prepare(self, labels: Iterable[str]) -> None:
        """Build the indexes of ``labels`` now, so that the requests selecting on them find them built
        (a request building one at the same time builds the same index)."""
        for label in labels:
            self._by(label)

    def _by(self, label: str) -> dict[str, Matches]:
        index = self._index.get(label)
        if index is None:
            index = {}
            more: dict[str, list[Series]] = {}  # the series after the first of each value
            for read, s in enumerate(self.series, 1):
                if not read % EVERY:
                    give_way()
                value = s.labels.get(label)
                if value is not None and index.setdefault(value, s) is not s:
                    more.setdefault(value, []).append(s)
            for value, rest in more.items():
                index[value] = (cast(Series, index[value]), *rest)
            self._index[label] = index
        return index

    def _matching(self, label: str, value: str) -> Sequence[Series]:
        found = self._by(label).get(value, ())
        return (found,) if isinstance(found, Series) else found

    def select(
        self,
        namespace: str | None,
        mode: NamespaceMode,
        selector: Selector,
        extra: Iterable[tuple[str, str]] = (),
    ) -> list[Series]:
        """Series in ``namespace`` (per ``mode``; None: any) matching ``selector`` and ``extra``."""
        pinned = dict(selector.equalities())
        pinned.update(extra)
        if namespace is not None and mode == "match":
            pinned["namespace"] = namespace
        candidates: Sequence[Series] = self.series
        for label, value in pinned.items():
            found = self._matching(label, value)
            if len(found) < len(candidates):
                candidates = found
            if not candidates:
                return []
        extra_items = tuple(extra)
        out = []
        for s in candidates:
            labels = s.labels
            if namespace is not None and mode != "ignore":
                ns = labels.get("namespace")
                if ns != namespace and not (ns is None and mode == "match_or_unlabelled"):
                    continue
            if all(labels.get(k) == v for k, v in extra_items) and selector.matches(labels):
                out.append(s)
        return out


_WORKLOADS: dict[str, str] = {}  # pod name -> its workload: the same pods come back every refresh
MAX_WORKLOADS = 200_000


def _workload(pod: str) -> str:
    found = _WORKLOADS.get(pod)
    if found is None:
        if len(_WORKLOADS) >= MAX_WORKLOADS:
            _WORKLOADS.clear()
        found = _WORKLOADS[pod] = workload_of(pod)
    return found


def with_workload(labels: dict[str, str]) -> dict[str, str]:
    """``labels`` (a new dict, changed in place) with a ``workload`` label derived from ``pod``
    where they have no workload yet: what ``add_workload`` gives, applied to a series as it is read,
    before its label set is shared (so the set without the workload is never kept)."""
    pod = labels.get("pod")
    if pod and "workload" not in labels:
        labels["workload"] = _workload(pod)
    return labels


def add_workload(series: Iterable[Series]) -> list[Series]:
    """Series with a ``workload`` label derived from ``pod`` where they have no workload yet (new
    label sets, interned: never a change to the shared ``s.labels``)."""
    out = []
    for s in series:
        if s.labels.get("pod") and "workload" not in s.labels:  # else shared as it is
            s = Series(labelsets.intern(with_workload({**s.labels})), s.value)
        out.append(s)
    return out
