"""The sample lines of wanted metric names, picked from an exposition while it arrives.

An inference server's /metrics page is mostly histograms and families no preset reads; an
answer may also be hostile (hundreds of thousands of series, a label value of megabytes). So the
body is never held whole: each chunk is searched for the wanted names (``bytes.find``, at C
speed), only the lines that start with one of them are kept, and what may be kept is capped:

- ``max_series``: kept lines in one answer (every series of a wanted name counts, matched or not);
- ``max_series_bytes``: bytes of one kept line (name, labels and value);

over either cap the answer is refused (``QueueSourceError``), never read in part. A line of a
name nobody reads costs nothing however long it is: at most ``max_series_bytes`` of its start is
held while its name is not yet known, then it is skipped to its end.
"""

from __future__ import annotations

from collections.abc import Iterable

from .base import QueueSourceError

_AFTER_NAME = frozenset(b"{ \t\r\n")


class SampleLines:
    """Fed the body in chunks; ``take()`` hands over the lines kept so far (and forgets them)."""

    def __init__(self, names: Iterable[str], max_series: int, max_series_bytes: int) -> None:
        self._names = sorted({n.encode() for n in names})
        self.max_series = max_series
        self.max_series_bytes = max_series_bytes
        self.series = 0  # lines kept in this answer
        self.kept_bytes = 0  # bytes of the lines not yet taken
        self._lines: list[bytes] = []
        self._carry = b""  # the start of a line whose end has not arrived yet
        self._skipping = False  # inside a line no one reads, longer than max_series_bytes

    def feed(self, chunk: bytes) -> None:
        if self._skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return
            chunk, self._skipping = chunk[end + 1 :], False
        data = self._carry + chunk if self._carry else chunk
        last = data.rfind(b"\n")
        if last < 0:
            self._carry = data
        else:
            self._carry = data[last + 1 :]
            self._scan(data, last + 1)
        if len(self._carry) > self.max_series_bytes:
            name = self._name_of(self._carry)
            if name is not None:
                raise self._too_long(name)
            self._carry, self._skipping = b"", True

    def finish(self) -> None:
        """The body ended: its last line needs no newline."""
        if self._carry and not self._skipping:
            data, self._carry = self._carry + b"\n", b""
            self._scan(data, len(data))
        self._carry, self._skipping = b"", False

    def take(self) -> list[bytes]:
        lines, self._lines, self.kept_bytes = self._lines, [], 0
        return lines

    def _scan(self, data: bytes, end: int) -> None:
        """Keep the wanted lines among the complete lines ``data[:end]`` (``data[end - 1]`` is a newline)."""
        for name in self._names:
            at = data.find(name, 0, end)
            while at >= 0:
                after = at + len(name)
                line_end = data.find(b"\n", at, end)
                if (at == 0 or data[at - 1] == 10) and data[after] in _AFTER_NAME:
                    line = data[at:line_end]
                    if len(line) > self.max_series_bytes:
                        raise self._too_long(name)
                    self.series += 1
                    if self.series > self.max_series:
                        raise QueueSourceError(
                            f"answer has more than {self.max_series} series of the metrics read "
                            "(max_series)"
                        )
                    line = line.rstrip(b"\r")
                    self._lines.append(line)
                    self.kept_bytes += len(line) + 1
                at = data.find(name, line_end, end)

    def _name_of(self, line: bytes) -> bytes | None:
        """The wanted name ``line`` starts with, if any."""
        for name in self._names:
            if line.startswith(name) and len(line) > len(name) and line[len(name)] in _AFTER_NAME:
                return name
        return None

    def _too_long(self, name: bytes) -> QueueSourceError:
        return QueueSourceError(
            f"a series of {name.decode()} is longer than {self.max_series_bytes} bytes (max_series_bytes)"
        )
