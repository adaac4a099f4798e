"""Structured logs: one logfmt line per event (``ts=… level=… msg=… key=value``), as Prometheus does."""

from __future__ import annotations

import logging
import sys
import time
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
