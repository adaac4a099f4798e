"""One upstream query per prometheus-adapter rule, however many metric names the rule exposes.

A rule whose ``seriesQuery`` finds several series names exposes one metric per name, each with
its own batched query (``batching.plan`` with that name in place of ``<<.Series>>``). Here those
queries are sent as one: each wrapped in ``label_replace`` adding a label that carries the
metric's name, joined with ``or``. The name cannot be kept by grouping on ``__name__``: functions
such as ``rate()`` drop it, and ``label_replace`` cannot wrap the range selector inside them. Each
branch is the metric's own query unchanged and the branches' label sets differ by the added label
(so ``or`` keeps them all), so every metric's series are exactly what its own query would give.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from ..vectors import Series

NAME_LABEL = "rightsizer_promadapter_metric"


def combine(queries: Mapping[str, str]) -> str:
    """The query answering every metric of ``queries`` (metric name -> its own query) at once."""
    if len(queries) == 1:
        return next(iter(queries.values()))
    return " or ".join(
        f'label_replace({query}, "{NAME_LABEL}", {json.dumps(name)}, "", "")'
        for name, query in queries.items()
    )


def split(series: Iterable[Series], names: Iterable[str]) -> dict[str, list[Series]]:
    """The answer to ``combine``'s query, per metric name, without the added label."""
    names = list(names)
    out: dict[str, list[Series]] = {name: [] for name in names}
    if len(names) == 1:
        out[names[0]] = list(series)
        return out
    for s in series:
        labels = dict(s.labels)
        name = labels.pop(NAME_LABEL, None)
        if name in out:
            out[name].append(Series(labels, s.value))
    return out
