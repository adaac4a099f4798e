"""Publish the simulated fleet's queues under the queue families, as a real queue source would.

A scenario GPU with ``queue: {name, labels}`` feeds a queue whose depth follows its workload;
this extension publishes it as ``rightsizer_queue_depth{queue, kind="simulated", <labels>}`` (and
in-flight, source up, duration, last success) so demos, dashboards and the adapter see queue depth
without a real inference server.
"""

from __future__ import annotations

from typing import Any, Protocol

from rightsizer_core.snapshot import GpuReading, GpuSample, Row

from ...sampler import Contribution
from ..queues.families import (
    DEPTH,
    IN_FLIGHT,
    KV_CACHE,
    KV_CAPACITY,
    LAST_SUCCESS,
    PREEMPTIONS,
    SOURCE_DURATION,
    SOURCE_UP,
    THROUGHPUT,
)


class QueueSampleLike(Protocol):
    name: str
    labels: dict[str, str]
    depth: float
    in_flight: float | None
    gpus: tuple[str, ...]
    server: str | None
    kv_cache_usage: float | None
    preemptions_total: float | None
    kv_cache_bytes: float | None
    generated_tokens_total: float | None
    prompt_tokens_total: float | None
    requests_total: float | None


class QueueSampler(Protocol):
    def queue_samples(self, t: float | None = None) -> list[Any]: ...


class SimulatedQueues:
    name = "simulated_queues"

    def __init__(self, source: QueueSampler) -> None:
        self.source = source

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    def contribute(self, reading: GpuReading, gpus: tuple[GpuSample, ...]) -> Contribution:
        samples: list[QueueSampleLike] = self.source.queue_samples(reading.timestamp)
        rows: dict[str, list[Row]] = {
            DEPTH: [],
            IN_FLIGHT: [],
            SOURCE_UP: [],
            SOURCE_DURATION: [],
            LAST_SUCCESS: [],
            KV_CACHE: [],
            PREEMPTIONS: [],
            KV_CAPACITY: [],
            **{name: [] for name in THROUGHPUT},
        }
        api = []
        for q in samples:
            queue = (("queue", q.name),)
            # A queue standing for an inference server says so, as a configured source of that kind.
            kind = q.server or "simulated"
            series = (*queue, ("kind", kind), *sorted(q.labels.items()))
            rows[DEPTH].append(Row(q.depth, series))
            if q.kv_cache_usage is not None:
                rows[KV_CACHE].append(Row(q.kv_cache_usage, series))
            if q.preemptions_total is not None:
                rows[PREEMPTIONS].append(Row(q.preemptions_total, series))
            if q.kv_cache_bytes is not None:
                rows[KV_CAPACITY].append(Row(q.kv_cache_bytes, series))
            counted = (q.generated_tokens_total, q.prompt_tokens_total, q.requests_total)
            for name, total in zip(THROUGHPUT, counted, strict=True):
                if total is not None:
                    rows[name].append(Row(total, series))
            if q.in_flight is not None:
                rows[IN_FLIGHT].append(Row(q.in_flight, series))
            rows[SOURCE_UP].append(Row(1.0, series))
            rows[SOURCE_DURATION].append(Row(0.0, queue))
            rows[LAST_SUCCESS].append(Row(reading.timestamp, queue))
            api.append(
                {
                    "name": q.name,
                    "kind": kind,
                    "labels": dict(q.labels),
                    "target": "simulated",
                    "up": True,
                    "depth": q.depth,
                    "in_flight": q.in_flight,
                    "gpus": list(q.gpus),
                    "last_success_timestamp_seconds": reading.timestamp,
                    "error": None,
                }
            )
        return Contribution(rows={k: tuple(v) for k, v in rows.items()}, api={"queues": api})
