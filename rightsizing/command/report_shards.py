"""The report's queries split by shard, so no answer grows with the fleet.

A shard is a group of exporters (``instance`` values). Cheap queries count each exporter's
series over the window (``count by (instance)`` of each family in ``SIZED_BY``: GPUs, queues and
workload latency SLOs; every other query of the report answers at most that many series per
exporter, since each groups by ``instance`` and finer); exporters are packed, in name order, into
shards of at most ``max_series`` of them. Each query of the report is then sent once per shard
with an ``instance=~"a|b|…"`` matcher added to every selector, at most ``concurrency`` at a time,
and the answers are concatenated: as every query groups by ``instance``, that is the answer the
unsplit query gives. A fleet that fits one shard is queried exactly as before, without matchers.

One exporter with more series than ``max_series`` is a shard of its own (a shard never splits an
exporter: its queues link to its GPUs, its host CPU to all of them). A shard's matcher is also
kept under ``MATCHER_CHARS`` characters: VictoriaMetrics refuses a query longer than its
``-search.maxQueryLen`` (16 KiB by default), and one query names up to four metrics.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import TypeVar

from .promapi import PrometheusClient, RangeSeries, Sample

DEFAULT_MAX_SERIES = 2000
DEFAULT_CONCURRENCY = 4
MATCHER_CHARS = 3000
# The families whose series per exporter bound every answer: GPUs, queues, and the workload latency
# SLOs (quantiles x kinds x workloads, and the declared targets, which may have no histogram yet).
SIZED_BY = (
    "DCGM_FI_DEV_FB_USED",
    "rightsizer_queue_depth",
    "rightsizer_workload_latency_seconds",
    "rightsizer_workload_slo_target_seconds",
)
# Every metric the report reads is one of the exporter's: a DCGM field or a rightsizer_ family.
_SELECTOR = re.compile(r"\b((?:DCGM_FI|rightsizer)_[A-Za-z0-9_]*)\b(\{?)")
_REGEX_SPECIAL = set(r"\.+*?()|[]{}^$")
T = TypeVar("T")


def series_per_exporter(client: PrometheusClient, at: float, w: str, metric: str) -> dict[str, float]:
    """Per ``instance``: how many series of ``metric`` it had over the window."""
    query = f"count by (instance) (last_over_time({metric}[{w}]))"
    return {s.labels.get("instance", ""): s.value for s in client.query(query, at)}


def plan(counts: dict[str, float], max_series: int) -> list[tuple[str, ...]]:
    """Exporters packed in name order into shards of at most ``max_series`` series (and a matcher
    of at most ``MATCHER_CHARS`` characters); an exporter over the bound alone."""
    shards: list[tuple[str, ...]] = []
    current: list[str] = []
    size = 0.0
    for name in sorted(counts):
        n = counts[name]
        if current and (size + n > max_series or len(matcher([*current, name])) > MATCHER_CHARS):
            shards.append(tuple(current))
            current, size = [], 0.0
        current.append(name)
        size += n
    if current:
        shards.append(tuple(current))
    return shards


def matcher(instances: Sequence[str]) -> str:
    pattern = "|".join("".join(f"\\{c}" if c in _REGEX_SPECIAL else c for c in i) for i in instances)
    return 'instance=~"' + pattern.replace("\\", "\\\\").replace('"', '\\"') + '"'


def scoped(expr: str, match: str) -> str:
    """``expr`` with ``match`` added to each selector of an exporter metric."""

    def add(m: re.Match[str]) -> str:
        return f"{m.group(1)}{{{match}," if m.group(2) else f"{m.group(1)}{{{match}}}"

    return _SELECTOR.sub(add, expr)


class ShardedClient:
    """Sends each query once per shard, ``concurrency`` at a time, and concatenates the answers;
    ``on_answer`` is called (in the caller's thread) after each shard's answer."""

    def __init__(
        self,
        client: PrometheusClient,
        shards: Sequence[tuple[str, ...]],
        concurrency: int,
        on_answer: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.matchers: list[str | None] = [matcher(s) for s in shards] if len(shards) > 1 else [None]
        self.on_answer = on_answer
        self.pool = ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(self.matchers))))

    @property
    def shards(self) -> int:
        return len(self.matchers)

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    def query(self, expr: str, at: float) -> list[Sample]:
        return self._each(lambda e: self.client.query(e, at), expr)

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[RangeSeries]:
        return self._each(lambda e: self.client.query_range(e, start, end, step), expr)

    def _each(self, send: Callable[[str], list[T]], expr: str) -> list[T]:
        if self.matchers == [None]:
            out = send(expr)
            self.on_answer()
            return out
        futures: dict[Future[list[T]], int] = {
            self.pool.submit(send, scoped(expr, m)): i for i, m in enumerate(self.matchers) if m
        }
        answers: list[list[T]] = [[] for _ in self.matchers]
        try:
            for done in as_completed(futures):
                answers[futures[done]] = done.result()
                self.on_answer()
        finally:
            for f in futures:
                f.cancel()
        return [x for answer in answers for x in answer]
