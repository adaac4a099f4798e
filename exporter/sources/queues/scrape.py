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
from .kv_pool import architecture, pool_bytes, token_pool_bytes
from .lines import SampleLines
from .presets import PRESETS, Preset, preset_for  # noqa: F401 (PRESETS: read from here too)
from .settings import DEFAULT_MAX_SERIES, DEFAULT_MAX_SERIES_BYTES, QueueSettings

log = logging.getLogger("rightsizer.queues")
ACCEPT = "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1"
BATCH_BYTES = 256 * 1024  # kept lines parsed at once when an answer keeps more


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
        self._summed = {*p.depth_names, *p.in_flight_names, *((p.preemptions,) if p.preemptions else ())}
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
                    if sums.model_name is None and sample.name in self.preset.depth_names:
                        # SGLang 0.3 named its model in a `name` label.
                        sums.model_name = sample.labels.get("model_name") or sample.labels.get("name")
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
        depth_name = next((n for n in p.depth_names if n in totals), None)
        if depth_name is None:
            raise QueueSourceError(self._missing(p.depth_names))
        depth = how_many(totals[depth_name], depth_name)
        in_flight = None
        in_flight_name = next((n for n in p.in_flight_names if n in totals), None)
        if in_flight_name is not None:
            in_flight = how_many(totals[in_flight_name], in_flight_name)
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

    def _missing(self, names: tuple[str, ...]) -> str:
        name = names[0] + "".join(f" (or {n})" for n in names[1:])
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
