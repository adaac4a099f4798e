"""Query API answers decoded series by series, so that a large answer never holds the event loop.

At fleet scale one rule's answer holds tens of thousands of series (megabytes of JSON).
``json.loads`` decodes such a body in one call that keeps the interpreter to itself for its whole
length (about 0.15 s for 40,000 series on this project's 2-core test machine), and every request
arriving meanwhile waits. ``decode`` reads the envelope that Prometheus and VictoriaMetrics write in
fixed shapes (``{"status":"success",["isPartial":false,]"data":{"resultType":"vector","result":[``)
and then the ``result`` array one series at a time (``JSONDecoder.raw_decode``); run in a worker
thread (``PrometheusSource._digest``), it lets the interpreter switch to the event loop between
series. Any other shape, and anything malformed, is decoded whole by ``json.loads``, so the outcome
(the object, or the error) never depends on the path taken. A series in the compact shape the
engines write is not even decoded where the caller gives ``fast``: its texts are handed over as
they are (``_ITEM``), for the caller to decode only the label sets it has not read before
(``prometheus.SeenTexts``).

``decode(body, item)`` hands each series of a streamed array to ``item`` as soon as it is read and
keeps what that returns, so the caller can keep only what it needs of each (``parse_answer``: the
shared label set, the time and the value) instead of every series' decoded objects at once: for a
40,000-series answer that is some 40 MB less held while it is read. ``item`` must accept what
``json.loads`` would give for a series, and the caller must accept unconverted items too (the
whole-body path does not call it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

_HEAD = re.compile(
    r'\s*\{"status":"success",(?P<partial>"isPartial":(?:true|false),)?'
    r'"data":\{"resultType":"vector","result":\['
)
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"\s*")
# A series as the engines write it: ``{"metric":{...},"value":[<number>,"<text>"]}``, without
# spaces, a label set holding no brace and a value text holding no escape (every engine's answer
# but a hostile one). In valid JSON, ``}`` followed by ``,"value":[`` cannot lie inside a string (a
# quote in a string is escaped), so group 1 is exactly the ``metric`` object whenever the series is
# valid; the number's and the text's patterns are JSON's own grammar for them.
_ITEM = re.compile(
    r'\{"metric":(\{[^{}]*\}),"value":\[(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?),'
    r'"([^"\\\x00-\x1f]*)"\]\}(,?)'
)
Fast = Callable[[str, str, str], Any]
T = TypeVar("T")


def decode(body: bytes, item: Callable[[Any], Any] | None = None, fast: Fast | None = None) -> Any:
    """``json.loads(body)``, with a vector answer's series decoded one at a time (and, given
    ``item``, each replaced by ``item(series)`` as it is read).

    ``fast`` (with ``item``): called instead for a series of the engines' own shape (``_ITEM``)
    with the text of its ``metric`` object, of its time and its value text, undecoded; it must
    give what ``item`` gives for that series decoded (so that the caller can keep what it made of
    a label set's text, and decode only those it has not seen), and raise ``ValueError`` where the
    ``metric`` text is not JSON (the body then fails as ``json.loads`` fails)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return json.loads(body)  # raises as it always did
    head = _HEAD.match(text)
    if head is None:
        return json.loads(text)
    try:
        items, end = _series(text, head.end(), item, fast if item is not None else None)
        rest = _tail(text, end)
    except ValueError:
        return json.loads(text)
    data = _envelope(head, rest)
    data["data"]["result"] = items
    return data


def compact(body: bytes, read: Callable[[str, int], tuple[T, int] | None]) -> tuple[dict[str, Any], T] | None:
    """A vector answer of the engines' own envelope with at least one series: (the answer as
    ``decode`` gives it but for its ``result``, what ``read`` made of that array), ``read`` given
    the text and the index of its first series and giving what it made and the index past its
    ``]``. None where ``read`` gives None, or where anything else is not what ``decode`` reads:
    the caller then decodes the answer, which decides the outcome."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    head = _HEAD.match(text)
    if head is None:
        return None
    at = _SPACE.match(text, head.end()).end()  # type: ignore[union-attr]
    got = None if text.startswith("]", at) else read(text, at)
    if got is None:
        return None
    made, end = got
    try:
        rest = _tail(text, end)
    except ValueError:
        return None
    return _envelope(head, rest), made


def _envelope(head: re.Match[str], rest: dict[str, Any]) -> dict[str, Any]:
    """The answer as read from its head (``_HEAD``) and its other members (``_tail``), without the
    ``result`` array."""
    data: dict[str, Any] = {"status": "success", "data": {"resultType": "vector"}}
    if head.group("partial"):
        data["isPartial"] = "true" in head.group("partial")
    for key, value in rest.items():
        data.setdefault(key, value)
    return data


def _series(
    text: str, at: int, convert: Callable[[Any], Any] | None = None, fast: Fast | None = None
) -> tuple[list[Any], int]:
    """The array's items from ``at`` (just past ``[``), each through ``convert`` (or ``fast``) if
    given, and the index just past its ``]``."""
    items: list[Any] = []
    at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
    if text.startswith("]", at):
        return items, at + 1
    shaped = _ITEM.match
    while True:
        found = shaped(text, at) if fast is not None else None
        if found is not None:
            metric, ts, value, comma = found.groups()
            items.append(fast(metric, ts, value))  # type: ignore[misc]
            at = found.end()
            if comma:  # a series follows
                continue
        else:
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]  # after a comma read above
            item, at = _DECODER.raw_decode(text, at)
            items.append(item if convert is None else convert(item))
        at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        if text.startswith(",", at):
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
        elif text.startswith("]", at):
            return items, at + 1
        else:
            raise ValueError("not an array")


def _tail(text: str, at: int) -> dict[str, Any]:
    """What follows the array: ``}`` closing ``data``, then the answer's other members (``warnings``,
    ``stats``) and ``}``."""
    at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
    if not text.startswith("}", at):
        raise ValueError("data has more members")
    rest = text[at + 1 :].strip()
    if rest == "}":
        return {}
    if not rest.startswith(","):
        raise ValueError("not an object")
    more = json.loads("{" + rest[1:])
    if not isinstance(more, dict) or {"data", "status", "isPartial"} & more.keys():
        raise ValueError("a member given twice")
    return more
