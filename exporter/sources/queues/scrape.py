"""Queue depth from a Prometheus exposition: vLLM, TGI, Triton, SGLang presets or any metric.

The answer is read as it arrives and never held whole (``lines.py``): only the sample lines of the
names the preset reads are kept, capped in count and length, and handed to prometheus-client's
parsers (text 0.0.4, or OpenMetrics when the server answers with it) a batch at a time. A vLLM
exposition is some 400 lines, mostly histograms, and the parser reads about one line per 50 us, so
keeping only the wanted lines also keeps 200 sources at 1 s cheap; when those lines are the same as
at the previous poll the previous result is reused.
"""

from __future__ import annotations

import codecs
import dataclasses
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families as text_families

from rightsizer_core.logs import event
from rightsizing.models import Architecture

from .base import QueueSourceError, QueueValue, how_many, shorten
from .histograms import HistogramSums, Labels
from .http_client import HttpGetter
from .kv_pool import CACHE_INFO, architecture, pool_bytes, token_pool_bytes
from .lines import SampleLines
from .settings import DEFAULT_MAX_SERIES, DEFAULT_MAX_SERIES_BYTES, QueueSettings

log = logging.getLogger("rightsizer.queues")
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
BATCH_BYTES = 256 * 1024  # kept lines parsed at once when an answer keeps more


@dataclass(frozen=True)
class Preset:
    """What one kind of server is read for. Every name in it is a sample name read from the page;
    ``read_names`` collects them all (a field marked ``histogram`` in its metadata names histogram
    families, read as their ``_bucket``, ``_sum`` and ``_count`` samples), and only those lines are
    kept from an answer: a name added here is read, with no other list to update."""

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
    # Latency histograms (seconds unless ``histograms.SCALES`` says otherwise; of several names, the
    # first found wins), and cumulative duration counters giving a mean over ``mean_count``.
    ttft: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    itl: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    e2e: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    queue_time: tuple[str, ...] = dataclasses.field(default=(), metadata={"histogram": True})
    mean_e2e: tuple[str, ...] = ()
    mean_queue: tuple[str, ...] = ()
    mean_count: tuple[str, ...] = ()
    # The server's cache configuration (an info series: its labels are read, not its value), which
    # sizes its KV-cache pool in bytes (``kv_pool``).
    cache_info: str | None = None
    # Or the pool's size in tokens, a gauge (several series: the largest).
    pool_tokens: str | None = None

    @property
    def latency(self) -> dict[str, tuple[str, ...]]:
        """Latency kind -> histogram names."""
        return {"ttft": self.ttft, "itl": self.itl, "e2e": self.e2e, "queue": self.queue_time}

    @property
    def means(self) -> dict[str, tuple[str, ...]]:
        return {"e2e": self.mean_e2e, "queue": self.mean_queue}

    @property
    def counters(self) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        return (self.generated_tokens, self.prompt_tokens, self.requests)

    @property
    def read_names(self) -> frozenset[str]:
        names: set[str] = set()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            found = (value,) if isinstance(value, str) else tuple(value or ())
            suffixes = ("_bucket", "_sum", "_count") if f.metadata.get("histogram") else ("",)
            names.update(name + suffix for name in found for suffix in suffixes)
        return frozenset(names)


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
        ttft=("vllm:time_to_first_token_seconds",),
        itl=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        e2e=("vllm:e2e_request_latency_seconds",),
        queue_time=("vllm:request_queue_time_seconds",),
        cache_info=CACHE_INFO,
    ),
    "tgi": Preset(
        "tgi_queue_size",
        "tgi_batch_current_size",
        generated_tokens=("tgi_request_generated_tokens_sum",),
        prompt_tokens=("tgi_request_input_length_sum",),
        requests=("tgi_request_success", "tgi_request_success_total", "tgi_request_generated_tokens_count"),
        itl=("tgi_request_mean_time_per_token_duration",),
        e2e=("tgi_request_duration",),
        queue_time=("tgi_request_queue_duration",),
    ),
    "triton": Preset(
        "nv_inference_pending_request_count",
        None,
        requests=("nv_inference_count", "nv_inference_request_success"),
        ttft=("nv_inference_first_response_histogram_ms",),
        mean_e2e=("nv_inference_request_duration_us", "nv_inference_request_duration_us_total"),
        mean_queue=("nv_inference_queue_duration_us", "nv_inference_queue_duration_us_total"),
        mean_count=("nv_inference_request_success", "nv_inference_request_success_total"),
    ),
    "sglang": Preset(
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        ("sglang:token_usage",),
        "sglang:num_retracted_requests_total",
        ("sglang:generation_tokens_total",),
        ("sglang:prompt_tokens_total",),
        ("sglang:num_requests_total",),
        ttft=("sglang:time_to_first_token_seconds",),
        itl=("sglang:inter_token_latency_seconds",),
        e2e=("sglang:e2e_request_latency_seconds",),
        queue_time=("sglang:queue_time_seconds",),
        pool_tokens="sglang:max_total_num_tokens",
    ),
}


