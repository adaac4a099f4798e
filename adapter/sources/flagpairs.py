"""Prometheus mode: a flag rule and its complement answered by one query.

``rightsizer_gpu_idle`` is ``max by (K) (F{...})`` and ``rightsizer_gpu_busy`` is
``max by (K) (1 - F{...})``, over the same series (the idle verdicts). Asked apart, the engine
reads those series twice per refresh, and at fleet scale what a query costs the engine is the series
it reads (docs/fleet-scale.md). Asked together as

    count_values by (K) ("rightsizer_adapter_value", F{...})

the engine reads them once and answers every distinct value of each key (one series per key, or
more where several exporters publish a key and disagree, as during a DaemonSet rollout). From those
the flag is the largest value of each key and the complement one minus the smallest: exactly what
each rule's own query gives, on any values (a value that is not a number is refused for both).
Both rules carry the same source states (same family, same matchers): one query, one set of parts.

Rules are paired by their queries' text, so only rules written exactly that way share (the built-in
ones, or a user's copy of them); every other rule keeps its own query.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..giveway import EVERY, give_way
from ..labelsets import Labels
from ..promql import PLACEHOLDER
from ..rules import RuleConfig
from ..vectors import Series

FLAG_VALUES = "rightsizer_adapter_value"  # count_values' label: each distinct value of a key
THREAD_SERIES = 5_000  # answers at least this long are folded in a worker thread
_FLAG = re.compile(
    r"max by \((?P<keys>[a-zA-Z_][a-zA-Z0-9_]*(?:, [a-zA-Z_][a-zA-Z0-9_]*)*)\) "
    r"\((?P<complement>1 - )?(?P<selector>[a-zA-Z_:][a-zA-Z0-9_:]*\{" + re.escape(PLACEHOLDER) + r"\})\)"
)
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class FlagPair:
    flag: RuleConfig  # max by (K) (F)
    complement: RuleConfig  # max by (K) (1 - F)
    query: str  # the shared query, with <<.LabelMatchers>>


Same = tuple[str, str, tuple[str, ...], "str | None", bool, bool]  # keys, selector, match, family, ...


def _shape(rule: RuleConfig) -> tuple[bool, Same] | None:
    """(whether ``rule`` is a complement, what must be equal for two rules to share a query), or
    None for a rule that cannot share."""
    if rule.query is None or rule.up_family is not None or rule.why_family is not None:
        return None
    m = _FLAG.fullmatch(rule.query)
    if m is None or FLAG_VALUES in m["keys"].split(", "):
        return None
    same = (m["keys"], m["selector"], tuple(rule.match), rule.source_family, rule.every_source,
            rule.workload_from_pod)  # fmt: skip
    return m["complement"] is not None, same


def flag_pairs(rules: Sequence[RuleConfig]) -> list[FlagPair]:
    """Each flag rule of ``rules`` with the first complement of the same series (each rule in one
    pair at most)."""
    flags: dict[Same, list[RuleConfig]] = {}
    complements: dict[Same, list[RuleConfig]] = {}
    for rule in rules:
        shape = _shape(rule)
        if shape is not None:
            (complements if shape[0] else flags).setdefault(shape[1], []).append(rule)
    pairs = []
    for same, found in flags.items():
        for flag, complement in zip(found, complements.get(same, []), strict=False):
            keys, selector = same[0], same[1]
            query = f'count_values by ({keys}) ("{FLAG_VALUES}", {selector})'
            pairs.append(FlagPair(flag, complement, query))
    return pairs


def extremes(series: Sequence[Series]) -> tuple[list[Series], list[Series]]:
    """(each key's largest value, one minus each key's smallest) from a pair's answer: the flag's
    values and the complement's, keys in the order first seen. The keys' labels are interned
    (``labelsets``), so equal keys are equal objects (hashable)."""
    high: dict[object, float] = {}
    low: dict[object, float] = {}
    labels: dict[object, Series] = {}
    for seen, s in enumerate(series, 1):
        if not seen % EVERY:
            give_way()
        key: object = s.labels if type(s.labels) is Labels else frozenset(s.labels.items())
        value = s.value
        top = high.get(key)
        if top is None:
            high[key] = low[key] = value
            labels[key] = s
        elif value > top:
            high[key] = value
        elif value < low[key]:
            low[key] = value
    return (
        [Series(s.labels, high[key]) for key, s in labels.items()],
        [Series(s.labels, 1 - low[key]) for key, s in labels.items()],
    )


async def in_thread_if_large(fold: Callable[[Sequence[T]], R], items: Sequence[T]) -> R:
    """``fold(items)``, in a worker thread when ``items`` is long: the event loop keeps answering."""
    if len(items) < THREAD_SERIES:
        return fold(items)
    return await asyncio.to_thread(fold, items)
