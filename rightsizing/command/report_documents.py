"""``rightsizer report --format html|markdown``: the report's JSON document made into a file to
attach to a ticket (HTML, with per-GPU charts read from Prometheus) or to paste into a pull
request (Markdown tables). Both render the very document ``--format json`` prints, so their rows
and verdicts are the JSON's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .promapi import PrometheusClient
from .report_charts import collect_charts
from .report_shards import ShardedClient


def document_text(
    fmt: str,
    document: dict[str, Any],
    client: PrometheusClient | ShardedClient,
    resolution: float | None,
    progress: Callable[[int, int, str], None],
) -> str:
    from .report_html import render_html
    from .report_markdown import render_markdown

    if fmt == "markdown":
        return render_markdown(document)
    try:
        at, since = document["at"], document["assumptions"]["history_start"]
        charts = collect_charts(client, at, document["window_seconds"], resolution, progress, since)
    finally:
        progress(0, 0, "")
    if charts.error:
        print(f"rightsizer: the report is written without charts: {charts.error}", file=sys.stderr)
    return render_html(document, charts)
