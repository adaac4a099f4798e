"""Which queues feed which GPUs.

A queue links to a GPU when
- a ``rightsizing.queue_links`` entry names the queue and the GPU (by UUID or index), or the
  GPU's pod namespace and/or workload; or
- the queue carries ``namespace`` and ``workload`` labels (as the ``queues:`` entries' static
  labels do for the adapter) that match the pod attributed to the GPU; or
- the source says so itself (the simulated fleet knows which GPU each queue feeds; a server found
  on the node by discovery is linked to its own pod's GPUs, and then only to those).

The workload of a pod is its name less Kubernetes' generated suffixes (Deployment
``<name>-<hash>-<id>``, StatefulSet ``<name>-<ordinal>``, DaemonSet/Job ``<name>-<id>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rightsizer_core.snapshot import GpuSample
from rightsizer_core.workloads import workload_of

from .settings import QueueLink
from .slo.latency import Histogram


@dataclass(frozen=True, slots=True)
class QueueReading:
    """One queue's depth this cycle, with its labels and any GPUs the source says it feeds."""

    name: str
    depth: float
    labels: Mapping[str, str]
    gpus: tuple[str, ...] = ()  # UUIDs
    server: str | None = None  # the source's kind when it is an inference server (vllm, sglang, ...)
    kv_cache_usage: float | None = None  # KV-cache usage 0-1, read on the same poll as the depth
    preemptions_total: float | None = None  # the server's preemption (or retraction) counter
    # The server's throughput counters, read on the same poll: tokens generated and prompted, requests.
    generated_tokens_total: float | None = None
    prompt_tokens_total: float | None = None
    requests_total: float | None = None
    # Latency histograms read on the same poll (``latency.KINDS`` -> cumulative histogram, seconds).
    latency: Mapping[str, Histogram] | None = None
    kv_cache_bytes: float | None = None  # the server's KV-cache pool, over all of its GPUs, when known
    latency_refused: Mapping[str, str] | None = None  # kinds whose histogram the poll refused -> why
    # The source knows exactly which GPUs the server holds (a pod found on the node, linked through
    # the kubelet): the queue feeds those GPUs and no other, whatever its labels say.
    exact: bool = False


def _matches_pod(sample: GpuSample, namespace: str | None, workload: str | None) -> bool:
    pod = sample.pod
    if pod is None:
        return False
    if namespace is not None and pod.namespace != namespace:
        return False
    return workload is None or workload in (pod.pod, workload_of(pod.pod))


def linked(sample: GpuSample, queues: Sequence[QueueReading], links: Sequence[QueueLink]) -> list[str]:
    """Names of the queues feeding this GPU."""
    ident = sample.identity
    names: list[str] = []
    for q in queues:
        by_source = ident.uuid in q.gpus or (ident.parent_uuid is not None and ident.parent_uuid in q.gpus)
        by_labels = not q.exact and "namespace" in q.labels and "workload" in q.labels
        if by_source or (by_labels and _matches_pod(sample, q.labels["namespace"], q.labels["workload"])):
            names.append(q.name)
    for link in links:
        if link.queue in names:
            continue
        by_gpu = ident.uuid in link.gpus or str(ident.index) in link.gpus
        by_pod = (link.namespace or link.workload) and _matches_pod(sample, link.namespace, link.workload)
        if by_gpu or by_pod:
            names.append(link.queue)
    return names
