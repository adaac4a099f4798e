"""Queue depth from a Prometheus exposition: vLLM, TGI, Triton, SGLang presets or any metric.

The answer is parsed by prometheus-client's parsers (text 0.0.4, or OpenMetrics when the server
answers with it). To keep 200 sources at 1 s cheap, only the lines of the wanted metric names
(their samples and HELP/TYPE/UNIT comments) are handed to the parser: a large inference-server
exposition is mostly histograms that the queue depth does not need.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from .base import QueueSourceError, QueueValue, finite, shorten
from .http_client import HttpGetter
from .settings import QueueSettings

ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"


@dataclass(frozen=True)
class Preset:
    depth: str
    in_flight: str | None


# The metric names each inference server publishes (see the README's presets table).
PRESETS: Mapping[str, Preset] = {
    "vllm": Preset("vllm:num_requests_waiting", "vllm:num_requests_running"),
    "tgi": Preset("tgi_queue_size", "tgi_batch_current_size"),
    "triton": Preset("nv_inference_pending_request_count", None),
    "sglang": Preset("sglang:num_queue_reqs", "sglang:num_running_reqs"),
}


def preset_for(cfg: QueueSettings) -> Preset:
    if cfg.kind == "prometheus":
        assert cfg.metric is not None  # checked by the configuration schema
        return Preset(cfg.metric, cfg.in_flight_metric)
    return PRESETS[cfg.kind]


def _line_filter(names: Iterable[str]) -> re.Pattern[str]:
    alternatives = "|".join(re.escape(n) for n in sorted(set(names), key=len, reverse=True))
    return re.compile(rf"^(?:# (?:HELP|TYPE|UNIT) )?(?:{alternatives})(?:[{{ \t].*)?$", re.M)


class ExpositionReader:
    """Sums the wanted samples of one exposition text, narrowed by ``match``."""

    def __init__(self, depth: str, in_flight: str | None, match: Mapping[str, str]) -> None:
        self.depth = depth
        self.in_flight = in_flight
        self.match = dict(match)
        self._filter = _line_filter([depth] if in_flight is None else [depth, in_flight])

    def read(self, text: str, openmetrics: bool) -> QueueValue:
        wanted = "\n".join(m.group(0) for m in self._filter.finditer(text))
        totals: dict[str, float] = {}
        try:
            if openmetrics:
                families = openmetrics_families(wanted + "\n# EOF\n")
            else:
                families = text_families(wanted + "\n")
            for family in families:
                for sample in family.samples:
                    if sample.name in (self.depth, self.in_flight) and self._matches(sample.labels):
                        totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        except Exception as exc:  # prometheus-client raises ValueError and friends on bad input
            raise QueueSourceError(f"cannot parse the exposition: {shorten(str(exc), 120)}") from None
        if self.depth not in totals:
            raise QueueSourceError(self._missing(self.depth))
        depth = finite(totals[self.depth], self.depth)
        in_flight = None
        if self.in_flight is not None and self.in_flight in totals:
            in_flight = finite(totals[self.in_flight], self.in_flight)
        return QueueValue(depth, in_flight)

    def _matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())

    def _missing(self, name: str) -> str:
        if self.match:
            wanted = ",".join(f'{k}="{v}"' for k, v in self.match.items())
            return f"no {name} series matches {{{wanted}}}"
        return f"metric {name} not found"


class ScrapeSource:
    """One inference server's (or any exporter's) /metrics."""

    def __init__(self, session: aiohttp.ClientSession, cfg: QueueSettings) -> None:
        preset = preset_for(cfg)
        self.http = HttpGetter(session, cfg, ACCEPT)
        self.reader = ExpositionReader(preset.depth, preset.in_flight, dict(cfg.match))

    async def read(self) -> QueueValue:
        content_type, body = await self.http.get()
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        if content_type in ("text/html", "application/json"):
            raise QueueSourceError(f"answer is {content_type}, not a Prometheus exposition")
        return self.reader.read(text, openmetrics=content_type == "application/openmetrics-text")

    async def close(self) -> None:
        """The shared session is closed by the extension."""
