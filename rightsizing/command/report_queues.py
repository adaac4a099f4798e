"""The report's queue evidence: the same figures the live engine keeps per queue, from PromQL.

Depth (latest, maximum, mean, least-squares slope via ``deriv``, the time its samples span), the
inference server behind it (the ``kind`` label: vllm, sglang, tgi, triton), its KV-cache usage at
p95, its KV-cache pool in bytes (the latest) and the preemptions counted over the window, and its
throughput: the increase of its token and request counters over the window's samples divided by
the time they span, first poll to last (the live engine divides the counter's increase by the time
its readings span; ``report_span`` says how both are read without extrapolating or rounding to a
step).
"""

from __future__ import annotations

from typing import Protocol

from rightsizer_core.snapshot import GpuIdentity, GpuSample, PodRef

from ..evidence import QueueEvidence
from ..links import QueueReading
from ..pressure import INFERENCE_SERVERS
from .promapi import Sample
from .report_span import counted, queue_span_queries


class Collector(Protocol):
    """What the queue queries need of ``report.Collector`` (named here, not imported, so
    ``report`` and this module do not import each other)."""

    w: str  # the window as a PromQL duration

    def run(self, what: str, expr: str) -> list[Sample]: ...

DEPTH = "rightsizer_queue_depth"
KV_CACHE = "rightsizer_queue_kv_cache_usage_ratio"
PREEMPTIONS = "rightsizer_queue_preemptions_total"
KV_CAPACITY = "rightsizer_queue_kv_cache_capacity_bytes"
THROUGHPUT = (
    "rightsizer_queue_generated_tokens_total",
    "rightsizer_queue_prompt_tokens_total",
    "rightsizer_queue_requests_total",
)


def queues(c: Collector, step: str) -> dict[tuple[str, str], tuple[QueueReading, QueueEvidence]]:
    """Each exporter's (instance's) queues: latest reading and evidence (``rise`` over the span its
    samples cover), by (instance, queue)."""
    w = c.w

    def by_queue(what: str, expr: str) -> dict[tuple[str, str], float]:
        return {(x.labels.get("instance", ""), x.labels.get("queue", "")): x.value for x in c.run(what, expr)}

    lastv = c.run("queues", f"last_over_time({DEPTH}[{w}])")
    maxv = by_queue("queues", f"max by (instance, queue) (max_over_time({DEPTH}[{w}]))")
    mean = by_queue("queues", f"max by (instance, queue) (avg_over_time({DEPTH}[{w}]))")
    slope = by_queue("queues", f"max by (instance, queue) (deriv({DEPTH}[{w}]))")
    exact_expr, stepped_expr = queue_span_queries(DEPTH, "instance, queue", w, step)
    exact, stepped = by_queue("queues", exact_expr), by_queue("queues", stepped_expr)
    kv = by_queue("KV cache", f"max by (instance, queue) (quantile_over_time(0.95, {KV_CACHE}[{w}]))")
    pool = by_queue("KV cache", f"max by (instance, queue) (last_over_time({KV_CAPACITY}[{w}]))")
    preempted = by_queue("preemptions", f"sum by (instance, queue) ({counted(PREEMPTIONS, w)})")
    served = [by_queue("throughput", f"sum by (instance, queue) ({counted(n, w)})") for n in THROUGHPUT]
    out: dict[tuple[str, str], tuple[QueueReading, QueueEvidence]] = {}
    for x in lastv:
        name = x.labels.get("queue", "")
        key = (x.labels.get("instance", ""), name)
        labels = {k: v for k, v in x.labels.items() if k not in ("__name__", "instance", "job")}
        kind = x.labels.get("kind", "")
        server = kind if kind in INFERENCE_SERVERS else None
        span = max(0.0, exact.get(key, stepped.get(key, 0.0)))
        rates = [c[key] / span if key in c and span > 0 else None for c in served]
        evidence = QueueEvidence(
            name, x.value, maxv.get(key, x.value), slope.get(key, 0.0) * span, mean.get(key), span,
            server, kv.get(key), preempted.get(key), rates[0], rates[1], rates[2],
            kv_cache_bytes=pool.get(key),
        )  # fmt: skip
        out[key] = (QueueReading(name, x.value, labels, (), server), evidence)
    return out


def link_sample(labels: dict[str, str], capacity: float) -> GpuSample:
    """Just enough of a GpuSample for queue links (UUID, index, pod)."""
    gpu = labels.get("gpu", "")
    ident = GpuIdentity(
        int(gpu) if gpu.isascii() and gpu.isdigit() else -1,
        labels.get("UUID", ""),
        "",
        labels.get("modelName", ""),
        0,
        "",
        int(capacity),
    )
    pod = (
        PodRef(labels["pod"], labels.get("namespace", ""), labels.get("container", ""))
        if labels.get("pod")
        else None
    )
    return GpuSample(ident, True, pod=pod)
