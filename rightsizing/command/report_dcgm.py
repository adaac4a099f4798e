"""The node's dcgm-exporter in the report's Prometheus: its profiling series for GPUs whose
rightsizer-exporter published none, and no second unit for a GPU both exporters publish.

dcgm-exporter publishes the same DCGM names under its own ``instance`` (and its own pod labels),
so its series of a GPU never share a unit key with the rightsizer-exporter's. A unit of one of
our exporters (the instances publishing ``rightsizer_gpu_memory_total_bytes``) that has no value
of a profiling family takes the highest value any other exporter published for the same GPU:
its ``UUID`` and, on a MIG instance, ``GPU_I_ID`` (GPU UUIDs are unique, so the node need not be
matched). Our exporters' own values (GPM, or dcgm-exporter's read by the exporter itself) always
come first. A GPU only another exporter publishes stays a unit of its own, as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Key = tuple[str, ...]  # report.KEY: instance, UUID, GPU_I_ID, pod, namespace, container


def _gpu(key: Key) -> tuple[str, str]:
    return key[1], key[2]


def borrow(values: dict[Key, float], units: Iterable[Key], ours: frozenset[str]) -> int:
    """Fills ``values`` for the ``units`` lacking one from other exporters' series of the same
    GPU; returns how many it filled."""
    others: dict[tuple[str, str], float] = {}
    for key, value in values.items():
        if key[0] not in ours and key[1]:
            gpu = _gpu(key)
            others[gpu] = max(others.get(gpu, value), value)
    filled = 0
    for unit in units:
        if unit not in values and _gpu(unit) in others:
            values[unit] = others[_gpu(unit)]
            filled += 1
    return filled


def twins(keys: Iterable[Key], ours: frozenset[str]) -> frozenset[Key]:
    """Keys of other exporters' units whose GPU one of ours publishes too: not units of their own."""
    keys = list(keys)
    mine = {_gpu(k) for k in keys if k[0] in ours}
    return frozenset(k for k in keys if k[0] not in ours and _gpu(k) in mine)


def ours(total: Mapping[Key, float]) -> frozenset[str]:
    """Our exporters: the instances that published ``rightsizer_gpu_memory_total_bytes``."""
    return frozenset(k[0] for k in total)
