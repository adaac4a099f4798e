"""The adapter's ``prometheus_adapter`` section: serve a prometheus-adapter configuration file."""

from __future__ import annotations

from dataclasses import dataclass

from rightsizer_core.settings import setting


@dataclass(frozen=True)
class PromAdapterSettings:
    config_file: str | None = setting(
        None,
        "prometheus-adapter configuration file (rules, externalRules) served unchanged; needs "
        "prometheus.url, and replaces the built-in rules.",
    )
    source_checks: bool = setting(
        False,
        "Answer a request only while every scrape target behind its series is up and current, as the "
        "built-in rules do (see Outages); off: answered as prometheus-adapter would (partial answers "
        "are refused either way).",
    )
    relist_interval_seconds: float = setting(
        600.0,
        "How often seriesQuery discovery runs (prometheus-adapter's --metrics-relist-interval).",
        minimum=1,
        maximum=86400,
    )
