"""Structured logs: one logfmt line per event (``ts=… level=… msg=… key=value``), as Prometheus does."""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Callable, Hashable
from typing import Any

_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None)))


def _quote(value: object) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\n\t'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        parts = [
            f"ts={ts}",
            f"level={record.levelname.lower()}",
            f"logger={record.name}",
            f"msg={_quote(record.getMessage())}",
        ]
        parts += [
            f"{k}={_quote(v)}" for k, v in vars(record).items() if k not in _RESERVED and k != "message"
        ]
        if record.exc_info and record.levelno >= logging.ERROR:
            # Unexpected faults only: expected ones are logged without exc_info.
            parts.append(f"exception={_quote(self.formatException(record.exc_info))}")
        return " ".join(parts)


def configure(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def event(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    """Log one event with key=value fields."""
    logger.log(level, msg, extra=fields)


def shape(text: str) -> str:
    """``text`` with its measures blanked (decimals, and integers of four digits or more): two
    failures that differ only in a size or a time are the same failure (a wrong URL's page is a few
    bytes longer at every poll), while a status code (404, 503) still tells two apart."""
    return _MEASURE.sub("#", text)


_MEASURE = re.compile(r"\d+\.\d+|\d{4,}")


class Repeats:
    """Warnings that come back every poll, said once and then counted: the first event of a key
    (what failed and the ``shape`` of why) is logged, later ones of the same key only once
    ``period`` seconds have passed since the last line, which then carries ``repeated=N`` (how many
    were left out since) and the latest fields. A wrong URL polled twice a second is one line a
    minute, not two a second; another cause is another key, said at once. ``clear(key)`` when the
    cause is gone, so the next failure is logged at once. At most ``max_keys`` keys are remembered
    (the oldest are forgotten first)."""

    def __init__(self, period: float = 60.0, max_keys: int = 1024) -> None:
        self.period = period
        self.max_keys = max_keys
        self._seen: dict[Hashable, tuple[float, int]] = {}  # key -> (last line's time, left out since)

    def warning(self, key: Hashable, logger: logging.Logger, msg: str, **fields: Any) -> bool:
        """Log a warning now or count it; True when a line was written."""
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is not None and now - seen[0] < self.period:
            self._seen[key] = (seen[0], seen[1] + 1)
            return False
        if seen is not None and seen[1]:
            fields = {**fields, "repeated": seen[1]}
        self._seen.pop(key, None)
        self._seen[key] = (now, 0)
        while len(self._seen) > self.max_keys:
            del self._seen[next(iter(self._seen))]
        event(logger, logging.WARNING, msg, **fields)
        return True

    def clear(self, key: Hashable) -> None:
        self._seen.pop(key, None)

    def forget(self, which: Callable[[Any], bool]) -> None:
        """``clear`` every key for which ``which(key)`` is true."""
        for key in [k for k in self._seen if which(k)]:
            del self._seen[key]
