"""Which metric names PromQL in deploy/ and dashboards/ may use, and how to find them in an expression.

Our names come from the one table of published families (``exporter.metrics.FAMILIES``) and the
adapter's own ``/metrics``; a dashboard or rule naming anything else of ours has drifted.
"""

from __future__ import annotations

import re

from exporter.metrics import FAMILIES

# rightsizer_* and DCGM_FI_* names, not the middle of a recording rule's level:name:operation.
_OURS = re.compile(r"(?<![\w:])(rightsizer_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)(?![\w:])")
_LABEL_OR_STRING = re.compile(
    r'"(?:[^"\\]|\\.)*"|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)'
)


_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count"),
}


def adapter_metric_names() -> set[str]:
    """The sample names of the adapter's own /metrics, read from its registry's families."""
    from adapter.selfmetrics import AdapterMetrics

    metrics = AdapterMetrics()
    metrics.attach_cache(lambda: [], lambda: 0)
    return {family.name + suffix for family in metrics.registry.collect()
            for suffix in _SUFFIXES.get(family.type, ("",))}


def known_names() -> set[str]:
    names = {f.name for f in FAMILIES}
    # Counters are also queried under the exposition's sample names.
    names |= {f"{f.name}_total" for f in FAMILIES if f.type == "counter" and not f.dcgm}
    return names | adapter_metric_names()


def names_in(expr: str) -> set[str]:
    """Our metric names an expression selects (label values, strings and grouping lists skipped)."""
    return set(_OURS.findall(_LABEL_OR_STRING.sub(" ", expr)))

