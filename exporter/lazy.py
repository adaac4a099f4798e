"""Parts of a cycle's output that are computed only when something reads them.

An extension whose rows or JSON sections cost more than their reads are worth (right-sizing: scores,
rows and API objects) returns them as ``LazyRows`` / ``LazySections`` of ``Deferred`` values. The
sampler merges them without reading them, so a cycle nobody reads computes nothing, and the first
read (a render for a scrape, ``/api/v1/...``, the status page) computes them once for that cycle.

Reads happen on the event loop (the sampler resolves a cycle's rows there before handing a render to
a worker thread), where the extension's state belongs to the cycle last published.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from rightsizer_core.snapshot import Row

FamilyRows = Mapping[str, tuple[Row, ...]]


class LazyRows(Mapping[str, tuple[Row, ...]]):
    """Family name -> rows, built by ``build`` on first read and kept."""

    __slots__ = ("_build", "_rows")

    def __init__(self, build: Callable[[], FamilyRows]) -> None:
        self._build: Callable[[], FamilyRows] | None = build
        self._rows: FamilyRows | None = None

    @property
    def resolved(self) -> bool:
        return self._rows is not None

    def resolve(self) -> FamilyRows:
        rows = self._rows
        if rows is None:
            assert self._build is not None
            rows = self._rows = self._build()
            self._build = None
        return rows

    def __getitem__(self, name: str) -> tuple[Row, ...]:
        return self.resolve()[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.resolve().get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self.resolve())

    def __len__(self) -> int:
        return len(self.resolve())


class Deferred:
    """A section value computed by ``build`` when first read through ``LazySections``."""

    __slots__ = ("build",)

    def __init__(self, build: Callable[[], object]) -> None:
        self.build = build


class LazySections(Mapping[str, object]):
    """Section name -> value; ``Deferred`` values are built on first read and kept. The names are
    known without building anything (``in``, iteration)."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, object]) -> None:
        self._values = values

    def raw(self) -> dict[str, object]:
        """The sections as given, ``Deferred`` values unbuilt (for merging)."""
        return self._values

    def __getitem__(self, name: str) -> object:
        value = self._values[name]
        if isinstance(value, Deferred):
            value = self._values[name] = value.build()
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._values


def merge_rows(parts: list[FamilyRows]) -> dict[str, tuple[Row, ...]]:
    """The contributions' rows in extension order; several extensions may feed one family."""
    rows: dict[str, tuple[Row, ...]] = {}
    for part in parts:
        for name, family_rows in part.items():
            rows[name] = rows[name] + family_rows if name in rows else family_rows
    return rows