def preset_for(cfg: QueueSettings) -> Preset:
    if cfg.kind == "prometheus":
        assert cfg.metric is not None  # checked by the configuration schema
        return Preset(cfg.metric, cfg.in_flight_metric)
    return PRESETS[cfg.kind]


class ExpositionReader:
    """Sums the wanted samples of one exposition, narrowed by ``match``: ``scan()`` for an answer
    read in chunks, ``read()`` for a whole text."""

    def __init__(
        self,
        preset: Preset,
        match: Mapping[str, str],
        max_series: int = DEFAULT_MAX_SERIES,
        max_series_bytes: int = DEFAULT_MAX_SERIES_BYTES,
        model: Architecture | None = None,
        kv_cache_dtype: str = "auto",
        name: str = "",
    ) -> None:
        self.name = name  # the queue's, for the one line saying why its KV-cache pool is unknown
        self.preset = preset
        self.model = model  # the served model's shape, when configured (else its model_name label)
        self.kv_cache_dtype = kv_cache_dtype  # for a server that does not publish it (SGLang)
        self.match = dict(match)
        self.max_series = max_series
        self.max_series_bytes = max_series_bytes
        self._names = preset.read_names
        p = preset
        self._summed = {p.depth, *(n for n in (p.in_flight, p.preemptions) if n)}
        self._summed.update(n for names in p.counters for n in names)
        self._last: tuple[bytes, bool, QueueValue] | None = None
        self._label_cache: dict[bytes, Labels | None] = {}
        # The cache configuration's line changes only when the server restarts with another one:
        # its labels are parsed once per distinct line, not at every poll (13 labels cost ~100 us).
        self._info_prefix = None if preset.cache_info is None else preset.cache_info.encode()
        self._info_cache: dict[tuple[bytes, bool], dict[str, str]] = {}
        self._pool: tuple[object, float | None] | None = None  # (what it was worked out from, pool)

    def histograms(self) -> HistogramSums:
        p = self.preset
        return HistogramSums(p.latency, p.means, p.mean_count, self._label_cache)

    def scan(self, openmetrics: bool) -> ExpositionScan:
        return ExpositionScan(self, openmetrics)

    def read(self, text: str, openmetrics: bool) -> QueueValue:
        scan = self.scan(openmetrics)
        scan.feed(text.encode())
        return scan.finish()

    def _add(self, lines: list[bytes], openmetrics: bool, sums: _Sums) -> None:
        lines = sums.latency.take(lines, self._matches)  # histogram lines: read by their own parser
        if self._info_prefix is not None:
            lines = self._take_info(lines, openmetrics, sums)
        if not lines:
            return
        try:
            wanted = b"\n".join(lines).decode() + "\n"
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        try:
            families = openmetrics_families(wanted + "# EOF\n") if openmetrics else text_families(wanted)
            for family in families:
                for sample in family.samples:
                    if not self._matches(sample.labels):
                        continue
                    if sample.name == self.preset.depth and sums.model_name is None:
                        sums.model_name = sample.labels.get("model_name")
                    if sums.latency.add(sample.name, sample.labels, sample.value):
                        continue
                    if sample.name == self.preset.pool_tokens:
                        sums.pool_tokens = max(sums.pool_tokens or 0.0, sample.value)
                        continue
                    if sample.name in self.preset.kv_cache:
                        highest = sums.highest
                        highest[sample.name] = max(highest.get(sample.name, sample.value), sample.value)
                    elif sample.name in self._summed:
                        sums.totals[sample.name] = sums.totals.get(sample.name, 0.0) + sample.value
        except Exception as exc:  # prometheus-client raises ValueError and friends on bad input
            raise QueueSourceError(f"cannot parse the exposition: {shorten(str(exc), 120)}") from None

    def _take_info(self, lines: list[bytes], openmetrics: bool, sums: _Sums) -> list[bytes]:
        """Reads the cache-configuration lines (the server's own, whatever ``match``) into
        ``sums.cache_infos`` and returns the other lines."""
        prefix = self._info_prefix
        assert prefix is not None
        rest = []
        for line in lines:
            if not (line.startswith(prefix) and line[len(prefix) : len(prefix) + 1] in (b"{", b" ")):
                rest.append(line)
                continue
            labels = self._info_cache.get((line, openmetrics))
            if labels is None:
                if len(self._info_cache) >= 64:  # a server changing its configuration forever
                    self._info_cache.clear()
                labels = self._info_cache[(line, openmetrics)] = self._info_labels(line, openmetrics)
            sums.cache_infos[line] = labels
        return rest

    @staticmethod
    def _info_labels(line: bytes, openmetrics: bool) -> dict[str, str]:
        """The line's labels; none when it does not parse (the pool is an extra: a broken line
        leaves it unknown and never fails the depth)."""
        try:
            text = line.decode() + "\n"
            families = openmetrics_families(text + "# EOF\n") if openmetrics else text_families(text)
            return next((dict(x.labels) for f in families for x in f.samples), {})
        except Exception:  # prometheus-client raises ValueError and friends on bad input
            return {}

    def _value(self, sums: _Sums) -> QueueValue:
        p, totals = self.preset, sums.totals
        if p.depth not in totals:
            raise QueueSourceError(self._missing(p.depth))
        depth = how_many(totals[p.depth], p.depth)
        in_flight = None
        if p.in_flight is not None and p.in_flight in totals:
            in_flight = how_many(totals[p.in_flight], p.in_flight)
        # Memory-pressure figures are extras: a missing or broken one is left out, never a fault.
        kv = next((sums.highest[n] for n in p.kv_cache if n in sums.highest), None)
        kv = kv if kv is not None and 0.0 <= kv <= 1.0 else None
        preempted = _count(totals, (p.preemptions,) if p.preemptions else ())
        generated, prompt, requests = (_count(totals, names) for names in p.counters)
        latency = sums.latency.result()
        pool = None
        if sums.cache_infos or sums.pool_tokens is not None:
            key = (tuple(sums.cache_infos), sums.pool_tokens, sums.model_name)
            if self._pool is None or self._pool[0] != key:
                arch = architecture(self.model, sums.model_name)
                if arch is None:  # said once per distinct answer: the memo keeps it
                    named = sums.model_name
                    why = "publishes no model_name" if named is None else f"serves {named!r}, not a built-in"
                    event(
                        log, logging.WARNING, "KV-cache pool unknown", queue=self.name,
                        reason=f"the server {why}; set 'model' on the queue (a built-in or a config.json) "
                        "to count the weights and KV cache in use instead of the server's reservation",
                    )  # fmt: skip
                if sums.cache_infos:
                    found = pool_bytes(sums.cache_infos.values(), arch)
                else:
                    found = token_pool_bytes(sums.pool_tokens, self.kv_cache_dtype, arch)
                self._pool = (key, found)
            pool = self._pool[1]
        refused = dict(sums.latency.refused) or None
        return QueueValue(
            depth, in_flight, kv, preempted, generated, prompt, requests, latency or None, pool, refused
        )

    def _matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match.items())

    def _missing(self, name: str) -> str:
        if self.match:
            wanted = ",".join(f'{k}="{v}"' for k, v in self.match.items())
            return f"no {name} series matches {{{wanted}}}"
        return f"metric {name} not found"


