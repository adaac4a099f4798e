"""Reading a few families out of an exporter's exposition text, cheaply, every half second.

The lines of the wanted families are found with ``str.find`` (no pass over every line in
Python). Each series' name-and-labels text is parsed once by prometheus-client's parser and its
labels remembered; after that only the value (and optional timestamp) after the label block is
read with ``float``, so an unchanged set of series costs a dictionary lookup per line.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

from ..vectors import Series

MAX_SERIES = 20_000  # default cap of the series read from one exporter (direct.max_series_per_exporter)


def lines_of(text: str, name: str) -> list[str]:
    """Sample lines of family ``name`` (``name{...} v`` or ``name v``), wherever they are."""
    out: list[str] = []
    size = len(name)
    needle = "\n" + name
    at = 0 if text.startswith(name) else _after(text.find(needle))
    while at is not None:
        end = text.find("\n", at)
        line = text[at:] if end == -1 else text[at:end]
        if line[size : size + 1] in ("{", " "):
            out.append(line)
        if end == -1:
            break
        at = end + 1 if text.startswith(name, end + 1) else _after(text.find(needle, end))
    return out


def _after(found: int) -> int | None:
    return None if found == -1 else found + 1


class SampleReader:
    """Samples of chosen families from one exporter's expositions, with its series' labels cached."""

    def __init__(self, instance: str, max_series: int = MAX_SERIES) -> None:
        self.instance = instance
        self.max_series = max_series
        self._labels: dict[str, dict[str, str]] = {}

    def _parse_labels(self, head: str) -> dict[str, str]:
        """Labels of ``name{...}`` by prometheus-client's parser; raises ValueError if malformed."""
        for family in text_string_to_metric_families(head + " 0\n"):
            for sample in family.samples:
                return {**sample.labels, "instance": self.instance}
        raise ValueError(f"cannot parse {head[:100]!r}")

    def read(self, text: str, families: Iterable[str]) -> dict[str, list[Series]]:
        """``{family: samples}``; raises ValueError when a wanted line does not parse, or when the
        wanted families hold more than ``max_series`` series (counted before any is parsed)."""
        found = {name: lines_of(text, name) for name in families}
        count = sum(len(lines) for lines in found.values())
        if count > self.max_series:
            raise ValueError(
                f"{count} series of the families read, more than direct.max_series_per_exporter "
                f"({self.max_series})"
            )
        if len(self._labels) > 2 * self.max_series:  # series churn: the label cache starts again
            self._labels.clear()
        out: dict[str, list[Series]] = {}
        for name, lines in found.items():
            rows = []
            for line in lines:
                cut = line.rfind("}") + 1 if line[len(name)] == "{" else len(name)
                head, rest = line[:cut], line[cut:].split()
                if not 1 <= len(rest) <= 2:
                    raise ValueError(f"malformed sample line {line[:100]!r}")
                labels = self._labels.get(head)
                if labels is None:
                    labels = self._labels[head] = self._parse_labels(head)
                rows.append(Series(labels, float(rest[0])))
            if rows:
                out[name] = rows
        return out
