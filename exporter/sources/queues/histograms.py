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
- a histogram that is broken (a bound that is not a number, a count that is negative, not finite
  or goes down from one bound to the next, a line that does not parse) is left out, like every
  other extra: its kind is then unknown, never fast, and the queue depth is still read.

Histogram lines are most of what a preset keeps (vLLM: 88 of 100), so they are read by ``take``, a
sample-line parser for exactly the text and OpenMetrics sample syntax (name, labels, value, then an
optional timestamp and exemplar) at about 3 us a line, instead of prometheus-client's parser at
about 25 us; every other kept line still goes to prometheus-client.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from rightsizing.latency import Histogram

# Families whose unit is not the second.
SCALES: Mapping[str, float] = {
    "nv_inference_first_response_histogram_ms": 1e-3,
    "nv_inference_request_duration_us": 1e-6,
    "nv_inference_queue_duration_us": 1e-6,
}
PARTS = ("_bucket", "_sum", "_count")
LABEL_CACHE = 4096  # label sections remembered per source (a vLLM page has ~90)
_LINE = re.compile(
    rb'([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\})?[ \t]+(\S+)(?:[ \t]+\S+)?'
    rb"(?:[ \t]+#.*)?[ \t]*"
)
_PAIR = re.compile(rb'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(?:,|$)')
_ESCAPES = {b"\\\\": "\\", b'\\"': '"', b"\\n": "\n"}


@dataclass
class _Family:
    """One histogram family's matching series, summed: le -> (count, series), sum, count."""

    buckets: dict[float, list[float]] = field(default_factory=dict)
    total: float = 0.0
    count: float = 0.0
    series: int = 0  # series with a +Inf bucket
    broken: bool = False


class HistogramSums:
    """Collects the histogram samples of one answer (``add``), assembled at its end (``result``)."""

    def __init__(
        self,
        kinds: Mapping[str, tuple[str, ...]],
        means: Mapping[str, tuple[str, ...]],
        count_names: tuple[str, ...],
        label_cache: dict[bytes, tuple[dict[str, str], bool] | None] | None = None,
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
        self.families: dict[str, _Family] = {}
        self.counters: dict[str, float] = {}

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._parts) | frozenset(self._counters)

    def take(self, lines: list[bytes], matches: Callable[[Mapping[str, str]], bool]) -> list[bytes]:
        """Read the histogram sample lines among ``lines`` (those passing ``matches``); returns the
        others, for prometheus-client's parser."""
        rest: list[bytes] = []
        parts, cache = self._bytes, self._label_cache
        for line in lines:
            brace = line.find(b"{")
            name = line[:brace] if brace >= 0 else (line.split(None, 1) or [b""])[0]
            if name not in parts:
                rest.append(line)
                continue
            part = parts[name]
            split = _split(line, brace, len(name))
            if split is None:
                self._broken(part)
                continue
            section, text = split
            known = cache.get(section)
            if known is None:
                if section in cache:  # not label syntax (remembered)
                    self._broken(part)
                    continue
                labels = _labels(section)
                known = None if labels is None else (labels, matches(labels))
                if len(cache) >= LABEL_CACHE:
                    cache.clear()
                cache[section] = known
                if known is None:
                    self._broken(part)
                    continue
            if not known[1]:
                continue
            try:
                value = float(text)
            except ValueError:
                self._broken(part)
                continue
            self.add(part, known[0], value)
        return rest

    def _broken(self, name: str) -> None:
        family_name, _ = self._parts[name]
        self.families.setdefault(family_name, _Family()).broken = True

    def add(self, name: str, labels: Mapping[str, str], value: float) -> bool:
        """Take one sample if it is a latency sample; False when it is not one (or is a counter that
        others read too)."""
        found = self._parts.get(name)
        if found is None:
            if name in self._counters:  # also read as a throughput counter: not consumed
                self.counters[name] = self.counters.get(name, 0.0) + value
            return False
        family_name, part = found
        fam = self.families.get(family_name)
        if fam is None:
            fam = self.families[family_name] = _Family()
        if not math.isfinite(value) or value < 0:
            fam.broken = True
            return True
        if part == "_sum":
            fam.total += value
        elif part == "_count":
            fam.count += value
        else:
            try:
                le = float(labels.get("le", ""))
            except ValueError:
                fam.broken = True
                return True
            if math.isnan(le):
                fam.broken = True
                return True
            slot = fam.buckets.setdefault(le, [0.0, 0.0])
            slot[0] += value
            slot[1] += 1
            if math.isinf(le):
                fam.series += 1
        return True

    def result(self) -> dict[str, Histogram]:
        out: dict[str, Histogram] = {}
        for kind, names in self.kinds.items():
            for name in names:
                h = _assemble(self.families.get(name), SCALES.get(name, 1.0))
                if h is not None:
                    out[kind] = h
                    break
        count = next((self.counters[n] for n in self.count_names if n in self.counters), None)
        for kind, names in self.means.items():
            if kind in out or count is None or not math.isfinite(count) or count < 0:
                continue
            total = next((self.counters[n] for n in names if n in self.counters), None)
            if total is not None and math.isfinite(total) and total >= 0:
                scale = next(SCALES.get(n, 1.0) for n in names if n in self.counters)
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


def _assemble(fam: _Family | None, scale: float) -> Histogram | None:
    if fam is None or fam.broken or fam.series == 0:
        return None
    kept = sorted(le for le, (_, n) in fam.buckets.items() if n == fam.series)
    if not kept or not math.isinf(kept[-1]):
        return None
    counts = [fam.buckets[le][0] for le in kept]
    if any(b < a for a, b in itertools.pairwise(counts)):
        return None  # cumulative counts go down: not a histogram
    bounds = tuple(le * scale for le in kept[:-1])
    return Histogram(bounds, tuple(counts), fam.total * scale)
