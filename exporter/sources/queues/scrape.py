"""Queue depth from a Prometheus exposition: vLLM, TGI, Triton, SGLang presets or any metric.

The answer is parsed by prometheus-client's parsers (text 0.0.4, or OpenMetrics when the server
answers with it). To keep 200 sources at 1 s cheap, only the sample lines of the wanted metric
names are handed to the parser (a vLLM exposition is some 400 lines, mostly histograms, and the
parser reads about one line per 50 us), and when those lines are the same as at the previous poll
the previous result is reused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
    # Memory pressure, read on the same poll for right-sizing: KV-cache usage 0-1 (the first name
    # found wins; several series: the highest) and a preemption counter (series summed).
    kv_cache: tuple[str, ...] = ()
    preemptions: str | None = None
    # Throughput counters, read on the same poll for cost per inference (series summed; of several
    # names, the first found wins): tokens generated, prompt tokens processed, requests finished.
    generated_tokens: tuple[str, ...] = ()
    prompt_tokens: tuple[str, ...] = ()
    requests: tuple[str, ...] = ()

    @property
    def counters(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        return (self.generated_tokens, self.prompt_tokens, self.requests)


# The metric names each inference server publishes (see the README's presets table). TGI and
# Triton publish no KV-cache usage share. TGI has no token counter: its generated-tokens and
# input-length histograms' sums are the totals (its Rust exporter writes counters without _total;
# either spelling is read). Triton counts inferences, not tokens.
PRESETS: Mapping[str, Preset] = {
    "vllm": Preset(
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "vllm:num_preemptions_total",
        ("vllm:generation_tokens_total",),
        ("vllm:prompt_tokens_total",),
        ("vllm:request_success_total",),
    ),
    "tgi": Preset(
        "tgi_queue_size",
        "tgi_batch_current_size",
        generated_tokens=("tgi_request_generated_tokens_sum",),
        prompt_tokens=("tgi_request_input_length_sum",),
        requests=("tgi_request_success", "tgi_request_success_total", "tgi_request_generated_tokens_count"),
    ),
    "triton": Preset(
        "nv_inference_pending_request_count",
        None,
        requests=("nv_inference_count", "nv_inference_request_success"),
    ),
    "sglang": Preset(
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        ("sglang:token_usage",),
        "sglang:num_retracted_requests_total",
        ("sglang:generation_tokens_total",),
        ("sglang:prompt_tokens_total",),
        ("sglang:num_requests_total",),
    ),
}


def preset_for(cfg: QueueSettings) -> Preset:
    if cfg.kind == "prometheus":
        assert cfg.metric is not None  # checked by the configuration schema
        return Preset(cfg.metric, cfg.in_flight_metric)
    return PRESETS[cfg.kind]


def sample_lines(text: str, names: Iterable[str]) -> list[str]:
    """The lines of ``text`` that are samples of one of ``names`` (the name at the start of the line,
    followed by labels, a blank or the end of the line), in order, per name."""
    lines: list[str] = []
    size = len(text)
    for name in names:
        at = text.find(name)
        while at >= 0:
            end = text.find("\n", at)
            end = size if end < 0 else end
            after = at + len(name)
            if (at == 0 or text[at - 1] == "\n") and (after == end or text[after] in "{ \t\r"):
                lines.append(text[at:end].rstrip("\r"))
            at = text.find(name, end)
    return lines


class ExpositionReader:
    """Sums the wanted samples of one exposition text, narrowed by ``match``."""

    def __init__(
        self,
        depth: str,
        in_flight: str | None,
        match: Mapping[str, str],
        kv_cache: tuple[str, ...] = (),
        preemptions: str | None = None,
        counters: tuple[tuple[str, ...], ...] = (),
    ) -> None:
        self.depth = depth
        self.in_flight = in_flight
        self.match = dict(match)
        self.kv_cache = kv_cache
        self.preemptions = preemptions
        self.counters = tuple(counters) + ((),) * (3 - len(counters))  # generated, prompt, requests
        names = [depth] if in_flight is None else [depth, in_flight]
        counted = [n for names_ in self.counters for n in names_]
        self._names = (*names, *kv_cache, *([preemptions] if preemptions else []), *counted)
        self._summed = {depth, *([in_flight] if in_flight else []), *([preemptions] if preemptions else [])}
        self._summed.update(counted)
        self._last: tuple[str, bool, QueueValue] | None = None

    def read(self, text: str, openmetrics: bool) -> QueueValue:
        wanted = "\n".join(sample_lines(text, self._names)) + "\n"
        last = self._last
        if last is not None and last[0] == wanted and last[1] == openmetrics:
            return last[2]
        value = self._parse(wanted, openmetrics)
        self._last = (wanted, openmetrics, value)
        return value

    def _parse(self, wanted: str, openmetrics: bool) -> QueueValue:
        totals: dict[str, float] = {}
        highest: dict[str, float] = {}
        try:
            families = openmetrics_families(wanted + "# EOF\n") if openmetrics else text_families(wanted)
            for family in families:
                for sample in family.samples:
                    if not self._matches(sample.labels):
                        continue
                    if sample.name in self.kv_cache:
                        highest[sample.name] = max(highest.get(sample.name, sample.value), sample.value)
                    elif sample.name in self._summed:
                        totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        except Exception as exc:  # prometheus-client raises ValueError and friends on bad input
            raise QueueSourceError(f"cannot parse the exposition: {shorten(str(exc), 120)}") from None
        if self.depth not in totals:
            raise QueueSourceError(self._missing(self.depth))
        depth = finite(totals[self.depth], self.depth)
        in_flight = None
        if self.in_flight is not None and self.in_flight in totals:
            in_flight = finite(totals[self.in_flight], self.in_flight)
        # Memory-pressure figures are extras: a missing or broken one is left out, never a fault.
        kv = next((highest[n] for n in self.kv_cache if n in highest), None)
        kv = kv if kv is not None and 0.0 <= kv <= 1.0 else None
        preempted = _count(totals, (self.preemptions,) if self.preemptions else ())
        generated, prompt, requests = (_count(totals, names) for names in self.counters)
        return QueueValue(depth, in_flight, kv, preempted, generated, prompt, requests)

    def _matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())

    def _missing(self, name: str) -> str:
        if self.match:
            wanted = ",".join(f'{k}="{v}"' for k, v in self.match.items())
            return f"no {name} series matches {{{wanted}}}"
        return f"metric {name} not found"


def _count(totals: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    """The first of ``names`` found, when it is a usable counter value (finite, not negative)."""
    value = next((totals[n] for n in names if n in totals), None)
    return value if value is not None and math.isfinite(value) and value >= 0 else None


class ScrapeSource:
    """One inference server's (or any exporter's) /metrics."""

    def __init__(self, cfg: QueueSettings) -> None:
        preset = preset_for(cfg)
        self.http = HttpGetter(cfg, ACCEPT)
        self.reader = ExpositionReader(
            preset.depth,
            preset.in_flight,
            dict(cfg.match),
            preset.kv_cache,
            preset.preemptions,
            preset.counters,
        )

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
        self.http.close()
