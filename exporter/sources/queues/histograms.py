"""Latency histograms read from an inference server's exposition, on the same poll as its queue.

Which families each preset reads is in ``scrape.PRESETS`` (see docs/queues.md, "Latency"); this
module turns their samples into one ``rightsizing.latency.Histogram`` per kind (ttft, itl, e2e,
queue), in seconds:

- the series of one family that pass the source's ``match`` are summed bucket by bucket (a server's
  own label sets, such as vLLM's ``engine``); when series disagree on the layout only the bounds
  all of them have are kept (``+Inf`` always is);
- of several names for one kind (vLLM's older ``time_per_output_token``), the first found wins;
- a family in milliseconds or microseconds (Triton) is scaled to seconds;
- Triton without ``histogram_latencies`` has cumulative duration counters only: the request and
  queue durations over ``nv_inference_request_success`` give a mean (a histogram with no finite
  bound), never a percentile;
- a histogram that is broken (see ``histogram_series``: a bound that is negative, repeated or out
  of order, a count that is negative, not finite or goes down from one bound to the next, a
  ``_count`` other than the ``+Inf`` bucket, a line that does not parse) is refused for the poll
  with its reason (``refused``), never used: its kind is then unknown, never fast, and the queue
  depth is still read.

Histogram lines are most of what a preset keeps (vLLM: 88 of 100), so they are read by ``take``, a
sample-line parser for exactly the text and OpenMetrics sample syntax (name, labels, value, then an
optional timestamp and exemplar) at about 3 us a line, instead of prometheus-client's parser at
about 25 us; every other kept line still goes to prometheus-client.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

from rightsizing.slo.latency import Histogram

from .histogram_series import MAX_COUNT, Family

# Families whose unit is not the second.
SCALES: Mapping[str, float] = {
    "nv_inference_first_response_histogram_ms": 1e-3,
    "nv_inference_request_duration_us": 1e-6,
    "nv_inference_queue_duration_us": 1e-6,
}
PARTS = ("_bucket", "_sum", "_count")
LABEL_CACHE = 4096  # label sections remembered per source (a vLLM page has ~90)
# Lines read between two releases of the GIL. The pollers run in their own thread: a page of
# thousands of histogram lines would otherwise hold the GIL for up to the switch interval (5 ms)
# at every turn, and each of the event loop's waits on it (a /healthz answer takes several) would
# last that long.
YIELD_LINES = 200
_LINE = re.compile(
    rb'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?'
    rb"(?:[ \t]+#.*)?[ \t]*"
)
_PAIR = re.compile(rb'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_LE_TAIL = re.compile(rb'(?:^|,)[ \t]*le[ \t]*=[ \t]*"([^"\\]*)"[ \t]*$')
_ESCAPES = {b"\\\\": "\\", b'\\"': '"', b"\\n": "\n"}


class Labels(NamedTuple):
    """A label section as read once: its labels, whether they pass the source's match, the series
    they name (the labels but ``le``) and the ``le`` text."""

    labels: dict[str, str]
    matches: bool
    series: tuple[tuple[str, str], ...]
    le: str | None


def known(labels: dict[str, str], matches: bool) -> Labels:
    series = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
    return Labels(labels, matches, series, labels.get("le"))


class HistogramSums:
    """Collects the histogram samples of one answer (``add``), assembled at its end (``result``)."""

    def __init__(
        self,
        kinds: Mapping[str, tuple[str, ...]],
        means: Mapping[str, tuple[str, ...]],
        count_names: tuple[str, ...],
        label_cache: dict[bytes, Labels | None] | None = None,
    ) -> None:
        self.kinds = kinds
        self.means = means  # kind -> cumulative duration counter names (a mean over count_names)
        self.count_names = count_names
        self._parts: dict[str, tuple[str, str]] = {}  # sample name -> (family, part)
        for names in kinds.values():
            for name in names:
                for part in PARTS:
                    self._parts[name + part] = (name, part)
        self._bytes = {n.encode(): n for n in self._parts}  # sample names as they arrive
        # A label section as it arrives -> (its labels, whether they pass the source's match), kept
        # by the reader from poll to poll: a server repeats its label sets, bucket bounds included.
        self._label_cache = {} if label_cache is None else label_cache
        self._counters = {n for names in means.values() for n in names} | set(count_names)
        self.families: dict[str, Family] = {}
        self.counters: dict[str, float] = {}
        self.refused: dict[str, str] = {}  # kind -> why its histogram was refused (``result``)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._parts) | frozenset(self._counters)

    def take(self, lines: list[bytes], matches: Callable[[Mapping[str, str]], bool]) -> list[bytes]:
        """Read the histogram sample lines among ``lines`` (those passing ``matches``); returns the
        others, for prometheus-client's parser."""
        rest: list[bytes] = []
        parts, cache = self._bytes, self._label_cache
        for at, line in enumerate(lines):
            if at % YIELD_LINES == YIELD_LINES - 1:
                time.sleep(0)  # let the exporter's event loop thread take the GIL (see YIELD_LINES)
            brace = line.find(b"{")
            name = line[:brace] if brace >= 0 else (line.split(None, 1) or [b""])[0]
            if name not in parts:
                rest.append(line)
                continue
            part = parts[name]
            split = _split(line, brace, len(name))
            if split is None:
                self._broken(part, "a line does not parse")
                continue
            section, text = split
            found = cache.get(section)
            if found is None:
                if section in cache:  # not label syntax (remembered)
                    self._broken(part, "a line does not parse")
                    continue
                found = self._bucket_labels(section, matches)
                if found is None:
                    labels = _labels(section)
                    found = None if labels is None else known(labels, matches(labels))
                    if len(cache) >= LABEL_CACHE:
                        cache.clear()
                    cache[section] = found
                if found is None:
                    self._broken(part, "a line does not parse")
                    continue
            if not found.matches:
                continue
            try:
                value = float(text)
            except ValueError:
                self._broken(part, "a value is not a number")
                continue
            family_name, suffix = self._parts[part]
            self._family(family_name).add(found.series, suffix, found.le, value)
        return rest

    def _bucket_labels(self, section: bytes, matches: Callable[[Mapping[str, str]], bool]) -> Labels | None:
        """A bucket's labels from those of its series (the section before ``,le="..."``, where every
        client library writes it), parsed once for all of the series' bounds: a layout of thousands
        of bounds is not thousands of label sections to parse and remember. None: not that shape."""
        tail = _LE_TAIL.search(section)
        if tail is None:
            return None
        cache, head = self._label_cache, section[: tail.start()]
        series = cache.get(head)
        if series is None:
            labels = _labels(head)
            if labels is None or "le" in labels:
                return None
            series = known(labels, matches(labels))
            if len(cache) >= LABEL_CACHE:
                cache.clear()
            cache[head] = series
        if series.le is not None:
            return None
        return series._replace(le=tail.group(1).decode())

    def _family(self, name: str) -> Family:
        fam = self.families.get(name)
        if fam is None:
            fam = self.families[name] = Family()
        return fam

    def _broken(self, name: str, why: str) -> None:
        self._family(self._parts[name][0]).refuse(why)

    def add(self, name: str, labels: Mapping[str, str], value: float) -> bool:
        """Take one sample if it is a latency sample; False when it is not one (or is a counter that
        others read too)."""
        found = self._parts.get(name)
        if found is None:
            if name in self._counters:  # also read as a throughput counter: not consumed
                self.counters[name] = self.counters.get(name, 0.0) + value
            return False
        family_name, part = found
        self._family(family_name).add(known(dict(labels), True).series, part, labels.get("le"), value)
        return True

    def result(self) -> dict[str, Histogram]:
        out: dict[str, Histogram] = {}
        self.refused = {}
        for kind, names in self.kinds.items():
            for name in names:
                fam = self.families.get(name)
                h = None if fam is None else fam.assemble(SCALES.get(name, 1.0))
                if isinstance(h, str):  # refused: an older name of the kind may still be read
                    self.refused.setdefault(kind, f"{name}: {h}")
                elif h is not None:
                    out[kind] = h
                    self.refused.pop(kind, None)
                    break
        count = next((self.counters[n] for n in self.count_names if n in self.counters), None)
        for kind, names in self.means.items():
            if kind in out or kind in self.refused or count is None or not 0 <= count <= MAX_COUNT:
                continue
            total = next((self.counters[n] for n in names if n in self.counters), None)
            if total is not None and math.isfinite(total) and total >= 0:
                scale = next(SCALES.get(n, 1.0) for n in names if n in self.counters)
                if total * scale <= MAX_COUNT:
                    out[kind] = Histogram((), (count,), total * scale)
        return out


