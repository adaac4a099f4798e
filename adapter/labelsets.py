"""Label sets shared process-wide: one immutable mapping per distinct label set.

At fleet scale the cache holds hundreds of thousands of series, and most of their bytes are label
sets: a dict and its strings per series. The GPU rules answer the same label sets (namespace, pod,
container, UUID, and the derived ``workload``), and every refresh answers them again. ``intern``
gives every equal label set the same ``Labels`` object, with its names and values shared too, so a
GPU's labels are held once for every rule and kept from one refresh to the next: the new answer's
dicts are dropped as soon as they are read.

The table is bounded: ``sweep`` (after each refresh) keeps only the label sets that some cache
still holds (every live ``Holder``), so the sets of pods that were replaced are forgotten. Between
two sweeps it grows by at most what one refresh reads (``max_series_per_rule`` per query).

A ``Labels`` is a ``dict`` (lookups stay C-fast, ``{**labels, ...}`` and ``dict(labels)`` copy as
before) that refuses every change: it is shared, so a change would alter every rule's answers.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, NoReturn, Protocol

from .giveway import EVERY, give_way


class Labels(dict[str, str]):
    """An interned label set: equal to the dict it was made from, hashable, and never changed."""

    __slots__ = ("_hash",)
    _hash: int

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("an interned label set is shared by every series holding it; copy it to change it")

    __setitem__ = __delitem__ = pop = popitem = clear = update = setdefault = __ior__ = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:  # a copy (pickle, copy.copy) is a plain dict
        return (dict, (dict(self),))


class Holder(Protocol):
    def held_labels(self) -> Iterator[Mapping[str, str]]:
        """Every label set this holder keeps (the series of its cached vectors)."""
        ...


_table: dict[Labels, Labels] = {}
_strings: dict[str, str] = {}  # the names and values of the label sets in the table
_holders: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()  # answers are parsed in worker threads while the event loop may sweep


def _key(labels: Mapping[str, str]) -> Labels:
    key = Labels(labels)
    key._hash = hash(frozenset(labels.items()))
    return key


def intern(labels: Mapping[str, str]) -> Labels:
    """The shared ``Labels`` equal to ``labels`` (which the caller must not change afterwards)."""
    if type(labels) is Labels:
        return labels
    key = _key(labels)
    table = _table
    found = table.get(key)
    if found is not None:
        return found
    with _lock:
        strings = _strings
        shared = Labels({strings.setdefault(k, k): strings.setdefault(v, v) for k, v in labels.items()})
        shared._hash = key._hash
        return table.setdefault(shared, shared)


def register(holder: Holder) -> None:
    """Count ``holder``'s label sets as held at every sweep, for as long as it lives."""
    _holders.add(holder)


_on_sweep: list[Callable[[], None]] = []


def on_sweep(call: Callable[[], None]) -> None:
    """Call ``call`` at every ``sweep``: tables keyed by what a refresh read, forgetting the rest."""
    _on_sweep.append(call)


def sweep() -> None:
    """Forget the label sets no live holder keeps, and the strings only they used."""
    global _table, _strings
    for call in _on_sweep:
        call()
    table: dict[Labels, Labels] = {}
    for holder in list(_holders):
        for read, labels in enumerate(holder.held_labels(), 1):
            if not read % EVERY:
                give_way()
            if type(labels) is Labels:
                table[labels] = labels
    strings: dict[str, str] = {}
    for read, labels in enumerate(table, 1):
        if not read % EVERY:
            give_way()
        for k, v in labels.items():
            strings[k] = k
            strings[v] = v
    with _lock:
        _table, _strings = table, strings


def size() -> int:
    """Label sets in the table now."""
    return len(_table)


def held(sets: Iterable[Iterable[Any] | None]) -> Iterator[Mapping[str, str]]:
    """The labels of every series in ``sets`` (each an iterable of ``Series``, or None)."""
    for series in sets:
        if series is not None:
            for s in series:
                yield s.labels