@dataclass
class _Sums:
    latency: HistogramSums
    totals: dict[str, float] = dataclasses.field(default_factory=dict)
    highest: dict[str, float] = dataclasses.field(default_factory=dict)
    cache_infos: dict[bytes, dict[str, str]] = dataclasses.field(default_factory=dict)  # by line
    model_name: str | None = None
    pool_tokens: float | None = None


class ExpositionScan:
    """One answer, fed as it arrives (``feed``), summed at its end (``finish``)."""

    def __init__(self, reader: ExpositionReader, openmetrics: bool) -> None:
        self.reader = reader
        self.openmetrics = openmetrics
        self.lines = SampleLines(reader._names, reader.max_series, reader.max_series_bytes)
        self.sums = _Sums(reader.histograms())
        self.batched = False  # some lines were parsed already: the previous result cannot be reused
        self._utf8 = codecs.getincrementaldecoder("utf-8")()  # checks the text, keeps nothing

    def feed(self, chunk: bytes) -> None:
        try:
            self._utf8.decode(chunk)
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        self.lines.feed(chunk)
        if self.lines.kept_bytes > BATCH_BYTES:
            self.batched = True
            self.reader._add(self.lines.take(), self.openmetrics, self.sums)

    def finish(self) -> QueueValue:
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError:
            raise QueueSourceError("answer is not UTF-8 text") from None
        self.lines.finish()
        reader, rest = self.reader, self.lines.take()
        key = None if self.batched else b"\n".join(rest)
        last = reader._last
        if key is not None and last is not None and last[0] == key and last[1] == self.openmetrics:
            return last[2]
        reader._add(rest, self.openmetrics, self.sums)
        value = reader._value(self.sums)
        reader._last = None if key is None else (key, self.openmetrics, value)
        return value


