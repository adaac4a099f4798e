"""Queue depth from an HTTP endpoint that answers JSON (the shape KEDA's metrics-api scaler reads).

``path`` is a dotted path into the answer (``queue.waiting``; list items by index, ``items.0.n``;
a literal dot escaped as ``\\.``). The value may be a number, a numeric string or a Kubernetes
quantity string such as ``"1500m"``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import QueueSourceError, QueueValue, how_many, shorten
from .http_client import HttpGetter
from .settings import QueueSettings

ACCEPT = "application/json"
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")
_SUFFIX = {
    None: 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def split_path(path: str) -> tuple[str, ...]:
    parts = re.split(r"(?<!\\)\.", path.removeprefix("$."))
    return tuple(p.replace("\\.", ".") for p in parts if p)


def number(value: Any, where: str) -> float:
    if isinstance(value, bool) or value is None or isinstance(value, dict | list):
        kind = "null" if value is None else type(value).__name__
        raise QueueSourceError(f"value at {where} is {kind}, not a number")
    if isinstance(value, int | float):
        try:
            return how_many(float(value), f"value at {where}")
        except OverflowError:  # an integer past float's range
            raise QueueSourceError(f"value at {where} is too large") from None
    match = _QUANTITY.fullmatch(str(value).strip())
    if match is None:
        raise QueueSourceError(f"value at {where} is not a number: {shorten(repr(value), 40)}")
    return how_many(float(match.group(1)) * _SUFFIX[match.group(2)], f"value at {where}")


_INDEX = re.compile(r"-?[0-9]{1,18}")


def _index(part: str) -> bool:
    """A list index in a path: ASCII digits (str.isdigit also accepts '²', which int() refuses)."""
    return _INDEX.fullmatch(part) is not None


def lookup(doc: Any, path: tuple[str, ...], text: str) -> Any:
    node = doc
    for i, part in enumerate(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and _index(part) and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            raise QueueSourceError(f"path {text} not found (no {'.'.join(path[: i + 1])})")
    return node


class HttpJsonSource:
    def __init__(self, cfg: QueueSettings) -> None:
        assert cfg.path is not None  # checked by the configuration schema
        self.http = HttpGetter(cfg, ACCEPT, cfg.body_limit)
        self.path_text = cfg.path
        self.path = split_path(cfg.path)
        self.in_flight_text = cfg.in_flight_path
        self.in_flight = split_path(cfg.in_flight_path) if cfg.in_flight_path else None

    async def read(self) -> QueueValue:
        _, body = await self.http.get()
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise QueueSourceError(f"answer is not JSON: {shorten(str(exc), 80)}") from None
        except RecursionError:  # the C decoder stops at the interpreter's recursion limit
            raise QueueSourceError("answer is not usable JSON: nested too deep") from None
        depth = number(lookup(doc, self.path, self.path_text), self.path_text)
        in_flight = None
        if self.in_flight is not None and self.in_flight_text is not None:
            in_flight = number(lookup(doc, self.in_flight, self.in_flight_text), self.in_flight_text)
        return QueueValue(depth, in_flight)

    async def close(self) -> None:
        self.http.close()
