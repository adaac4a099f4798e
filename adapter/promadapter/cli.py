"""Command-line glue: load the file, note ``resourceRules``, make the source, ``--check-config``."""

from __future__ import annotations

import logging

from rightsizer_core.logs import event

from ..config import AdapterConfig
from ..selfmetrics import AdapterMetrics
from ..sources.prometheus import QueryError
from . import schema
from .discovery import discover
from .schema import PromAdapterConfig
from .source import PromAdapterSource

log = logging.getLogger("rightsizer.adapter.promadapter")


def load_promadapter(path: str) -> PromAdapterConfig:
    return schema.load(path)


def note_resource_rules(path: str) -> None:
    if schema.load(path).has_resource_rules:
        event(
            log,
            logging.INFO,
            "resourceRules (the resource metrics API, metrics.k8s.io) are not served",
            file=path,
        )


def promadapter_source(cfg: AdapterConfig, metrics: AdapterMetrics) -> PromAdapterSource:
    assert cfg.prometheus_adapter.config_file is not None
    file = schema.load(cfg.prometheus_adapter.config_file)
    settings = cfg.prometheus_adapter
    return PromAdapterSource(
        cfg.prometheus, file, settings.relist_interval_seconds, metrics, settings.source_checks
    )


async def check_promadapter(cfg: AdapterConfig, file: PromAdapterConfig) -> int:
    """Print, per rule, the metric names it exposes against ``prometheus.url``; 1 if unreachable."""
    path = cfg.prometheus_adapter.config_file
    print(f"{path}: OK ({len(file.rules)} rules)")
    if file.has_resource_rules:
        print("resourceRules: not served (the resource metrics API is out of scope)")
    source = PromAdapterSource(
        cfg.prometheus, file, cfg.prometheus_adapter.relist_interval_seconds, AdapterMetrics()
    )
    await source.start()
    try:
        series = {}
        for query in dict.fromkeys(r.series_query for r in file.rules):
            series[query] = await source.series(query)
    except QueryError as exc:
        print(f"cannot list series from {cfg.prometheus.url}: {exc}")
        return 1
    finally:
        await source.close()
    found = discover(file.rules, series)
    apis = {"custom": "custom.metrics.k8s.io", "external": "external.metrics.k8s.io"}
    for rule in file.rules:
        names = found.by_rule.get(rule.where, [])
        print(f"{rule.where} ({apis[rule.kind]}): {', '.join(names) if names else '(no metrics)'}")
        for name in names:
            key = f"{rule.where}/{name}"
            if key in found.unbatchable:
                print(f"  {name}: queried per request: {found.unbatchable[key]}")
            if key in found.not_served:
                print(f"  {name}: not served: {found.not_served[key]}")
    batched = {
        where
        for where, names in found.by_rule.items()
        if any(n not in found.per_request and f"{where}/{n}" not in found.not_served for n in names)
    }
    print(
        f"upstream queries per refresh: {len(batched)} (one per rule with batched metrics); "
        f"{len(found.per_request)} metrics queried per request"
    )
    return 0