def _count(totals: Mapping[str, float], names: tuple[str, ...]) -> float | None:
    """The first of ``names`` found, when it is a usable counter value (finite, not negative)."""
    value = next((totals[n] for n in names if n in totals), None)
    return value if value is not None and math.isfinite(value) and value >= 0 else None


class ScrapeSource:
    """One inference server's (or any exporter's) /metrics."""

    def __init__(self, cfg: QueueSettings) -> None:
        self.http = HttpGetter(cfg, ACCEPT, cfg.body_limit)
        self.reader = ExpositionReader(
            preset_for(cfg),
            dict(cfg.match),
            cfg.series_limit,
            cfg.series_bytes_limit,
            cfg.architecture,
            cfg.kv_cache_dtype or "auto",
            cfg.name,
        )
        self._scan: ExpositionScan | None = None

    def _begin(self, content_type: str) -> None:
        if content_type in ("text/html", "application/json"):
            raise QueueSourceError(f"answer is {content_type}, not a Prometheus exposition")
        self._scan = self.reader.scan(openmetrics=content_type == "application/openmetrics-text")

    def _feed(self, chunk: bytes) -> None:
        assert self._scan is not None
        self._scan.feed(chunk)

    async def read(self) -> QueueValue:
        self._scan = None
        try:
            await self.http.get(sink=(self._begin, self._feed))
            assert self._scan is not None
            return self._scan.finish()
        finally:
            self._scan = None

    async def close(self) -> None:
        self.http.close()