def _split(line: bytes, brace: int, name_end: int) -> tuple[bytes, bytes] | None:
    """(label section, value text) of a sample line; None when it does not parse. A line with an
    exemplar (``# {...}``, OpenMetrics) goes through the full pattern."""
    if b"#" in line:
        m = _LINE.fullmatch(line)
        return None if m is None else (m.group(2) or b"", m.group(3))
    if brace >= 0:
        close = line.rfind(b"}")
        if close < brace:
            return None
        section, tail = line[brace + 1 : close], line[close + 1 :]
    else:
        section, tail = b"", line[name_end:]
    fields = tail.split()
    if not 1 <= len(fields) <= 2 or (tail[:1] not in (b" ", b"\t")):
        return None
    return section, fields[0]


def _labels(text: bytes | None) -> dict[str, str] | None:
    """``a="1",b="x\\"y"`` as a mapping; None when it is not label syntax."""
    if not text:
        return {}
    out: dict[str, str] = {}
    at, end = 0, len(text)
    while at < end:
        m = _PAIR.match(text, at)
        if m is None:
            return None
        raw = m.group(2)
        if b"\\" in raw:
            raw_text = re.sub(rb"\\.", lambda e: _ESCAPES.get(e.group(0), e.group(0).decode()).encode(), raw)
            out[m.group(1).decode()] = raw_text.decode()
        else:
            out[m.group(1).decode()] = raw.decode()
        at = m.end()
    return out
