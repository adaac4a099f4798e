"""Where the live engine's inputs besides the GPUs come from: the configured queue sources'
latest readings (``QueueExtensionFeed``, from the queue extension's pollers), the simulated
fleet's queues, and the NUMA placements of GPUs and their containers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from rightsizing.links import QueueReading
from rightsizing.numa import NumaPlacement
from rightsizing.pressure import INFERENCE_SERVERS


class QueueFeed(Protocol):
    def queue_readings(self) -> list[QueueReading]: ...


# Device UUID -> NUMA placement of the GPU and its container (pod attribution, or the simulated
# fleet's scenario); cached by its owner, no I/O.
PlacementFeed = Callable[[], Mapping[str, NumaPlacement]]


def simulated_queue_readings(samples: Iterable[Any]) -> list[QueueReading]:
    """The simulated fleet's queues at one time (its ``queue_samples``) as queue readings."""
    return [
        QueueReading(
            q.name,
            q.depth,
            dict(q.labels),
            tuple(q.gpus),
            q.server,
            q.kv_cache_usage,
            q.preemptions_total,
            q.generated_tokens_total,
            q.prompt_tokens_total,
            q.requests_total,
            q.latency,
            getattr(q, "kv_cache_bytes", None),
        )
        for q in samples
    ]


class QueueExtensionFeed:
    """Latest depths of the configured queue sources (``queues:``), read from their pollers."""

    def __init__(self, queue_extension: Any) -> None:
        self.ext = queue_extension

    def queue_readings(self) -> list[QueueReading]:
        out = []
        for p in getattr(self.ext, "pollers", ()):
            outcome = p.outcome
            if outcome is None or outcome.value is None:
                continue  # not polled yet, or down: no fresh value
            value = outcome.value
            out.append(
                QueueReading(
                    p.name,
                    float(value.depth),
                    dict(p.cfg.labels),
                    tuple(getattr(p, "gpus", ())),
                    server=p.cfg.kind if p.cfg.kind in INFERENCE_SERVERS else None,
                    kv_cache_usage=value.kv_cache_usage,
                    preemptions_total=value.preemptions_total,
                    generated_tokens_total=value.generated_tokens_total,
                    prompt_tokens_total=value.prompt_tokens_total,
                    requests_total=value.requests_total,
                    latency=value.latency,
                    kv_cache_bytes=value.kv_cache_bytes,
                    latency_refused=value.latency_refused,
                    exact=getattr(p, "exact", False),
                )
            )
        return out
